// fuzz/token_block_sequence_fuzz.cpp: kvbm/token_block_sequence.h through its
// public API.
//
// Input (FuzzedDataProvider): block size, salt, block keys, tokens, the sizes
// of the chunks to extend by, a truncation point and misuse to try.
//
// Invariants:
//   * the hashes do not depend on how the tokens arrive: one extend(), extend()
//     in chunks, one append() at a time, and extend() of the sequence's own
//     tokens give the same block and sequence hashes;
//   * they are hash_blocks()' hashes of the full blocks, with the keys that
//     start in them, and the keys are kept sorted by offset (stable);
//   * num_blocks(), tokens(), tail_tokens(), block(i), to_token_block(i) and
//     last_sequence_hash() agree with each other;
//   * truncate(n), n < size(), keeps n / block_size blocks and returns how
//     many it dropped, drops the keys at or past n, and extending again with
//     the same tokens (and the dropped keys) gives every hash back;
//     truncate(size()) changes nothing;
//   * misuse (block size 0, a key of the wrong kind or in a complete block, an
//     offset over 32 bits, truncating past the end, a block index past the
//     last) throws kvbm::UsageError, nothing else, and leaves the sequence as
//     it was.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <fuzzer/FuzzedDataProvider.h>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "kvbm/error.h"
#include "kvbm/hashing.h"
#include "kvbm/token_block_sequence.h"

namespace {

using kvbm::ExtraKey;
using kvbm::KeyDomain;
using kvbm::SequenceHash;
using kvbm::Token;
using kvbm::TokenBlockSequence;

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

template <class A, class B>
bool equal(const A& a, const B& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

// Everything observable about a sequence.
struct Snapshot {
  std::vector<Token> tokens;
  std::vector<std::uint64_t> block_hashes;
  std::vector<SequenceHash> sequence_hashes;
  std::vector<ExtraKey> keys;

  explicit Snapshot(const TokenBlockSequence& s)
      : tokens(s.tokens().begin(), s.tokens().end()),
        block_hashes(s.block_hashes().begin(), s.block_hashes().end()),
        sequence_hashes(s.sequence_hashes().begin(), s.sequence_hashes().end()),
        keys(s.block_keys().begin(), s.block_keys().end()) {}
  friend bool operator==(const Snapshot&, const Snapshot&) = default;
};

bool same_hashes(const TokenBlockSequence& a, const TokenBlockSequence& b) {
  return equal(a.block_hashes(), b.block_hashes()) &&
         equal(a.sequence_hashes(), b.sequence_hashes());
}

// Adds `keys` to `s`: block-level ones are accepted (nothing is hashed yet),
// others throw and change nothing. Returns the accepted ones, in order.
std::vector<ExtraKey> add_keys(TokenBlockSequence& s, const std::vector<ExtraKey>& keys) {
  std::vector<ExtraKey> accepted;
  for (const auto& k : keys) {
    const Snapshot before(s);
    const bool failed = throws_usage_error([&] { s.add_block_key(k); });
    KVBM_FUZZ_CHECK(failed == !kvbm::is_block_level(k.domain),
                    "add_block_key failed when it should not, or the reverse");
    if (failed) {
      KVBM_FUZZ_CHECK(Snapshot(s) == before, "a failed add_block_key changed the sequence");
    } else {
      accepted.push_back(k);
    }
  }
  return accepted;
}

// Checks that the accessors of `s` agree with each other and with `tokens`.
void check_views(const TokenBlockSequence& s, std::span<const Token> tokens) {
  const std::uint32_t bs = s.block_size();
  KVBM_FUZZ_CHECK(s.total_tokens() == tokens.size() && equal(s.tokens(), tokens), "tokens()");
  KVBM_FUZZ_CHECK(s.num_blocks() == tokens.size() / bs, "num_blocks() is not the full blocks");
  KVBM_FUZZ_CHECK(
      s.block_hashes().size() == s.num_blocks() && s.sequence_hashes().size() == s.num_blocks(),
      "one hash of each kind per block");
  KVBM_FUZZ_CHECK(equal(s.tail_tokens(), tokens.subspan(s.num_blocks() * bs)), "tail_tokens()");
  for (std::size_t i = 0; i < s.num_blocks(); ++i) {
    const auto v = s.block(i);
    const auto copy = s.to_token_block(i);
    const auto expected = tokens.subspan(i * bs, bs);
    KVBM_FUZZ_CHECK(equal(v.tokens(), expected) && equal(copy.tokens(), expected),
                    "block(i) does not hold block i's tokens");
    KVBM_FUZZ_CHECK(v.block_hash() == s.block_hashes()[i] && copy.block_hash() == v.block_hash() &&
                        v.sequence_hash() == s.sequence_hashes()[i] &&
                        copy.sequence_hash() == v.sequence_hash(),
                    "block(i) and to_token_block(i) disagree with the hash lists");
  }
  KVBM_FUZZ_CHECK(
      s.last_sequence_hash() ==
          (s.num_blocks() == 0 ? std::nullopt : std::optional(s.sequence_hashes().back())),
      "last_sequence_hash()");
  const Snapshot before(s);
  KVBM_FUZZ_CHECK(throws_usage_error([&] { (void)s.block(s.num_blocks()); }) &&
                      throws_usage_error([&] { (void)s.block_tokens(s.num_blocks()); }),
                  "a block index past the last did not throw");
  KVBM_FUZZ_CHECK(Snapshot(s) == before, "a failed accessor changed the sequence");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const auto block_size = in.ConsumeIntegralInRange<std::uint32_t>(1, 8);
  const kvbm::SaltHash salt(in.ConsumeIntegral<std::uint64_t>());
  std::vector<ExtraKey> keys(in.ConsumeIntegralInRange<std::size_t>(0, 4));
  for (auto& k : keys) {
    const auto kind = in.ConsumeIntegralInRange<int>(0, 7);
    k.domain = kind == 0 ? static_cast<KeyDomain>(in.ConsumeIntegral<std::uint8_t>() % 5)
                         : KeyDomain::kMultimodal;
    k.token_offset = in.ConsumeIntegralInRange<std::uint32_t>(0, 80);
    k.bytes = in.ConsumeRandomLengthString(12);
  }
  std::vector<Token> tokens(in.ConsumeIntegralInRange<std::size_t>(0, 72));
  // Few distinct values, so that equal blocks and prefixes occur.
  for (auto& t : tokens) t = in.ConsumeIntegralInRange<Token>(0, 3);
  const std::size_t cut = in.ConsumeIntegralInRange<std::size_t>(0, tokens.size() + 2);
  std::vector<std::size_t> chunks;
  for (std::size_t sum = 0; sum < tokens.size(); sum += chunks.back()) {
    const std::size_t left = tokens.size() - sum;  // all of it once the input runs out
    chunks.push_back(in.remaining_bytes() == 0
                         ? left
                         : std::min(in.ConsumeIntegralInRange<std::size_t>(0, 20), left));
  }

  KVBM_FUZZ_CHECK(throws_usage_error([] { TokenBlockSequence s(0); }),
                  "a block size of 0 did not throw");

  // One extend().
  TokenBlockSequence one(block_size, salt);
  std::vector<ExtraKey> accepted = add_keys(one, keys);
  const std::size_t completed = one.extend(tokens);
  KVBM_FUZZ_CHECK(completed == one.num_blocks(), "extend() miscounted the blocks it completed");
  check_views(one, tokens);
  std::stable_sort(accepted.begin(), accepted.end(), [](const ExtraKey& a, const ExtraKey& b) {
    return a.token_offset < b.token_offset;
  });
  KVBM_FUZZ_CHECK(equal(one.block_keys(), accepted), "block keys not kept sorted (stably)");

  // hash_blocks over the full blocks, with the keys that start in them.
  {
    const std::size_t full = one.num_blocks() * block_size;
    std::vector<ExtraKey> hashed;
    for (const auto& k : accepted) {
      if (k.token_offset < full) hashed.push_back(k);
    }
    std::vector<std::uint64_t> block_hashes;
    std::vector<SequenceHash> sequence_hashes;
    kvbm::hash_blocks(std::span<const Token>(tokens.data(), full), block_size, salt, std::nullopt,
                      block_hashes, sequence_hashes, hashed);
    KVBM_FUZZ_CHECK(
        equal(one.block_hashes(), block_hashes) && equal(one.sequence_hashes(), sequence_hashes),
        "the sequence's hashes are not hash_blocks' hashes");
  }

  // In chunks, and one token at a time.
  {
    TokenBlockSequence chunked(block_size, salt);
    add_keys(chunked, keys);
    std::size_t at = 0;
    for (const std::size_t n : chunks) {
      chunked.extend(std::span<const Token>(tokens).subspan(at, n));
      at += n;
    }
    KVBM_FUZZ_CHECK(same_hashes(chunked, one), "extend() in chunks hashes differently");
    check_views(chunked, tokens);

    TokenBlockSequence appended(block_size, salt);
    add_keys(appended, keys);
    std::size_t blocks = 0;
    for (const Token t : tokens) blocks += appended.append(t);
    KVBM_FUZZ_CHECK(blocks == appended.num_blocks(), "append() miscounted completed blocks");
    KVBM_FUZZ_CHECK(same_hashes(appended, one), "append() hashes differently");
  }

  // extend() of the sequence's own tokens.
  {
    const std::size_t half = tokens.size() / 2;
    std::vector<Token> doubled(tokens.begin(), tokens.begin() + half);
    doubled.insert(doubled.end(), tokens.begin(), tokens.begin() + half);
    TokenBlockSequence self(block_size, salt);
    add_keys(self, keys);
    self.extend(std::span<const Token>(tokens).first(half));
    self.extend(self.tokens());
    TokenBlockSequence plain(block_size, salt);
    add_keys(plain, keys);
    plain.extend(doubled);
    KVBM_FUZZ_CHECK(same_hashes(self, plain), "extend() of its own tokens hashes differently");
    check_views(self, doubled);
  }

  // Misuse leaves the sequence as it was.
  {
    const Snapshot before(one);
    KVBM_FUZZ_CHECK(throws_usage_error([&] { one.truncate(tokens.size() + 1); }),
                    "truncating past the end did not throw");
    KVBM_FUZZ_CHECK(throws_usage_error([&] {
                      one.add_multimodal(std::size_t{std::numeric_limits<std::uint32_t>::max()} + 1,
                                         std::uint64_t{7});
                    }),
                    "an offset over 32 bits did not throw");
    if (one.num_blocks() > 0) {
      const auto offset = in.ConsumeIntegralInRange<std::uint32_t>(
          0, static_cast<std::uint32_t>(one.num_blocks() * block_size - 1));
      KVBM_FUZZ_CHECK(throws_usage_error([&] { one.add_multimodal(offset, "late"); }),
                      "a key in a complete block did not throw");
    }
    KVBM_FUZZ_CHECK(throws_usage_error([&] { one.add_block_key(ExtraKey::lora("x")); }),
                    "a sequence-level key was taken as a block key");
    KVBM_FUZZ_CHECK(Snapshot(one) == before, "a failed call changed the sequence");
    KVBM_FUZZ_CHECK(one.truncate(tokens.size()) == 0 && Snapshot(one) == before,
                    "truncating to size() changed something");
  }

  // truncate(cut), then the same tokens and the dropped keys again. (A cut
  // at size() changes nothing, keys past the end included; checked above.)
  if (cut < tokens.size()) {
    const Snapshot full(one);
    const std::size_t blocks = one.num_blocks();
    const std::size_t dropped = one.truncate(cut);
    KVBM_FUZZ_CHECK(one.num_blocks() == cut / block_size && dropped == blocks - one.num_blocks(),
                    "truncate() kept or counted the wrong blocks");
    check_views(one, std::span<const Token>(tokens).first(cut));
    KVBM_FUZZ_CHECK(std::equal(one.sequence_hashes().begin(), one.sequence_hashes().end(),
                               full.sequence_hashes.begin()),
                    "truncate() changed the blocks it kept");
    std::vector<ExtraKey> kept, lost;
    for (const auto& k : accepted) (k.token_offset < cut ? kept : lost).push_back(k);
    KVBM_FUZZ_CHECK(equal(one.block_keys(), kept), "truncate() kept the wrong keys");
    for (const auto& k : lost) one.add_block_key(k);
    one.extend(std::span<const Token>(tokens).subspan(cut));
    KVBM_FUZZ_CHECK(Snapshot(one) == full, "extending again after truncate() hashes differently");
  }
  return 0;
}
