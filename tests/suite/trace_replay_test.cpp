// Replays a real request trace (Mooncake FAST'25 "Conversation" workload; see
// ../shared/data/README.md) through a BlockManager<G2> and checks the prefix
// hit counts against the reference figures computed independently.
//
// Each line's hash_ids are one id per 512-token block, already prefix-chained,
// so the id at position i becomes SequenceHash(id, previous id, i). A request:
//
//   1. match_blocks(hashes): its hits are the blocks returned;
//   2. the blocks it still needs are allocated, staged and registered;
//   3. the request finishes: every block is dropped front to back, so the
//      inactive pool receives the hits first, then the rest in request order,
//      the most recent last (the touch order of the reference figures).
//
// Step 2 comes in two modes.
//   kAllocateMisses: allocate every block after the hits (the literal
//     procedure); a later block that is still cached although an earlier one
//     was evicted is allocated too and deduplicated at registration
//     (DuplicatePolicy::kReject), which touches it like the reference but may
//     evict one block more than the reference would.
//   kTouchCachedTail: scan_matches() takes the cached blocks after the first
//     miss first, so only truly missing blocks are allocated; this is the
//     reference's "inserted or touched" exactly.
//
// When a request needs more blocks than the pool can give while it holds its
// hits (never the case here: the longest request has 247 blocks and the
// smallest pool 1,000), it takes what fits for its leading missing blocks and
// leaves the rest uncached; the count of such blocks is reported and must be
// zero for the capacities below.
//
// The unlimited case replays the whole trace at any scale. The limited ones replay it whole
// against the README's figures at full scale; at KVBM_STRESS_SCALE < 1 (the sanitizer stages)
// they replay its first requests (that fraction of them) in pools scaled alike (at least the
// smallest, 1,000 blocks) and compare with TextbookLru (tests/textbook_lru.h), the README's LRU
// written out in the test, which the full-scale run checks against the README.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/block_manager.h"
#include "kvbm/block_registry.h"
#include "kvbm/frequency_tracker.h"
#include "skip_or_fail.h"
#include "test_util.h"
#include "textbook_lru.h"

namespace kvbm {
namespace trace_replay_test {

using test::stress_scale;

constexpr std::size_t kRequests = 12'031;
constexpr std::size_t kTotalBlocks = 288'500;
constexpr std::size_t kUniqueBlocks = 182'790;
constexpr std::size_t kUnlimitedHits = 105'710;
constexpr std::uint32_t kBlockSize = 512;
constexpr std::size_t kSmallestPool = 1'000;  // the README's smallest capacity

struct Trace {
  std::string path;
  std::vector<std::vector<SequenceHash>> requests;
  std::size_t blocks = 0;
};

std::optional<std::string> find_trace() {
  for (const char* p : {KVBM_SOURCE_DIR "/examples/data/conversation_trace.jsonl",
                        KVBM_SHARED_DIR "/data/conversation_trace.jsonl"}) {
    if (std::filesystem::exists(p)) return std::string(p);
  }
  return std::nullopt;
}

// Parses the hash_ids array of every line (nothing else of the JSON is needed).
// Returns an error message, or "" on success.
std::string parse_trace(const std::string& path, Trace& out) {
  std::ifstream in(path);
  if (!in) return "cannot open " + path;
  out.path = path;
  std::string line;
  std::size_t line_no = 0;
  std::vector<std::uint64_t> ids;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const std::string_view key = "\"hash_ids\"";
    const auto k = line.find(key);
    if (k == std::string::npos) return "line " + std::to_string(line_no) + ": no hash_ids";
    const auto open = line.find('[', k + key.size());
    const auto close = line.find(']', open);
    if (open == std::string::npos || close == std::string::npos) {
      return "line " + std::to_string(line_no) + ": hash_ids is not an array";
    }
    ids.clear();
    const char* p = line.data() + open + 1;
    const char* const end = line.data() + close;
    while (p < end) {
      while (p < end && (*p == ' ' || *p == ',')) ++p;
      if (p == end) break;
      std::uint64_t v = 0;
      const auto [next, ec] = std::from_chars(p, end, v);
      if (ec != std::errc()) return "line " + std::to_string(line_no) + ": bad hash id";
      ids.push_back(v);
      p = next;
    }
    std::vector<SequenceHash> hashes;
    hashes.reserve(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      hashes.emplace_back(ids[i], i == 0 ? std::nullopt : std::optional<std::uint64_t>(ids[i - 1]),
                          static_cast<std::uint32_t>(i));
    }
    out.blocks += hashes.size();
    out.requests.push_back(std::move(hashes));
  }
  return {};
}

// The trace, parsed once for the whole binary; null when the file is missing.
const Trace* trace() {
  static const std::optional<Trace> t = []() -> std::optional<Trace> {
    const auto path = find_trace();
    if (!path) return std::nullopt;
    Trace parsed;
    if (const auto err = parse_trace(*path, parsed); !err.empty()) {
      ADD_FAILURE() << "parsing " << *path << ": " << err;
      return std::nullopt;
    }
    return parsed;
  }();
  return t ? &*t : nullptr;
}

#define KVBM_REQUIRE_TRACE()                                                             \
  const Trace* const tr = trace();                                                       \
  if (tr == nullptr) {                                                                   \
    KVBM_SKIP_OR_FAIL(                                                                   \
        "shipped trace missing: conversation_trace.jsonl is in neither " KVBM_SOURCE_DIR \
        "/examples/data/ nor " KVBM_SHARED_DIR "/data/; nothing to replay");             \
  }

enum class Mode { kAllocateMisses, kTouchCachedTail };

struct ReplayResult {
  std::size_t requests = 0;
  std::size_t blocks = 0;
  std::size_t hits = 0;
  std::size_t uncached = 0;  // blocks a request could not get (pool too small)
  PoolCounts counts;
  std::string audit;
};

using Requests = std::span<const std::vector<SequenceHash>>;

ReplayResult replay(Requests requests, BlockManager<G2>& m, Mode mode) {
  ReplayResult r;
  std::vector<std::optional<ImmutableBlock<G2>>> held;
  std::vector<std::size_t> need;  // positions to allocate
  for (const auto& hashes : requests) {
    const std::size_t n = hashes.size();
    ++r.requests;
    r.blocks += n;
    held.clear();
    held.resize(n);
    auto matched = m.match_blocks(hashes);
    const std::size_t hits = matched.size();
    r.hits += hits;
    for (std::size_t i = 0; i < hits; ++i) held[i] = std::move(matched[i]);

    need.clear();
    if (mode == Mode::kTouchCachedTail && hits < n) {
      const auto tail = std::span<const SequenceHash>(hashes).subspan(hits);
      auto cached = m.scan_matches(tail);
      std::size_t j = 0;
      for (std::size_t i = hits; i < n; ++i) {
        if (j < cached.size() && cached[j].sequence_hash() == hashes[i]) {
          held[i] = std::move(cached[j++]);
        } else {
          need.push_back(i);
        }
      }
    } else {
      for (std::size_t i = hits; i < n; ++i) need.push_back(i);
    }

    if (!need.empty()) {
      auto blocks = m.allocate_blocks(need.size());
      if (!blocks) {  // more than the pool can give now: take what fits
        const std::size_t fit = std::min(need.size(), m.available_blocks());
        r.uncached += need.size() - fit;
        need.resize(fit);
        if (fit > 0) blocks = m.allocate_blocks(fit);
      }
      if (blocks) {
        for (std::size_t k = 0; k < need.size(); ++k) {
          auto staged = std::move((*blocks)[k]).stage(hashes[need[k]], kBlockSize);
          if (!staged.ok()) {
            ADD_FAILURE() << "stage failed: " << staged.error().reason;
            return r;
          }
          held[need[k]] = m.register_block(std::move(staged).value());
        }
      }
    }
    // The request finishes: release front to back (hits first, most recent last).
    for (auto& b : held) b.reset();
  }
  r.counts = m.pool_counts();
  r.audit = m.audit();
  return r;
}

BlockManager<G2> make_manager(std::size_t blocks, EvictionPolicy policy) {
  return BlockManager<G2>::builder()
      .block_count(blocks)
      .block_size(kBlockSize)
      .eviction(policy)
      .duplicate_policy(DuplicatePolicy::kReject)
      .registry(BlockRegistry::builder()
                    .frequency_tracker(std::make_shared<FrequencyTracker>(TrackerCapacity::kMedium))
                    .build())
      .build();
}

TEST(TraceReplay, TraceHasTheDocumentedShape) {
  KVBM_REQUIRE_TRACE();
  std::cout << "[trace_replay] " << tr->path << std::endl;
  EXPECT_EQ(tr->requests.size(), kRequests);
  EXPECT_EQ(tr->blocks, kTotalBlocks);
}

// With room for every unique block nothing is ever evicted, so the hit count
// is the same for any correct prefix cache and any eviction policy.
class TraceReplayUnlimited : public ::testing::TestWithParam<EvictionPolicy> {};

TEST_P(TraceReplayUnlimited, HitsExactly105710) {
  KVBM_REQUIRE_TRACE();
  auto m = make_manager(200'000, GetParam());
  const ReplayResult r = replay(tr->requests, m, Mode::kAllocateMisses);
  std::cout << "[trace_replay] unlimited " << to_string(GetParam()) << ": hits " << r.hits << " of "
            << r.blocks << std::endl;
  EXPECT_EQ(r.requests, kRequests);
  EXPECT_EQ(r.blocks, kTotalBlocks);
  EXPECT_EQ(r.hits, kUnlimitedHits);
  EXPECT_EQ(r.uncached, 0u);
  EXPECT_EQ(r.audit, "");
  EXPECT_TRUE(r.counts.balanced());
  EXPECT_EQ(r.counts.in_use, 0u);
  EXPECT_EQ(r.counts.inactive, kUniqueBlocks);  // every unique block, once
  EXPECT_EQ(r.counts.reset, 200'000 - kUniqueBlocks);
  // Every hash of the trace is still registered.
  std::size_t absent = 0;
  for (const auto& hashes : tr->requests) {
    for (const bool p : m.registry()->presence<G2>(hashes)) absent += p ? 0 : 1;
  }
  EXPECT_EQ(absent, 0u);
}

INSTANTIATE_TEST_SUITE_P(Policies, TraceReplayUnlimited,
                         ::testing::Values(EvictionPolicy::kLru, EvictionPolicy::kMultiLevelLru,
                                           EvictionPolicy::kLineage),
                         [](const ::testing::TestParamInfo<EvictionPolicy>& p) {
                           return std::string(to_string(p.param));
                         });

// Finite LRU capacities against the README table.
struct Capacity {
  std::size_t blocks;
  std::size_t reference_hits;
};

void PrintTo(const Capacity& c, std::ostream* os) { *os << c.blocks << " blocks"; }

class TraceReplayLru : public ::testing::TestWithParam<Capacity> {
 protected:
  void check(Mode mode, const char* mode_name) {
    KVBM_REQUIRE_TRACE();
    // Full scale: the whole trace and the README's capacities and figures. Below: the first
    // requests, a pool scaled alike, and the textbook model's figures.
    const bool full = stress_scale() >= 1.0;
    const Capacity c = GetParam();
    const std::size_t pool = full ? c.blocks : test::scaled(c.blocks, kSmallestPool);
    const Requests requests =
        Requests(tr->requests)
            .first(full ? tr->requests.size()
                        : std::min(tr->requests.size(), test::scaled(kRequests, 1)));
    test::TextbookLru model(pool);
    for (const auto& hashes : requests) model.request(hashes);
    if (full) {
      EXPECT_EQ(model.hits(), c.reference_hits) << "the textbook model against the README";
    }
    const std::size_t expected = full ? c.reference_hits : model.hits();

    auto m = make_manager(pool, EvictionPolicy::kLru);
    const ReplayResult r = replay(requests, m, mode);
    const double ratio = static_cast<double>(r.hits) / static_cast<double>(r.blocks);
    const double reference = static_cast<double>(expected) / static_cast<double>(model.blocks());
    std::cout << "[trace_replay] lru " << pool << " blocks, " << requests.size() << " requests, "
              << mode_name << ": hits " << r.hits << " of " << r.blocks << " (" << ratio << "; "
              << (full ? "reference " : "textbook model ") << expected << ", " << reference << ")"
              << std::endl;
    RecordProperty("hits", std::to_string(r.hits));
    EXPECT_EQ(r.requests, requests.size());
    EXPECT_EQ(r.blocks, full ? kTotalBlocks : model.blocks());
    EXPECT_EQ(r.uncached, 0u);
    EXPECT_NEAR(ratio, reference, 0.01) << "hits " << r.hits << " vs " << expected;
    if (mode == Mode::kTouchCachedTail) {
      // Same touch and eviction order as the reference, block for block.
      EXPECT_EQ(r.hits, expected);
    }
    EXPECT_EQ(r.audit, "");
    EXPECT_TRUE(r.counts.balanced());
    EXPECT_EQ(r.counts.in_use, 0u);
    EXPECT_EQ(r.counts.inactive, model.size());  // the trace fills every pool here
    EXPECT_EQ(model.size(), pool);
  }
};

TEST_P(TraceReplayLru, AllocateMissesWithinOnePointOfReference) {
  check(Mode::kAllocateMisses, "allocate misses");
}

TEST_P(TraceReplayLru, TouchCachedTailMatchesReferenceExactly) {
  check(Mode::kTouchCachedTail, "touch cached tail");
}

INSTANTIATE_TEST_SUITE_P(ReadmeTable, TraceReplayLru,
                         ::testing::Values(Capacity{100'000, 104'924}, Capacity{50'000, 102'290},
                                           Capacity{10'000, 60'921}, Capacity{1'000, 12'831}),
                         [](const ::testing::TestParamInfo<Capacity>& p) {
                           return "capacity_" + std::to_string(p.param.blocks);
                         });

}  // namespace trace_replay_test
}  // namespace kvbm
