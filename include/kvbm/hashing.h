// kvbm/hashing.h: how tokens become block hashes and sequence hashes.
//
// Every full block of tokens gets two hashes:
//
//   * the block hash: XXH3-64 of the block's token ids (each as 4 little-endian
//     bytes), seeded with the sequence's SaltHash; when the block carries
//     block-level extra keys (multimodal content), their tagged encodings are
//     appended to the token bytes;
//   * the sequence hash (kvbm::SequenceHash): for the first block its value is
//     the block hash; for the block at position i > 0 it is XXH3-64, seeded
//     with i, of the 16 bytes [parent's value, LE][block hash, LE]. The step
//     is neither symmetric in parent and block nor cancels equal inputs, so
//     prompts with repeated or swapped blocks do not collide by construction;
//     equal values mean equal tokens, equal salt and equal extra keys over the
//     whole prefix (up to a 2^-64 chance per pair, as for any 64-bit hash).
//
// Extra keys live in tagged domains. Each key is encoded as
// [domain tag: 1 byte][payload length: u32 LE][payload], so the byte string fed
// to the hash is injective: a LoRA adapter named "x" never hashes like a cache
// salt "x", and ("ab", "c") never like ("a", "bc"). Sequence-level keys (LoRA
// adapter, cache salt) are folded into one SaltHash by SaltBuilder, which then
// seeds every block hash. Block-level keys (multimodal content) are appended to
// the block they start in; a key's payload is its token offset inside the block
// (u32 LE) followed by its content bytes. For a fixed block size the encoding
// is injective over (tokens, keys); hashes of blocks of different sizes are not
// meant to be compared.
//
// XXH3 is not a cryptographic hash: collisions can be built on purpose. Callers
// that serve untrusted tenants should give each its own cache salt and may
// compare the tokens of a hit (TokenBlock keeps them).
//
// Lifetime and thread-safety: free functions are pure and may be called from
// any thread. SaltBuilder and SaltHash are plain values; a SaltBuilder must not
// be used from two threads at once.

#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvbm/sequence_hash.h"

namespace kvbm {

/// A token id.
using Token = std::uint32_t;

/// The domain an extra hash key belongs to; its value is the tag byte hashed.
enum class KeyDomain : std::uint8_t {
  kLoraAdapter = 1,  ///< Sequence level: the LoRA adapter's name.
  kCacheSalt = 2,    ///< Sequence level: a cache salt or tenant id.
  kMultimodal = 3,   ///< Block level: a multimodal item's content hash.
};

/// Returns true for domains that apply to a whole sequence (folded into SaltHash).
[[nodiscard]] constexpr bool is_sequence_level(KeyDomain domain) noexcept {
  return domain == KeyDomain::kLoraAdapter || domain == KeyDomain::kCacheSalt;
}

/// Returns true for domains that apply to one block (appended to its block hash).
[[nodiscard]] constexpr bool is_block_level(KeyDomain domain) noexcept {
  return domain == KeyDomain::kMultimodal;
}

/// Returns the domain's name, e.g. "lora_adapter"; "unknown" for other values.
[[nodiscard]] std::string_view to_string(KeyDomain domain) noexcept;

/// One extra hash key: its domain, the token it starts at (block-level keys
/// only) and its content bytes.
struct ExtraKey {
  /// Which domain the key belongs to.
  KeyDomain domain = KeyDomain::kCacheSalt;
  /// Block-level keys: offset of the first token the key applies to, relative
  /// to the start of the tokens being hashed. Ignored for sequence-level keys.
  std::uint32_t token_offset = 0;
  /// The key's content; any bytes.
  std::string bytes;

  /// Returns a LoRA adapter key.
  [[nodiscard]] static ExtraKey lora(std::string_view name) {
    return ExtraKey{KeyDomain::kLoraAdapter, 0, std::string(name)};
  }
  /// Returns a cache-salt key.
  [[nodiscard]] static ExtraKey cache_salt(std::string_view salt) {
    return ExtraKey{KeyDomain::kCacheSalt, 0, std::string(salt)};
  }
  /// Returns a multimodal key whose content is a 64-bit hash (stored as 8 LE bytes).
  [[nodiscard]] static ExtraKey multimodal(std::uint32_t token_offset, std::uint64_t content_hash) {
    std::string bytes(8, '\0');
    for (std::size_t i = 0; i < 8; ++i)
      bytes[i] = static_cast<char>((content_hash >> (8 * i)) & 0xFFU);
    return ExtraKey{KeyDomain::kMultimodal, token_offset, std::move(bytes)};
  }
  /// Returns a multimodal key whose content is an arbitrary identifier.
  [[nodiscard]] static ExtraKey multimodal(std::uint32_t token_offset,
                                           std::string_view content_id) {
    return ExtraKey{KeyDomain::kMultimodal, token_offset, std::string(content_id)};
  }

  friend bool operator==(const ExtraKey&, const ExtraKey&) = default;
};

/// The sequence-level seed of every block hash: a strong typedef over u64.
class SaltHash {
 public:
  /// The value of "no salt": hashing with it is plain XXH3-64 with seed 0.
  static constexpr std::uint64_t kNoSaltValue = 0;

  /// The no-salt value.
  constexpr SaltHash() noexcept = default;
  /// Wraps a raw salt value (e.g. one received from another process).
  constexpr explicit SaltHash(std::uint64_t value) noexcept : value_(value) {}

  /// Returns the raw 64-bit value.
  [[nodiscard]] constexpr std::uint64_t value() const noexcept { return value_; }

  friend constexpr bool operator==(SaltHash, SaltHash) noexcept = default;

 private:
  std::uint64_t value_ = kNoSaltValue;
};

/// The salt of sequences without LoRA adapter or cache salt.
inline constexpr SaltHash kNoSalt{};

/// Folds sequence-level extra keys into a SaltHash.
///
/// Each domain may be set once. The result does not depend on the order the
/// keys were given in (they are hashed in domain order); with no keys it is
/// kNoSalt. An empty string is a present key and differs from an absent one.
class SaltBuilder {
 public:
  /// Sets the LoRA adapter name. Throws UsageError if already set.
  SaltBuilder& lora(std::string_view name);
  /// Sets the cache salt (tenant). Throws UsageError if already set.
  SaltBuilder& cache_salt(std::string_view salt);
  /// Adds a sequence-level key. Throws UsageError for a block-level domain or
  /// a domain already set.
  SaltBuilder& add(const ExtraKey& key);

  /// Returns the salt: kNoSalt without keys, else XXH3-64 of the encoded keys.
  [[nodiscard]] SaltHash build() const;

 private:
  static constexpr std::size_t kSlots = 2;
  std::array<std::optional<std::string>, kSlots> keys_;  // index: domain tag - 1
};

/// Returns the block hash of `tokens` seeded with `salt`, with the tagged
/// encodings of `block_keys` appended.
///
/// Preconditions (UsageError otherwise): every key is block-level, its
/// token_offset < tokens.size(), and offsets are non-decreasing.
[[nodiscard]] std::uint64_t block_hash(std::span<const Token> tokens, SaltHash salt,
                                       std::span<const ExtraKey> block_keys = {});

/// Returns the sequence hash of a block with `block_hash` that follows
/// `parent` (nullopt: the first block of its sequence).
[[nodiscard]] SequenceHash chain(std::optional<SequenceHash> parent, std::uint64_t block_hash);

/// Hashes consecutive full blocks in one call, appending one entry per block
/// to `block_hashes` and `sequence_hashes`; the first block chains to `parent`.
///
/// `block_keys` are block-level keys whose token_offset is relative to the
/// start of `tokens`; each is hashed with the block it starts in, its offset
/// rebased to that block. The result equals block_hash() and chain() applied
/// block by block.
///
/// Preconditions (UsageError otherwise): block_size > 0, tokens.size() is a
/// multiple of block_size, keys as for block_hash().
void hash_blocks(std::span<const Token> tokens, std::uint32_t block_size, SaltHash salt,
                 std::optional<SequenceHash> parent, std::vector<std::uint64_t>& block_hashes,
                 std::vector<SequenceHash>& sequence_hashes,
                 std::span<const ExtraKey> block_keys = {});

namespace detail {

/// hash_blocks() that also copies `tokens` to `copy_to` in the same pass, while
/// they are in cache; TokenBlockSequence::extend stores a prompt this way.
/// Precondition: copy_to holds tokens.size() tokens and does not overlap tokens.
void hash_blocks_and_copy(std::span<const Token> tokens, Token* copy_to, std::uint32_t block_size,
                          SaltHash salt, std::optional<SequenceHash> parent,
                          std::vector<std::uint64_t>& block_hashes,
                          std::vector<SequenceHash>& sequence_hashes,
                          std::span<const ExtraKey> block_keys = {});

}  // namespace detail
}  // namespace kvbm
