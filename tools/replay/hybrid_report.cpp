#include "replay/hybrid_report.h"

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>

#include <fmt/format.h>

namespace kvbm::replay {

namespace {

std::string bytes_text(long double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  std::size_t u = 0;
  while (b >= 1024.0L && u + 1 < std::size(units)) {
    b /= 1024.0L;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", static_cast<double>(b), units[u])
                : fmt::format("{:.1f} {}", static_cast<double>(b), units[u]);
}

// One row of the group table: manager, group, kind, block size, bytes per block, G1 blocks
// and bytes, hit blocks, tokens and bytes, written, peak held, mean held.
constexpr char kGroupRow[] =
    "  {:<9} {:<10} {:<10} {:>4} {:>10} {:>10} {:>10} {:>11} {:>12} {:>10} {:>10} {:>17} {:>10}\n";

void print_groups(std::ostream& out, const char* which, const HybridRun& run) {
  for (const auto& g : run.groups) {
    out << fmt::format(
        kGroupRow, which, g.spec.display_name(), g.spec.kind_label(), g.spec.tokens_per_block,
        bytes_text(g.spec.bytes_per_block), group_digits(g.capacity_blocks),
        bytes_text(g.capacity_bytes()), group_digits(g.hit_blocks), group_digits(g.hit_tokens),
        bytes_text(g.bytes(g.hit_blocks)), bytes_text(g.bytes(g.written_blocks)),
        fmt::format("{} / {}", group_digits(g.peak_held_blocks),
                    bytes_text(g.bytes(g.peak_held_blocks))),
        bytes_text(static_cast<long double>(g.mean_held_blocks) * g.spec.bytes_per_block));
  }
}

// The pooled tiers a run has (G1 always; G2, G3 when a group has blocks there).
std::vector<TierId> run_tiers(const HybridRun& run) {
  std::vector<TierId> out{TierId::kG1};
  for (const TierId t : {TierId::kG2, TierId::kG3}) {
    if (!run.groups.empty() && run.groups[0].tier_capacity_blocks[t] > 0) out.push_back(t);
  }
  return out;
}

// A group's figures per tier, and the blocks moved per tier pair (bytes: blocks x its block).
nlohmann::json tiers_json(const GroupFigures& g) {
  nlohmann::json tiers = nlohmann::json::object();
  for (const TierId t : {TierId::kG1, TierId::kG2, TierId::kG3}) {
    if (g.tier_capacity_blocks[t] == 0) continue;
    tiers[std::string(to_string(t))] = {{"capacity_blocks", g.tier_capacity_blocks[t]},
                                        {"capacity_bytes", g.bytes(g.tier_capacity_blocks[t])},
                                        {"hit_blocks", g.hit_blocks_by_tier[t]},
                                        {"hit_bytes", g.bytes(g.hit_blocks_by_tier[t])},
                                        {"held_blocks_end", g.held_blocks_end[t]},
                                        {"held_bytes_end", g.bytes(g.held_blocks_end[t])}};
  }
  const auto moved = [&g](std::uint64_t blocks) -> nlohmann::json {
    return {{"blocks", blocks}, {"bytes", g.bytes(blocks)}};
  };
  return {{"by_tier", tiers},
          {"moved",
           {{"G1_to_G2", moved(g.offloaded_g1_g2)},
            {"G2_to_G3", moved(g.offloaded_g2_g3)},
            {"G2_to_G1", moved(g.hit_blocks_by_tier[TierId::kG2])},
            {"G3_to_G1", moved(g.hit_blocks_by_tier[TierId::kG3])}}}};
}

nlohmann::json group_json(const GroupFigures& g) {
  return {{"name", g.spec.display_name()},
          {"kind", std::string(to_string(g.spec.kind))},
          {"window_tokens", g.spec.window_tokens},
          {"tokens_per_block", g.spec.tokens_per_block},
          {"bytes_per_block", g.spec.bytes_per_block},
          {"layers", g.spec.layers.size()},
          {"g1_weight", g.g1_weight},
          {"capacity_blocks", g.capacity_blocks},
          {"capacity_bytes", g.capacity_bytes()},
          {"hits",
           {{"blocks", g.hit_blocks}, {"tokens", g.hit_tokens}, {"bytes", g.bytes(g.hit_blocks)}}},
          {"held",
           {{"peak_blocks", g.peak_held_blocks},
            {"peak_bytes", g.bytes(g.peak_held_blocks)},
            {"mean_blocks", g.mean_held_blocks},
            {"mean_bytes", g.mean_held_blocks * static_cast<double>(g.spec.bytes_per_block)}}},
          {"moved",
           {{"written_blocks", g.written_blocks},
            {"written_bytes", g.bytes(g.written_blocks)},
            {"hit_bytes", g.bytes(g.hit_blocks)}}},
          {"cached_blocks_end", g.cached_blocks_end},
          {"tiers", tiers_json(g)}};
}

nlohmann::json run_json(const HybridRun& run) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : run.groups) groups.push_back(group_json(g));
  return {{"requests", run.requests},
          {"prompt_tokens", run.prompt_tokens},
          {"hit_tokens", run.hit_tokens},
          {"token_hit_ratio", run.token_hit_ratio()},
          {"hit_requests", run.hit_requests},
          {"uncached_tokens", run.uncached_tokens},
          {"prefill_steps", run.prefill_steps},
          {"tiered", run.tiered},
          {"vllm_padded_block",
           {{"tokens", run.vllm_padded_block},
            {"vllm_rule_hit_tokens", run.vllm_rule_hit_tokens},
            {"short_requests", run.short_requests},
            {"short_prompt_tokens", run.short_prompt_tokens},
            {"short_hit_tokens", run.short_hit_tokens},
            {"short_vllm_rule_tokens", run.short_vllm_rule_tokens}}},
          {"shrunk_cuts", run.shrunk_cuts},
          {"g1_bytes", run.g1_bytes()},
          {"groups", groups},
          {"audit", run.audit},
          {"wall_seconds", run.wall_seconds}};
}

// vLLM's padded attention block (a model with a recurrent state): what its rule gives.
void print_vllm_rule(std::ostream& out, const char* which, const HybridRun& run) {
  if (run.vllm_padded_block == 0) return;
  out << fmt::format(
      "  {}: vLLM pads the attention block to {} tokens; prompts shorter: {} ({} tokens), found "
      "{} tokens here, {} by vLLM's rule; every prompt by vLLM's rule: {} hit tokens ({:.2f}%), "
      "here {}\n",
      which, run.vllm_padded_block, group_digits(run.short_requests),
      group_digits(run.short_prompt_tokens), group_digits(run.short_hit_tokens),
      group_digits(run.short_vllm_rule_tokens), group_digits(run.vllm_rule_hit_tokens),
      run.prompt_tokens == 0 ? 0.0
                             : 100.0 * static_cast<double>(run.vllm_rule_hit_tokens) /
                                   static_cast<double>(run.prompt_tokens),
      group_digits(run.hit_tokens));
}

// One row of the tier table: manager, group, tier, G blocks and bytes, hit blocks and bytes
// (from that tier), held at the end, moved into the tier from above.
constexpr char kTierRow[] =
    "  {:<9} {:<10} {:<4} {:>11} {:>10} {:>11} {:>10} {:>11} {:>10} {:>17}\n";

void print_tier_rows(std::ostream& out, const char* which, const HybridRun& run) {
  for (const auto& g : run.groups) {
    for (const TierId t : run_tiers(run)) {
      const std::uint64_t down = t == TierId::kG2   ? g.offloaded_g1_g2
                                 : t == TierId::kG3 ? g.offloaded_g2_g3
                                                    : g.written_blocks;
      out << fmt::format(
          kTierRow, which, g.spec.display_name(), to_string(t),
          group_digits(g.tier_capacity_blocks[t]), bytes_text(g.bytes(g.tier_capacity_blocks[t])),
          group_digits(g.hit_blocks_by_tier[t]), bytes_text(g.bytes(g.hit_blocks_by_tier[t])),
          group_digits(g.held_blocks_end[t]), bytes_text(g.bytes(g.held_blocks_end[t])),
          fmt::format("{} / {}", group_digits(down), bytes_text(g.bytes(down))));
    }
  }
}

// G2 and G3 behind G1: both tiered replays beside the G1-only ones.
void print_tiered(std::ostream& out, const HybridReplayResult& r) {
  const HybridRun& h = *r.hybrid_tiered;
  const HybridRun& b = *r.baseline_tiered;
  out << fmt::format(
      "\n  with G2 {} and G3 {} behind the same G1 (HybridKvBlockManager, metadata only)\n",
      r.g2_budget_bytes == 0 ? std::string("none") : bytes_text(r.g2_budget_bytes),
      r.g3_budget_bytes == 0 ? std::string("none") : bytes_text(r.g3_budget_bytes));
  out << fmt::format("  {:<14} {:>14} {:>12} {:>14} {:>16} {:>12}\n", "manager", "hit tokens",
                     "token ratio", "hit requests", "uncached tokens", "shrunk cuts");
  for (const auto& [name, run] : {std::pair<const char*, const HybridRun*>{"hybrid G1", &r.hybrid},
                                  {"hybrid G1-G3", &h},
                                  {"baseline G1", &r.baseline},
                                  {"baseline G1-G3", &b}}) {
    out << fmt::format("  {:<14} {:>14} {:>11.2f}% {:>14} {:>16} {:>12}\n", name,
                       group_digits(run->hit_tokens), 100 * run->token_hit_ratio(),
                       group_digits(run->hit_requests), group_digits(run->uncached_tokens),
                       run->tiered ? group_digits(run->shrunk_cuts) : std::string("-"));
  }
  out << fmt::format(
      "  hybrid G1-G3 / hybrid G1 hit tokens: {:.3f}x; / baseline G1-G3: {:.3f}x\n\n",
      r.tiered_gain(),
      b.hit_tokens == 0 ? 0.0
                        : static_cast<double>(h.hit_tokens) / static_cast<double>(b.hit_tokens));
  out << fmt::format(kTierRow, "manager", "group", "tier", "blocks", "bytes", "hit blocks",
                     "hit bytes", "held (end)", "held bytes", "moved in (blocks)");
  print_tier_rows(out, "hybrid", h);
  print_tier_rows(out, "baseline", b);
  out << fmt::format(
      "\n  hit blocks: the cuts' blocks by the tier they came from (G2, G3: onboarded into G1);\n"
      "  moved in: G1 blocks prefilled, G2 blocks copied from G1, G3 blocks copied from G2\n");
  print_vllm_rule(out, "hybrid G1-G3", h);
  out << fmt::format("  audit: hybrid G1-G3 {}, baseline G1-G3 {}\n",
                     h.audit.empty() ? "every pool of every tier balanced" : h.audit,
                     b.audit.empty() ? "balanced" : b.audit);
}

}  // namespace

void print_hybrid(std::ostream& out, const TraceSummary& t, const HybridReplayResult& r) {
  out << fmt::format("kvbm-replay: {}\n", t.source);
  out << fmt::format("  model groups {}: {}\n", r.model, r.label);
  if (!r.source.empty()) out << fmt::format("  geometry: {}\n", r.source);
  out << fmt::format(
      "  requests {}   prompt tokens {}   {}, metadata only; prefill {} tokens a step; "
      "snapshots {}; eviction {}; cache {}\n",
      group_digits(r.hybrid.requests), group_digits(r.hybrid.prompt_tokens),
      r.hybrid_tiered ? "G1 only, then G2 and G3 behind it" : "G1 only", r.prefill_chunk_tokens,
      r.snapshot_policy, r.eviction, r.register_at_end ? "tails" : "all");
  out << fmt::format("  G1 {} (hybrid pools {}, baseline pool {})\n\n",
                     r.g1_unlimited ? std::string("unlimited") : bytes_text(r.g1_budget_bytes),
                     bytes_text(r.hybrid.g1_bytes()), bytes_text(r.baseline.g1_bytes()));
  out << fmt::format("  {:<9} {:>14} {:>12} {:>14} {:>16}\n", "manager", "hit tokens",
                     "token ratio", "hit requests", "uncached tokens");
  for (const auto& [name, run] :
       {std::pair<const char*, const HybridRun*>{"hybrid", &r.hybrid}, {"baseline", &r.baseline}}) {
    out << fmt::format("  {:<9} {:>14} {:>11.2f}% {:>14} {:>16}\n", name,
                       group_digits(run->hit_tokens), 100 * run->token_hit_ratio(),
                       group_digits(run->hit_requests), group_digits(run->uncached_tokens));
  }
  out << fmt::format(
      "  hybrid / baseline hit tokens: {:.3f}x  (baseline: every layer as full "
      "attention, the same G1 bytes)\n\n",
      r.gain());
  out << fmt::format(kGroupRow, "manager", "group", "kind", "tpb", "per block", "G1 blocks",
                     "G1 bytes", "hit blocks", "hit tokens", "hit bytes", "written", "peak held",
                     "mean held");
  print_groups(out, "hybrid", r.hybrid);
  print_groups(out, "baseline", r.baseline);
  out << fmt::format(
      "\n  hit blocks: what the cuts read from the group (a window's tail, one "
      "snapshot); written: blocks prefilled into G1;\n  held: blocks the running "
      "request holds after each prefill step (peak blocks / bytes, and mean bytes)\n");
  out << fmt::format("  audit: hybrid {}, baseline {}\n",
                     r.hybrid.audit.empty() ? "every pool balanced" : r.hybrid.audit,
                     r.baseline.audit.empty() ? "balanced" : r.baseline.audit);
  print_vllm_rule(out, "hybrid", r.hybrid);
  if (r.hybrid_tiered && r.baseline_tiered) print_tiered(out, r);
}

nlohmann::json hybrid_json(const HybridReplayResult& r) {
  nlohmann::json j = {{"model", {{"name", r.model}, {"label", r.label}, {"source", r.source}}},
                      {"config",
                       {{"trace_block_tokens", r.trace_block_tokens},
                        {"g1_budget_bytes", r.g1_budget_bytes},
                        {"g2_budget_bytes", r.g2_budget_bytes},
                        {"g3_budget_bytes", r.g3_budget_bytes},
                        {"g1_unlimited", r.g1_unlimited},
                        {"prefill_chunk_tokens", r.prefill_chunk_tokens},
                        {"snapshot_policy", r.snapshot_policy},
                        {"eviction", r.eviction},
                        {"cache", r.register_at_end ? "tails" : "all"}}},
                      {"hybrid", run_json(r.hybrid)},
                      {"baseline", run_json(r.baseline)},
                      {"gain", r.gain()}};
  if (r.hybrid_tiered && r.baseline_tiered) {
    j["hybrid_tiered"] = run_json(*r.hybrid_tiered);
    j["baseline_tiered"] = run_json(*r.baseline_tiered);
    j["tiered_gain"] = r.tiered_gain();
  }
  return j;
}

namespace {

// The snapshot policy of --hybrid-snapshots, or nullopt when malformed.
std::optional<SnapshotPolicy> parse_snapshots(const std::string& text) {
  if (text == "every_block") return SnapshotPolicy::every_block();
  if (text == "request_end") return SnapshotPolicy::request_end();
  if (text == "step_end") return SnapshotPolicy::step_end();
  if (text.rfind("every:", 0) == 0) {
    char* end = nullptr;
    const unsigned long k = std::strtoul(text.c_str() + 6, &end, 10);
    if (end != text.c_str() + 6 && *end == '\0' && k >= 1 && k <= 1'000'000) {
      return SnapshotPolicy::every_kth_block(static_cast<std::uint32_t>(k));
    }
  }
  return std::nullopt;
}

}  // namespace

std::string check_model_groups(const Options& o) {
  if (o.model_groups.empty() && o.model_groups_file.empty()) {
    if (o.hybrid_cache != "all" || !o.hybrid_weight.empty() ||
        o.hybrid_snapshots != "every_block") {
      return "--hybrid-cache, --hybrid-weight and --hybrid-snapshots go with --model-groups or "
             "--model-groups-file";
    }
    return {};
  }
  if (!o.model_groups.empty() && !o.model_groups_file.empty()) {
    return "give --model-groups or --model-groups-file, not both";
  }
  if (!o.model_groups.empty()) {
    if (std::string e = check_hybrid_preset(o.model_groups); !e.empty()) return e;
  }
  const char* flag = !o.model_groups.empty() ? "--model-groups" : "--model-groups-file";
  const std::pair<bool, const char*> refused[] = {
      {!o.model.empty(), "--model"},      {o.instances > 1, "--instances"},
      {o.router.has_value(), "--router"}, {!o.remote.empty(), "--remote"},
      {!o.sweep.empty(), "--sweep"},      {!o.sweep_instances.empty(), "--sweep-instances"},
      {o.soak_seconds > 0, "--soak"},     {o.realtime, "--realtime"},
      {o.persist, "--persist"},
  };
  if (o.hybrid_cache != "all" && o.hybrid_cache != "tails") {
    return "--hybrid-cache: expected all or tails, got '" + o.hybrid_cache + "'";
  }
  if (!o.hybrid_weight.empty()) {
    char* end = nullptr;
    const double w = std::strtod(o.hybrid_weight.c_str(), &end);
    if (end != o.hybrid_weight.c_str() + o.hybrid_weight.size() || !(w > 0) || !std::isfinite(w)) {
      return "--hybrid-weight: expected a number > 0, got '" + o.hybrid_weight + "'";
    }
  }
  if (!parse_snapshots(o.hybrid_snapshots)) {
    const std::string expected =
        "--hybrid-snapshots: expected every_block, every:K (K >= 1), request_end or step_end";
    return expected + ", got '" + o.hybrid_snapshots + "'";
  }
  if (o.disk_given && (!o.host_given || (o.host.blocks == 0 && o.host.bytes == 0)) &&
      (o.disk.blocks != 0 || o.disk.bytes != 0)) {
    return std::string(flag) + ": G3 sits behind G2; give --host-blocks or --host-bytes too";
  }
  if (o.eviction == EvictionPolicy::kMultiLevelLru) {
    return std::string(flag) + ": the groups' pools have no frequency tracker; use --eviction " +
           "lru or lineage";
  }
  for (const auto& [given, name] : refused) {
    if (given) {
      return std::string(flag) + " replays one instance, in trace order; leave out " + name;
    }
  }
  return {};
}

HybridReplayConfig hybrid_config(const Options& o, std::uint32_t trace_block_tokens) {
  HybridReplayConfig c;
  if (!o.model_groups_file.empty()) {
    c.model = read_model_groups_file(o.model_groups_file);
  } else {
    auto m = find_hybrid_preset(o.model_groups);
    KVBM_CHECK(m.has_value(), check_hybrid_preset(o.model_groups));
    c.model = std::move(*m);
  }
  c.g1_unlimited = o.device.unlimited;
  c.g1_bytes = o.device.bytes != 0
                   ? o.device.bytes
                   : baseline_bytes_for_blocks(c.model, o.device.blocks, trace_block_tokens);
  c.eviction = o.eviction;
  // G2 and G3 as the dense replay names them, blocks of the baseline's layout as for G1;
  // only the tiers given on the command line (their defaults are the dense replay's).
  const auto tier_bytes = [&](const SizeOption& s) -> std::uint64_t {
    return s.bytes != 0 ? s.bytes
                        : baseline_bytes_for_blocks(c.model, s.blocks, trace_block_tokens);
  };
  c.g2_bytes = o.host_given ? tier_bytes(o.host) : 0;
  c.g3_bytes = o.disk_given && c.g2_bytes > 0 ? tier_bytes(o.disk) : 0;
  c.g1_g2 = o.g1_g2;
  c.g2_g3 = o.g2_g3;
  c.register_at_end = o.hybrid_cache == "tails";
  c.snapshot = parse_snapshots(o.hybrid_snapshots).value_or(SnapshotPolicy::every_block());
  if (!o.hybrid_weight.empty()) {
    const double w = std::strtod(o.hybrid_weight.c_str(), nullptr);
    for (std::size_t g = 0; g < c.model.groups.size(); ++g) {
      if (c.model.groups[g].kind != AttentionKind::kFull) c.model.g1_weights[g] = w;
    }
  }
  return c;
}

int run_hybrid_command(const Options& o, const Trace& trace, const TraceSummary& ts,
                       std::ostream& out, const std::atomic<bool>* stop) {
  HybridReplayConfig c = hybrid_config(o, trace.block_tokens);
  c.stop = stop;
  const HybridReplayResult r = run_hybrid_replay(trace, c);
  if (o.json) {
    out << json_text({{"trace", trace_json(ts)}, {"hybrid_replay", hybrid_json(r)}}) << "\n";
  } else {
    print_hybrid(out, ts, r);
  }
  if (!r.hybrid.audit.empty() || !r.baseline.audit.empty()) return 1;
  for (const auto* t : {&r.hybrid_tiered, &r.baseline_tiered}) {
    if (t->has_value() && !(*t)->audit.empty()) return 1;
  }
  return stop != nullptr && stop->load() ? 130 : 0;
}

}  // namespace kvbm::replay
