// kvbm/token_block.h: a full block of tokens together with its hashes.
//
// TokenBlock owns its tokens (a std::vector<Token>) so it can outlive the
// sequence or PartialBlock it came from, travel to another thread, and back a
// content check on a cache hit (REFERENCE: XXH3 can be collided on purpose).
// Its hashes are always those of its tokens: it is built only by
// TokenBlock::compute, PartialBlock::into_token_block and
// TokenBlockSequence::to_token_block, never from caller-supplied hashes.
//
// TokenBlockView is the non-owning counterpart handed out by
// TokenBlockSequence::block(): a span over the sequence's token storage plus
// the hashes, valid until the sequence is next modified or destroyed.
//
// Lifetime: a moved-from TokenBlock holds no tokens and valid() returns false;
// only assignment, valid() and destruction are meaningful on it.
// Thread-safety: plain values; const members may be called concurrently.

#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "kvbm/error.h"
#include "kvbm/hashing.h"
#include "kvbm/sequence_hash.h"

namespace kvbm {

class PartialBlock;
class TokenBlockSequence;

/// A non-owning view of a full block: its tokens and hashes.
class TokenBlockView {
 public:
  /// Builds a view; the caller guarantees the hashes belong to the tokens.
  constexpr TokenBlockView(std::span<const Token> tokens, std::uint64_t block_hash,
                           SequenceHash sequence_hash) noexcept
      : tokens_(tokens), block_hash_(block_hash), sequence_hash_(sequence_hash) {}

  /// Returns the block's tokens.
  [[nodiscard]] constexpr std::span<const Token> tokens() const noexcept { return tokens_; }
  /// Returns the number of tokens (the block size).
  [[nodiscard]] constexpr std::size_t size() const noexcept { return tokens_.size(); }
  /// Returns the block hash (tokens, salt and block keys; no prefix).
  [[nodiscard]] constexpr std::uint64_t block_hash() const noexcept { return block_hash_; }
  /// Returns the sequence hash (the block and its whole prefix).
  [[nodiscard]] constexpr SequenceHash sequence_hash() const noexcept { return sequence_hash_; }

 private:
  std::span<const Token> tokens_;
  std::uint64_t block_hash_;
  SequenceHash sequence_hash_;
};

/// A full block that owns its tokens and knows its block and sequence hashes.
class TokenBlock {
 public:
  /// Hashes `tokens` as the block that follows `parent` (nullopt: the first
  /// block) and returns it. Precondition: tokens is not empty; block_keys as
  /// for kvbm::block_hash().
  [[nodiscard]] static TokenBlock compute(std::vector<Token> tokens, SaltHash salt,
                                          std::optional<SequenceHash> parent,
                                          std::span<const ExtraKey> block_keys = {}) {
    KVBM_CHECK(!tokens.empty(), "TokenBlock::compute: a block needs at least one token");
    const std::uint64_t hash = kvbm::block_hash(tokens, salt, block_keys);
    const SequenceHash seq = kvbm::chain(parent, hash);
    return TokenBlock(std::move(tokens), hash, seq);
  }

  /// Returns false only for a moved-from block.
  [[nodiscard]] bool valid() const noexcept { return !tokens_.empty(); }
  /// Returns the block's tokens.
  [[nodiscard]] std::span<const Token> tokens() const noexcept { return tokens_; }
  /// Returns the number of tokens (the block size).
  [[nodiscard]] std::size_t size() const noexcept { return tokens_.size(); }
  /// Returns the block hash (tokens, salt and block keys; no prefix).
  [[nodiscard]] std::uint64_t block_hash() const noexcept { return block_hash_; }
  /// Returns the sequence hash (the block and its whole prefix).
  [[nodiscard]] SequenceHash sequence_hash() const noexcept { return sequence_hash_; }
  /// Returns a non-owning view, valid while this block lives unchanged.
  [[nodiscard]] TokenBlockView view() const noexcept {
    return {tokens_, block_hash_, sequence_hash_};
  }
  /// Returns true when `tokens` equal this block's tokens: the content check
  /// to run on a hash hit when hash collisions must be ruled out.
  [[nodiscard]] bool holds_tokens(std::span<const Token> tokens) const noexcept {
    return std::ranges::equal(tokens_, tokens);
  }

  friend bool operator==(const TokenBlock&, const TokenBlock&) = default;

 private:
  friend class PartialBlock;
  friend class TokenBlockSequence;

  TokenBlock(std::vector<Token> tokens, std::uint64_t block_hash,
             SequenceHash sequence_hash) noexcept
      : tokens_(std::move(tokens)), block_hash_(block_hash), sequence_hash_(sequence_hash) {}

  std::vector<Token> tokens_;
  std::uint64_t block_hash_;
  SequenceHash sequence_hash_;
};

}  // namespace kvbm
