#include "replay/hybrid_replay.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <numeric>
#include <optional>
#include <utility>

#include "kvbm/error.h"
#include "kvbm/groups/hybrid_block_manager.h"
#include "replay/hybrid_tiers.h"

namespace kvbm::replay {

namespace {

using Manager = HybridBlockManager<G1>;

// Mixes a trace block's chained hash with a hash block's index (splitmix64's finalizer
// over both): equal inputs, equal outputs; anything else collides with chance 2^-64.
std::uint64_t mix(std::uint64_t value, std::uint64_t index) noexcept {
  std::uint64_t z = value ^ (index * 0x9E37'79B9'7F4A'7C15ull + 0x632B'E59B'D9B4'E019ull);
  z = (z ^ (z >> 30)) * 0xBF58'476D'1CE4'E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D0'49BB'1331'11EBull;
  return z ^ (z >> 31);
}

std::uint32_t lcm_block(const HybridModel& m) {
  std::uint64_t l = 1;
  for (const auto& g : m.groups) l = std::lcm(l, std::uint64_t{g.tokens_per_block});
  KVBM_CHECK(l <= kMaxAlignmentTokens, "the groups' block sizes have an lcm above ",
             kMaxAlignmentTokens, " tokens");
  return static_cast<std::uint32_t>(l);
}

// The most blocks of `tokens_per_block` any request of the trace needs, summed: room for all.
std::size_t unlimited_blocks(const Trace& trace, std::uint32_t tokens_per_block) {
  std::size_t n = 1;
  for (const auto& r : trace.requests)
    n += (r.input_length + tokens_per_block - 1) / tokens_per_block;
  return n;
}

std::string snapshot_name(const SnapshotPolicy& p) {
  switch (p.kind) {
    case SnapshotPolicy::Kind::kEveryKthBlock:
      return "every_" + std::to_string(p.every) + "th_block";
    case SnapshotPolicy::Kind::kRequestEnd:
      return "request_end";
    case SnapshotPolicy::Kind::kStepEnd:
      return "step_end";
    case SnapshotPolicy::Kind::kEveryBlock:
      break;
  }
  return "every_block";
}

// One replay of the trace through one manager: a HybridBlockManager<G1> of its own
// (G1 only), or a HybridKvBlockManager's core over its groups' G1 pools (tiered).
class HybridPass {
 public:
  HybridPass(const Trace& trace, const HybridReplayConfig& config, const HybridModel& model,
             const std::vector<TierArray<std::size_t>>& capacity, bool tiered)
      : trace_(trace), config_(config) {
    if (tiered) {
      tiered_ = tiered_manager(model, capacity, config);
      core_ = &tiered_->core();
    } else {
      own_.emplace(build(model, capacity));
      core_ = &*own_;
    }
    run_.tiered = tiered;
    run_.vllm_padded_block = vllm_padded_block(model);
    for (std::size_t g = 0; g < model.groups.size(); ++g) {
      GroupFigures f;
      f.spec = model.groups[g];
      f.g1_weight = g < model.g1_weights.size() ? model.g1_weights[g] : 1.0;
      f.capacity_blocks = capacity[g][TierId::kG1];
      f.tier_capacity_blocks[TierId::kG1] = f.capacity_blocks;
      run_.groups.push_back(std::move(f));
    }
    held_sum_.assign(model.groups.size(), 0);
  }

  HybridRun run() {
    const auto start = std::chrono::steady_clock::now();
    const std::size_t total = trace_.requests.size();
    for (std::size_t i = 0; i < total; ++i) {
      if (config_.stop != nullptr && config_.stop->load(std::memory_order_relaxed)) break;
      replay_request(trace_.requests[i]);
      if (config_.progress && ((i + 1) % 256 == 0 || i + 1 == total))
        config_.progress(i + 1, total);
    }
    for (std::size_t g = 0; g < run_.groups.size(); ++g) {
      auto& f = run_.groups[g];
      f.mean_held_blocks = run_.prefill_steps == 0 ? 0.0
                                                   : static_cast<double>(held_sum_[g]) /
                                                         static_cast<double>(run_.prefill_steps);
      f.cached_blocks_end = core_->pool(g).pool_counts().inactive;
      const PoolCounts c = core_->pool(g).pool_counts();
      f.held_blocks_end[TierId::kG1] = c.total - c.reset;
    }
    if (tiered_) {
      tiered_->drain();
      collect_tiers(*tiered_, run_);
      run_.audit = tiered_->audit();
    } else {
      run_.audit = own_->audit();
    }
    run_.wall_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::move(run_);
  }

 private:
  Manager build(const HybridModel& model,
                const std::vector<TierArray<std::size_t>>& capacity) const {
    auto b = Manager::builder();
    for (std::size_t g = 0; g < model.groups.size(); ++g)
      b.group(model.groups[g], capacity[g][TierId::kG1]);
    return b.snapshot_policy(config_.snapshot).eviction(config_.eviction).pool_name("G1").build();
  }

  // The cut of one request: G1's alone, or onboarded from every tier (only what it reads).
  PrefixHit<G1> lookup(const std::vector<SequenceHash>& hashes, std::size_t max_tokens) {
    if (!tiered_) {
      PrefixHit<G1> hit = own_->find_prefix(hashes, max_tokens);
      for (std::size_t g = 0; g < run_.groups.size(); ++g)
        run_.groups[g].hit_blocks_by_tier[TierId::kG1] += hit.ranges[g].size();
      return hit;
    }
    HybridOnboardHandle h = tiered_->onboard(hashes, max_tokens);
    PrefixHit<G1> hit = h.take_hit();
    run_.shrunk_cuts += hit.tokens < h.planned_tokens() ? 1 : 0;
    for (std::size_t g = 0; g < run_.groups.size(); ++g) {
      if (hit.ranges[g].empty()) continue;
      const OnboardCounts c = h.counts(g);
      for (const TierId t : kTierIds) run_.groups[g].hit_blocks_by_tier[t] += c.from(t);
    }
    return hit;
  }

  void replay_request(const TraceRequest& req) {
    const std::size_t prompt = req.input_length;
    ++run_.requests;
    run_.prompt_tokens += prompt;
    if (prompt == 0) return;
    const auto hashes = hybrid_hashes(req, trace_.block_tokens, core_->hash_block_size());
    PrefixHit<G1> hit = lookup(hashes, prompt - 1);
    run_.hit_tokens += hit.tokens;
    run_.hit_requests += hit.tokens > 0 ? 1 : 0;
    count_vllm_rule(prompt, hit.tokens);
    for (std::size_t g = 0; g < run_.groups.size(); ++g) {
      run_.groups[g].hit_blocks += hit.ranges[g].size();
      run_.groups[g].hit_tokens += hit.ranges[g].size() * run_.groups[g].spec.tokens_per_block;
    }
    HybridRequest<G1> r = core_->start_request(std::move(hit));
    prefill(r, hashes, prompt);
    core_->finish(r, hashes);
    // Every offload lands before the next request: the same figures on every run.
    if (tiered_) tiered_->drain();
  }

  // The cut under vLLM's padded block (HybridRun::vllm_padded_block).
  void count_vllm_rule(std::size_t prompt, std::size_t cut) {
    const std::size_t p = run_.vllm_padded_block;
    if (p == 0) return;
    const std::size_t vllm = std::min(cut, prompt - 1) / p * p;
    run_.vllm_rule_hit_tokens += vllm;
    if (prompt >= p) return;
    ++run_.short_requests;
    run_.short_prompt_tokens += prompt;
    run_.short_hit_tokens += cut;
    run_.short_vllm_rule_tokens += vllm;
  }

  // G1 room for the step; tiered: after the copies in flight have let their blocks go.
  bool allocate(HybridRequest<G1>& r, std::size_t tokens) {
    if (core_->allocate(r, tokens)) return true;
    if (!tiered_) return false;
    tiered_->drain();
    return core_->allocate(r, tokens);
  }

  // Step 2 of the file comment: chunk by chunk from the cut to the prompt's end.
  void prefill(HybridRequest<G1>& r, const std::vector<SequenceHash>& hashes, std::size_t prompt) {
    const std::size_t chunk = config_.prefill_chunk_tokens;
    std::size_t done = r.computed_tokens();
    std::vector<std::size_t> end_before(run_.groups.size());
    for (std::size_t g = 0; g < run_.groups.size(); ++g) end_before[g] = r.held_range(g).last;
    while (done < prompt) {
      const std::size_t next = std::min(prompt, (done / chunk + 1) * chunk);
      if (!allocate(r, next)) {
        run_.uncached_tokens += prompt - done;
        break;
      }
      ++run_.prefill_steps;
      for (std::size_t g = 0; g < run_.groups.size(); ++g) {
        const BlockRange held = r.held_range(g);
        auto& f = run_.groups[g];
        f.peak_held_blocks = std::max(f.peak_held_blocks, held.size());
        held_sum_[g] += held.size();
        f.written_blocks += held.last > end_before[g] ? held.last - end_before[g] : 0;
        end_before[g] = std::max(end_before[g], held.last);
      }
      if (!config_.register_at_end || next == prompt) core_->commit(r, hashes, next);
      core_->release_out_of_reach(r, next);
      done = next;
    }
  }

  const Trace& trace_;
  const HybridReplayConfig& config_;
  std::optional<Manager> own_;
  std::unique_ptr<HybridKvBlockManager> tiered_;
  Manager* core_ = nullptr;
  HybridRun run_;
  std::vector<std::uint64_t> held_sum_;
};

// Each group's blocks per tier (G2 and G3: 0 without them).
std::vector<TierArray<std::size_t>> capacities(const Trace& trace, const HybridReplayConfig& config,
                                               const HybridModel& model) {
  std::vector<std::size_t> g1;
  if (!config.g1_unlimited) {
    g1 = split_g1(model, config.g1_bytes);
  } else {
    for (const auto& g : model.groups) g1.push_back(unlimited_blocks(trace, g.tokens_per_block));
  }
  return tier_capacities(model, g1, config);
}

}  // namespace

HybridModel full_attention_baseline(const HybridModel& model) {
  validate_groups(model.groups);
  const std::uint32_t block = lcm_block(model);
  std::uint64_t bytes = 0;
  std::vector<std::uint32_t> layers;
  for (const auto& g : model.groups) {
    bytes += g.bytes_per_block * (block / g.tokens_per_block);
    layers.insert(layers.end(), g.layers.begin(), g.layers.end());
  }
  std::sort(layers.begin(), layers.end());
  HybridModel b;
  b.name = model.name + " (every layer full attention)";
  b.label = "baseline: every layer as full attention";
  b.source = model.source;
  b.groups.push_back(KvCacheGroupSpec::full(GroupId{0}, block, bytes, std::move(layers)));
  b.groups[0].name = "all-full";
  b.g1_weights = {1.0};
  return b;
}

std::uint32_t vllm_padded_block(const HybridModel& model) {
  constexpr std::uint64_t kKernelBlock = 16;  // FlashAttention's smallest, vLLM's default size
  std::uint64_t attn_token = 0;               // one token of one attention layer
  std::uint64_t state = 0;                    // one layer's state snapshot
  for (const auto& g : model.groups) {
    if (g.layers.empty()) continue;
    const std::uint64_t layers = g.layers.size();
    if (g.kind == AttentionKind::kRecurrentState) {
      state = std::max(state, g.bytes_per_block / layers);
    } else {
      attn_token = std::max(attn_token, g.bytes_per_block / (layers * g.tokens_per_block));
    }
  }
  if (state == 0 || attn_token == 0) return 0;
  const std::uint64_t per_kernel_block = kKernelBlock * attn_token;
  return static_cast<std::uint32_t>(kKernelBlock *
                                    ((state + per_kernel_block - 1) / per_kernel_block));
}

std::uint64_t baseline_bytes_for_blocks(const HybridModel& model, std::size_t blocks,
                                        std::uint32_t trace_block_tokens) {
  const HybridModel b = full_attention_baseline(model);
  const long double per_token = static_cast<long double>(b.groups[0].bytes_per_block) /
                                static_cast<long double>(b.groups[0].tokens_per_block);
  return static_cast<std::uint64_t>(per_token * static_cast<long double>(blocks) *
                                    static_cast<long double>(trace_block_tokens));
}

std::vector<std::size_t> split_g1(const HybridModel& model, std::uint64_t bytes) {
  KVBM_CHECK(!model.groups.empty(), "split_g1: no groups");
  // Bytes per token of capacity: sum over groups of weight x bytes per block / tokens per block.
  long double per_token = 0;
  for (std::size_t g = 0; g < model.groups.size(); ++g) {
    const double w = g < model.g1_weights.size() ? model.g1_weights[g] : 1.0;
    KVBM_CHECK(w > 0, "split_g1: group ", g, "'s g1_weight is ", w, "; give a weight > 0");
    per_token += static_cast<long double>(w) * model.groups[g].bytes_per_block /
                 model.groups[g].tokens_per_block;
  }
  const long double tokens = static_cast<long double>(bytes) / per_token;
  std::vector<std::size_t> out;
  for (std::size_t g = 0; g < model.groups.size(); ++g) {
    const auto& spec = model.groups[g];
    const double w = g < model.g1_weights.size() ? model.g1_weights[g] : 1.0;
    const auto n = static_cast<std::size_t>(w * tokens / spec.tokens_per_block);
    KVBM_CHECK(n > 0, "G1 of ", bytes, " bytes leaves group ", g, " (", spec.display_name(), ", ",
               spec.bytes_per_block, " bytes per block) no block; give a larger G1");
    out.push_back(n);
  }
  return out;
}

std::vector<SequenceHash> hybrid_hashes(const TraceRequest& request,
                                        std::uint32_t trace_block_tokens,
                                        std::uint32_t hash_block) {
  KVBM_CHECK(trace_block_tokens > 0 && hash_block > 0, "hybrid_hashes: a block of 0 tokens");
  const std::uint64_t covered = std::min<std::uint64_t>(
      request.input_length, std::uint64_t{trace_block_tokens} * request.hashes.size());
  const std::size_t n = covered / hash_block;
  std::vector<SequenceHash> out;
  out.reserve(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t last_token = (k + 1) * std::size_t{hash_block} - 1;
    const std::uint64_t prev = k == 0 ? 0 : out.back().value();
    const std::uint64_t v =
        mix(mix(request.hashes[last_token / trace_block_tokens].value(), prev), k);
    out.emplace_back(v, k == 0 ? std::nullopt : std::optional(out.back().value()),
                     static_cast<std::uint32_t>(k));
  }
  return out;
}

HybridReplayResult run_hybrid_replay(const Trace& trace, const HybridReplayConfig& config) {
  KVBM_CHECK(trace.block_tokens > 0, "run_hybrid_replay: the trace was read with block_tokens 0");
  KVBM_CHECK(config.prefill_chunk_tokens > 0, "run_hybrid_replay: a prefill chunk of 0 tokens");
  KVBM_CHECK(config.g1_unlimited || config.g1_bytes > 0,
             "run_hybrid_replay: give G1 bytes or unlimited");
  validate_groups(config.model.groups);
  HybridReplayResult res;
  res.trace = trace.source;
  res.trace_block_tokens = trace.block_tokens;
  res.model = config.model.name;
  res.label = config.model.label;
  res.source = config.model.source;
  res.g1_budget_bytes = config.g1_unlimited ? 0 : config.g1_bytes;
  res.g1_unlimited = config.g1_unlimited;
  res.prefill_chunk_tokens = config.prefill_chunk_tokens;
  res.snapshot_policy = snapshot_name(config.snapshot);
  res.eviction = std::string(to_string(config.eviction));
  res.register_at_end = config.register_at_end;
  res.g2_budget_bytes = config.g2_bytes;
  res.g3_budget_bytes = config.g3_bytes;
  const HybridModel base = full_attention_baseline(config.model);
  const auto model_blocks = capacities(trace, config, config.model);
  const auto base_blocks = capacities(trace, config, base);
  res.hybrid = HybridPass(trace, config, config.model, model_blocks, false).run();
  res.baseline = HybridPass(trace, config, base, base_blocks, false).run();
  if (config.tiered()) {
    res.hybrid_tiered = HybridPass(trace, config, config.model, model_blocks, true).run();
    res.baseline_tiered = HybridPass(trace, config, base, base_blocks, true).run();
  }
  return res;
}

}  // namespace kvbm::replay
