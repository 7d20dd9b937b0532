#include "kvbm/token_block_sequence.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>

namespace kvbm {
namespace {

// Copies tokens in pieces of at most 2 KiB; see copy_tokens in hashing.cpp
// for why (slow `rep movsb` on 4 KiB-aliased buffers).
void copy_in_pieces(const Token* src, std::size_t count, Token* dst) noexcept {
  constexpr std::size_t kPiece = 2048 / sizeof(Token);
  while (count > kPiece) {
    std::copy_n(src, kPiece, dst);
    src += kPiece;
    dst += kPiece;
    count -= kPiece;
  }
  std::copy_n(src, count, dst);
}

}  // namespace

TokenBlockSequence::TokenBlockSequence(std::uint32_t block_size, SaltHash salt)
    : block_size_(block_size), salt_(salt) {
  KVBM_CHECK(block_size > 0, "TokenBlockSequence: block_size must be greater than 0");
}

std::size_t TokenBlockSequence::extend(std::span<const Token> tokens) {
  if (tokens.empty()) return 0;
  if (!tokens_.empty() && std::less_equal<const Token*>()(tokens_.data(), tokens.data()) &&
      std::less<const Token*>()(tokens.data(), tokens_.data() + tokens_.size())) {
    // The input is (part of) this sequence's own storage, which may move on resize.
    const std::vector<Token> copy(tokens.begin(), tokens.end());
    return extend(copy);
  }
  const std::size_t old_tokens = tokens_.size();
  const std::size_t old_blocks = num_blocks();
  const std::size_t tail = old_tokens - hashed_tokens_;
  tokens_.resize(old_tokens + tokens.size());  // uninitialized; filled below
  Token* const dst = tokens_.data() + old_tokens;
  try {
    // 1. Top up the tail block; hash it if that fills it.
    std::size_t taken = 0;
    if (tail != 0) {
      taken = std::min<std::size_t>(block_size_ - tail, tokens.size());
      copy_in_pieces(tokens.data(), taken, dst);
      if (tail + taken == block_size_) {
        hash_span({tokens_.data() + hashed_tokens_, block_size_}, nullptr, hashed_tokens_);
      }
    }
    // 2. Whole blocks: hashed straight from the input and copied in the same pass.
    const std::span<const Token> rest = tokens.subspan(taken);
    const std::size_t whole = rest.size() / block_size_ * block_size_;
    if (whole != 0) hash_span(rest.first(whole), dst + taken, old_tokens + taken);
    // 3. The new tail.
    copy_in_pieces(rest.data() + whole, rest.size() - whole, dst + taken + whole);
  } catch (...) {  // undo, then rethrow whatever it was: nothing is swallowed
    tokens_.resize(old_tokens);
    block_hashes_.resize(old_blocks);
    sequence_hashes_.resize(old_blocks);
    hashed_tokens_ = old_blocks * block_size_;
    throw;
  }
  return num_blocks() - old_blocks;
}

std::size_t TokenBlockSequence::complete_tail_block() {
  const std::span<const Token> block(tokens_.data() + hashed_tokens_, block_size_);
  try {
    if (block_keys_.empty()) {
      // Decode completes one block at a time: skip the batch machinery.
      const std::uint64_t hash = block_hash(block, salt_);
      const SequenceHash seq = chain(last_sequence_hash(), hash);
      block_hashes_.push_back(hash);
      try {
        sequence_hashes_.push_back(seq);
      } catch (...) {  // undo, then rethrow: nothing is swallowed
        block_hashes_.pop_back();
        throw;
      }
      hashed_tokens_ += block_size_;
    } else {
      hash_span(block, nullptr, hashed_tokens_);
    }
  } catch (...) {        // undo, then rethrow: nothing is swallowed
    tokens_.pop_back();  // append() changes nothing when it fails
    throw;
  }
  return 1;
}

void TokenBlockSequence::hash_span(std::span<const Token> src, Token* copy_to,
                                   std::size_t first_token) {
  // Block keys that start inside these blocks, rebased to their first token.
  std::vector<ExtraKey> keys;
  if (!block_keys_.empty()) {
    const std::size_t end = first_token + src.size();
    auto by_offset = [](const ExtraKey& key, std::size_t offset) {
      return key.token_offset < offset;
    };
    auto first = std::lower_bound(block_keys_.begin(), block_keys_.end(), first_token, by_offset);
    auto last = std::lower_bound(first, block_keys_.end(), end, by_offset);
    for (auto it = first; it != last; ++it) {
      ExtraKey rebased = *it;
      rebased.token_offset = static_cast<std::uint32_t>(it->token_offset - first_token);
      keys.push_back(std::move(rebased));
    }
  }
  if (copy_to != nullptr) {
    detail::hash_blocks_and_copy(src, copy_to, block_size_, salt_, last_sequence_hash(),
                                 block_hashes_, sequence_hashes_, keys);
  } else {
    hash_blocks(src, block_size_, salt_, last_sequence_hash(), block_hashes_, sequence_hashes_,
                keys);
  }
  hashed_tokens_ = num_blocks() * block_size_;
}

std::size_t TokenBlockSequence::truncate(std::size_t new_token_count) {
  KVBM_CHECK(new_token_count <= tokens_.size(), "TokenBlockSequence::truncate: cannot truncate to ",
             new_token_count, " tokens, the sequence holds only ", tokens_.size(),
             "; truncate rolls tokens back, use extend() or append() to add tokens");
  if (new_token_count == tokens_.size()) return 0;
  const std::size_t keep_blocks = new_token_count / block_size_;
  const std::size_t kept = std::min(keep_blocks, num_blocks());
  const std::size_t dropped = num_blocks() - kept;
  tokens_.resize(new_token_count);
  block_hashes_.resize(kept);
  sequence_hashes_.resize(kept);
  hashed_tokens_ = kept * block_size_;
  std::erase_if(block_keys_,
                [&](const ExtraKey& key) { return key.token_offset >= new_token_count; });
  return dropped;
}

void TokenBlockSequence::clear() noexcept {
  tokens_.clear();
  block_hashes_.clear();
  sequence_hashes_.clear();
  block_keys_.clear();
  hashed_tokens_ = 0;
}

void TokenBlockSequence::reserve(std::size_t token_count) {
  tokens_.reserve(token_count);
  block_hashes_.reserve(token_count / block_size_);
  sequence_hashes_.reserve(token_count / block_size_);
}

void TokenBlockSequence::add_multimodal(std::size_t token_offset, std::uint64_t content_hash) {
  KVBM_CHECK(token_offset <= std::numeric_limits<std::uint32_t>::max(),
             "TokenBlockSequence::add_multimodal: token offset ", token_offset,
             " does not fit in 32 bits");
  add_block_key(ExtraKey::multimodal(static_cast<std::uint32_t>(token_offset), content_hash));
}

void TokenBlockSequence::add_multimodal(std::size_t token_offset, std::string_view content_id) {
  KVBM_CHECK(token_offset <= std::numeric_limits<std::uint32_t>::max(),
             "TokenBlockSequence::add_multimodal: token offset ", token_offset,
             " does not fit in 32 bits");
  add_block_key(ExtraKey::multimodal(static_cast<std::uint32_t>(token_offset), content_id));
}

void TokenBlockSequence::add_block_key(ExtraKey key) {
  KVBM_CHECK(is_block_level(key.domain),
             "TokenBlockSequence::add_block_key: got a salt or extra key of the wrong kind: a ",
             to_string(key.domain),
             " key applies to the whole sequence; fold it into the SaltHash with SaltBuilder and "
             "pass that "
             "to the constructor");
  KVBM_CHECK(key.token_offset >= hashed_tokens_, "TokenBlockSequence: cannot attach a ",
             to_string(key.domain), " key at token offset ", key.token_offset,
             ": the block holding it (block ", key.token_offset / block_size_,
             ") is already complete and hashed; attach block keys before "
             "extending the sequence past their block");
  auto pos = std::upper_bound(
      block_keys_.begin(), block_keys_.end(), key.token_offset,
      [](std::uint32_t offset, const ExtraKey& k) { return offset < k.token_offset; });
  block_keys_.insert(pos, std::move(key));
}

}  // namespace kvbm
