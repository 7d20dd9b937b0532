// HostTransferEngine: byte-for-byte round trips over both layouts and odd
// sizes, splitting over workers, concurrent submits, misuse, completions,
// draining on destruction, metrics, and options reaching the code.

#include "kvbm/transfer/host_engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "kvbm/error.h"
#include "kvbm/storage/storage.h"
#include "skip_or_fail.h"
#include "test_util.h"

namespace kvbm {
namespace host_engine_test {

using ::testing::HasSubstr;
using Bytes = std::vector<std::uint8_t>;

LayoutConfig config(std::uint32_t layers, std::uint32_t outer, std::uint32_t page,
                    std::uint32_t inner, std::uint32_t dtype) {
  LayoutConfig c;
  c.num_layers = layers;
  c.outer_dim = outer;
  c.page_size = page;
  c.inner_dim = inner;
  c.dtype_bytes = dtype;
  return c;
}

/// Options with `threads` workers splitting at `min_bytes` per thread.
HostEngineOptions sized(std::size_t threads, std::size_t min_bytes) {
  HostEngineOptions o;
  o.threads = threads;
  o.min_bytes_per_thread = min_bytes;
  return o;
}

/// Options naming the path, publishing to `registry` when given.
HostEngineOptions named(std::string name,
                        std::shared_ptr<prometheus::Registry> registry = nullptr) {
  HostEngineOptions o;
  o.name = std::move(name);
  o.registry = std::move(registry);
  return o;
}

/// Host memory holding `layout`: one Storage (contiguous) or one per region.
struct HostPool {
  std::vector<std::unique_ptr<Storage>> storage;
  Layout layout;
};

/// Makes a pool of `n` blocks of `kind`, every byte (padding too) set to `fill`.
/// `stride` is the layout's block or region stride (0: packed).
HostPool make_pool(const LayoutConfig& c, LayoutKind kind, std::size_t n, std::uint8_t fill,
                   std::size_t stride = 0) {
  std::vector<std::unique_ptr<Storage>> st;
  if (kind == LayoutKind::kFullyContiguous) {
    const std::size_t s = stride == 0 ? c.block_bytes() : stride;
    st.push_back(make_host_storage((n - 1) * s + c.block_bytes()));
    for (auto& x : st) std::memset(reinterpret_cast<void*>(x->base()), fill, x->size());
    Layout l = Layout::fully_contiguous(c, n, st[0]->base(), stride);
    return HostPool{std::move(st), std::move(l)};
  }
  const std::size_t s = stride == 0 ? c.region_bytes() : stride;
  std::vector<std::uintptr_t> bases;
  for (std::size_t r = 0; r < c.regions_per_block(); ++r) {
    st.push_back(make_host_storage((n - 1) * s + c.region_bytes(), 64));
    bases.push_back(st.back()->base());
  }
  for (auto& x : st) std::memset(reinterpret_cast<void*>(x->base()), fill, x->size());
  Layout l = Layout::layer_separated(c, n, std::move(bases), stride);
  return HostPool{std::move(st), std::move(l)};
}

/// Fills every byte of the pool's storage with random bytes.
void randomize(HostPool& pool, std::mt19937_64& rng) {
  for (auto& s : pool.storage) {
    auto* p = reinterpret_cast<std::uint8_t*>(s->base());
    for (std::size_t i = 0; i < s->size(); ++i) p[i] = static_cast<std::uint8_t>(rng());
  }
}

/// Returns the bytes of every storage of the pool.
std::vector<Bytes> snapshot(const HostPool& pool) {
  std::vector<Bytes> out;
  for (const auto& s : pool.storage) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(s->base());
    out.emplace_back(p, p + s->size());
  }
  return out;
}

/// Returns a block's bytes, regions concatenated in (layer, outer) order.
Bytes block_bytes(const HostPool& pool, BlockId b) {
  std::vector<Region> regions;
  pool.layout.append_regions(b, regions);
  Bytes out;
  for (const Region& r : regions) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(r.addr);
    out.insert(out.end(), p, p + r.size);
  }
  return out;
}

/// Returns what `dst`'s storage must hold after copying `pairs` from `src`:
/// its snapshot with exactly the destination regions overwritten.
std::vector<Bytes> expected_after(const HostPool& src, const HostPool& dst,
                                  const std::vector<TransferPair>& pairs) {
  std::vector<Bytes> out = snapshot(dst);
  const LayoutConfig& c = src.layout.config();
  for (const auto& pr : pairs) {
    for (std::uint32_t l = 0; l < c.num_layers; ++l) {
      for (std::uint32_t o = 0; o < c.outer_dim; ++o) {
        const Region from = src.layout.region(pr.src, l, o);
        const Region to = dst.layout.region(pr.dst, l, o);
        for (std::size_t k = 0; k < dst.storage.size(); ++k) {
          const std::uintptr_t base = dst.storage[k]->base();
          if (to.addr >= base && to.addr + to.size <= base + dst.storage[k]->size()) {
            std::memcpy(out[k].data() + (to.addr - base), reinterpret_cast<const void*>(from.addr),
                        to.size);
          }
        }
      }
    }
  }
  return out;
}

/// Returns `count` distinct ids from [0, n), in random order.
std::vector<BlockId> pick(std::size_t n, std::size_t count, std::mt19937_64& rng) {
  std::vector<BlockId> ids(n);
  std::iota(ids.begin(), ids.end(), BlockId{0});
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(count);
  return ids;
}

/// Copies with the engine, waits, and checks the whole destination storage and
/// that the source did not change.
void copy_and_check(HostTransferEngine& engine, const HostPool& src, const HostPool& dst,
                    const std::vector<TransferPair>& pairs) {
  const auto src_before = snapshot(src);
  const auto want = expected_after(src, dst, pairs);
  const auto done = engine.submit(pairs);
  ASSERT_NE(done, nullptr);
  const TransferOutcome& outcome = done->wait();
  EXPECT_TRUE(outcome.ok()) << outcome.message();
  EXPECT_TRUE(outcome.failed.empty());
  EXPECT_TRUE(snapshot(dst) == want) << "destination storage differs from the expected bytes";
  EXPECT_TRUE(snapshot(src) == src_before) << "the source changed";
}

// ---- a copy hook that records and can hold the workers ------------------------------------

struct Hook {
  std::mutex mu;
  std::condition_variable cv;
  std::set<std::thread::id> threads;   // guarded by mu
  std::size_t calls = 0;               // guarded by mu
  std::size_t bytes = 0;               // guarded by mu
  std::size_t hold_until_threads = 0;  // each call waits until this many distinct threads came
  bool gate_closed = false;            // each call waits while closed
  bool timed_out = false;              // guarded by mu

  void open_gate() {
    {
      std::lock_guard lock(mu);
      gate_closed = false;
    }
    cv.notify_all();
  }
  void wait_calls(std::size_t n) {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return calls >= n; }));
  }
};

Hook* g_hook = nullptr;

void hooked_copy(void* dst, const void* src, std::size_t n) noexcept {
  Hook& h = *g_hook;
  {
    std::unique_lock lock(h.mu);
    h.threads.insert(std::this_thread::get_id());
    ++h.calls;
    h.bytes += n;
    h.cv.notify_all();
    if (!h.cv.wait_for(lock, std::chrono::seconds(30), [&] {
          return h.threads.size() >= h.hold_until_threads && !h.gate_closed;
        })) {
      h.timed_out = true;
    }
  }
  std::memcpy(dst, src, n);
}

class HostEngineHookTest : public ::testing::Test {
 protected:
  void SetUp() override { g_hook = &hook_; }
  void TearDown() override { g_hook = nullptr; }
  HostEngineOptions hooked(std::size_t threads, std::size_t min_bytes) const {
    HostEngineOptions o;
    o.threads = threads;
    o.min_bytes_per_thread = min_bytes;
    o.copy = &hooked_copy;
    return o;
  }
  Hook hook_;
};

// ---- round trips ---------------------------------------------------------------------------

struct RoundTripCase {
  const char* name;
  LayoutConfig config;
  std::size_t contiguous_stride;  // 0: packed
  std::size_t separated_stride;   // 0: packed
};

const RoundTripCase kCases[] = {
    // Region 15 B, block 90 B: nothing aligned.
    {"odd_tiny", config(3, 2, 5, 3, 1), 0, 0},
    {"odd_tiny_padded", config(3, 2, 5, 3, 1), 97, 17},
    // Region 2193 B, block 13158 B: split points fall inside regions.
    {"odd_split", config(3, 2, 17, 129, 1), 0, 2201},
    // MLA-style: one outer index, 2048 B regions.
    {"mla", config(5, 1, 16, 64, 2), 0, 0},
};

using RoundTripParam = std::tuple<int, LayoutKind, LayoutKind>;

class HostEngineRoundTrip : public ::testing::TestWithParam<RoundTripParam> {};

TEST_P(HostEngineRoundTrip, HostToHostAndBackByteForByte) {
  const auto& [case_index, there_kind, back_kind] = GetParam();
  const RoundTripCase& tc = kCases[case_index];
  auto stride = [&](LayoutKind k) {
    return k == LayoutKind::kFullyContiguous ? tc.contiguous_stride : tc.separated_stride;
  };
  std::mt19937_64 rng(test::test_seed());

  HostPool a = make_pool(tc.config, back_kind, 7, 0);
  randomize(a, rng);
  HostPool b = make_pool(tc.config, there_kind, 11, 0xEE, stride(there_kind));
  HostPool c = make_pool(tc.config, back_kind, 7, 0x11, stride(back_kind));

  HostEngineOptions options;
  options.threads = 3;
  options.min_bytes_per_thread = 4096;  // split even these small batches
  HostTransferEngine there(a.layout, b.layout, options);
  HostTransferEngine back(b.layout, c.layout, options);

  const auto from = pick(7, 5, rng);
  const auto via = pick(11, 5, rng);
  std::vector<TransferPair> out_pairs;
  std::vector<TransferPair> back_pairs;
  for (std::size_t i = 0; i < from.size(); ++i) {
    out_pairs.push_back({from[i], via[i]});
    back_pairs.push_back({via[i], from[i]});
  }
  copy_and_check(there, a, b, out_pairs);
  copy_and_check(back, b, c, back_pairs);
  for (const BlockId id : from) {
    EXPECT_EQ(block_bytes(c, id), block_bytes(a, id)) << "block " << id << " after the round trip";
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, HostEngineRoundTrip,
    ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kCases))),
                       ::testing::Values(LayoutKind::kFullyContiguous, LayoutKind::kLayerSeparated),
                       ::testing::Values(LayoutKind::kFullyContiguous,
                                         LayoutKind::kLayerSeparated)),
    [](const ::testing::TestParamInfo<RoundTripParam>& p) {
      return std::string(kCases[std::get<0>(p.param)].name) + "_via_" +
             std::string(to_string(std::get<1>(p.param))) + "_to_" +
             std::string(to_string(std::get<2>(p.param)));
    });

TEST(HostEngine, WholeBatchOfOneBlockAndAllBlocks) {
  std::mt19937_64 rng(test::test_seed());
  const auto c = config(2, 2, 3, 5, 2);
  HostPool src = make_pool(c, LayoutKind::kLayerSeparated, 9, 0);
  randomize(src, rng);
  HostPool dst = make_pool(c, LayoutKind::kFullyContiguous, 9, 0xAB);
  HostTransferEngine engine(src.layout, dst.layout);
  copy_and_check(engine, src, dst, {{4, 8}});
  std::vector<TransferPair> all;
  for (BlockId i = 0; i < 9; ++i) all.push_back({i, 8 - i});
  copy_and_check(engine, src, dst, all);
}

TEST(HostEngine, EmulatedDeviceTierToPinnedAndBack) {
  const auto c = config(4, 2, 16, 32, 2);  // 1 KiB regions, 8 KiB blocks
  const std::size_t n = 6;
  auto g1 = make_device_storage(n * c.block_bytes());
  if (!g1->host_accessible())
    KVBM_SKIP_OR_FAIL("GPU present: real device memory: covered by the CUDA engine");
  auto g2 = make_pinned_storage(n * c.block_bytes());
  std::mt19937_64 rng(test::test_seed());
  auto* p = reinterpret_cast<std::uint8_t*>(g1->base());
  for (std::size_t i = 0; i < g1->size(); ++i) p[i] = static_cast<std::uint8_t>(rng());
  const Bytes original(p, p + g1->size());

  const std::size_t region_span = n * c.region_bytes();
  std::vector<std::uintptr_t> bases;
  for (std::size_t r = 0; r < c.regions_per_block(); ++r)
    bases.push_back(g1->base() + r * region_span);
  const auto g1_layout = Layout::layer_separated(c, n, bases);
  const auto g2_layout = Layout::fully_contiguous(c, n, g2->base());
  HostTransferEngine offload(g1_layout, g2_layout, named("g1_to_g2"));
  HostTransferEngine onboard(g2_layout, g1_layout, named("g2_to_g1"));

  std::vector<TransferPair> pairs;
  for (BlockId i = 0; i < n; ++i) pairs.push_back({i, static_cast<BlockId>(n - 1 - i)});
  EXPECT_TRUE(offload.submit(pairs)->wait().ok());
  std::memset(p, 0, g1->size());
  EXPECT_TRUE(onboard.submit(pairs)->wait().ok());  // n-1-i -> n-1-(n-1-i) = i: every block home
  EXPECT_TRUE(Bytes(p, p + g1->size()) == original);
}

// ---- splitting over workers ----------------------------------------------------------------

TEST_F(HostEngineHookTest, LargeBatchIsSplitOverWorkersNeverTheCaller) {
  std::mt19937_64 rng(test::test_seed());
  const auto c = config(2, 2, 16, 64, 2);  // 2 KiB regions, 8 KiB blocks
  HostPool src = make_pool(c, LayoutKind::kFullyContiguous, 8, 0);
  randomize(src, rng);
  HostPool dst = make_pool(c, LayoutKind::kFullyContiguous, 8, 0xEE);
  HostTransferEngine engine(src.layout, dst.layout, hooked(4, 4096));
  // The pairs merge into one 64 KiB op; it must still be split, and each call
  // waits until a second worker has come: only a split batch completes.
  hook_.hold_until_threads = 2;
  std::vector<TransferPair> pairs;
  for (BlockId i = 0; i < 8; ++i) pairs.push_back({i, i});
  copy_and_check(engine, src, dst, pairs);
  std::lock_guard lock(hook_.mu);
  EXPECT_FALSE(hook_.timed_out) << "the batch ran on one worker";
  EXPECT_GE(hook_.threads.size(), 2U);
  EXPECT_LE(hook_.threads.size(), 4U);
  EXPECT_EQ(hook_.threads.count(std::this_thread::get_id()), 0U);
  EXPECT_EQ(hook_.bytes, 8 * c.block_bytes());
  EXPECT_GE(hook_.calls, 2U);  // at least one piece per worker that took part
}

TEST_F(HostEngineHookTest, SmallBatchRunsOnOneWorker) {
  const auto c = config(4, 2, 16, 64, 2);
  HostPool src = make_pool(c, LayoutKind::kLayerSeparated, 8, 1);
  HostPool dst = make_pool(c, LayoutKind::kFullyContiguous, 8, 2);
  // 64 KiB in the batch, 1 MiB minimum per thread: one piece.
  HostTransferEngine engine(src.layout, dst.layout, hooked(4, std::size_t{1} << 20));
  std::vector<TransferPair> pairs;
  for (BlockId i = 0; i < 8; ++i) pairs.push_back({i, 7 - i});
  copy_and_check(engine, src, dst, pairs);
  std::lock_guard lock(hook_.mu);
  EXPECT_EQ(hook_.threads.size(), 1U);
  EXPECT_EQ(hook_.threads.count(std::this_thread::get_id()), 0U);
  EXPECT_EQ(hook_.calls, 8U * 8U);  // one per region: nothing adjacent in both
  EXPECT_EQ(hook_.bytes, 8 * c.block_bytes());
}

TEST_F(HostEngineHookTest, MinBytesPerThreadBoundsTheSplit) {
  const auto c = config(1, 1, 16, 64, 4);  // 4 KiB blocks, one region each
  HostPool src = make_pool(c, LayoutKind::kFullyContiguous, 16, 1);
  HostPool dst = make_pool(c, LayoutKind::kFullyContiguous, 16, 2);
  // 64 KiB at 32 KiB per thread: exactly two pieces, though there are 8 workers.
  HostTransferEngine engine(src.layout, dst.layout, hooked(8, 32 << 10));
  std::vector<TransferPair> pairs;
  for (BlockId i = 0; i < 16; ++i) pairs.push_back({i, i});
  copy_and_check(engine, src, dst, pairs);
  std::lock_guard lock(hook_.mu);
  EXPECT_EQ(hook_.calls, 2U);  // one merged op, cut in two
  EXPECT_EQ(hook_.bytes, 64U << 10);
}

// ---- concurrency ---------------------------------------------------------------------------

TEST(HostEngine, ConcurrentSubmitsFromSeveralThreads) {
  std::mt19937_64 rng(test::test_seed());
  const auto c = config(3, 2, 8, 40, 2);  // 640 B regions
  constexpr int kThreads = 4;
  constexpr int kBatches = 25;
  constexpr int kPerBatch = 3;
  constexpr std::size_t kDst = kThreads * kBatches * kPerBatch;
  HostPool src = make_pool(c, LayoutKind::kLayerSeparated, 13, 0);
  randomize(src, rng);
  HostPool dst = make_pool(c, LayoutKind::kFullyContiguous, kDst, 0xEE);
  HostTransferEngine engine(src.layout, dst.layout, sized(3, 4096));

  std::vector<std::vector<TransferPair>> batches(kThreads * kBatches);
  for (std::size_t i = 0; i < batches.size(); ++i) {
    for (int k = 0; k < kPerBatch; ++k) {
      batches[i].push_back(
          {static_cast<BlockId>(rng() % 13), static_cast<BlockId>(i * kPerBatch + k)});
    }
  }
  std::vector<std::thread> callers;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    callers.emplace_back([&, t] {
      std::vector<std::shared_ptr<TransferCompletion>> done;
      for (int b = 0; b < kBatches; ++b) done.push_back(engine.submit(batches[t * kBatches + b]));
      for (auto& d : done) failures[t] += d->wait().ok() ? 0 : 1;
    });
  }
  for (auto& t : callers) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0);
  for (const auto& batch : batches) {
    for (const auto& p : batch) {
      EXPECT_EQ(block_bytes(dst, p.dst), block_bytes(src, p.src)) << p.src << " -> " << p.dst;
    }
  }
}

TEST(HostEngine, DestructorDrainsAcceptedBatches) {
  std::mt19937_64 rng(test::test_seed());
  const auto c = config(2, 2, 16, 128, 2);  // 4 KiB regions
  HostPool src = make_pool(c, LayoutKind::kLayerSeparated, 20, 0);
  randomize(src, rng);
  HostPool dst = make_pool(c, LayoutKind::kLayerSeparated, 20, 0xEE);
  std::vector<std::shared_ptr<TransferCompletion>> done;
  {
    HostTransferEngine engine(src.layout, dst.layout, sized(2, 4096));
    for (BlockId i = 0; i < 20; ++i)
      done.push_back(engine.submit(std::vector<TransferPair>{{i, 19 - i}}));
  }
  for (const auto& d : done) {
    ASSERT_TRUE(d->done());
    EXPECT_TRUE(d->wait().ok());
  }
  for (BlockId i = 0; i < 20; ++i) EXPECT_EQ(block_bytes(dst, 19 - i), block_bytes(src, i));
}

// ---- completion ----------------------------------------------------------------------------

TEST_F(HostEngineHookTest, CompletionSignalsWaitersAndCallbacksOnce) {
  const auto c = config(1, 2, 4, 16, 2);
  HostPool src = make_pool(c, LayoutKind::kFullyContiguous, 4, 7);
  HostPool dst = make_pool(c, LayoutKind::kFullyContiguous, 4, 9);
  HostTransferEngine engine(src.layout, dst.layout, hooked(2, 4096));
  hook_.gate_closed = true;  // hold the worker inside the copy
  const auto done = engine.submit(std::vector<TransferPair>{{0, 1}, {1, 2}});
  hook_.wait_calls(1);
  EXPECT_FALSE(done->done());
  EXPECT_FALSE(done->wait_for(std::chrono::milliseconds(0)));

  std::mutex mu;
  int calls = 0;
  std::thread::id ran_on;
  bool ok = false;
  done->on_complete([&](const TransferOutcome& o) {
    std::lock_guard lock(mu);
    ++calls;
    ran_on = std::this_thread::get_id();
    ok = o.ok();
  });
  hook_.open_gate();
  EXPECT_TRUE(done->wait().ok());
  EXPECT_TRUE(done->done());
  EXPECT_TRUE(done->wait_for(std::chrono::seconds(0)));
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(calls, 1);
    EXPECT_TRUE(ok);
    EXPECT_NE(ran_on, std::this_thread::get_id()) << "the callback ran on the caller's thread";
  }
  // Registered after completion: runs at once, on this thread.
  std::thread::id late_on;
  done->on_complete([&](const TransferOutcome&) { late_on = std::this_thread::get_id(); });
  EXPECT_EQ(late_on, std::this_thread::get_id());
  // A second complete() has no effect.
  done->complete(TransferOutcome{{0}, TransferError{ErrorKind::kIo, 0, "late"}});
  EXPECT_TRUE(done->wait().ok());
  std::lock_guard lock(mu);
  EXPECT_EQ(calls, 1);
}

// ---- misuse --------------------------------------------------------------------------------

TEST_F(HostEngineHookTest, BadBatchesThrowAndCopyNothing) {
  const auto c = config(2, 2, 4, 8, 2);
  HostPool src = make_pool(c, LayoutKind::kLayerSeparated, 4, 0x33);
  HostPool dst = make_pool(c, LayoutKind::kFullyContiguous, 6, 0xEE);
  HostTransferEngine engine(src.layout, dst.layout, hooked(2, 4096));
  const auto before = snapshot(dst);
  auto message = [&](std::vector<TransferPair> pairs) -> std::string {
    try {
      (void)engine.submit(pairs);
    } catch (const UsageError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected a UsageError";
    return {};
  };
  EXPECT_THAT(message({}), HasSubstr("at least one pair"));
  EXPECT_THAT(message({{0, 0}, {4, 1}}), HasSubstr("source block 4 (pair 1) out of range"));
  EXPECT_THAT(message({{0, 0}, {1, 6}}), HasSubstr("destination block 6 (pair 1) out of range"));
  EXPECT_THAT(message({{0, 5}, {1, 2}, {2, 5}}), HasSubstr("destination block 5 appears twice"));
  EXPECT_THAT(message({{0, 1}, {0xFFFFFFFFU, 2}}), HasSubstr("out of range"));
  EXPECT_TRUE(snapshot(dst) == before);
  std::lock_guard lock(hook_.mu);
  EXPECT_EQ(hook_.calls, 0U) << "a rejected batch started copying";
}

TEST(HostEngine, ConstructionChecks) {
  const auto c = config(2, 2, 4, 8, 2);
  auto other = c;
  other.inner_dim = 16;
  const auto a = Layout::fully_contiguous(c, 4, 0x10000);
  const auto b = Layout::fully_contiguous(other, 4, 0x20000);
  EXPECT_THROW((void)HostTransferEngine(a, b), UsageError);
  EXPECT_THROW((void)HostTransferEngine(a, a, sized(257, 1 << 20)), UsageError);
  EXPECT_THROW((void)HostTransferEngine(a, a, sized(0, 0)), UsageError);
  EXPECT_THROW((void)HostTransferEngine(a, a, named("")), UsageError);
}

TEST(HostEngine, OptionsReachTheEngine) {
  const auto c = config(2, 2, 4, 8, 2);
  const auto a = Layout::fully_contiguous(c, 4, 0x10000);
  const auto s = Layout::layer_separated(c, 5, {0x1000, 0x2000, 0x3000, 0x4000});
  HostTransferEngine three(a, s, [] {
    auto o = named("g2_to_g1");
    o.threads = 3;
    return o;
  }());
  EXPECT_EQ(three.threads(), 3U);
  EXPECT_EQ(three.name(), "g2_to_g1");
  EXPECT_EQ(three.src().num_blocks(), 4U);
  EXPECT_EQ(three.dst().num_blocks(), 5U);
  EXPECT_EQ(three.dst().kind(), LayoutKind::kLayerSeparated);
  HostTransferEngine dflt(a, a);
  const std::size_t hw = std::max(1U, std::thread::hardware_concurrency());
  EXPECT_EQ(dflt.threads(), std::min<std::size_t>(4, hw));
  EXPECT_EQ(dflt.name(), "host_to_host");
}

// ---- metrics -------------------------------------------------------------------------------

std::optional<double> path_metric(prometheus::Registry& registry, std::string_view name,
                                  std::string_view path) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "path" && label.value == path) return metric.counter.value;
      }
    }
  }
  return std::nullopt;
}

TEST(HostEngine, MetricsCountBlocksAndBytesPerPath) {
  const auto c = config(2, 2, 4, 8, 2);  // 256 B blocks
  HostPool src = make_pool(c, LayoutKind::kFullyContiguous, 8, 1);
  HostPool dst = make_pool(c, LayoutKind::kLayerSeparated, 8, 2);
  auto registry = std::make_shared<prometheus::Registry>();
  {
    HostTransferEngine engine(src.layout, dst.layout, named("g2_to_g1", registry));
    EXPECT_EQ(path_metric(*registry, "kvbm_transfer_blocks_total", "g2_to_g1"), 0.0);
    EXPECT_THROW((void)HostTransferEngine(src.layout, dst.layout, named("g2_to_g1", registry)),
                 UsageError);
    EXPECT_TRUE(engine.submit(std::vector<TransferPair>{{0, 1}, {1, 2}, {2, 3}})->wait().ok());
    EXPECT_TRUE(engine.submit(std::vector<TransferPair>{{5, 5}, {7, 0}})->wait().ok());
    EXPECT_EQ(path_metric(*registry, "kvbm_transfer_blocks_total", "g2_to_g1"), 5.0);
    EXPECT_EQ(path_metric(*registry, "kvbm_transfer_bytes_total", "g2_to_g1"), 5.0 * 256);
    EXPECT_EQ(path_metric(*registry, "kvbm_transfer_failed_blocks_total", "g2_to_g1"), 0.0);
    HostTransferEngine other(dst.layout, src.layout, named("g1_to_g2", registry));
    EXPECT_EQ(path_metric(*registry, "kvbm_transfer_blocks_total", "g1_to_g2"), 0.0);
  }
  EXPECT_EQ(path_metric(*registry, "kvbm_transfer_blocks_total", "g2_to_g1"), std::nullopt);
  HostTransferEngine again(src.layout, dst.layout, named("g2_to_g1", registry));
  EXPECT_EQ(path_metric(*registry, "kvbm_transfer_blocks_total", "g2_to_g1"), 0.0);
}

}  // namespace host_engine_test
}  // namespace kvbm
