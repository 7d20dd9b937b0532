#include "kvbm/partial_block.h"

#include <algorithm>
#include <utility>

namespace kvbm {

using State = PartialBlockState;

PartialBlock::PartialBlock(std::uint32_t block_size) : block_size_(block_size) {
  KVBM_CHECK(block_size > 0, "PartialBlock: block_size must be greater than 0");
}

PartialBlock::PartialBlock(PartialBlock&& other) noexcept
    : block_size_(other.block_size_),
      state_(other.state_),
      salt_(other.salt_),
      parent_(other.parent_),
      block_keys_(std::move(other.block_keys_)),
      tokens_(std::move(other.tokens_)),
      computed_(other.computed_),
      block_hash_(other.block_hash_),
      sequence_hash_(other.sequence_hash_) {
  other.reset();
}

PartialBlock& PartialBlock::operator=(PartialBlock&& other) noexcept {
  if (this != &other) {
    block_size_ = other.block_size_;
    state_ = other.state_;
    salt_ = other.salt_;
    parent_ = other.parent_;
    block_keys_ = std::move(other.block_keys_);
    tokens_ = std::move(other.tokens_);
    computed_ = other.computed_;
    block_hash_ = other.block_hash_;
    sequence_hash_ = other.sequence_hash_;
    other.reset();
  }
  return *this;
}

void PartialBlock::reset() noexcept {
  state_ = State::kEmpty;
  salt_ = kNoSalt;
  parent_.reset();
  block_keys_.clear();
  tokens_.clear();
  computed_ = 0;
  block_hash_ = 0;
  sequence_hash_ = SequenceHash();
}

void PartialBlock::fail(std::string_view call, std::string_view hint) const {
  detail::throw_usage_error(
      __FILE__, __LINE__,
      detail::concat("PartialBlock::", call, "() called in state ", to_string(state_), ": ", hint));
}

void PartialBlock::initialize(SaltHash salt, std::optional<SequenceHash> parent,
                              std::vector<ExtraKey> block_keys) {
  if (state_ != State::kEmpty) {
    fail(
        "initialize",
        "only an Empty block can be initialized; a block is Empty when constructed, moved from, or "
        "after std::move(block).into_token_block()");
  }
  for (const ExtraKey& key : block_keys) {
    KVBM_CHECK(
        is_block_level(key.domain),
        "PartialBlock::initialize: got a salt or extra key of the wrong kind: a ",
        to_string(key.domain),
        " key applies to the whole sequence; fold it into the SaltHash with SaltBuilder instead");
    KVBM_CHECK(key.token_offset < block_size_, "PartialBlock::initialize: a ",
               to_string(key.domain), " key at token offset ", key.token_offset,
               " lies outside a block of ", block_size_,
               " tokens; offsets count from the block's first token");
  }
  std::stable_sort(block_keys.begin(), block_keys.end(), [](const ExtraKey& a, const ExtraKey& b) {
    return a.token_offset < b.token_offset;
  });
  salt_ = salt;
  parent_ = parent;
  block_keys_ = std::move(block_keys);
  tokens_.reserve(block_size_);
  state_ = State::kPartial;
}

std::size_t PartialBlock::add_tokens(std::span<const Token> tokens) {
  switch (state_) {
    case State::kPartial:
    case State::kReadyForScheduling:
      break;
    case State::kEmpty:
      fail("add_tokens", "call initialize() first");
    case State::kInflight:
      fail("add_tokens",
           "its pending tokens are being computed; wait for compute_done() or call "
           "cancel_schedule()");
    case State::kComplete:
      fail("add_tokens",
           "the block is full; take it with std::move(block).into_token_block() and start the next "
           "block");
  }
  const std::size_t accepted = std::min(tokens.size(), remaining());
  if (accepted == 0) return 0;
  tokens_.insert(tokens_.end(), tokens.begin(),
                 tokens.begin() + static_cast<std::ptrdiff_t>(accepted));
  state_ = State::kReadyForScheduling;
  return accepted;
}

void PartialBlock::schedule_compute() {
  switch (state_) {
    case State::kReadyForScheduling:
      break;
    case State::kEmpty:
      fail("schedule_compute", "call initialize() and add_tokens() first");
    case State::kPartial:
      fail("schedule_compute", "no tokens are pending; add_tokens() first");
    case State::kInflight:
      fail("schedule_compute", "it is already scheduled; wait for compute_done()");
    case State::kComplete:
      fail("schedule_compute", "the block is full and computed; nothing is left to compute");
  }
  state_ = State::kInflight;
}

std::size_t PartialBlock::cancel_schedule() {
  switch (state_) {
    case State::kReadyForScheduling:
    case State::kInflight:
      break;
    case State::kEmpty:
      fail("cancel_schedule", "nothing is pending; the block is not initialized");
    case State::kPartial:
      fail("cancel_schedule", "no tokens are pending, so there is nothing to cancel");
    case State::kComplete:
      fail("cancel_schedule", "the block is already computed; nothing can be cancelled");
  }
  const std::size_t discarded = tokens_.size() - computed_;
  tokens_.resize(computed_);
  state_ = State::kPartial;
  return discarded;
}

void PartialBlock::compute_done() {
  switch (state_) {
    case State::kInflight:
      break;
    case State::kEmpty:
      fail("compute_done", "the block is not initialized; nothing was computed");
    case State::kPartial:
      fail("compute_done", "nothing is in flight; add_tokens() and schedule_compute() first");
    case State::kReadyForScheduling:
      fail("compute_done",
           "its pending tokens were never scheduled; call schedule_compute() first");
    case State::kComplete:
      fail("compute_done", "the block is already complete");
  }
  if (tokens_.size() < block_size_) {
    computed_ = tokens_.size();
    state_ = State::kPartial;
    return;
  }
  // Hash before changing anything so a failure leaves the block Inflight.
  const std::uint64_t hash = kvbm::block_hash(tokens_, salt_, block_keys_);
  const SequenceHash seq = kvbm::chain(parent_, hash);
  block_hash_ = hash;
  sequence_hash_ = seq;
  computed_ = tokens_.size();
  state_ = State::kComplete;
}

TokenBlock PartialBlock::into_token_block() && {
  if (state_ != State::kComplete) {
    fail("into_token_block", detail::concat("only a Complete block becomes a TokenBlock; it holds ",
                                            computed_, " computed of ", block_size_, " tokens"));
  }
  TokenBlock block(std::move(tokens_), block_hash_, sequence_hash_);
  reset();
  return block;
}

std::uint64_t PartialBlock::block_hash() const {
  if (state_ != State::kComplete)
    fail("block_hash", "hashes are known only once the block is Complete");
  return block_hash_;
}

SequenceHash PartialBlock::sequence_hash() const {
  if (state_ != State::kComplete)
    fail("sequence_hash", "hashes are known only once the block is Complete");
  return sequence_hash_;
}

}  // namespace kvbm
