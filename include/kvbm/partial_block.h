// kvbm/partial_block.h: the token-filling life of a sequence's tail block.
//
// A PartialBlock collects the tokens of one block while the model computes
// their KV, following this state machine:
//
//   Empty --initialize--> Partial --add_tokens (accepted > 0)--> ReadyForScheduling
//   ReadyForScheduling --add_tokens--> ReadyForScheduling
//   ReadyForScheduling --schedule_compute--> Inflight
//   ReadyForScheduling | Inflight --cancel_schedule--> Partial (pending tokens discarded)
//   Inflight --compute_done--> Complete (block full) | Partial (space remains)
//   Complete --std::move(b).into_token_block()--> TokenBlock; b is Empty again
//
// Tokens are "computed" once a compute_done() covered them and "pending" while
// they wait for or are in a compute; cancel_schedule() throws the pending ones
// away. A Complete block has its block hash and sequence hash (kvbm/hashing.h)
// computed from its tokens, the salt and the parent given to initialize().
//
// Any call that the current state does not allow throws UsageError naming the
// call, the state and what to do instead; a failed call changes nothing.
//
// Lifetime: move-only. A moved-from PartialBlock, and one whose tokens were
// taken by into_token_block(), is Empty (and can be initialized again).
// Thread-safety: none; one thread at a time.

#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "kvbm/error.h"
#include "kvbm/hashing.h"
#include "kvbm/sequence_hash.h"
#include "kvbm/token_block.h"

namespace kvbm {

/// The states of a PartialBlock.
enum class PartialBlockState : std::uint8_t {
  kEmpty,               ///< Not initialized; holds nothing.
  kPartial,             ///< Initialized; every token it holds is computed; space remains.
  kReadyForScheduling,  ///< Holds pending (uncomputed) tokens.
  kInflight,            ///< Its pending tokens are being computed.
  kComplete,            ///< Full and computed; hashes known.
};

/// Returns the state's name, e.g. "ReadyForScheduling".
[[nodiscard]] constexpr std::string_view to_string(PartialBlockState state) noexcept {
  switch (state) {
    case PartialBlockState::kEmpty:
      return "Empty";
    case PartialBlockState::kPartial:
      return "Partial";
    case PartialBlockState::kReadyForScheduling:
      return "ReadyForScheduling";
    case PartialBlockState::kInflight:
      return "Inflight";
    case PartialBlockState::kComplete:
      return "Complete";
  }
  return "Unknown";
}

/// The tail block of a sequence while its tokens are added and computed.
class PartialBlock {
 public:
  /// Creates an Empty block of `block_size` tokens. Precondition: block_size > 0.
  explicit PartialBlock(std::uint32_t block_size);

  PartialBlock(const PartialBlock&) = delete;
  PartialBlock& operator=(const PartialBlock&) = delete;
  /// Moves the block; `other` is left Empty.
  PartialBlock(PartialBlock&& other) noexcept;
  /// Moves the block; `other` is left Empty.
  PartialBlock& operator=(PartialBlock&& other) noexcept;
  ~PartialBlock() = default;

  /// Empty -> Partial: sets the salt, the parent (nullopt for a sequence's
  /// first block) and block-level keys (offsets within this block).
  /// Preconditions: state Empty; keys are block-level with offset < block_size.
  void initialize(SaltHash salt, std::optional<SequenceHash> parent,
                  std::vector<ExtraKey> block_keys = {});

  /// Adds up to remaining() tokens and returns how many it accepted; when it
  /// accepted any, the state becomes ReadyForScheduling.
  /// Precondition: state Partial or ReadyForScheduling.
  std::size_t add_tokens(std::span<const Token> tokens);

  /// ReadyForScheduling -> Inflight: the pending tokens go to compute.
  void schedule_compute();

  /// ReadyForScheduling or Inflight -> Partial: discards the pending tokens
  /// and returns how many were discarded.
  std::size_t cancel_schedule();

  /// Inflight -> Complete when the block is full, else -> Partial: the
  /// pending tokens are now computed. Computes the hashes on Complete.
  void compute_done();

  /// Complete -> TokenBlock (this block becomes Empty). Precondition: state Complete.
  [[nodiscard]] TokenBlock into_token_block() &&;
  /// Use std::move(block).into_token_block(): taking the tokens ends the block.
  TokenBlock into_token_block() & = delete;

  /// Returns the current state.
  [[nodiscard]] PartialBlockState state() const noexcept { return state_; }
  /// Returns the number of tokens a full block holds.
  [[nodiscard]] std::uint32_t block_size() const noexcept { return block_size_; }
  /// Returns every token held, computed ones first.
  [[nodiscard]] std::span<const Token> tokens() const noexcept { return tokens_; }
  /// Returns the number of tokens held.
  [[nodiscard]] std::size_t size() const noexcept { return tokens_.size(); }
  /// Returns the number of computed tokens.
  [[nodiscard]] std::size_t computed_tokens() const noexcept { return computed_; }
  /// Returns the pending (uncomputed) tokens.
  [[nodiscard]] std::span<const Token> pending_tokens() const noexcept {
    return std::span<const Token>(tokens_).subspan(computed_);
  }
  /// Returns how many more tokens fit.
  [[nodiscard]] std::size_t remaining() const noexcept { return block_size_ - tokens_.size(); }
  /// Returns the salt given to initialize() (kNoSalt while Empty).
  [[nodiscard]] SaltHash salt() const noexcept { return salt_; }
  /// Returns the parent given to initialize().
  [[nodiscard]] std::optional<SequenceHash> parent() const noexcept { return parent_; }
  /// Returns the block hash. Precondition: state Complete.
  [[nodiscard]] std::uint64_t block_hash() const;
  /// Returns the sequence hash. Precondition: state Complete.
  [[nodiscard]] SequenceHash sequence_hash() const;

 private:
  [[noreturn]] void fail(std::string_view call, std::string_view hint) const;
  void reset() noexcept;

  std::uint32_t block_size_;
  PartialBlockState state_ = PartialBlockState::kEmpty;
  SaltHash salt_;
  std::optional<SequenceHash> parent_;
  std::vector<ExtraKey> block_keys_;
  std::vector<Token> tokens_;  // computed tokens first, then pending ones
  std::size_t computed_ = 0;
  std::uint64_t block_hash_ = 0;
  SequenceHash sequence_hash_;
};

}  // namespace kvbm
