// Sequence hashing throughput, reported beside the raw XXH3 it is built on.
//
//   BM_Xxh3_RawBlocks          baseline: XXH3_64bits_withSeed over each block's bytes
//   BM_HashBlocks_Batch        kvbm::hash_blocks: block hashes + chaining, no copy
//   BM_TokenBlockSequence_Extend   a whole prompt: copy into the sequence + hash_blocks
//   BM_TokenBlockSequence_Append   decode: one token at a time
//
// Arguments: {prompt tokens, block size}. items/s counts tokens, bytes/s token bytes.

#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "kvbm/hashing.h"
#include "kvbm/token_block_sequence.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace {

using kvbm::Token;

std::vector<Token> random_tokens(std::size_t n) {
  std::mt19937 rng(12345);
  std::vector<Token> tokens(n);
  for (Token& t : tokens) t = static_cast<Token>(rng() % 128000);
  return tokens;
}

void set_counters(benchmark::State& state, std::size_t tokens) {
  const auto n = static_cast<std::int64_t>(tokens);
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * static_cast<std::int64_t>(sizeof(Token)));
}

void BM_Xxh3_RawBlocks(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto bs = static_cast<std::size_t>(state.range(1));
  const std::vector<Token> tokens = random_tokens(n);
  const std::uint64_t seed = kvbm::SaltBuilder().cache_salt("bench").build().value();
  for (auto _ : state) {
    for (std::size_t off = 0; off + bs <= n; off += bs) {
      std::uint64_t h = XXH3_64bits_withSeed(tokens.data() + off, bs * sizeof(Token), seed);
      benchmark::DoNotOptimize(h);
    }
  }
  set_counters(state, n);
}

void BM_HashBlocks_Batch(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto bs = static_cast<std::uint32_t>(state.range(1));
  const std::vector<Token> tokens = random_tokens(n);
  const kvbm::SaltHash salt = kvbm::SaltBuilder().cache_salt("bench").build();
  std::vector<std::uint64_t> block_hashes;
  std::vector<kvbm::SequenceHash> sequence_hashes;
  block_hashes.reserve(n / bs);
  sequence_hashes.reserve(n / bs);
  for (auto _ : state) {
    block_hashes.clear();
    sequence_hashes.clear();
    kvbm::hash_blocks(tokens, bs, salt, std::nullopt, block_hashes, sequence_hashes);
    benchmark::DoNotOptimize(sequence_hashes.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, n);
}

void BM_TokenBlockSequence_Extend(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto bs = static_cast<std::uint32_t>(state.range(1));
  const std::vector<Token> tokens = random_tokens(n);
  kvbm::TokenBlockSequence seq(bs, kvbm::SaltBuilder().cache_salt("bench").build());
  seq.reserve(n);
  for (auto _ : state) {
    seq.clear();
    benchmark::DoNotOptimize(seq.extend(tokens));
    benchmark::ClobberMemory();
  }
  set_counters(state, n);
}

void BM_TokenBlockSequence_Append(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto bs = static_cast<std::uint32_t>(state.range(1));
  const std::vector<Token> tokens = random_tokens(n);
  kvbm::TokenBlockSequence seq(bs, kvbm::SaltBuilder().cache_salt("bench").build());
  seq.reserve(n);
  for (auto _ : state) {
    seq.clear();
    for (Token t : tokens) benchmark::DoNotOptimize(seq.append(t));
    benchmark::ClobberMemory();
  }
  set_counters(state, n);
}

#define KVBM_HASH_ARGS \
  ArgNames({"tokens", "block"})->Args({4096, 16})->Args({4096, 32})->Args({4096, 64})

BENCHMARK(BM_Xxh3_RawBlocks)->KVBM_HASH_ARGS;
BENCHMARK(BM_HashBlocks_Batch)->KVBM_HASH_ARGS;
BENCHMARK(BM_TokenBlockSequence_Extend)->KVBM_HASH_ARGS;
BENCHMARK(BM_TokenBlockSequence_Append)->KVBM_HASH_ARGS;

}  // namespace

BENCHMARK_MAIN();
