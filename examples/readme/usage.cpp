// examples/readme/usage.cpp: the README's "Usage" snippet as a program that CI
// builds and runs (ctest examples.readme.usage). The README shows the lines
// between the [readme] markers; scripts/readme_snippets.py checks that they are
// equal (--fix copies them over). Runs with no arguments.
//
// A prompt of 100 tokens is served twice: the first time every full block is
// computed and registered, the second time all of them are a cached prefix and
// nothing is allocated.

// [readme]
#include <kvbm/kvbm.h>
// [/readme]

#include <cstdio>
#include <numeric>
#include <vector>

namespace {

// Builds the pool of the README: 1024 blocks of 16 tokens, LRU eviction.
kvbm::BlockManager<kvbm::G1> make_pool() {
  // [readme]
  auto registry = kvbm::BlockRegistry::builder()
                      .frequency_tracker(std::make_shared<kvbm::FrequencyTracker>(4096))
                      .build();
  auto pool = kvbm::BlockManager<kvbm::G1>::builder()
                  .block_count(1024)
                  .block_size(16)
                  .registry(registry)
                  .with_lru_backend()
                  .build();
  // [/readme]
  return pool;
}

// Serves `prompt_tokens` once; sets `computed` to the number of blocks it computed.
// Returns false when the pool had no room or the blocks held are not the prompt's.
bool serve(kvbm::BlockManager<kvbm::G1>& pool, const std::vector<kvbm::Token>& prompt_tokens,
           std::size_t& computed) {
  // [readme]
  kvbm::TokenBlockSequence seq(16, kvbm::SaltBuilder().cache_salt("tenant-a").build());
  seq.extend(prompt_tokens);

  auto held = pool.match_blocks(seq.sequence_hashes());  // cached prefix
  const std::size_t cached = held.size();
  auto fresh = pool.allocate_blocks(seq.num_blocks() - cached);  // empty when all are cached
  if (!fresh) return false;  // not enough free blocks: nothing was taken
  for (std::size_t i = 0; i < fresh->size(); ++i) {
    // ... the forward pass writes the block ...
    auto complete = std::move((*fresh)[i]).complete(seq.block(cached + i)).value();
    held.push_back(pool.register_block(std::move(complete)));
  }
  // Dropping `held` leaves the blocks cached in the inactive pool.
  // [/readme]
  computed = fresh->size();
  if (held.size() != seq.num_blocks()) return false;
  for (std::size_t i = 0; i < held.size(); ++i) {
    if (held[i].sequence_hash() != seq.sequence_hashes()[i]) return false;
  }
  return true;
}

}  // namespace

int main() {
  auto pool = make_pool();

  std::vector<kvbm::Token> prompt(100);  // 6 full blocks and a tail of 4 tokens
  std::iota(prompt.begin(), prompt.end(), 1);
  std::size_t first = 0;
  std::size_t second = 0;
  const bool served = serve(pool, prompt, first) && serve(pool, prompt, second);
  std::printf("first request: %zu blocks computed; second: %zu (all cached)\n", first, second);
  const bool ok = served && first == 6 && second == 0 && pool.audit().empty();
  return ok ? 0 : 1;
}
