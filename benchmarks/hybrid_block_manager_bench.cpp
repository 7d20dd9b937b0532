// Per-block lifecycle cost of a hybrid model's block manager: two groups beside one.
//
//   BM_Baseline_BlockManagerLifecycle  one BlockManager, no groups: allocate 32 blocks,
//                                      stage, register, drop; match the 32 again, drop
//   BM_Hybrid_Lifecycle/groups:1       HybridBlockManager with one full-attention group:
//                                      find_prefix (miss), allocate, commit (stage and
//                                      register), release_out_of_reach, finish; then
//                                      find_prefix (hit), start_request, finish
//   BM_Hybrid_Lifecycle/groups:2       the same with a full-attention group and a
//                                      sliding-window group (W = 128)
//
// A request is 32 blocks of 16 tokens (512 tokens) with fresh hashes; each pool holds
// 100,000 blocks and evicts cached blocks once full. items_processed counts token
// blocks, so the inverse of items_per_second is the cost per block of the prompt.
// The target: groups:2 at most 2.2x groups:1. Run with
// --benchmark_enable_random_interleaving=true --benchmark_repetitions=N and read the
// ratio with benchmarks/hybrid_ratio.py (docs/hybrid.md, "Cost").

#include <cstdint>
#include <optional>
#include <vector>

#include <benchmark/benchmark.h>

#include <kvbm/block_manager.h>
#include <kvbm/groups/hybrid_block_manager.h>

namespace {

using kvbm::G1;
using kvbm::GroupId;
using kvbm::KvCacheGroupSpec;
using kvbm::SequenceHash;

constexpr std::size_t kPool = 100'000;
constexpr std::size_t kBlocks = 32;
constexpr std::uint32_t kBlockSize = 16;

// The n-th fresh value: a splitmix64 finalizer, spread like real sequence hashes.
std::uint64_t fresh(std::uint64_t n) {
  std::uint64_t z = n + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A fresh chain of kBlocks hashes, written into `out`.
void fresh_chain(std::uint64_t& next, std::vector<SequenceHash>& out) {
  out.clear();
  for (std::size_t i = 0; i < kBlocks; ++i) {
    const std::uint64_t v = fresh(next++);
    out.emplace_back(v, i == 0 ? std::nullopt : std::optional(out.back().value()),
                     static_cast<std::uint32_t>(i));
  }
}

void BM_Baseline_BlockManagerLifecycle(benchmark::State& state) {
  auto m = kvbm::BlockManager<G1>::builder().block_count(kPool).block_size(kBlockSize).build();
  std::uint64_t next = 1;
  std::vector<SequenceHash> hashes;
  for (auto _ : state) {
    fresh_chain(next, hashes);
    {
      auto blocks = *m.allocate_blocks(kBlocks);
      std::vector<kvbm::CompleteBlock<G1>> staged;
      staged.reserve(kBlocks);
      for (std::size_t i = 0; i < kBlocks; ++i) {
        staged.push_back(std::move(blocks[i]).stage(hashes[i], kBlockSize).value());
      }
      auto registered = m.register_blocks(std::move(staged));
      benchmark::DoNotOptimize(registered.data());
    }
    auto matched = m.match_blocks(hashes);
    benchmark::DoNotOptimize(matched.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBlocks));
}
BENCHMARK(BM_Baseline_BlockManagerLifecycle);

kvbm::HybridBlockManager<G1> make_hybrid(int groups) {
  auto b = kvbm::HybridBlockManager<G1>::builder().group(
      KvCacheGroupSpec::full(GroupId{0}, kBlockSize, 65536, {0}), kPool);
  if (groups > 1) {
    b.group(KvCacheGroupSpec::sliding_window(GroupId{1}, 128, kBlockSize, 65536, {1}), kPool);
  }
  return b.build();
}

void BM_Hybrid_Lifecycle(benchmark::State& state) {
  auto m = make_hybrid(static_cast<int>(state.range(0)));
  constexpr std::size_t kTokens = kBlocks * kBlockSize;
  std::uint64_t next = 1;
  std::vector<SequenceHash> hashes;
  for (auto _ : state) {
    fresh_chain(next, hashes);
    auto r = m.start_request(m.find_prefix(hashes, kTokens - 1));
    if (!m.allocate(r, kTokens)) state.SkipWithError("allocation failed");
    m.commit(r, hashes, kTokens);
    m.release_out_of_reach(r, kTokens);
    m.finish(r);
    auto again = m.start_request(m.find_prefix(hashes, kTokens - 1));
    benchmark::DoNotOptimize(again.computed_tokens());
    m.finish(again);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBlocks));
  if (!m.audit().empty()) state.SkipWithError("a pool is unbalanced");
}
BENCHMARK(BM_Hybrid_Lifecycle)->ArgName("groups")->Arg(1)->Arg(2);

}  // namespace

BENCHMARK_MAIN();
