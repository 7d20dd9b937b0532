// quickstart: prefix reuse on one tier with kvbm.
//
// Two requests share a system prompt. The first computes every block and
// registers it; the second finds the shared prefix already cached and only
// allocates blocks for its own suffix. Runs with no arguments.

#include <cstdio>
#include <numeric>
#include <vector>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <kvbm/kvbm.h>

namespace {

using kvbm::BlockManager;
using kvbm::G1;
using kvbm::Token;

constexpr std::uint32_t kBlockSize = 16;

// Serves one request: reuse the cached prefix, compute and register the rest.
// Returns the blocks the request holds while it runs.
std::vector<kvbm::ImmutableBlock<G1>> serve(BlockManager<G1>& pool,
                                            const std::vector<Token>& prompt, kvbm::SaltHash salt) {
  kvbm::TokenBlockSequence seq(kBlockSize, salt);
  seq.extend(prompt);
  const auto hashes = seq.sequence_hashes();

  auto held = pool.match_blocks(hashes);
  const std::size_t cached = held.size();
  const std::size_t missing = hashes.size() - cached;
  if (missing > 0) {
    auto fresh = pool.allocate_blocks(missing);
    if (!fresh) {
      std::printf("  pool exhausted: %zu blocks needed, %zu available\n", missing,
                  pool.available_blocks());
      return held;
    }
    std::vector<kvbm::CompleteBlock<G1>> computed;
    for (std::size_t i = 0; i < missing; ++i) {
      // ... the engine's forward pass writes the block's KV data here ...
      auto staged = std::move((*fresh)[i]).complete(seq.block(cached + i));
      if (!staged.ok()) {
        std::printf("  staging failed: %s\n", staged.error().reason.c_str());
        return held;
      }
      computed.push_back(std::move(staged).value());
    }
    for (auto& b : pool.register_blocks(std::move(computed))) held.push_back(std::move(b));
  }
  std::printf("  %zu tokens -> %zu full blocks: %zu reused from cache, %zu computed\n",
              prompt.size(), hashes.size(), cached, missing);
  return held;
}

}  // namespace

int main() {
  auto tracker = std::make_shared<kvbm::FrequencyTracker>(4096);
  auto registry = kvbm::BlockRegistry::builder().frequency_tracker(tracker).build();
  auto metrics = std::make_shared<prometheus::Registry>();
  auto pool = BlockManager<G1>::builder()
                  .block_count(64)
                  .block_size(kBlockSize)
                  .registry(registry)
                  .with_lru_backend()
                  .metrics_registry(metrics)
                  .build();
  const auto salt = kvbm::SaltBuilder().cache_salt("tenant-a").build();

  std::vector<Token> system_prompt(200);
  std::iota(system_prompt.begin(), system_prompt.end(), 1000);
  auto request = [&](Token first, std::size_t n) {
    std::vector<Token> p = system_prompt;
    for (std::size_t i = 0; i < n; ++i) p.push_back(first + static_cast<Token>(i));
    return p;
  };

  std::printf("request 1 (cold cache):\n");
  { auto blocks = serve(pool, request(1, 90), salt); }
  std::printf("request 2 (same system prompt):\n");
  { auto blocks = serve(pool, request(50'000, 120), salt); }
  std::printf("request 3 (same prompt, another tenant's salt):\n");
  { auto blocks = serve(pool, request(1, 90), kvbm::SaltBuilder().cache_salt("tenant-b").build()); }

  const auto c = pool.pool_counts();
  std::printf("\npool %s: total %zu = reset %zu + inactive %zu + in use %zu (%s)\n",
              pool.pool_name().c_str(), c.total, c.reset, c.inactive, c.in_use,
              c.balanced() ? "balanced" : "UNBALANCED");
  std::printf("\nmetrics:\n%s", prometheus::TextSerializer().Serialize(metrics->Collect()).c_str());
  return c.balanced() && pool.audit().empty() ? 0 : 1;
}
