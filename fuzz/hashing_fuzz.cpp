// fuzz/hashing_fuzz.cpp: kvbm/hashing.h through its public API (SaltBuilder,
// block_hash, chain, hash_blocks), so it holds whatever the chain step's
// internals become.
//
// Input (FuzzedDataProvider): salt keys, a block size, an optional parent,
// block keys (some of the wrong kind, out of range or unsorted on purpose),
// output vectors' prior contents, then tokens.
//
// Invariants:
//   * SaltBuilder: the salt does not depend on the order of its keys; with no
//     key it is kNoSalt; a domain set twice, or a domain that is not
//     sequence-level, throws UsageError and leaves the builder as it was;
//   * chain: position parent + 1 (0 without parent), the parent's value as
//     parent; a first block's value is its block hash; a parent at the last
//     position throws UsageError;
//   * hash_blocks over n blocks equals block_hash() + chain() applied block
//     by block, each key rebased to the block it starts in; it appends after
//     what the outputs held and leaves that alone;
//   * every call is deterministic;
//   * a broken precondition (block size 0, a partial block, a key out of
//     range, unsorted or of the wrong kind, more blocks than positions) throws
//     kvbm::UsageError, nothing else, exactly when the header says.

#include <cstddef>
#include <cstdint>
#include <fuzzer/FuzzedDataProvider.h>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "kvbm/error.h"
#include "kvbm/hashing.h"

namespace {

using kvbm::ExtraKey;
using kvbm::KeyDomain;
using kvbm::SaltHash;
using kvbm::SequenceHash;
using kvbm::Token;

constexpr std::uint32_t kMaxPosition = std::numeric_limits<std::uint32_t>::max();

// Runs `f`; returns true if it threw UsageError, false if it returned.
template <class F>
bool throws_usage_error(F&& f) {
  try {
    f();
  } catch (const kvbm::UsageError&) {
    return true;
  } catch (...) {
    KVBM_FUZZ_CHECK(false, "threw something other than kvbm::UsageError");
  }
  return false;
}

// True when block_hash() and hash_blocks() accept `keys` over `tokens` tokens.
bool keys_valid(std::span<const ExtraKey> keys, std::size_t tokens) {
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (!kvbm::is_block_level(keys[i].domain) || keys[i].token_offset >= tokens) return false;
    if (i > 0 && keys[i - 1].token_offset > keys[i].token_offset) return false;
  }
  return true;
}

SaltHash check_salt(FuzzedDataProvider& in) {
  const bool has_lora = in.ConsumeBool();
  const std::string lora = in.ConsumeRandomLengthString(16);
  const bool has_salt = in.ConsumeBool();
  const std::string salt_text = in.ConsumeRandomLengthString(16);

  kvbm::SaltBuilder forward, backward;
  if (has_lora) forward.lora(lora);
  if (has_salt) forward.cache_salt(salt_text);
  if (has_salt) backward.add(ExtraKey::cache_salt(salt_text));
  if (has_lora) backward.add(ExtraKey::lora(lora));
  const SaltHash salt = forward.build();
  KVBM_FUZZ_CHECK(salt == backward.build(), "the salt depends on the order of its keys");
  KVBM_FUZZ_CHECK(salt == forward.build(), "build() is not deterministic");
  if (!has_lora && !has_salt) KVBM_FUZZ_CHECK(salt == kvbm::kNoSalt, "no keys is not kNoSalt");

  // Any domain byte, set or not: an error exactly for a non-sequence-level
  // domain or one already set, and then nothing changes.
  const auto domain = static_cast<KeyDomain>(in.ConsumeIntegral<std::uint8_t>() % 6);
  const bool taken = (domain == KeyDomain::kLoraAdapter && has_lora) ||
                     (domain == KeyDomain::kCacheSalt && has_salt);
  kvbm::SaltBuilder more = forward;
  const bool failed = throws_usage_error([&] {
    more.add(ExtraKey{domain, 0, in.ConsumeRandomLengthString(8)});
  });
  KVBM_FUZZ_CHECK(failed == (!kvbm::is_sequence_level(domain) || taken),
                  "SaltBuilder::add failed when it should not, or the reverse");
  if (failed) KVBM_FUZZ_CHECK(more.build() == salt, "a failed add changed the builder");
  return salt;
}

std::optional<SequenceHash> make_parent(FuzzedDataProvider& in) {
  if (!in.ConsumeBool()) return std::nullopt;
  const std::uint32_t position =
      in.ConsumeBool() ? in.ConsumeIntegralInRange<std::uint32_t>(0, 8)
                       : kMaxPosition - in.ConsumeIntegralInRange<std::uint32_t>(0, 4);
  const auto value = in.ConsumeIntegral<std::uint64_t>();
  const auto parent = in.ConsumeIntegral<std::uint64_t>();
  return SequenceHash(value, position == 0 ? std::nullopt : std::optional(parent), position);
}

std::vector<ExtraKey> make_keys(FuzzedDataProvider& in) {
  std::vector<ExtraKey> keys(in.ConsumeIntegralInRange<std::size_t>(0, 4));
  std::uint32_t offset = 0;
  for (auto& k : keys) {
    // Mostly multimodal keys at non-decreasing offsets, sometimes anything.
    const auto kind = in.ConsumeIntegralInRange<int>(0, 9);
    k.domain = kind < 8 ? KeyDomain::kMultimodal
                        : static_cast<KeyDomain>(in.ConsumeIntegral<std::uint8_t>() % 5);
    offset = kind == 0 ? in.ConsumeIntegral<std::uint32_t>()
                       : offset + in.ConsumeIntegralInRange<std::uint32_t>(0, 12);
    k.token_offset = offset;
    k.bytes = in.ConsumeRandomLengthString(12);
  }
  return keys;
}

void check_chain(std::optional<SequenceHash> parent, std::uint64_t block_hash) {
  if (parent && parent->position() == kMaxPosition) {
    KVBM_FUZZ_CHECK(throws_usage_error([&] { (void)kvbm::chain(parent, block_hash); }),
                    "chain() past the last position did not throw");
    return;
  }
  const SequenceHash s = kvbm::chain(parent, block_hash);
  KVBM_FUZZ_CHECK(s == kvbm::chain(parent, block_hash), "chain() is not deterministic");
  if (parent) {
    KVBM_FUZZ_CHECK(
        s.position() == parent->position() + 1 && s.has_parent() && s.parent() == parent->value(),
        "chain() does not link to its parent");
  } else {
    KVBM_FUZZ_CHECK(s.position() == 0 && !s.has_parent() && s.value() == block_hash,
                    "a first block's sequence hash is not its block hash");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const SaltHash salt = check_salt(in);
  const auto block_size = in.ConsumeIntegralInRange<std::uint32_t>(0, 9);
  const std::optional<SequenceHash> parent = make_parent(in);
  const std::vector<ExtraKey> keys = make_keys(in);
  const bool partial = in.ConsumeBool();
  const auto prior = in.ConsumeIntegralInRange<std::size_t>(0, 2);
  std::vector<Token> tokens(in.ConsumeIntegralInRange<std::size_t>(0, 256));
  for (auto& t : tokens) t = in.ConsumeIntegral<Token>();

  // block_hash over every token with every key.
  if (keys.empty() || keys_valid(keys, tokens.size())) {
    const std::uint64_t h = kvbm::block_hash(tokens, salt, keys);
    KVBM_FUZZ_CHECK(h == kvbm::block_hash(tokens, salt, keys), "block_hash is not deterministic");
    check_chain(parent, h);
    check_chain(std::nullopt, h);
  } else {
    KVBM_FUZZ_CHECK(throws_usage_error([&] { (void)kvbm::block_hash(tokens, salt, keys); }),
                    "block_hash accepted invalid keys");
  }

  // hash_blocks over whole blocks (or, on purpose, a partial one).
  const std::size_t span =
      partial || block_size == 0 ? tokens.size() : tokens.size() / block_size * block_size;
  const std::span<const Token> input(tokens.data(), span);
  const std::size_t count = block_size == 0 ? 0 : span / block_size;
  const std::uint64_t first_position = parent ? std::uint64_t{parent->position()} + 1 : 0;
  const bool expect_error = block_size == 0 || span % block_size != 0 ||
                            (!keys.empty() && !keys_valid(keys, span)) ||
                            (count > 0 && first_position + (count - 1) > kMaxPosition);
  std::vector<std::uint64_t> block_hashes(prior, 0x5eed);
  std::vector<SequenceHash> sequence_hashes(prior);
  const bool failed = throws_usage_error([&] {
    kvbm::hash_blocks(input, block_size, salt, parent, block_hashes, sequence_hashes, keys);
  });
  KVBM_FUZZ_CHECK(failed == expect_error, "hash_blocks failed when it should not, or the reverse");
  if (failed) return 0;

  KVBM_FUZZ_CHECK(block_hashes.size() == prior + count && sequence_hashes.size() == prior + count,
                  "hash_blocks did not append one hash of each kind per block");
  for (std::size_t i = 0; i < prior; ++i) {
    KVBM_FUZZ_CHECK(block_hashes[i] == 0x5eed && sequence_hashes[i] == SequenceHash{},
                    "hash_blocks changed what its outputs held");
  }
  std::optional<SequenceHash> previous = parent;
  std::size_t next_key = 0;
  for (std::size_t b = 0; b < count; ++b) {
    const std::size_t start = b * block_size;
    std::vector<ExtraKey> mine;
    for (; next_key < keys.size() && keys[next_key].token_offset < start + block_size; ++next_key) {
      ExtraKey k = keys[next_key];
      k.token_offset -= static_cast<std::uint32_t>(start);
      mine.push_back(std::move(k));
    }
    const std::uint64_t expected = kvbm::block_hash(input.subspan(start, block_size), salt, mine);
    KVBM_FUZZ_CHECK(block_hashes[prior + b] == expected,
                    "hash_blocks' block hash is not block_hash() of the block");
    check_chain(previous, expected);
    const SequenceHash s = kvbm::chain(previous, expected);
    KVBM_FUZZ_CHECK(sequence_hashes[prior + b] == s,
                    "hash_blocks' sequence hash is not chain() of the block");
    previous = s;
  }

  std::vector<std::uint64_t> block_hashes_again;
  std::vector<SequenceHash> sequence_hashes_again;
  kvbm::hash_blocks(input, block_size, salt, parent, block_hashes_again, sequence_hashes_again,
                    keys);
  KVBM_FUZZ_CHECK(std::equal(block_hashes_again.begin(), block_hashes_again.end(),
                             block_hashes.begin() + prior, block_hashes.end()) &&
                      std::equal(sequence_hashes_again.begin(), sequence_hashes_again.end(),
                                 sequence_hashes.begin() + prior, sequence_hashes.end()),
                  "hash_blocks is not deterministic");
  return 0;
}
