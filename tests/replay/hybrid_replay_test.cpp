// Tests of replay/hybrid_replay.h and hybrid_report.h: the presets through
// HybridBlockManager<G1> on a prefix of the shipped trace, beside the
// full-attention baseline at the same G1 bytes.

#include "replay/hybrid_replay.h"

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "replay/hybrid_report.h"
#include "replay_test_util.h"

namespace kvbm::replay {
namespace hybrid_replay_test {

// The G1 of the dense replay's default: 1,000 trace blocks of the baseline's layout.
HybridReplayConfig config_for(const std::string& preset, std::uint32_t trace_block_tokens) {
  HybridReplayConfig c;
  c.model = *find_hybrid_preset(preset);
  c.g1_bytes = baseline_bytes_for_blocks(c.model, 1'000, trace_block_tokens);
  return c;
}

// Blocks a sliding window of W (or a chunk of C) needs for one running request that
// prefills `step` tokens at a time: the window's tail (or the whole chunk) plus a step.
std::size_t reach_bound(const KvCacheGroupSpec& g, std::uint32_t step) {
  const std::size_t b = g.tokens_per_block;
  const std::size_t tail = g.kind == AttentionKind::kSlidingWindow
                               ? (g.window_tokens - 1 + b - 1) / b
                               : g.window_tokens / b;
  return tail + (step + b - 1) / b + 1;
}

void expect_balanced(const HybridRun& run, const std::string& what) {
  EXPECT_EQ(run.audit, "") << what;
  EXPECT_GT(run.requests, 0u) << what;
  EXPECT_EQ(run.uncached_tokens, 0u) << what;
}

TEST(HybridReplay, HashesKeepTheTracesPrefixSharing) {
  TraceRequest a;
  a.input_length = 1100;  // two full trace blocks and a partial third
  a.hashes = {SequenceHash(1, std::nullopt, 0), SequenceHash(2, 1, 1), SequenceHash(3, 2, 2)};
  TraceRequest b = a;
  b.hashes[1] = SequenceHash(9, 1, 1);  // the same first block, another second
  const auto ha = hybrid_hashes(a, 512, 16);
  const auto hb = hybrid_hashes(b, 512, 16);
  ASSERT_EQ(ha.size(), 1100u / 16);  // full hash blocks only; the partial tail is not hashed
  for (std::size_t k = 0; k < ha.size(); ++k) {
    EXPECT_EQ(ha[k].position(), k);
    if (k > 0) {
      EXPECT_EQ(ha[k].parent(), ha[k - 1].value());
    }
    EXPECT_EQ(ha[k].value() == hb[k].value(), k < 32) << k;  // equal exactly over block 0
  }
}

// Every preset on a prefix of the shipped trace: every group's pool balanced at the end
// in both managers, and the baseline holding what it should.
TEST(HybridReplay, EveryPresetEndsWithEveryPoolBalanced) {
  const auto trace = test::first_requests(kvbm::test::scaled(300, 100));
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  for (const auto& p : hybrid_presets()) {
    const HybridReplayResult r = run_hybrid_replay(*trace, config_for(std::string(p.name), 512));
    expect_balanced(r.hybrid, std::string(p.name) + " hybrid");
    expect_balanced(r.baseline, std::string(p.name) + " baseline");
    ASSERT_EQ(r.baseline.groups.size(), 1u);
    EXPECT_LE(r.hybrid.g1_bytes(), r.g1_budget_bytes) << p.name;
    EXPECT_LE(r.baseline.g1_bytes(), r.g1_budget_bytes) << p.name;
    for (const auto& g : r.hybrid.groups) {
      EXPECT_GT(g.written_blocks, 0u) << p.name << " " << g.spec.display_name();
      EXPECT_LE(g.peak_held_blocks, g.capacity_blocks) << p.name;
    }
  }
}

// A sliding window's (and a chunk's) group holds what its reach needs, however long
// the prompt: the replay runs one request at a time, so one request's worth.
TEST(HybridReplay, WindowAndChunkGroupsHoldOnlyTheirReach) {
  const auto trace = test::first_requests(kvbm::test::scaled(300, 100));
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  for (const char* preset : {"gpt-oss-20b", "gemma3-27b", "llama4-scout"}) {
    const HybridReplayConfig c = config_for(preset, 512);
    const HybridReplayResult r = run_hybrid_replay(*trace, c);
    const auto& full = r.hybrid.groups[0];
    const auto& local = r.hybrid.groups[1];
    const std::size_t bound = reach_bound(local.spec, c.prefill_chunk_tokens);
    EXPECT_LE(local.peak_held_blocks, bound) << preset;
    EXPECT_GT(full.peak_held_blocks, bound) << preset << ": the prompts are longer than the reach";
    EXPECT_LT(local.mean_held_blocks, full.mean_held_blocks) << preset;
    // The baseline holds every layer of the whole prompt.
    EXPECT_EQ(r.baseline.groups[0].peak_held_blocks, full.peak_held_blocks) << preset;
  }
}

// With room for every block, a cut needs nothing that was evicted: the hybrid hit rules
// give the baseline's cuts exactly.
TEST(HybridReplay, UnlimitedG1GivesTheBaselinesHits) {
  const auto trace = test::first_requests(kvbm::test::scaled(300, 100));
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  for (const auto& p : hybrid_presets()) {
    HybridReplayConfig c = config_for(std::string(p.name), 512);
    c.g1_unlimited = true;
    const HybridReplayResult r = run_hybrid_replay(*trace, c);
    EXPECT_GT(r.baseline.hit_tokens, 0u) << p.name;
    EXPECT_EQ(r.hybrid.hit_tokens, r.baseline.hit_tokens) << p.name;
    EXPECT_EQ(r.hybrid.hit_requests, r.baseline.hit_requests) << p.name;
    expect_balanced(r.hybrid, std::string(p.name));
  }
}

// A dense model is its own baseline: identical figures.
TEST(HybridReplay, ADenseModelEqualsItsBaseline) {
  const auto trace = test::first_requests(300);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  const HybridReplayResult r = run_hybrid_replay(*trace, config_for("llama3.1-8b", 512));
  EXPECT_EQ(r.hybrid.hit_tokens, r.baseline.hit_tokens);
  EXPECT_EQ(r.hybrid.groups[0].hit_blocks, r.baseline.groups[0].hit_blocks);
  EXPECT_EQ(r.hybrid.groups[0].written_blocks, r.baseline.groups[0].written_blocks);
  EXPECT_EQ(r.hybrid.groups[0].capacity_blocks, r.baseline.groups[0].capacity_blocks);
}

// At the same G1 bytes, caching only what is in reach when a prefill ends (a window's
// tail, a chunk's head, one snapshot) lets the small groups' pools shrink to a tenth of
// the tokens and the full-attention pool grow: more prefixes held, more hits than the
// baseline. (Caching every block as vLLM does gives the baseline's hits at best: the
// window's pool then sees as many blocks per request as the full one; docs/replay.md.)
TEST(HybridReplay, CachingTailsHoldsMorePrefixesInTheSameBytes) {
  const auto trace = test::first_requests(600);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  for (const char* preset : {"gpt-oss-20b", "gemma3-27b", "llama4-scout", "qwen3-next-80b"}) {
    HybridReplayConfig c = config_for(preset, 512);
    c.register_at_end = true;
    c.model.g1_weights[1] = 0.1;
    const HybridReplayResult r = run_hybrid_replay(*trace, c);
    expect_balanced(r.hybrid, preset);
    EXPECT_GT(r.hybrid.groups[0].capacity_blocks, r.baseline.groups[0].capacity_blocks *
                                                      r.baseline.groups[0].spec.tokens_per_block /
                                                      r.hybrid.groups[0].spec.tokens_per_block)
        << preset;
    EXPECT_GT(r.hybrid.hit_tokens, r.baseline.hit_tokens) << preset;
    EXPECT_GT(r.gain(), 1.0) << preset;
  }
}

// A recurrent-state group that keeps one snapshot per request (SnapshotPolicy::request_end)
// needs a tenth of the tokens: the full-attention pool grows and finds more, even with
// every block cached as it fills.
TEST(HybridReplay, OneSnapshotPerRequestHoldsMorePrefixesInTheSameBytes) {
  const auto trace = test::first_requests(600);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  HybridReplayConfig c = config_for("qwen3-next-80b", 512);
  c.snapshot = SnapshotPolicy::request_end();
  c.model.g1_weights[1] = 0.1;
  const HybridReplayResult r = run_hybrid_replay(*trace, c);
  expect_balanced(r.hybrid, "request_end");
  EXPECT_EQ(r.snapshot_policy, "request_end");
  EXPECT_LE(r.hybrid.groups[1].peak_held_blocks, 2u);  // the live state and the last snapshot
  EXPECT_GT(r.hybrid.hit_tokens, r.baseline.hit_tokens);
}

// vLLM's align mode (SnapshotPolicy::step_end): the state group takes one block per prefill
// step and holds the live state and the one before, nothing more, whatever the prompt length.
TEST(HybridReplay, StepEndSnapshotsHoldTheLiveStateAndTheOneBefore) {
  const auto trace = test::first_requests(600);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  HybridReplayConfig c = config_for("qwen3-next-80b", 512);
  c.snapshot = SnapshotPolicy::step_end();
  const HybridReplayResult r = run_hybrid_replay(*trace, c);
  expect_balanced(r.hybrid, "step_end");
  EXPECT_EQ(r.snapshot_policy, "step_end");
  EXPECT_LE(r.hybrid.groups[1].peak_held_blocks, 2u);
  EXPECT_GT(r.hybrid.hit_tokens, 0u);
}

// Two runs, the same figures: the text table and the JSON (less its wall time).
TEST(HybridReplay, TwoRunsGiveTheSameReport) {
  const auto trace = test::first_requests(200);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  const TraceSummary ts{"trace", 200, 0, 0};
  auto once = [&](std::string& text) {
    HybridReplayConfig c = config_for("qwen3-next-80b", 512);
    c.register_at_end = true;
    const HybridReplayResult r = run_hybrid_replay(*trace, c);
    std::ostringstream out;
    print_hybrid(out, ts, r);
    text = out.str();
    nlohmann::json j = hybrid_json(r);
    j["hybrid"].erase("wall_seconds");
    j["baseline"].erase("wall_seconds");
    return j.dump();
  };
  std::string text1;
  std::string text2;
  const std::string json1 = once(text1);
  const std::string json2 = once(text2);
  EXPECT_EQ(text1, text2);
  EXPECT_EQ(json1, json2);
  EXPECT_NE(json1.find("\"peak_bytes\""), std::string::npos);
  EXPECT_NE(text1.find("deltanet"), std::string::npos);
}

// G2 and G3 behind a small G1 (300 trace blocks, above the longest prompt; G2 4x, G3 16x).
HybridReplayConfig tiered_config_for(const std::string& preset) {
  HybridReplayConfig c;
  c.model = *find_hybrid_preset(preset);
  c.g1_bytes = baseline_bytes_for_blocks(c.model, 300, 512);
  c.g2_bytes = 4 * c.g1_bytes;
  c.g3_bytes = 16 * c.g1_bytes;
  return c;
}

// Each group's tiers after a tiered run: what it holds fits, its hits add up, G1 let blocks
// go down, and every pool of every group and tier audits clean.
void expect_tiers_consistent(const HybridRun& run, const std::string& what) {
  ASSERT_TRUE(run.tiered) << what;
  expect_balanced(run, what);
  for (const auto& g : run.groups) {
    const std::string at = what + " " + g.spec.display_name();
    for (const TierId t : {TierId::kG1, TierId::kG2, TierId::kG3}) {
      EXPECT_GT(g.tier_capacity_blocks[t], 0u) << at << " " << to_string(t);
      EXPECT_LE(g.held_blocks_end[t], g.tier_capacity_blocks[t]) << at << " " << to_string(t);
    }
    if (run.shrunk_cuts == 0) {
      EXPECT_EQ(total(g.hit_blocks_by_tier), g.hit_blocks) << at;
    }
    EXPECT_GT(g.offloaded_g1_g2, 0u) << at;
  }
}

// G2 and G3 behind G1, at the same G1 bytes: every preset finds at least what G1 alone
// finds, the difference from the lower tiers, onboarding only what the cut reads (a window's
// tail, one snapshot: never more blocks than the cut reads).
TEST(HybridReplay, G2AndG3BehindG1FindAtLeastWhatG1AloneFinds) {
  const auto trace = test::first_requests(250);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  // The sanitizer builds (KVBM_STRESS_SCALE < 1) leave out the chunked-local preset, whose
  // tiers tests/hybrid/ checks too: a window and a state group cover the onboarding rules.
  std::vector<const char*> presets = {"gpt-oss-20b", "qwen3-next-80b"};
  if (test::stress_scale() >= 1) presets.push_back("llama4-scout");
  for (const char* preset : presets) {
    const HybridReplayResult r = run_hybrid_replay(*trace, tiered_config_for(preset));
    ASSERT_TRUE(r.hybrid_tiered && r.baseline_tiered) << preset;
    const HybridRun& t = *r.hybrid_tiered;
    expect_tiers_consistent(t, std::string(preset) + " hybrid G1-G3");
    expect_tiers_consistent(*r.baseline_tiered, std::string(preset) + " baseline G1-G3");
    EXPECT_GE(t.hit_tokens, r.hybrid.hit_tokens) << preset;
    EXPECT_GE(r.baseline_tiered->hit_tokens, r.baseline.hit_tokens) << preset;
    EXPECT_GT(r.tiered_gain(), 1.0) << preset;
    std::uint64_t lower = 0;
    for (std::size_t g = 0; g < t.groups.size(); ++g) {
      const auto& f = t.groups[g];
      lower += f.hit_blocks_by_tier[TierId::kG2] + f.hit_blocks_by_tier[TierId::kG3];
      // The same G1 pools as the G1-only replay.
      EXPECT_EQ(f.capacity_blocks, r.hybrid.groups[g].capacity_blocks) << preset;
    }
    EXPECT_GT(lower, 0u) << preset << ": no hit came from G2 or G3";
  }
}

// The tiered report repeats run to run: the text and the JSON (less the wall times).
TEST(HybridReplay, TieredReportRepeatsRunToRun) {
  const auto trace = test::first_requests(100);
  if (!trace) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  const TraceSummary ts{"trace", 100, 0, 0};
  auto once = [&](std::string& text) {
    const HybridReplayResult r = run_hybrid_replay(*trace, tiered_config_for("gpt-oss-20b"));
    std::ostringstream out;
    print_hybrid(out, ts, r);
    text = out.str();
    nlohmann::json j = hybrid_json(r);
    for (const char* k : {"hybrid", "baseline", "hybrid_tiered", "baseline_tiered"}) {
      j.at(k).erase("wall_seconds");
    }
    return j.dump();
  };
  std::string text1;
  std::string text2;
  const std::string json1 = once(text1);
  const std::string json2 = once(text2);
  EXPECT_EQ(text1, text2);
  EXPECT_EQ(json1, json2);
  EXPECT_NE(json1.find("\"G2_to_G3\""), std::string::npos);
  EXPECT_NE(text1.find("hybrid G1-G3"), std::string::npos) << text1;
}

// A short trace of its own: `n` requests of `tokens` prompt tokens sharing trace block 7.
Trace repeated_prompt(std::size_t n, std::uint64_t tokens) {
  Trace t;
  t.source = "repeated";
  t.block_tokens = 512;
  for (std::size_t i = 0; i < n; ++i) {
    TraceRequest r;
    r.input_length = tokens;
    for (std::uint64_t b = 0; b * 512 < tokens; ++b) {
      r.hashes.emplace_back(7 + b, b == 0 ? std::nullopt : std::optional<std::uint64_t>(6 + b),
                            static_cast<std::uint32_t>(b));
    }
    t.blocks += r.hashes.size();
    t.input_tokens += tokens;
    t.requests.push_back(std::move(r));
  }
  return t;
}

// vLLM pads Qwen3-Next's attention block to 544 tokens (16 x ceil(1,097,728 state bytes per
// layer / (16 x 2,048 KV bytes per token per layer))), so a prompt under 544 tokens never
// hits there. kvbm's state group at its own block size (16) finds the repeated 400-token
// prompt up to its last full block; the preset's 512-token snapshots find nothing under
// 513 tokens either, and on a 1,100-token prompt cut at 1,024 where vLLM's rule gives 544.
TEST(HybridReplay, ShortPromptsAgainstVllmsPaddedBlock) {
  HybridReplayConfig c;
  c.model = *find_hybrid_preset("qwen3-next-80b");
  EXPECT_EQ(vllm_padded_block(c.model), 544u);
  EXPECT_EQ(vllm_padded_block(*find_hybrid_preset("gpt-oss-20b")), 0u);
  c.g1_unlimited = true;
  const HybridReplayResult preset = run_hybrid_replay(repeated_prompt(10, 400), c);
  EXPECT_EQ(preset.hybrid.short_requests, 10u);
  EXPECT_EQ(preset.hybrid.short_hit_tokens, 0u);
  c.model.groups[1].tokens_per_block = 16;  // a snapshot per 16-token block
  const HybridReplayResult fine = run_hybrid_replay(repeated_prompt(10, 400), c);
  EXPECT_EQ(fine.hybrid.vllm_padded_block, 544u);
  EXPECT_EQ(fine.hybrid.short_requests, 10u);
  EXPECT_EQ(fine.hybrid.short_prompt_tokens, 4'000u);
  EXPECT_EQ(fine.hybrid.short_hit_tokens, 9u * 384);  // every repeat: 399 tokens down to 16s
  EXPECT_EQ(fine.hybrid.short_vllm_rule_tokens, 0u);
  expect_balanced(fine.hybrid, "16-token snapshots");
  const HybridReplayResult longer = run_hybrid_replay(repeated_prompt(10, 1'100), c);
  EXPECT_EQ(longer.hybrid.short_requests, 0u);
  EXPECT_EQ(longer.hybrid.hit_tokens, 9u * 1'088);  // 1,099 down to 16s
  EXPECT_EQ(longer.hybrid.vllm_rule_hit_tokens, 9u * 1'088 / 544 * 544);
}

TEST(HybridReplay, SplitsG1ByWeightAndRefusesAnEmptyPool) {
  HybridModel m = *find_hybrid_preset("gpt-oss-20b");
  const std::uint64_t block = m.groups[0].bytes_per_block;  // both groups' block bytes
  auto even = split_g1(m, 100 * block);
  EXPECT_EQ(even, (std::vector<std::size_t>{50, 50}));
  m.g1_weights[1] = 0.25;
  EXPECT_EQ(split_g1(m, 100 * block), (std::vector<std::size_t>{80, 20}));
  EXPECT_THROW((void)split_g1(m, block), UsageError);
  const HybridModel base = full_attention_baseline(m);
  EXPECT_EQ(base.groups[0].bytes_per_block, 2 * block);
  EXPECT_EQ(base.groups[0].layers.size(), 24u);
}

}  // namespace hybrid_replay_test
}  // namespace kvbm::replay
