#include "replay/report.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include <fmt/format.h>

#include "replay/cluster_report.h"
#include "replay/savings.h"
#include "replay/svg_plot.h"

extern char** environ;

namespace kvbm::replay {

namespace {

double ratio(std::uint64_t num, std::uint64_t den) {
  return den == 0 ? 0.0 : static_cast<double>(num) / static_cast<double>(den);
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  std::size_t u = 0;
  while (b >= 1024.0 && u + 1 < std::size(units)) {
    b /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", b, units[u]) : fmt::format("{:.1f} {}", b, units[u]);
}

double gb_per_s(std::uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}

std::string capacity_text(std::size_t blocks) {
  return blocks == 0 ? std::string("absent") : group_digits(blocks) + " blocks";
}

// Returns the full path of `name` on PATH, or "".
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return {};
  std::stringstream ss(path);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    const std::string full = dir + "/" + name;
    if (::access(full.c_str(), X_OK) == 0) return full;
  }
  return {};
}

// Runs argv quietly (stdout and stderr to /dev/null); returns true on exit 0.
bool run_quietly(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return false;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return false;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string group_digits(std::uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void print_summary(std::ostream& out, const TraceSummary& t, const ReplayResult& r) {
  out << fmt::format("kvbm-replay: {}\n", t.source);
  out << fmt::format("  requests {}   blocks {}   prompt tokens {}   unique blocks {}",
                     group_digits(r.requests), group_digits(r.blocks), group_digits(r.tokens),
                     group_digits(t.unique_blocks));
  if (t.invalid_lines != 0)
    out << fmt::format("   invalid lines {}", group_digits(t.invalid_lines));
  out << "\n";
  out << fmt::format("  block {} tokens, {}   G1 {}   G2 {}   G3 {}   eviction {}\n",
                     r.block_tokens, human_bytes(static_cast<double>(r.block_bytes)),
                     capacity_text(r.capacity[TierId::kG1]), capacity_text(r.capacity[TierId::kG2]),
                     capacity_text(r.capacity[TierId::kG3]), r.eviction);
  if (r.persist) {
    out << fmt::format(
        "  G3 persistent: {} blocks recovered from {} at the start\n",
        group_digits(r.recovered_blocks),
        r.per_instance.empty() ? "the directory" : "the instances' directories (instance-<i>)");
  }
  if (!r.model.empty()) {
    out << fmt::format("  model {}: {} per block\n", r.model,
                       human_bytes(static_cast<double>(r.block_bytes)));
  }
  out << fmt::format("  offload G1->G2 {}, G2->G3 {}{}{}   {}\n\n", r.device_to_host,
                     r.host_to_disk, r.hold_queued_blocks ? " (queued blocks held)" : "",
                     r.overlap_offload ? " (copies overlap the requests)" : "",
                     !r.move_bytes       ? "metadata only (no bytes moved)"
                     : r.device_emulated ? "bytes moved, G1 in host memory (no GPU)"
                                         : "bytes moved, G1 on the GPU");

  out << fmt::format("  {:<6} {:>12} {:>12} {:>12} {:>12}\n", "tier", "hit blocks", "block ratio",
                     "token ratio", "evictions");
  for (const TierId k : kPoolTiers) {
    if (r.capacity[k] == 0) continue;
    out << fmt::format("  {:<6} {:>12} {:>11.2f}% {:>11.2f}% {:>12}\n", to_string(k),
                       group_digits(r.hit_blocks[k]), 100 * ratio(r.hit_blocks[k], r.blocks),
                       100 * ratio(r.hit_tokens[k], r.tokens), group_digits(r.evictions[k]));
  }
  if (r.remote) {
    out << fmt::format("  {:<6} {:>12} {:>11.2f}% {:>11.2f}%   (shared by the instances)\n", "G4",
                       group_digits(r.hit_blocks[TierId::kG4]),
                       100 * ratio(r.hit_blocks[TierId::kG4], r.blocks),
                       100 * ratio(r.hit_tokens[TierId::kG4], r.tokens));
    if (r.remote_stats && r.remote_stats->state == RemoteState::kRefused) {
      out << fmt::format("  {:<6} G4 REFUSED access: {} block accesses refused (see stderr)\n", "",
                         group_digits(r.remote_stats->count(RemoteStatus::kAccessDenied)));
    } else if (r.remote_stats && r.remote_stats->state == RemoteState::kDown) {
      out << fmt::format("  {:<6} G4 down at the end: misses while it did not answer\n", "");
    }
  }
  out << fmt::format("  {:<6} {:>12} {:>11.2f}% {:>11.2f}%\n\n", "total", group_digits(r.hits()),
                     100 * r.block_hit_ratio(), 100 * r.token_hit_ratio());
  if (!r.per_instance.empty()) {
    out << fmt::format("  {} instances{}, tier sizes per instance; hits per instance:\n",
                       r.per_instance.size(), r.remote ? " sharing G4" : ", sharing nothing");
    out << fmt::format("  {:<9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}{}\n", "instance",
                       "requests", "blocks", "G1", "G2", "G3", "G4", "ratio",
                       r.persist ? fmt::format(" {:>10}", "recovered") : "");
    for (std::size_t i = 0; i < r.per_instance.size(); ++i) {
      const auto& x = r.per_instance[i];
      out << fmt::format(
          "  {:<9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7.2f}%{}\n", i,
          group_digits(x.requests), group_digits(x.blocks), group_digits(x.hit_blocks[TierId::kG1]),
          group_digits(x.hit_blocks[TierId::kG2]), group_digits(x.hit_blocks[TierId::kG3]),
          group_digits(x.hit_blocks[TierId::kG4]), 100 * ratio(total(x.hit_blocks), x.blocks),
          r.persist ? fmt::format(" {:>10}", group_digits(x.recovered_blocks)) : "");
    }
    out << "\n";
  }
  print_cluster(out, r);

  out << fmt::format("  {:<8} {:>12} {:>12} {:>10}\n", "path", "blocks", "bytes", "GB/s");
  for (const auto& p : r.paths) {
    out << fmt::format("  {:<8} {:>12} {:>12} {:>10.3f}", p.name, group_digits(p.blocks),
                       human_bytes(static_cast<double>(p.bytes)),
                       gb_per_s(p.bytes, r.wall_seconds));
    if (p.failed_blocks != 0) out << fmt::format("   ({} failed)", group_digits(p.failed_blocks));
    out << "\n";
  }
  if (r.overlap_offload) {
    out << fmt::format("  lost_to_lag: G1->G2 {}, G2->G3 {} (evicted before their copy started)\n",
                       group_digits(r.lost_to_lag[0]), group_digits(r.lost_to_lag[1]));
  }
  out << "\n";
  {
    const Savings sv = estimate_savings(r.hit_blocks, r.hit_tokens, r.savings_inputs);
    out << fmt::format(
        "  what kvbm saved: {} prefill tokens not recomputed ({:.1f}% of the prompt tokens)\n",
        group_digits(sv.tokens_not_recomputed), 100 * ratio(sv.tokens_not_recomputed, r.tokens));
    out << fmt::format(
        "  estimate: {:.0f} s of prefill avoided ({:.0f} tokens/s), minus {:.1f} s loading G2 hits "
        "at {} GB/s "
        "and {:.1f} s loading G3 hits at {} GB/s: {:.0f} s saved\n\n",
        total(sv.recompute_s), r.savings_inputs.prefill_tokens_per_s, sv.load_s[TierId::kG2],
        r.savings_inputs.g2_gb_per_s, sv.load_s[TierId::kG3], r.savings_inputs.g3_gb_per_s,
        sv.saved_s);
  }
  out << fmt::format(
      "  computed {} blocks, uncached {} (G1 full), onboarding: {} failed, {} without room in G1\n",
      group_digits(r.computed_blocks), group_digits(r.uncached_blocks),
      group_digits(r.onboard_failed), group_digits(r.onboard_no_space));
  if (r.bytes_checked) {
    out << fmt::format("  verification: {} onboarded blocks checked, {} failures\n",
                       group_digits(r.verified_blocks), group_digits(r.verify_failures));
  } else {
    out << "  verification: not done (metadata only)\n";
  }
  out << fmt::format("  wall time {:.2f} s   {:.0f} requests/s   {:.0f} blocks/s\n", r.wall_seconds,
                     r.wall_seconds > 0 ? static_cast<double>(r.requests) / r.wall_seconds : 0.0,
                     r.wall_seconds > 0 ? static_cast<double>(r.blocks) / r.wall_seconds : 0.0);
  out << fmt::format("  CPU time {:.2f} s (every thread)   {:.0f} blocks per CPU second\n",
                     r.cpu_seconds,
                     r.cpu_seconds > 0 ? static_cast<double>(r.blocks) / r.cpu_seconds : 0.0);
  out << fmt::format("  audit: {}\n", r.audit.empty() ? "every pool balanced" : r.audit);
}

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json trace_json(const TraceSummary& t) {
  return {{"source", t.source},
          {"lines", t.lines},
          {"invalid_lines", t.invalid_lines},
          {"unique_blocks", t.unique_blocks}};
}

namespace {

// {"G1": a[G1], ..., "G4": a[G4]}.
nlohmann::json tier_json(const TierArray<std::uint64_t>& a) {
  nlohmann::json out = nlohmann::json::object();
  for (const TierId t : kTierIds) out[std::string(to_string(t))] = a[t];
  return out;
}

}  // namespace

nlohmann::json result_json(const ReplayResult& r) {
  using nlohmann::json;
  json hits = json::object();
  for (const TierId k : kPoolTiers) {
    hits[std::string(to_string(k))] = {{"blocks", r.hit_blocks[k]},
                                       {"tokens", r.hit_tokens[k]},
                                       {"block_ratio", ratio(r.hit_blocks[k], r.blocks)},
                                       {"token_ratio", ratio(r.hit_tokens[k], r.tokens)}};
  }
  if (r.remote) {
    const TierId g4 = TierId::kG4;
    hits["G4"] = {{"blocks", r.hit_blocks[g4]},
                  {"tokens", r.hit_tokens[g4]},
                  {"block_ratio", ratio(r.hit_blocks[g4], r.blocks)},
                  {"token_ratio", ratio(r.hit_tokens[g4], r.tokens)}};
    if (const auto& g = r.remote_stats) {  // the tier's state at the end (docs/remote.md)
      hits["G4"]["state"] = std::string(to_string(g->state));
      hits["G4"]["refused_blocks"] = g->count(RemoteStatus::kAccessDenied);
      hits["G4"]["refusal"] = g->refusal;
      hits["G4"]["refused_server"] = g->refused_server;
      hits["G4"]["refused_user"] = g->refused_user;
    }
  }
  hits["total"] = {{"blocks", r.hits()},
                   {"tokens", r.hit_token_count()},
                   {"block_ratio", r.block_hit_ratio()},
                   {"token_ratio", r.token_hit_ratio()}};
  json evictions = json::object();
  json capacity = json::object();
  for (const TierId k : kPoolTiers) {
    evictions[std::string(to_string(k))] = r.evictions[k];
    capacity[std::string(to_string(k))] = r.capacity[k];
  }
  json instances = json::array();
  for (const auto& x : r.per_instance) {
    instances.push_back({{"requests", x.requests},
                         {"blocks", x.blocks},
                         {"hit_blocks", tier_json(x.hit_blocks)},
                         {"recovered_blocks", x.recovered_blocks}});
  }
  json paths = json::object();
  for (const auto& p : r.paths) {
    paths[p.name] = {{"blocks", p.blocks},
                     {"bytes", p.bytes},
                     {"failed_blocks", p.failed_blocks},
                     {"gb_per_s", gb_per_s(p.bytes, r.wall_seconds)}};
  }
  const Savings sv = estimate_savings(r.hit_blocks, r.hit_tokens, r.savings_inputs);
  json savings = {
      {"prefill_tokens_not_recomputed", sv.tokens_not_recomputed},
      {"estimate",
       {{"label", "estimate: prefill time avoided minus the time to load G2/G3 hits into G1"},
        {"prefill_tokens_per_s", r.savings_inputs.prefill_tokens_per_s},
        {"g2_gb_per_s", r.savings_inputs.g2_gb_per_s},
        {"g3_gb_per_s", r.savings_inputs.g3_gb_per_s},
        {"block_bytes", r.savings_inputs.block_bytes},
        {"recompute_seconds_avoided", total(sv.recompute_s)},
        {"load_seconds", {{"G2", sv.load_s[TierId::kG2]}, {"G3", sv.load_s[TierId::kG3]}}},
        {"prefill_seconds_saved", sv.saved_s}}}};
  json engines = json::object();
  for (const auto& [name, p] : r.engine_paths) {
    engines[name] = {{"blocks", p.blocks}, {"bytes", p.bytes}, {"failed_blocks", p.failed_blocks}};
  }
  return {
      {"config",
       {{"block_tokens", r.block_tokens},
        {"block_bytes", r.block_bytes},
        {"capacity_blocks", capacity},
        {"eviction", r.eviction},
        {"g1_g2", r.device_to_host},
        {"g2_g3", r.host_to_disk},
        {"move_bytes", r.move_bytes},
        {"hold_queued_blocks", r.hold_queued_blocks},
        {"overlap_offload", r.overlap_offload},
        {"model", r.model},
        {"persist", r.persist},
        {"device_emulated", r.device_emulated}}},
      {"requests", r.requests},
      {"blocks", r.blocks},
      {"tokens", r.tokens},
      {"hits", hits},
      {"computed_blocks", r.computed_blocks},
      {"uncached_blocks", r.uncached_blocks},
      {"onboard_failed_blocks", r.onboard_failed},
      {"onboard_no_space_blocks", r.onboard_no_space},
      {"evictions", evictions},
      {"paths", paths},
      {"lost_to_lag", {{"G1->G2", r.lost_to_lag[0]}, {"G2->G3", r.lost_to_lag[1]}}},
      {"savings", savings},
      {"recovered_blocks", r.recovered_blocks},
      {"instances", {{"count", r.instances}, {"remote", r.remote}, {"each", instances}}},
      {"cluster", r.cluster ? cluster_json(*r.cluster) : json(nullptr)},
      {"engine_paths", engines},
      {"verification",
       {{"checked", r.bytes_checked},
        {"blocks", r.verified_blocks},
        {"failures", r.verify_failures}}},
      {"wall_seconds", r.wall_seconds},
      {"requests_per_second",
       r.wall_seconds > 0 ? static_cast<double>(r.requests) / r.wall_seconds : 0.0},
      {"blocks_per_second",
       r.wall_seconds > 0 ? static_cast<double>(r.blocks) / r.wall_seconds : 0.0},
      {"cpu_seconds", r.cpu_seconds},
      {"blocks_per_cpu_second",
       r.cpu_seconds > 0 ? static_cast<double>(r.blocks) / r.cpu_seconds : 0.0},
      {"audit", r.audit},
  };
}

void print_sweep(std::ostream& out, const std::vector<SweepPoint>& points) {
  out << fmt::format("  {:>20} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}\n", "G1 blocks", "G1", "G2",
                     "G3", "total", "tokens", "wall s");
  for (const auto& p : points) {
    const auto& r = p.result;
    out << fmt::format("  {:>20} {:>9.2f}% {:>9.2f}% {:>9.2f}% {:>9.2f}% {:>9.2f}% {:>9.1f}\n",
                       p.label == std::to_string(p.g1_blocks)
                           ? group_digits(p.g1_blocks)
                           : p.label + " (" + group_digits(p.g1_blocks) + ")",
                       100 * ratio(r.hit_blocks[TierId::kG1], r.blocks),
                       100 * ratio(r.hit_blocks[TierId::kG2], r.blocks),
                       100 * ratio(r.hit_blocks[TierId::kG3], r.blocks), 100 * r.block_hit_ratio(),
                       100 * r.token_hit_ratio(), r.wall_seconds);
  }
}

std::string sweep_svg(const std::vector<SweepPoint>& points, const std::string& title) {
  const PlotFrame f;
  const double kL = f.left, kT = f.top, pw = f.plot_width(), ph = f.plot_height();
  std::vector<const SweepPoint*> pts;
  for (const auto& p : points) {
    if (p.g1_blocks > 0) pts.push_back(&p);
  }
  std::sort(pts.begin(), pts.end(), [](auto* a, auto* b) { return a->g1_blocks < b->g1_blocks; });
  double xmin = 1, xmax = 10, ymax = 0.1;
  if (!pts.empty()) {
    xmin = static_cast<double>(pts.front()->g1_blocks) / 1.5;
    xmax = static_cast<double>(pts.back()->g1_blocks) * 1.5;
    for (auto* p : pts) ymax = std::max(ymax, p->result.block_hit_ratio());
  }
  ymax = std::min(1.0, std::ceil(ymax * 10.0 + 1e-9) / 10.0);
  auto x = [&](double v) {
    return kL + pw * (std::log10(v) - std::log10(xmin)) / (std::log10(xmax) - std::log10(xmin));
  };
  auto y = [&](double v) { return f.y(v, ymax); };

  std::string s = svg_head(f, title);
  // Grid and ticks.
  // Ticks at 1, 2 and 5 x 10^k inside the range (labels at 10^k, and at 2 and 5 when few decades).
  const bool few_decades = std::log10(xmax / xmin) < 2.5;
  for (double decade = std::pow(10.0, std::floor(std::log10(xmin))); decade <= xmax; decade *= 10) {
    for (const double m : {1.0, 2.0, 5.0}) {
      const double d = decade * m;
      if (d < xmin || d > xmax) continue;
      s += fmt::format(
          "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"{3}\"/>\n", x(d), kT,
          kT + ph, m == 1.0 ? "#ccc" : "#eee");
      if (m == 1.0 || few_decades) {
        s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x(d),
                         kT + ph + 18, group_digits(static_cast<std::uint64_t>(d)));
      }
    }
  }
  s += percent_grid(f, ymax, "G1 capacity (blocks, log scale)", "block hit ratio");

  struct Series {
    const char* name;
    const char* color;
    double (*value)(const ReplayResult&);
  };
  const Series series[] = {
      {"G1 hits only", "#ff7f0e",
       [](const ReplayResult& r) { return ratio(r.hit_blocks[TierId::kG1], r.blocks); }},
      {"all tiers (G1+G2+G3)", "#1f77b4",
       [](const ReplayResult& r) { return r.block_hit_ratio(); }},
  };
  double ly = kT + 10;
  for (const auto& se : series) {
    std::string poly;
    for (auto* p : pts)
      poly += fmt::format("{:.1f},{:.1f} ", x(static_cast<double>(p->g1_blocks)),
                          y(se.value(p->result)));
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                     poly, se.color);
    for (auto* p : pts) {
      const double px = x(static_cast<double>(p->g1_blocks)), py = y(se.value(p->result));
      s += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"><title>{} {}: "
          "{:.2f}%</title></circle>\n",
          px, py, se.color, xml_escape(p->label), se.name, 100 * se.value(p->result));
    }
    s += legend_entry(f, ly, se.color, se.name);
    ly += 20;
  }
  // Point labels for the all-tiers series, and the capacity label under "unlimited" and the like.
  for (auto* p : pts) {
    const double px = x(static_cast<double>(p->g1_blocks));
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"10\" "
        "fill=\"#1f77b4\">{:.1f}%</text>\n",
        px, y(p->result.block_hit_ratio()) - 9, 100 * p->result.block_hit_ratio());
    if (p->label != std::to_string(p->g1_blocks)) {
      s += fmt::format(
          "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\" "
          "fill=\"#555\">{}</text>\n",
          px, kT + ph - 6, xml_escape(p->label));
    }
  }
  if (!pts.empty()) {
    const auto& r = pts.front()->result;
    ly += 10;
    for (const std::string& line :
         {fmt::format("G2 {}", capacity_text(r.capacity[TierId::kG2])),
          fmt::format("G3 {}", capacity_text(r.capacity[TierId::kG3])),
          fmt::format("eviction {}", r.eviction), fmt::format("block {} tokens", r.block_tokens)}) {
      s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" fill=\"#555\">{}</text>\n", kL + pw + 16, ly,
                       xml_escape(line));
      ly += 16;
    }
  }
  s += "</svg>\n";
  return s;
}

std::optional<std::filesystem::path> convert_to_png(const std::filesystem::path& svg) {
  std::filesystem::path png = svg;
  png.replace_extension(".png");
  std::error_code ec;
  std::filesystem::remove(png, ec);
  if (const std::string rsvg = find_on_path("rsvg-convert"); !rsvg.empty()) {
    if (run_quietly({rsvg, "-o", png.string(), svg.string()}) && std::filesystem::exists(png, ec))
      return png;
  }
  for (const char* tool : {"magick", "convert"}) {
    if (const std::string im = find_on_path(tool); !im.empty()) {
      if (run_quietly({im, svg.string(), png.string()}) && std::filesystem::exists(png, ec))
        return png;
    }
  }
  return std::nullopt;
}

}  // namespace kvbm::replay
