// Tests of replay/hybrid_replay.h and hybrid_report.h: the presets through
// HybridBlockManager<G1> on a prefix of the shipped trace, beside the
// full-attention baseline at the same G1 bytes.

#include "replay/hybrid_replay.h"

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "replay/hybrid_report.h"
#include "replay_test_util.h"

namespace kvbm::replay {
namespace {

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
  const auto trace = test::first_requests(300);
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
  const auto trace = test::first_requests(300);
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
  const auto trace = test::first_requests(300);
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

}  // namespace
}  // namespace kvbm::replay
