// kvbm/token_block_sequence.h: a request's tokens cut into hashed blocks.
//
// A TokenBlockSequence holds every token of one request in a single vector and
// views it as consecutive blocks of `block_size` tokens. A block is hashed the
// moment it fills (kvbm/hashing.h): its block hash is seeded with the
// sequence's SaltHash and its sequence hash chains to the previous block, so
// sequence_hashes() is the list a prefix-cache lookup needs. The last, not yet
// full block is the tail: its tokens are kept but not hashed.
//
//   extend(prompt)     hashes every block the prompt fills in one out-of-line
//                      call, reading whole blocks straight from the input
//                      and copying them into the sequence in the same pass;
//   append(token)      decode: one token, hashing the block it completes;
//   truncate(n)        rolls back rejected speculative tokens: blocks past the
//                      cut are dropped, a block cut in two becomes the tail.
//
// Block-level extra keys (multimodal content) are attached by token offset in
// the sequence with add_multimodal() / add_block_key() before the block that
// holds that offset fills; the key joins that block's hash, and through the
// chain every later sequence hash. Keys are kept sorted by offset; a key whose
// offset is at or past a truncation cut is dropped with the tokens.
//
// Errors: misuse throws UsageError; a call that throws leaves the sequence as
// it was. Lifetime: spans and views returned by accessors are valid until the
// next non-const call or destruction. Thread-safety: none inside; one thread may
// modify a sequence at a time, const calls may run concurrently with each other.

#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "kvbm/error.h"
#include "kvbm/hashing.h"
#include "kvbm/sequence_hash.h"
#include "kvbm/token_block.h"

namespace kvbm {
namespace detail {

/// An allocator whose value-initializing resize leaves trivial elements
/// uninitialized, so a vector can grow and then be filled in one pass.
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  using std::allocator<T>::allocator;
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  }
};

}  // namespace detail

/// The tokens of one request, cut into blocks hashed as they fill.
class TokenBlockSequence {
 public:
  /// Creates an empty sequence. Precondition: block_size > 0.
  explicit TokenBlockSequence(std::uint32_t block_size, SaltHash salt = kNoSalt);

  /// Appends prompt tokens; returns how many blocks became complete (and were
  /// hashed). `tokens` may be a view of this sequence's own tokens.
  std::size_t extend(std::span<const Token> tokens);

  /// Appends one decoded token; returns 1 if it completed a block, else 0.
  std::size_t append(Token token) {
    tokens_.push_back(token);
    if (tokens_.size() - hashed_tokens_ < block_size_) return 0;
    return complete_tail_block();
  }

  /// Keeps the first `new_token_count` tokens; returns how many complete
  /// blocks were dropped. A cut inside a block makes that block the tail
  /// again; block keys at or past the cut are dropped. Truncating to size()
  /// changes nothing: keys attached for tokens not yet seen stay.
  /// Precondition: new_token_count <= total_tokens().
  std::size_t truncate(std::size_t new_token_count);

  /// Drops every token, block and block key; keeps block size and salt.
  void clear() noexcept;

  /// Reserves storage for `token_count` tokens and their blocks.
  void reserve(std::size_t token_count);

  /// Attaches a multimodal item starting at `token_offset` (counted from the
  /// sequence's first token) identified by a 64-bit content hash.
  /// Precondition: the block holding token_offset is not complete yet.
  void add_multimodal(std::size_t token_offset, std::uint64_t content_hash);
  /// Attaches a multimodal item identified by arbitrary content bytes.
  void add_multimodal(std::size_t token_offset, std::string_view content_id);
  /// Attaches a block-level key; key.token_offset counts from the sequence's
  /// first token. Preconditions: the key is block-level and the block holding
  /// its offset is not complete yet.
  void add_block_key(ExtraKey key);

  /// Returns the number of tokens per block.
  [[nodiscard]] std::uint32_t block_size() const noexcept { return block_size_; }
  /// Returns the salt every block hash is seeded with.
  [[nodiscard]] SaltHash salt() const noexcept { return salt_; }
  /// Returns the total number of tokens, complete blocks and tail together.
  [[nodiscard]] std::size_t total_tokens() const noexcept { return tokens_.size(); }
  /// Returns the number of complete (hashed) blocks.
  [[nodiscard]] std::size_t num_blocks() const noexcept { return sequence_hashes_.size(); }
  /// Returns every token.
  [[nodiscard]] std::span<const Token> tokens() const noexcept { return tokens_; }
  /// Returns the tokens of the tail (not yet full) block; empty at a block boundary.
  [[nodiscard]] std::span<const Token> tail_tokens() const noexcept {
    return std::span<const Token>(tokens_).subspan(hashed_tokens_);
  }
  /// Returns the tokens of complete block `index`. Precondition: index < num_blocks().
  [[nodiscard]] std::span<const Token> block_tokens(std::size_t index) const {
    check_block_index(index, "block_tokens");
    return std::span<const Token>(tokens_).subspan(index * block_size_, block_size_);
  }
  /// Returns complete block `index` as a view. Precondition: index < num_blocks().
  [[nodiscard]] TokenBlockView block(std::size_t index) const {
    check_block_index(index, "block");
    return {std::span<const Token>(tokens_).subspan(index * block_size_, block_size_),
            block_hashes_[index], sequence_hashes_[index]};
  }
  /// Returns an owning copy of complete block `index`. Precondition: index < num_blocks().
  [[nodiscard]] TokenBlock to_token_block(std::size_t index) const {
    const TokenBlockView v = block(index);
    return TokenBlock(std::vector<Token>(v.tokens().begin(), v.tokens().end()), v.block_hash(),
                      v.sequence_hash());
  }
  /// Returns the block hash of every complete block, in order.
  [[nodiscard]] std::span<const std::uint64_t> block_hashes() const noexcept {
    return block_hashes_;
  }
  /// Returns the sequence hash of every complete block, in order.
  [[nodiscard]] std::span<const SequenceHash> sequence_hashes() const noexcept {
    return sequence_hashes_;
  }
  /// Returns the sequence hash of the last complete block; nullopt if none.
  [[nodiscard]] std::optional<SequenceHash> last_sequence_hash() const noexcept {
    if (sequence_hashes_.empty()) return std::nullopt;
    return sequence_hashes_.back();
  }
  /// Returns the block-level keys, sorted by offset from the first token.
  [[nodiscard]] std::span<const ExtraKey> block_keys() const noexcept { return block_keys_; }

 private:
  // Hashes the tail block, which the last append() filled; returns 1.
  std::size_t complete_tail_block();
  // Hashes the whole blocks `src`, which start at token `first_token` of the
  // sequence, chaining them to the last hash; copies them to `copy_to` when
  // not null (else they are already stored there).
  void hash_span(std::span<const Token> src, Token* copy_to, std::size_t first_token);
  void check_block_index(std::size_t index, const char* caller) const {
    KVBM_CHECK(index < num_blocks(), "TokenBlockSequence::", caller, ": block ", index,
               " is not complete; the sequence has ", num_blocks(), " complete blocks");
  }

  std::uint32_t block_size_;
  SaltHash salt_;
  std::vector<Token, detail::DefaultInitAllocator<Token>> tokens_;  // resize does not zero
  std::vector<std::uint64_t> block_hashes_;                         // one per complete block
  std::vector<SequenceHash> sequence_hashes_;                       // one per complete block
  std::vector<ExtraKey> block_keys_;  // sorted by token_offset (absolute)
  std::size_t hashed_tokens_ = 0;     // num_blocks() * block_size_
};

}  // namespace kvbm
