// Block and sequence hashing. XXH3 is compiled into this file only, so public
// headers never include xxhash.h.

#include "kvbm/hashing.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <limits>

#define XXH_INLINE_ALL
#include <xxhash.h>

#if defined(__GNUC__)
#define KVBM_HOT_INLINE [[gnu::always_inline]] inline
#define KVBM_FLATTEN [[gnu::flatten]]
#else
#define KVBM_HOT_INLINE inline
#define KVBM_FLATTEN
#endif

namespace kvbm {
namespace {

constexpr bool kLittleEndian = std::endian::native == std::endian::little;
constexpr std::uint32_t kMaxPosition = std::numeric_limits<std::uint32_t>::max();
// Tag byte, u32 payload length, and for block-level keys a u32 token offset.
constexpr std::size_t kSequenceKeyHeader = 1 + 4;
constexpr std::size_t kBlockKeyHeader = 1 + 4 + 4;

void store_le32(unsigned char* out, std::uint32_t v) noexcept {
  for (std::size_t i = 0; i < 4; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

// Returns the u32 payload length of a key, checking that it fits.
std::uint32_t payload_length(std::size_t bytes, std::size_t extra) {
  KVBM_CHECK(bytes <= std::numeric_limits<std::uint32_t>::max() - extra, "an extra key of ", bytes,
             " bytes is too long; hash large content first and pass its hash");
  return static_cast<std::uint32_t>(bytes + extra);
}

// The chained value of the block at `position` with `block_hash` after a
// parent with `parent_value`: XXH3-64, seeded with the position, of the 16
// bytes [parent_value LE64][block_hash LE64].
//
// Why this and not a cheaper mix of parent ^ block_hash: any combination that
// is symmetric in its two inputs, or cancels equal ones, collides by
// construction (a prompt whose first two blocks are equal, or whose blocks are
// swapped, would share a value with every other such prompt). XXH3's 9-16 byte
// path keys the two words with different secret words, byte-swaps one of them,
// and folds their 128-bit product into the sum before its avalanche: it is not
// symmetric, an equal pair does not cancel, and the seed (the position) moves
// both keys. A collision of two distinct (parent, block, position) triples is
// then as unlikely as for a random 64-bit function (2^-64 per pair). The chain
// is the one serial dependency of hashing a prompt: about 14 cycles of latency
// per block (xor, multiply, fold, add, avalanche), while the independent block
// hashes overlap with it; at 16-token blocks it, not XXH3 of the tokens, sets
// the pace.
#if defined(__SIZEOF_INT128__)
__extension__ using Uint128 = unsigned __int128;

// XXH3_avalanche.
KVBM_HOT_INLINE std::uint64_t avalanche(std::uint64_t h) noexcept {
  h ^= h >> 37;
  h *= 0x165667919E3779F9ULL;
  return h ^ (h >> 32);
}

// XXH3_mul128_fold64: the low and high words of a * b, xored. On x86-64 the
// multiply is spelled out, because GCC keeps the 128-bit product of the C
// version in a stack slot in loops as large as these: a store and a reload
// (several cycles) after every multiply, on the serial path of the chain.
KVBM_HOT_INLINE std::uint64_t mul128_fold64(std::uint64_t a, std::uint64_t b) noexcept {
#if defined(__x86_64__) && defined(__GNUC__)
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  asm("mulq %3" : "=a"(lo), "=d"(hi) : "a"(a), "rm"(b) : "cc");
  return lo ^ hi;
#else
  const Uint128 product = Uint128{a} * b;
  return static_cast<std::uint64_t>(product) ^ static_cast<std::uint64_t>(product >> 64);
#endif
}

// XXH3_len_9to16_64b of xxhash.h written out for these 16 bytes, whose words
// are already in registers: the same value, bit for bit, without the trip
// through memory. Equality with XXH3 is tested
// (hashing_test: ChainStepIsXxh3OfParentAndBlock).
KVBM_HOT_INLINE std::uint64_t chain_value(std::uint64_t block_hash, std::uint64_t parent_value,
                                          std::uint32_t position) noexcept {
  // Constants once folded: words of the default secret, as XXH3 reads them.
  const std::uint64_t flip1 = XXH_readLE64(XXH3_kSecret + 24) ^ XXH_readLE64(XXH3_kSecret + 32);
  const std::uint64_t flip2 = XXH_readLE64(XXH3_kSecret + 40) ^ XXH_readLE64(XXH3_kSecret + 48);
  const std::uint64_t lo = parent_value ^ (flip1 + position);  // on the serial path
  const std::uint64_t hi = block_hash ^ (flip2 - position);    // independent of it
  return avalanche((16 + hi) + XXH_swap64(lo) + mul128_fold64(lo, hi));
}
#else
std::uint64_t chain_value(std::uint64_t block_hash, std::uint64_t parent_value,
                          std::uint32_t position) noexcept {
  unsigned char bytes[16];
  if constexpr (kLittleEndian) {
    std::memcpy(bytes, &parent_value, 8);
    std::memcpy(bytes + 8, &block_hash, 8);
  } else {
    store_le32(bytes, static_cast<std::uint32_t>(parent_value));
    store_le32(bytes + 4, static_cast<std::uint32_t>(parent_value >> 32));
    store_le32(bytes + 8, static_cast<std::uint32_t>(block_hash));
    store_le32(bytes + 12, static_cast<std::uint32_t>(block_hash >> 32));
  }
  return XXH3_64bits_withSeed(bytes, sizeof(bytes), position);
}
#endif

// Feeds `count` tokens as little-endian u32 bytes into a streaming state.
void update_tokens(XXH3_state_t* state, const Token* tokens, std::size_t count) noexcept {
  if constexpr (kLittleEndian) {
    XXH3_64bits_update(state, tokens, count * sizeof(Token));
  } else {
    unsigned char buf[256];
    std::size_t done = 0;
    while (done < count) {
      const std::size_t chunk = std::min<std::size_t>(count - done, sizeof(buf) / 4);
      for (std::size_t i = 0; i < chunk; ++i) store_le32(buf + 4 * i, tokens[done + i]);
      XXH3_64bits_update(state, buf, chunk * 4);
      done += chunk;
    }
  }
}

// The block hash of `count` tokens without block keys.
inline std::uint64_t hash_tokens(const Token* tokens, std::size_t count,
                                 std::uint64_t seed) noexcept {
  if constexpr (kLittleEndian) {
    return XXH3_64bits_withSeed(tokens, count * sizeof(Token), seed);
  } else {
    XXH3_state_t state;
    XXH3_INITSTATE(&state);
    XXH3_64bits_reset_withSeed(&state, seed);
    update_tokens(&state, tokens, count);
    return XXH3_64bits_digest(&state);
  }
}

// The block hash of `count` tokens followed by the tagged encodings of `keys`,
// whose offsets are rebased by `offset_base`. Keys were checked by the caller.
std::uint64_t hash_tokens_with_keys(const Token* tokens, std::size_t count, std::uint64_t seed,
                                    std::span<const ExtraKey> keys, std::uint32_t offset_base) {
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset_withSeed(&state, seed);
  update_tokens(&state, tokens, count);
  for (const ExtraKey& key : keys) {
    unsigned char header[kBlockKeyHeader];
    header[0] = static_cast<unsigned char>(key.domain);
    store_le32(header + 1, payload_length(key.bytes.size(), 4));
    store_le32(header + 5, key.token_offset - offset_base);
    XXH3_64bits_update(&state, header, sizeof(header));
    XXH3_64bits_update(&state, key.bytes.data(), key.bytes.size());
  }
  return XXH3_64bits_digest(&state);
}

// Checks the preconditions on block-level keys; `caller` names the API.
void check_block_keys(std::span<const ExtraKey> keys, std::size_t token_count, const char* caller) {
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const ExtraKey& key = keys[i];
    KVBM_CHECK(is_block_level(key.domain), caller,
               ": got a salt or extra key of the wrong kind: a ", to_string(key.domain),
               " key applies to the whole sequence; fold it into the SaltHash with SaltBuilder "
               "instead of passing it as a block key");
    KVBM_CHECK(key.token_offset < token_count, caller, ": block key ", i, " (",
               to_string(key.domain), ") starts at token offset ", key.token_offset, " but only ",
               token_count, " tokens are hashed; offsets are relative to the first token passed");
    KVBM_CHECK(i == 0 || keys[i - 1].token_offset <= key.token_offset, caller,
               ": block keys must be sorted by token_offset (key ", i, " at ", key.token_offset,
               " follows one at ", keys[i - 1].token_offset, ")");
  }
}

// Copies `count` tokens between non-overlapping buffers. Large copies go in
// pieces of at most 2 KiB: glibc switches to `rep movsb` above that, which
// some AMD cores run about 20x slower when source and destination are 4 KiB
// aliased -- as two same-sized heap vectors often are.
inline void copy_tokens(Token* dst, const Token* src, std::size_t count) noexcept {
  constexpr std::size_t kPiece = 2048 / sizeof(Token);
  while (count > kPiece) {
    std::memcpy(dst, src, kPiece * sizeof(Token));
    dst += kPiece;
    src += kPiece;
    count -= kPiece;
  }
  std::memcpy(dst, src, count * sizeof(Token));
}

// One batch of consecutive full blocks and where their hashes go.
struct Run {
  const Token* tokens;
  Token* copy_to;            // where to copy the tokens to, or null
  std::size_t count;         // blocks
  std::uint32_t block_size;  // tokens per block
  std::uint64_t seed;
  // Appended to; their capacity is reserved for `count` more entries, so that
  // no entry is written twice (resize() would zero them first).
  std::vector<std::uint64_t>* block_hashes;
  std::vector<SequenceHash>* sequence_hashes;
};

// Hashes the blocks of `run` with `block_hash_of(i, tokens)` and chains them to
// `parent`; copies each block to run.copy_to when kCopy. kFixed, when not 0, is
// run.block_size known at compile time. The block hashes are independent while
// the chain is one serial dependency (one short XXH3 per block), so a single
// loop lets the CPU overlap hashing and copying with it.
template <std::uint32_t kFixed, bool kCopy, class BlockHashOf>
KVBM_HOT_INLINE void chain_run(const Run& run, std::optional<SequenceHash> parent,
                               BlockHashOf&& block_hash_of) {
  // Locals, so that stores through the output pointers cannot force reloads.
  const std::size_t block_size = kFixed != 0 ? kFixed : run.block_size;
  const std::size_t count = run.count;
  const Token* block = run.tokens;
  Token* copy_to = run.copy_to;
  std::vector<std::uint64_t>& hash_out = *run.block_hashes;
  std::vector<SequenceHash>& seq_out = *run.sequence_hashes;
  auto copy_block = [&](const Token* src) {
    if constexpr (kCopy) {
      if constexpr (kFixed != 0) {
        std::memcpy(copy_to, src, kFixed * sizeof(Token));
      } else {
        copy_tokens(copy_to, src, block_size);
      }
      copy_to += block_size;
    }
  };

  std::size_t i = 0;
  std::uint64_t prev = 0;
  std::uint32_t position = 0;
  if (parent) {
    prev = parent->value();
    position = parent->position() + 1;
  } else {
    const std::uint64_t h = block_hash_of(0, block);
    copy_block(block);
    hash_out.push_back(h);
    seq_out.push_back(SequenceHash(h, std::nullopt, 0));  // NOLINT(modernize-use-emplace)
    prev = h;
    position = 1;
    block += block_size;
    i = 1;
  }
  for (; i < count; ++i, block += block_size, ++position) {
#if defined(__GNUC__)
    // The caller checked that no position wraps: SequenceHash's check that a
    // block with a parent is not at position 0 can go.
    if (position == 0) __builtin_unreachable();
#endif
    const std::uint64_t h = block_hash_of(i, block);
    copy_block(block);
    const std::uint64_t value = chain_value(h, prev, position);
    hash_out.push_back(h);
    // A built value pushed, not emplace_back: GCC 12 compiles the in-place
    // construction, check included, into a slower loop (0.82 vs 0.86 of raw XXH3).
    seq_out.push_back(SequenceHash(value, prev, position));  // NOLINT(modernize-use-emplace)
    prev = value;
  }
}

// Blocks without keys. Blocks of up to 240 bytes take XXH3's short paths;
// longer ones reuse one secret derived from the seed instead of deriving it
// per block (XXH3_64bits_withSecretandSeed with a secret from
// XXH3_generateSecret_fromSeed equals XXH3_64bits_withSeed, by contract).
template <std::uint32_t kFixed, bool kCopy>
KVBM_HOT_INLINE void hash_run_sized(const Run& run, std::optional<SequenceHash> parent) {
  const std::size_t tokens_per_block = kFixed != 0 ? kFixed : run.block_size;
  const std::size_t bytes = tokens_per_block * sizeof(Token);
  const std::uint64_t seed = run.seed;
  if constexpr (!kLittleEndian) {
    chain_run<kFixed, kCopy>(run, parent, [&](std::size_t, const Token* block) {
      return hash_tokens(block, tokens_per_block, seed);
    });
  } else {
    if (bytes > XXH3_MIDSIZE_MAX && seed != 0 && run.count > 1) {
      alignas(64) unsigned char secret[XXH3_SECRET_DEFAULT_SIZE];
      XXH3_generateSecret_fromSeed(secret, seed);
      chain_run<kFixed, kCopy>(run, parent, [&](std::size_t, const Token* block) {
        return XXH3_64bits_withSecretandSeed(block, bytes, secret, sizeof(secret), seed);
      });
      return;
    }
    chain_run<kFixed, kCopy>(run, parent, [&](std::size_t, const Token* block) {
      return XXH3_64bits_withSeed(block, bytes, seed);
    });
  }
}

// Dispatches common block sizes to loops where the size is a constant.
template <bool kCopy>
KVBM_FLATTEN void hash_run(const Run& run, std::optional<SequenceHash> parent) {
  switch (run.block_size) {
    case 16:
      hash_run_sized<16, kCopy>(run, parent);
      return;
    case 32:
      hash_run_sized<32, kCopy>(run, parent);
      return;
    case 64:
      hash_run_sized<64, kCopy>(run, parent);
      return;
    default:
      hash_run_sized<0, kCopy>(run, parent);
      return;
  }
}

// Blocks some of which carry keys (sorted, offsets relative to run.tokens).
template <bool kCopy>
void hash_run_with_keys(const Run& run, std::optional<SequenceHash> parent,
                        std::span<const ExtraKey> keys) {
  const ExtraKey* key = keys.data();
  const ExtraKey* const keys_end = key + keys.size();
  chain_run<0, kCopy>(run, parent, [&](std::size_t i, const Token* block) {
    const std::uint64_t block_end = (std::uint64_t{i} + 1) * run.block_size;
    const ExtraKey* first = key;
    while (key != keys_end && key->token_offset < block_end) ++key;
    if (first == key) return hash_tokens(block, run.block_size, run.seed);
    return hash_tokens_with_keys(block, run.block_size, run.seed, {first, key},
                                 static_cast<std::uint32_t>(i * run.block_size));
  });
}

// The checks and output sizing shared by hash_blocks and hash_blocks_and_copy.
void hash_blocks_impl(std::span<const Token> tokens, Token* copy_to, std::uint32_t block_size,
                      SaltHash salt, std::optional<SequenceHash> parent,
                      std::vector<std::uint64_t>& block_hashes,
                      std::vector<SequenceHash>& sequence_hashes,
                      std::span<const ExtraKey> block_keys) {
  KVBM_CHECK(block_size > 0, "hash_blocks: block_size must be greater than 0");
  KVBM_CHECK(tokens.size() % block_size == 0, "hash_blocks: ", tokens.size(),
             " tokens is not a whole number of blocks of ", block_size, "; pass only full blocks");
  if (!block_keys.empty()) check_block_keys(block_keys, tokens.size(), "hash_blocks");
  const std::size_t count = tokens.size() / block_size;
  if (count == 0) return;
  const std::uint64_t first_position = parent ? std::uint64_t{parent->position()} + 1 : 0;
  KVBM_CHECK(first_position + (count - 1) <= kMaxPosition, "hash_blocks: ", count,
             " blocks after position ", first_position, " exceed the largest block position");
  KVBM_CHECK(sequence_hashes.size() == block_hashes.size(),
             "hash_blocks: block_hashes and sequence_hashes must have the same size on entry");

  // Reserve, then append: the pushes below never reallocate, and nothing is
  // written twice. A failed call leaves both outputs as they were.
  // Growth stays geometric (reserve() alone would allocate the exact size on
  // every call of a caller that appends block by block).
  const std::size_t old_size = block_hashes.size();
  const std::size_t needed = old_size + count;
  if (block_hashes.capacity() < needed) {
    block_hashes.reserve(std::max(needed, 2 * block_hashes.capacity()));
  }
  if (sequence_hashes.capacity() < needed) {
    sequence_hashes.reserve(std::max(needed, 2 * sequence_hashes.capacity()));
  }
  const Run run{tokens.data(), copy_to,       count,           block_size,
                salt.value(),  &block_hashes, &sequence_hashes};
  try {
    if (copy_to != nullptr) {
      if (block_keys.empty()) {
        hash_run<true>(run, parent);
      } else {
        hash_run_with_keys<true>(run, parent, block_keys);
      }
    } else {
      if (block_keys.empty()) {
        hash_run<false>(run, parent);
      } else {
        hash_run_with_keys<false>(run, parent, block_keys);
      }
    }
  } catch (...) {  // undo, then rethrow: nothing is swallowed
    block_hashes.resize(old_size);
    sequence_hashes.resize(old_size);
    throw;
  }
}

}  // namespace

std::string_view to_string(KeyDomain domain) noexcept {
  switch (domain) {
    case KeyDomain::kLoraAdapter:
      return "lora_adapter";
    case KeyDomain::kCacheSalt:
      return "cache_salt";
    case KeyDomain::kMultimodal:
      return "multimodal";
  }
  return "unknown";
}

SaltBuilder& SaltBuilder::lora(std::string_view name) { return add(ExtraKey::lora(name)); }

SaltBuilder& SaltBuilder::cache_salt(std::string_view salt) {
  return add(ExtraKey::cache_salt(salt));
}

SaltBuilder& SaltBuilder::add(const ExtraKey& key) {
  KVBM_CHECK(
      is_sequence_level(key.domain),
      "SaltBuilder::add: got a salt or extra key of the wrong kind: a ", to_string(key.domain),
      " key applies to one block, not to the whole sequence; pass it to the block or sequence "
      "that holds its tokens (e.g. TokenBlockSequence::add_multimodal)");
  const auto slot = static_cast<std::size_t>(key.domain) - 1;
  KVBM_CHECK(!keys_[slot].has_value(), "SaltBuilder: the ", to_string(key.domain),
             " key is already set; each domain may be given once, so build a new SaltBuilder to "
             "change it");
  keys_[slot] = key.bytes;
  return *this;
}

SaltHash SaltBuilder::build() const {
  std::string encoded;
  for (std::size_t slot = 0; slot < kSlots; ++slot) {
    if (!keys_[slot]) continue;
    const std::string& bytes = *keys_[slot];
    unsigned char header[kSequenceKeyHeader];
    header[0] = static_cast<unsigned char>(slot + 1);
    store_le32(header + 1, payload_length(bytes.size(), 0));
    encoded.append(reinterpret_cast<const char*>(header), sizeof(header));
    encoded.append(bytes);
  }
  if (encoded.empty()) return kNoSalt;
  return SaltHash(XXH3_64bits(encoded.data(), encoded.size()));
}

std::uint64_t block_hash(std::span<const Token> tokens, SaltHash salt,
                         std::span<const ExtraKey> block_keys) {
  if (block_keys.empty()) return hash_tokens(tokens.data(), tokens.size(), salt.value());
  check_block_keys(block_keys, tokens.size(), "block_hash");
  return hash_tokens_with_keys(tokens.data(), tokens.size(), salt.value(), block_keys, 0);
}

SequenceHash chain(std::optional<SequenceHash> parent, std::uint64_t block_hash) {
  if (!parent) return SequenceHash(block_hash, std::nullopt, 0);
  KVBM_CHECK(parent->position() < kMaxPosition,
             "chain: the parent is at the last representable position ", parent->position(),
             "; a sequence cannot hold more blocks");
  const std::uint32_t position = parent->position() + 1;
  return SequenceHash(chain_value(block_hash, parent->value(), position), parent->value(),
                      position);
}

void hash_blocks(std::span<const Token> tokens, std::uint32_t block_size, SaltHash salt,
                 std::optional<SequenceHash> parent, std::vector<std::uint64_t>& block_hashes,
                 std::vector<SequenceHash>& sequence_hashes, std::span<const ExtraKey> block_keys) {
  hash_blocks_impl(tokens, nullptr, block_size, salt, parent, block_hashes, sequence_hashes,
                   block_keys);
}

namespace detail {

void hash_blocks_and_copy(std::span<const Token> tokens, Token* copy_to, std::uint32_t block_size,
                          SaltHash salt, std::optional<SequenceHash> parent,
                          std::vector<std::uint64_t>& block_hashes,
                          std::vector<SequenceHash>& sequence_hashes,
                          std::span<const ExtraKey> block_keys) {
  KVBM_CHECK(copy_to != nullptr, "hash_blocks_and_copy: copy_to must not be null");
  hash_blocks_impl(tokens, copy_to, block_size, salt, parent, block_hashes, sequence_hashes,
                   block_keys);
}

}  // namespace detail
}  // namespace kvbm
