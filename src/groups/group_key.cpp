// Group-derived block keys (kvbm/groups/group_key.h). XXH3 is compiled in here only.
#include "kvbm/groups/group_key.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kvbm/error.h"

namespace kvbm {

namespace {

// The domain byte of a group seed's input: no other kvbm hash input starts with it
// (hashing.h's key domains are 1..3).
constexpr unsigned char kGroupSeedDomain = 0x47;  // 'G'

void put_le(unsigned char* out, std::uint64_t v, int bytes) noexcept {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xFFU);
}

}  // namespace

std::uint64_t group_seed(const KvCacheGroupSpec& group) noexcept {
  // [domain][id u32][kind u8][window u32][tokens per block u32][bytes per block u64]
  unsigned char bytes[1 + 4 + 1 + 4 + 4 + 8];
  bytes[0] = kGroupSeedDomain;
  put_le(bytes + 1, to_index(group.id), 4);
  bytes[5] = static_cast<unsigned char>(group.kind);
  put_le(bytes + 6, group.window_tokens, 4);
  put_le(bytes + 10, group.tokens_per_block, 4);
  put_le(bytes + 14, group.bytes_per_block, 8);
  return XXH3_64bits(bytes, sizeof(bytes));
}

std::uint64_t group_key(std::uint64_t value, std::uint64_t seed) noexcept {
  unsigned char bytes[8];
  put_le(bytes, value, 8);
  return XXH3_64bits_withSeed(bytes, sizeof(bytes), seed);
}

SequenceHash group_key(const SequenceHash& hash, std::uint64_t seed) {
  return SequenceHash(
      group_key(hash.value(), seed),
      hash.has_parent() ? std::optional(group_key(hash.parent(), seed)) : std::nullopt,
      hash.position());
}

std::vector<SequenceHash> group_hashes(std::span<const SequenceHash> hashes,
                                       std::uint32_t blocks_per_group_block, std::uint64_t seed,
                                       std::size_t first, std::size_t last) {
  KVBM_CHECK(blocks_per_group_block > 0, "group_hashes: 0 hash blocks per group block");
  const std::size_t k = blocks_per_group_block;
  last = std::min(last, hashes.size() / k);
  std::vector<SequenceHash> out;
  if (first >= last) return out;
  out.reserve(last - first);
  for (std::size_t j = first; j < last; ++j) {
    const std::uint64_t value = group_key(hashes[(j + 1) * k - 1].value(), seed);
    const auto parent =
        j == 0 ? std::nullopt : std::optional(group_key(hashes[j * k - 1].value(), seed));
    out.emplace_back(value, parent, static_cast<std::uint32_t>(j));
  }
  return out;
}

std::vector<SequenceHash> group_hashes(std::span<const SequenceHash> hashes,
                                       std::uint32_t hash_block_tokens,
                                       const KvCacheGroupSpec& group) {
  KVBM_CHECK(hash_block_tokens > 0 && group.tokens_per_block % hash_block_tokens == 0,
             "group_hashes: group ", to_index(group.id), " has ", group.tokens_per_block,
             " tokens per block, not a multiple of the hash block size ", hash_block_tokens,
             "; hash at hash_block_size(groups)");
  return group_hashes(hashes, group.tokens_per_block / hash_block_tokens, group_seed(group), 0,
                      hashes.size());
}

}  // namespace kvbm
