// Tests of BounceTransferEngine (kvbm/transfer/bounce_engine.h), driven by two
// host engines (host -> bounce -> host), so they run without a GPU: round
// trips through pools of 1 (no overlap), 2, 3 and 8 bounce blocks, batches
// larger than the pool, failures injected in either hop reported for exactly
// the affected pairs, misuse, and concurrent submitters.

#include "kvbm/transfer/bounce_engine.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/error.h"
#include "kvbm/storage/layout.h"
#include "kvbm/storage/storage.h"
#include "kvbm/transfer/host_engine.h"
#include "test_util.h"

namespace kvbm {
namespace bounce_engine_test {

// 3 layers x K,V x 5 tokens x 7 x 2 bytes: odd 70-byte regions.
const LayoutConfig kConfig{3, 2, 5, 7, 2};
constexpr std::size_t kBlocks = 20;

Layout layer_separated(std::size_t n, std::uintptr_t base) {
  std::vector<std::uintptr_t> bases(kConfig.regions_per_block());
  for (std::size_t i = 0; i < bases.size(); ++i) bases[i] = base + i * n * kConfig.region_bytes();
  return Layout::layer_separated(kConfig, n, std::move(bases));
}

std::vector<unsigned char> block_bytes(const Layout& layout, BlockId block) {
  std::vector<Region> regions;
  layout.append_regions(block, regions);
  std::vector<unsigned char> out;
  for (const Region& r : regions) {
    const auto* p = reinterpret_cast<const unsigned char*>(r.addr);
    out.insert(out.end(), p, p + r.size);
  }
  return out;
}

HostEngineOptions one_thread() {
  HostEngineOptions o;
  o.threads = 1;
  return o;
}

/// Fails the pairs whose source (or destination) id is in a set; copies the
/// rest with an inner engine.
class FailingEngine final : public TransferEngine {
 public:
  FailingEngine(TransferEngine& inner, std::set<BlockId> fail_src, std::set<BlockId> fail_dst)
      : inner_(inner), fail_src_(std::move(fail_src)), fail_dst_(std::move(fail_dst)) {}
  [[nodiscard]] std::string_view name() const noexcept override { return "failing"; }
  [[nodiscard]] std::shared_ptr<TransferCompletion> submit(
      std::span<const TransferPair> pairs) override {
    TransferOutcome outcome;
    std::vector<TransferPair> rest;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      if (fail_src_.count(pairs[i].src) != 0 || fail_dst_.count(pairs[i].dst) != 0) {
        outcome.failed.push_back(i);
      } else {
        rest.push_back(pairs[i]);
      }
    }
    if (!outcome.failed.empty())
      outcome.error = TransferError{ErrorKind::kIo, 0, "injected failure"};
    if (!rest.empty()) {
      const TransferOutcome inner = inner_.submit(rest)->wait();
      EXPECT_TRUE(inner.ok()) << inner.message();
    }
    auto c = std::make_shared<TransferCompletion>();
    c->complete(std::move(outcome));
    return c;
  }

 private:
  TransferEngine& inner_;
  std::set<BlockId> fail_src_;
  std::set<BlockId> fail_dst_;
};

struct Pools {
  std::unique_ptr<Storage> src;
  std::unique_ptr<Storage> bounce;
  std::unique_ptr<Storage> dst;
  Layout src_layout;
  Layout bounce_layout;
  Layout dst_layout;
};

Pools make_pools(std::size_t bounce_blocks, std::mt19937_64& rng) {
  auto src = make_host_storage(kConfig.block_bytes() * kBlocks);
  auto bounce = make_host_storage(kConfig.block_bytes() * bounce_blocks);
  auto dst = make_host_storage(kConfig.block_bytes() * kBlocks);
  auto* s = reinterpret_cast<unsigned char*>(src->base());
  for (std::size_t i = 0; i < src->size(); ++i) s[i] = static_cast<unsigned char>(rng());
  std::memset(reinterpret_cast<void*>(dst->base()), 0xAB, dst->size());
  Layout src_layout = layer_separated(kBlocks, src->base());
  Layout bounce_layout = Layout::fully_contiguous(kConfig, bounce_blocks, bounce->base());
  Layout dst_layout = layer_separated(kBlocks, dst->base());
  return Pools{std::move(src),        std::move(bounce),        std::move(dst),
               std::move(src_layout), std::move(bounce_layout), std::move(dst_layout)};
}

// 13 pairs: source i -> destination 19 - i (blocks 0..6 of dst untouched).
std::vector<TransferPair> reversed_pairs() {
  std::vector<TransferPair> pairs;
  for (BlockId i = 0; i < 13; ++i) pairs.push_back({i, static_cast<BlockId>(kBlocks - 1 - i)});
  return pairs;
}

class BounceRoundTrip : public ::testing::TestWithParam<std::size_t> {};

TEST_P(BounceRoundTrip, EveryByteArrivesThroughThePool) {
  const std::size_t bounce_blocks = GetParam();
  std::mt19937_64 rng(test::test_seed());
  Pools p = make_pools(bounce_blocks, rng);
  HostTransferEngine first(p.src_layout, p.bounce_layout, one_thread());
  HostTransferEngine second(p.bounce_layout, p.dst_layout, one_thread());
  BounceTransferEngine engine(first, second,
                              {.bounce_blocks = bounce_blocks,
                               .src_blocks = kBlocks,
                               .dst_blocks = kBlocks,
                               .name = "host_bounce_host"});
  EXPECT_EQ(engine.name(), "host_bounce_host");
  const auto pairs = reversed_pairs();
  const TransferOutcome out = engine.submit(pairs)->wait();
  ASSERT_TRUE(out.ok()) << out.message();
  for (const TransferPair& pr : pairs) {
    EXPECT_EQ(block_bytes(p.dst_layout, pr.dst), block_bytes(p.src_layout, pr.src)) << pr.src;
  }
  const std::vector<unsigned char> sentinel(kConfig.block_bytes(), 0xAB);
  for (BlockId b = 0; b < kBlocks - pairs.size(); ++b) {
    EXPECT_EQ(block_bytes(p.dst_layout, b), sentinel) << "block " << b << " was written";
  }
}

INSTANTIATE_TEST_SUITE_P(PoolSizes, BounceRoundTrip, ::testing::Values(1, 2, 3, 8, 32));

TEST(BounceEngine, FailuresInEitherHopAreReportedForExactlyThosePairs) {
  std::mt19937_64 rng(test::test_seed());
  Pools p = make_pools(4, rng);
  HostTransferEngine first_host(p.src_layout, p.bounce_layout, one_thread());
  HostTransferEngine second_host(p.bounce_layout, p.dst_layout, one_thread());
  // Hop 1 fails sources 2 and 9; hop 2 fails destinations 15 (source 4) and
  // 12 (source 7).
  FailingEngine first(first_host, {2, 9}, {});
  FailingEngine second(second_host, {}, {15, 12});
  BounceTransferEngine engine(first, second,
                              {.bounce_blocks = 4, .src_blocks = kBlocks, .dst_blocks = kBlocks});
  const auto pairs = reversed_pairs();
  const TransferOutcome out = engine.submit(pairs)->wait();
  EXPECT_EQ(out.failed, (std::vector<std::size_t>{2, 4, 7, 9}));
  EXPECT_EQ(out.message(), "injected failure");
  const std::vector<unsigned char> sentinel(kConfig.block_bytes(), 0xAB);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const bool failed = i == 2 || i == 4 || i == 7 || i == 9;
    if (failed && (i == 2 || i == 9)) {
      // Failed in hop 1: hop 2 never ran for it.
      EXPECT_EQ(block_bytes(p.dst_layout, pairs[i].dst), sentinel) << i;
    } else if (!failed) {
      EXPECT_EQ(block_bytes(p.dst_layout, pairs[i].dst), block_bytes(p.src_layout, pairs[i].src))
          << i;
    }
  }
}

TEST(BounceEngine, MisuseThrowsBeforeAnythingStarts) {
  std::mt19937_64 rng(1);
  Pools p = make_pools(2, rng);
  HostTransferEngine first(p.src_layout, p.bounce_layout, one_thread());
  HostTransferEngine second(p.bounce_layout, p.dst_layout, one_thread());
  EXPECT_THROW(BounceTransferEngine(first, second, {.src_blocks = 1, .dst_blocks = 1}), UsageError);
  EXPECT_THROW(BounceTransferEngine(first, second, {.bounce_blocks = 2}), UsageError);
  BounceTransferEngine engine(first, second,
                              {.bounce_blocks = 2, .src_blocks = kBlocks, .dst_blocks = kBlocks});
  EXPECT_THROW(static_cast<void>(engine.submit({})), UsageError);
  const std::vector<TransferPair> bad_src = {{kBlocks, 0}};
  EXPECT_THROW(static_cast<void>(engine.submit(bad_src)), UsageError);
  const std::vector<TransferPair> bad_dst = {{0, kBlocks}};
  EXPECT_THROW(static_cast<void>(engine.submit(bad_dst)), UsageError);
  const std::vector<TransferPair> twice = {{0, 3}, {1, 3}};
  EXPECT_THROW(static_cast<void>(engine.submit(twice)), UsageError);
}

TEST(BounceEngine, ConcurrentSubmittersAllComplete) {
  std::mt19937_64 rng(test::test_seed());
  Pools p = make_pools(3, rng);
  HostTransferEngine first(p.src_layout, p.bounce_layout, one_thread());
  HostTransferEngine second(p.bounce_layout, p.dst_layout, one_thread());
  BounceTransferEngine engine(first, second,
                              {.bounce_blocks = 3, .src_blocks = kBlocks, .dst_blocks = kBlocks});
  auto worker = [&](BlockId parity) {
    for (BlockId i = parity; i < kBlocks; i += 2) {
      const std::vector<TransferPair> one = {{i, i}};
      const TransferOutcome out = engine.submit(one)->wait();
      EXPECT_TRUE(out.ok()) << out.message();
    }
  };
  std::thread t0(worker, 0);
  std::thread t1(worker, 1);
  t0.join();
  t1.join();
  for (BlockId b = 0; b < kBlocks; ++b) {
    EXPECT_EQ(block_bytes(p.dst_layout, b), block_bytes(p.src_layout, b)) << b;
  }
}

}  // namespace bounce_engine_test
}  // namespace kvbm
