// Replays with bytes moved through G1, G2 and G3: every onboarded block's
// bytes must match the pattern of its sequence hash, every tier must serve
// hits, and every pool must balance afterwards. Also a raw token-id trace.

#include "replay/replay.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <iostream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "replay/pattern.h"
#include "replay_test_util.h"

namespace kvbm::replay {
namespace replay_test {

TEST(ReplayPattern, DetectsAnyChangedByteAndTheWrongHashOrRegion) {
  std::vector<unsigned char> buf(1000 + 5);
  fill_pattern(buf.data(), buf.size(), 42, 3);
  EXPECT_TRUE(check_pattern(buf.data(), buf.size(), 42, 3));
  EXPECT_FALSE(check_pattern(buf.data(), buf.size(), 43, 3));
  EXPECT_FALSE(check_pattern(buf.data(), buf.size(), 42, 2));
  for (const std::size_t i : {std::size_t{0}, std::size_t{511}, buf.size() - 1}) {
    buf[i] ^= 1;
    EXPECT_FALSE(check_pattern(buf.data(), buf.size(), 42, 3)) << "byte " << i;
    buf[i] ^= 1;
  }
}

// A small model (2 KiB blocks) and small tiers, so that blocks are evicted
// from every tier and found again below G1.
ReplayConfig small_three_tiers(const std::filesystem::path& dir) {
  ReplayConfig c;
  c.layout = LayoutConfig{
      .num_layers = 2, .outer_dim = 2, .page_size = 512, .inner_dim = 1, .dtype_bytes = 1};
  c.device = TierConfig{.blocks = 300};
  c.host = TierConfig{.blocks = 1'500};
  c.disk = TierConfig{.blocks = 6'000};
  c.disk_directory = dir;
  c.move_bytes = true;
  return c;
}

const Trace& prefix_of_shipped_trace(std::size_t requests, Trace& storage) {
  const auto path = test::shipped_trace_path();
  storage = read_trace_file(*path, TraceOptions{.max_requests = requests});
  return storage;
}

struct Modes {
  OffloadMode g1_g2;
  OffloadMode g2_g3;
  EvictionPolicy eviction;
};

class ReplayBytes : public ::testing::TestWithParam<Modes> {};

TEST_P(ReplayBytes, ThreeTiersServeHitsWithZeroVerificationFailures) {
  if (!test::shipped_trace_path()) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  const std::size_t requests =
      std::max<std::size_t>(400, static_cast<std::size_t>(3'000 * test::stress_scale()));
  Trace trace;
  prefix_of_shipped_trace(requests, trace);
  test::ScratchDir dir("kvbm-replay-bytes");
  ReplayConfig c = small_three_tiers(dir.path());
  c.device_to_host = GetParam().g1_g2;
  c.host_to_disk = GetParam().g2_g3;
  c.device.eviction = c.host.eviction = c.disk.eviction = GetParam().eviction;
  const ReplayResult r = run_replay(trace, c);
  std::cout << "[replay bytes] " << r.requests << " requests, hits G1 " << r.hit_blocks[TierId::kG1]
            << " G2 " << r.hit_blocks[TierId::kG2] << " G3 " << r.hit_blocks[TierId::kG3]
            << ", verified " << r.verified_blocks << ", " << r.wall_seconds << " s" << std::endl;
  EXPECT_EQ(r.requests, requests);
  // The work was timed in CPU seconds too (every thread; the copies' included).
  EXPECT_GT(r.cpu_seconds, 0.0);
  ASSERT_TRUE(r.move_bytes);
  ASSERT_TRUE(r.device_emulated) << "these tests need G1 in host memory (a build without CUDA)";
  EXPECT_TRUE(r.bytes_checked);
  EXPECT_EQ(r.verify_failures, 0u);
  EXPECT_EQ(r.verified_blocks, r.hits());
  EXPECT_GT(r.hit_blocks[TierId::kG1], 0u);
  if (GetParam().g1_g2 == OffloadMode::kOnEviction) {
    // Deterministic: every block G1 evicts reaches G2 before the allocation
    // returns. (Write-through at replay speed, under a sanitizer in
    // particular, may lose every copy the short trace prefix would reuse:
    // G1 evicts a block before its copy starts. Its copies are checked by
    // the bytes moved on G1->G2 below.)
    EXPECT_GT(r.hit_blocks[TierId::kG2] + r.hit_blocks[TierId::kG3], 0u);
  }
  if (GetParam().g1_g2 == OffloadMode::kOnEviction &&
      GetParam().g2_g3 == OffloadMode::kOnEviction) {
    // Every block evicted from G1 reaches G2, and from G2 reaches G3. (Write-through
    // offload at replay speed loses blocks that G1 evicts before their copy starts,
    // so how much reaches G3 then depends on timing.)
    EXPECT_GT(r.hit_blocks[TierId::kG2], 0u);
    EXPECT_GT(r.hit_blocks[TierId::kG3], 0u);
  }
  EXPECT_EQ(r.onboard_failed, 0u);
  EXPECT_GT(r.evictions[TierId::kG1], 0u);
  // Bytes per path: onboarding moved exactly the blocks found below G1.
  ASSERT_EQ(r.paths.size(), 4u);
  EXPECT_EQ(r.paths[2].name, "G2->G1");
  EXPECT_EQ(r.paths[2].blocks, r.hit_blocks[TierId::kG2]);
  EXPECT_EQ(r.paths[2].bytes, r.hit_blocks[TierId::kG2] * r.block_bytes);
  EXPECT_EQ(r.paths[3].blocks, r.hit_blocks[TierId::kG3]);
  EXPECT_GT(r.paths[0].bytes, 0u);
  EXPECT_EQ(r.audit, "");
}

// A short soak: the trace prefix replayed over and over through one manager,
// each pass checked; the passes see the same requests, so the manager's state
// must carry from one to the next without leaking blocks.
TEST(ReplaySoak, PassesRepeatUntilTheDeadlineThroughOneManager) {
  if (!test::shipped_trace_path()) KVBM_SKIP_OR_FAIL(test::kTraceMissing);
  Trace trace;
  prefix_of_shipped_trace(200, trace);
  test::ScratchDir dir("kvbm-replay-soak");
  ReplayConfig c = small_three_tiers(dir.path());
  c.soak_seconds = 1e9;  // ended by `stop` after the third pass, however slow the build
  std::atomic<bool> stop{false};
  c.stop = &stop;
  std::vector<std::uint64_t> requests_after_pass;
  std::vector<std::string> audits;
  c.on_pass = [&](std::size_t pass, const ReplayResult& r, KvBlockManager& kv) {
    EXPECT_EQ(pass, requests_after_pass.size());
    requests_after_pass.push_back(r.requests);
    audits.push_back(kv.audit());
    EXPECT_EQ(r.verify_failures, 0u);
    if (pass + 1 == 3) stop = true;
  };
  const ReplayResult r = run_replay(trace, c);
  ASSERT_EQ(requests_after_pass.size(), 3u) << "a soak replays the trace more than once";
  for (std::size_t i = 0; i < requests_after_pass.size(); ++i) {
    EXPECT_EQ(requests_after_pass[i], 200u * (i + 1));
    EXPECT_EQ(audits[i], "") << "pass " << i + 1;
  }
  EXPECT_EQ(r.requests, 200u * requests_after_pass.size());
  EXPECT_GT(r.hits(), 0u);
  EXPECT_EQ(r.verify_failures, 0u);
  EXPECT_EQ(r.audit, "");
}

// --realtime: a stop set while the replay waits for the next request's
// timestamp ends the wait at once, not when the request falls due.
TEST(ReplayRealtime, StopEndsTheWaitForTheNextRequest) {
  std::istringstream in(
      R"({"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [1, 2]})"
      "\n"
      R"({"timestamp": 3600000, "input_length": 8, "output_length": 1, "hash_ids": [1, 3]})"
      "\n");
  const Trace trace = read_trace(in, TraceOptions{.block_tokens = 4});
  ASSERT_EQ(trace.requests.size(), 2u);
  ReplayConfig c;
  c.device = TierConfig{.blocks = 16};
  c.host = TierConfig{};
  c.disk = TierConfig{};
  c.realtime = true;
  c.progress_every = 1;
  std::atomic<bool> stop{false};
  c.stop = &stop;
  std::promise<void> first_done;
  c.progress = [&](std::size_t done, std::size_t) {
    if (done == 1) first_done.set_value();
  };
  std::chrono::steady_clock::time_point stopped_at;
  std::thread stopper([&] {
    first_done.get_future().wait();  // the replay now waits an hour for request 2
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stopped_at = std::chrono::steady_clock::now();
    stop = true;
  });
  const ReplayResult r = run_replay(trace, c);
  const auto returned = std::chrono::steady_clock::now();
  stopper.join();
  EXPECT_EQ(r.requests, 1u);
  EXPECT_LT(std::chrono::duration<double>(returned - stopped_at).count(), 1.0);
  EXPECT_EQ(r.audit, "");
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ReplayBytes,
    ::testing::Values(
        Modes{OffloadMode::kWriteThrough, OffloadMode::kWriteThrough, EvictionPolicy::kLru},
        Modes{OffloadMode::kOnEviction, OffloadMode::kOnEviction, EvictionPolicy::kLru},
        Modes{OffloadMode::kWriteThrough, OffloadMode::kOnEviction, EvictionPolicy::kMultiLevelLru},
        Modes{OffloadMode::kWriteThrough, OffloadMode::kWriteThrough, EvictionPolicy::kLineage}),
    [](const ::testing::TestParamInfo<Modes>& p) {
      return std::string(to_string(p.param.g1_g2)) + "_" + std::string(to_string(p.param.g2_g3)) +
             "_" + std::string(to_string(p.param.eviction));
    });

// Token-id trace: prompt A, then prompt B (which pushes A out of a 4-block G1),
// then A again, whose four full blocks come back from G2 with the right bytes.
// On-eviction offload makes it deterministic: evicting a block copies it to
// G2 before the allocation that evicted it returns.
TEST(ReplayTokenTrace, PromptSeenBeforeIsOnboardedFromG2) {
  auto prompt = [](std::uint32_t seed, std::size_t n) {
    std::string ids;
    for (std::size_t i = 0; i < n; ++i) {
      if (i != 0) ids += ',';
      ids += std::to_string(seed * 100'000 + i);
    }
    return ids;
  };
  std::ostringstream text;
  text << R"({"timestamp": 0, "output_length": 8, "input_ids": [)" << prompt(1, 4 * 16 + 5)
       << "]}\n";
  text << R"({"timestamp": 1, "output_length": 8, "input_ids": [)" << prompt(2, 4 * 16) << "]}\n";
  text << R"({"timestamp": 2, "output_length": 8, "input_ids": [)" << prompt(1, 4 * 16 + 5)
       << "]}\n";
  std::istringstream in(text.str());
  const Trace trace = read_trace(in, TraceOptions{.block_tokens = 16});
  ASSERT_EQ(trace.error_count, 0u) << trace.errors[0].message;
  ASSERT_EQ(trace.requests.size(), 3u);
  EXPECT_EQ(trace.blocks, 12u);

  ReplayConfig c;
  c.layout = LayoutConfig{
      .num_layers = 2, .outer_dim = 2, .page_size = 16, .inner_dim = 8, .dtype_bytes = 2};
  c.device = TierConfig{.blocks = 4};
  c.host = TierConfig{.blocks = 16};
  c.disk = {};
  c.device_to_host = OffloadMode::kOnEviction;
  c.move_bytes = true;
  const ReplayResult r = run_replay(trace, c);
  EXPECT_EQ(r.requests, 3u);
  EXPECT_EQ(r.hit_blocks[TierId::kG1], 0u);
  EXPECT_EQ(r.hit_blocks[TierId::kG2], 4u);
  EXPECT_EQ(r.hit_tokens[TierId::kG2], 4u * 16);
  EXPECT_EQ(r.tokens, 2u * (4 * 16 + 5) + 4 * 16);
  EXPECT_EQ(r.verify_failures, 0u);
  EXPECT_EQ(r.verified_blocks, 4u);
  EXPECT_EQ(r.uncached_blocks, 0u);
  EXPECT_EQ(r.audit, "");
}

// A G1 smaller than a request: the request takes what fits, the rest is uncached.
TEST(ReplaySmallG1, RequestLongerThanG1KeepsWhatFits) {
  std::istringstream in(R"({"timestamp": 0, "input_length": 40,)"
                        R"( "output_length": 1, "hash_ids": [1,2,3,4,5,6,7,8,9,10]})"
                        "\n");
  const Trace trace = read_trace(in, TraceOptions{.block_tokens = 4});
  ReplayConfig c;
  c.layout = LayoutConfig{
      .num_layers = 1, .outer_dim = 2, .page_size = 4, .inner_dim = 2, .dtype_bytes = 1};
  c.device = TierConfig{.blocks = 6};
  c.host = {};
  c.disk = {};
  const ReplayResult r = run_replay(trace, c);
  EXPECT_EQ(r.computed_blocks, 6u);
  EXPECT_EQ(r.uncached_blocks, 4u);
  EXPECT_EQ(r.audit, "");
}

}  // namespace replay_test
}  // namespace kvbm::replay
