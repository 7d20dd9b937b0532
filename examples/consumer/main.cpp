// Packaging check: a program outside the kvbm tree that includes kvbm's public headers and
// links kvbm::kvbm. Built by scripts/package_test.sh against the installed package and via
// add_subdirectory(). Reuses a prefix through a BlockManager; prints one line and exits 0.

#include <cstdio>
#include <vector>

#include <kvbm/kvbm.h>

int main() {
  auto pool = kvbm::BlockManager<kvbm::G2>::builder().block_count(8).block_size(4).build();
  kvbm::TokenBlockSequence seq(4);
  const std::vector<kvbm::Token> prompt{1, 2, 3, 4, 5, 6, 7, 8, 9};
  seq.extend(prompt);  // two full blocks and one token in the tail

  {
    auto blocks = pool.allocate_blocks(seq.num_blocks());
    if (!blocks) return 1;
    std::vector<kvbm::CompleteBlock<kvbm::G2>> staged;
    for (std::size_t i = 0; i < blocks->size(); ++i) {
      staged.push_back(std::move((*blocks)[i]).complete(seq.block(i)).value());
    }
    auto registered = pool.register_blocks(std::move(staged));
  }  // dropped: both blocks stay cached in the inactive pool

  const auto hits = pool.match_blocks(seq.sequence_hashes());
  const auto counts = pool.pool_counts();
  const bool ok = hits.size() == 2 && counts.balanced() && pool.audit().empty();
  std::printf("kvbm_consumer: %s (%zu of %zu blocks reused; pool %s: %zu reset, %zu in use)\n",
              ok ? "OK" : "FAILED", hits.size(), seq.num_blocks(), pool.pool_name().c_str(),
              counts.reset, counts.in_use);
  return ok ? 0 : 1;
}
