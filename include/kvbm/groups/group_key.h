// kvbm/groups/group_key.h: the keys of a group's blocks, never equal to another group's.
//
// The same tokens give each group of a hybrid model different bytes (other
// layers, another block size, a window's tail or a state snapshot), so a
// block of one group must never be served for another. kvbm keeps groups
// apart twice:
//
//   1. Each group has its own pool and registry (HybridBlockManager builds one
//      BlockManager per group), so a G1 lookup of one group cannot see
//      another's blocks.
//   2. Every block is registered under a key derived from the group: a tier
//      that holds several groups in one key space (a G3 file, a G4 store, a
//      router's index, the pools of one registry) still cannot mix them.
//
// The derivation: a group's seed is XXH3-64 of its id, kind, window or chunk,
// tokens per block and bytes per block, tagged with a domain byte no other
// kvbm hash input uses. A key is XXH3-64, seeded with the group's seed, of the
// 8 little-endian bytes of the token prefix's chained value. For a fixed
// prefix value, two groups' keys are equal only when their seeds are (one
// 2^-64 chance per pair, as for every 64-bit hash here); the step keeps the
// chain's property that equal keys mean equal prefixes.
//
// Blocks of different sizes: a model's tokens are hashed once, at
// hash_block_size() (the gcd of the groups' block sizes). A group block of b
// tokens covers k = b / hash_block_size hash blocks; its key derives from the
// chained value of its last hash block (which identifies the whole prefix up
// to the block's end), its parent from the hash block k before, and its
// position is the group block's index.
//
// Tiers shared by name (a directory, a G4 key prefix) also get a namespace per
// group: KvCacheGroupSpec::namespace_for(ns) = "<ns>/group:<id>:<kind>:<tpb>".
//
// Thread-safety: pure functions.

#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvbm/groups/kv_cache_group_spec.h"
#include "kvbm/sequence_hash.h"

namespace kvbm {

/// Returns the group's key seed (see the file comment); equal specs, equal seeds.
[[nodiscard]] std::uint64_t group_seed(const KvCacheGroupSpec& group) noexcept;

/// Returns the key, in the group seeded `seed`, of the prefix whose chained value is `value`.
[[nodiscard]] std::uint64_t group_key(std::uint64_t value, std::uint64_t seed) noexcept;

/// Returns the group's SequenceHash of a block whose size equals the hash block
/// size: value, parent and position carried over, value and parent keyed.
[[nodiscard]] SequenceHash group_key(const SequenceHash& hash, std::uint64_t seed);

/// Returns the group's SequenceHash of each of its full blocks covered by
/// `hashes` (chained hashes at `hash_block_tokens` tokens per block, from the
/// sequence's first block): one per tokens_per_block / hash_block_tokens hashes.
/// Throws UsageError unless hash_block_tokens divides the group's tokens per block.
[[nodiscard]] std::vector<SequenceHash> group_hashes(std::span<const SequenceHash> hashes,
                                                     std::uint32_t hash_block_tokens,
                                                     const KvCacheGroupSpec& group);

/// As group_hashes, for the group blocks [first, last) only (clamped to the full
/// blocks `hashes` covers), with the seed already computed.
[[nodiscard]] std::vector<SequenceHash> group_hashes(std::span<const SequenceHash> hashes,
                                                     std::uint32_t blocks_per_group_block,
                                                     std::uint64_t seed, std::size_t first,
                                                     std::size_t last);

}  // namespace kvbm
