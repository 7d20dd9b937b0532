// The KvIndexer keyed by tokens (BlockKey::kTokens) and KvRouter::route_tokens:
// engines whose block hashes the router cannot compute (vLLM seeds its hash
// per process) are matched by kvbm's own chained hash of the tokens.

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/error.h"
#include "kvbm/hashing.h"
#include "kvbm/router/kv_indexer.h"
#include "kvbm/router/kv_router.h"
#include "router/router_test_util.h"

namespace kvbm::router {
namespace kv_indexer_tokens_test {

using test::batch;
using test::cleared;

constexpr std::uint32_t kBlock = 4;

std::vector<std::uint32_t> tokens_of(std::size_t blocks, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint32_t> out(blocks * kBlock);
  for (auto& t : out) t = static_cast<std::uint32_t>(rng() % 50'000);
  return out;
}

TEST(KvIndexerTokens, KeyNamesRoundTripAndBadOnesSayWhatIsValid) {
  for (auto k : {BlockKey::kEngineHash, BlockKey::kTokens}) {
    EXPECT_EQ(parse_block_key(to_string(k)), k);
  }
  EXPECT_EQ(parse_block_key("tokens"), BlockKey::kTokens);
  try {
    (void)parse_block_key("token_ids");
    FAIL() << "no throw";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("token_ids"), std::string::npos) << what;
    EXPECT_NE(what.find("hashes or tokens"), std::string::npos) << what;
  }
}

// One engine's BlockStored of blocks [first, first + n) of `tokens`, under
// the engine's own hashes `hashes` (its parent: the engine hash of block first - 1).
events::KvEvent stored(const std::vector<std::uint64_t>& hashes,
                       const std::vector<std::uint32_t>& tokens, std::size_t first, std::size_t n,
                       std::string medium = "GPU", std::optional<std::int64_t> lora = {}) {
  events::BlockStored s;
  s.block_hashes.assign(hashes.begin() + static_cast<std::ptrdiff_t>(first),
                        hashes.begin() + static_cast<std::ptrdiff_t>(first + n));
  if (first > 0) s.parent_block_hash = hashes[first - 1];
  s.token_ids.assign(tokens.begin() + static_cast<std::ptrdiff_t>(first * kBlock),
                     tokens.begin() + static_cast<std::ptrdiff_t>((first + n) * kBlock));
  s.block_size = kBlock;
  s.lora_id = lora;
  s.medium = std::move(medium);
  return s;
}

events::KvEvent removed(std::vector<std::uint64_t> hashes, std::string medium = "GPU") {
  return events::BlockRemoved{std::move(hashes), std::move(medium), std::nullopt};
}

// An engine's own block hashes: anything the router cannot compute.
std::vector<std::uint64_t> engine_hashes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> out(n);
  for (auto& h : out) h = rng();
  return out;
}

KvIndexer token_index() {
  KvIndexerOptions o;
  o.key = BlockKey::kTokens;
  return KvIndexer(o);
}

std::size_t prefix_of(const KvIndexer& index, InstanceId id,
                      const std::vector<std::uint32_t>& tokens,
                      std::optional<std::int64_t> lora = {}) {
  const auto keys = token_keys(tokens, kBlock, lora);
  for (const auto& o : index.overlaps(keys).instances) {
    if (o.instance == id) return o.prefix_blocks;
  }
  return 0;
}

TEST(KvIndexerTokens, TokenKeysAreKvbmsOwnChainedHash) {
  const auto tokens = tokens_of(5, 1);
  std::vector<std::uint64_t> block_hashes;
  std::vector<SequenceHash> chain;
  hash_blocks(tokens, kBlock, kNoSalt, std::nullopt, block_hashes, chain);
  std::vector<std::uint64_t> values;
  for (const auto& h : chain) values.push_back(h.value());
  EXPECT_EQ(token_keys(tokens, kBlock), values);
  // A partial last block has no key.
  auto longer = tokens;
  longer.push_back(7);
  EXPECT_EQ(token_keys(longer, kBlock), values);
  EXPECT_THROW((void)token_keys(tokens, 0), UsageError);
}

TEST(KvIndexerTokens, EnginesWithDifferentHashesMatchTheSameTokens) {
  KvIndexer index = token_index();
  const auto a = index.add_instance("a");
  const auto b = index.add_instance("b");
  const auto tokens = tokens_of(6, 2);
  const auto ha = engine_hashes(6, 10);
  const auto hb = engine_hashes(6, 20);
  // a stores the blocks in two events (the second under its parent), b in one.
  index.apply(a, 0, batch({stored(ha, tokens, 0, 2), stored(ha, tokens, 2, 4)}));
  index.apply(b, 0, batch({stored(hb, tokens, 0, 3)}));
  EXPECT_EQ(prefix_of(index, a, tokens), 6U);
  EXPECT_EQ(prefix_of(index, b, tokens), 3U);
  // Another prompt sharing the first two blocks only.
  auto other = tokens;
  other[2 * kBlock] += 1;
  EXPECT_EQ(prefix_of(index, a, other), 2U);
  // The engines' hashes are not keys.
  EXPECT_EQ(index.overlaps(ha).instances[0].prefix_blocks, 0U);
}

TEST(KvIndexerTokens, RemovalsNameTheEnginesHashes) {
  KvIndexer index = token_index();
  const auto a = index.add_instance("a");
  const auto tokens = tokens_of(4, 3);
  const auto h = engine_hashes(4, 30);
  index.apply(a, 0, batch({stored(h, tokens, 0, 4), stored(h, tokens, 0, 4, "CPU")}));
  index.apply(a, 1, batch({removed({h[3]})}));  // G1 drops the tail; G2 still holds it
  const auto keys = token_keys(tokens, kBlock);
  EXPECT_FALSE(index.holds(a, keys[3], TierId::kG1));
  EXPECT_TRUE(index.holds(a, keys[3], TierId::kG2));
  EXPECT_EQ(prefix_of(index, a, tokens), 4U);
  index.apply(a, 2, batch({removed({h[3]}, "CPU")}));
  EXPECT_EQ(prefix_of(index, a, tokens), 3U);
  // Gone from every tier, the engine's hash is forgotten: a second removal is unknown.
  index.apply(a, 3, batch({removed({h[3]}, "CPU")}));
  EXPECT_EQ(index.stats().removed_unknown_blocks, 1U);
  // A child stored again under a parent still held is keyed as before.
  index.apply(a, 4, batch({stored(h, tokens, 3, 1)}));
  EXPECT_EQ(prefix_of(index, a, tokens), 4U);
}

TEST(KvIndexerTokens, EventsWithoutTokensOrAKnownParentAreCountedAndIgnored) {
  KvIndexer index = token_index();
  const auto a = index.add_instance("a");
  const auto tokens = tokens_of(3, 4);
  const auto h = engine_hashes(3, 40);
  events::BlockStored bare;
  bare.block_hashes = {h[0]};
  bare.block_size = kBlock;
  bare.medium = "GPU";
  index.apply(a, 0, batch({bare}));                     // no token ids
  index.apply(a, 1, batch({stored(h, tokens, 1, 2)}));  // its parent h[0] was never keyed
  EXPECT_EQ(index.stats().unkeyed_events, 2U);
  EXPECT_EQ(prefix_of(index, a, tokens), 0U);
  index.apply(a, 2, batch({stored(h, tokens, 0, 3)}));
  EXPECT_EQ(prefix_of(index, a, tokens), 3U);
  // After AllBlocksCleared the old hashes mean nothing: a child under one is unkeyed.
  index.apply(a, 3, batch({cleared()}));
  index.apply(a, 4, batch({stored(h, tokens, 2, 1)}));
  EXPECT_EQ(index.stats().unkeyed_events, 3U);
  EXPECT_EQ(prefix_of(index, a, tokens), 0U);
}

TEST(KvIndexerTokens, LoraAdaptersNeverShareBlocks) {
  KvIndexer index = token_index();
  const auto a = index.add_instance("a");
  const auto tokens = tokens_of(2, 5);
  const auto h = engine_hashes(2, 50);
  index.apply(a, 0, batch({stored(h, tokens, 0, 2, "GPU", 7)}));
  EXPECT_EQ(prefix_of(index, a, tokens), 0U);
  EXPECT_EQ(prefix_of(index, a, tokens, 8), 0U);
  EXPECT_EQ(prefix_of(index, a, tokens, 7), 2U);
}

TEST(KvIndexerTokens, RouteTokensGoesToTheInstanceHoldingThePrefix) {
  KvIndexer index = token_index();
  const auto a = index.add_instance("a");
  const auto b = index.add_instance("b");
  const auto tokens = tokens_of(8, 6);
  const auto hb = engine_hashes(8, 60);
  index.apply(a, 0, batch({}));
  index.apply(b, 0, batch({stored(hb, tokens, 0, 8)}));
  KvRouterOptions o;
  o.block_size = kBlock;
  KvRouter router(index, o);
  const RouteDecision d = router.route_tokens(tokens);
  EXPECT_EQ(d.instance, b);
  EXPECT_EQ(d.overlap.prefix_blocks, 8U);
  EXPECT_EQ(d.tokens_to_compute, 0U);
  router.finish(d);

  KvIndexer by_hash;
  (void)by_hash.add_instance("c");
  KvRouter wrong(by_hash, o);
  EXPECT_THROW((void)wrong.route_tokens(tokens), UsageError);
}

}  // namespace kv_indexer_tokens_test
}  // namespace kvbm::router
