// src/router/block_index.cpp: the router's block index (src/router/block_index.h).

#include "router/block_index.h"

#include <algorithm>
#include <bit>

namespace kvbm::router::impl {

namespace {

/// Where tier `t`'s counters sit in WalkCounters::s_ (TierArray order).
constexpr std::size_t slot_of(TierId t) noexcept { return TierArray<int>::index(t); }

/// Adds one to the bit-sliced counters `s` of every lane set in `m`.
/// Precondition: no lane's count reaches 2^slices (the caller sizes slices).
inline void add_lanes(std::uint64_t* s, std::uint64_t m) noexcept {
  for (std::size_t k = 0; m != 0; ++k) {
    const std::uint64_t carry = s[k] & m;
    s[k] ^= m;
    m = carry;
  }
}

}  // namespace

void WalkCounters::unpack() {
  per_lane_.assign(words_ * 64, TierBlockCounts{});
  for (const TierId t : kTierIds) {
    for (std::size_t w = 0; w < words_; ++w) {
      const std::uint64_t* s = s_.data() + ((slot_of(t) * words_) + w) * slices_;
      for (std::size_t k = 0; k < slices_; ++k) {
        for (std::uint64_t m = s[k]; m != 0; m &= m - 1) {
          per_lane_[(w * 64) + static_cast<std::size_t>(std::countr_zero(m))][t] += std::size_t{1}
                                                                                    << k;
        }
      }
    }
  }
}

BlockIndex::BlockIndex(TierArray<bool> shared) : shared_(shared) {
  local_index_.fill(-1);
  for (const TierId t : kTierIds) {
    if (!shared_[t]) {
      local_index_[t] = static_cast<int>(local_.size());
      local_.push_back(t);
    }
  }
}

void BlockIndex::reserve_lanes(std::size_t lanes) {
  if (lane_blocks_.size() < lanes) lane_blocks_.resize(lanes);
  const std::size_t words = std::max<std::size_t>(1, (lanes + 63) / 64);
  if (words <= words_) return;
  // Re-lay every row: tier i's words move from i * old to i * new.
  const std::size_t old_words = words_;
  const std::size_t old_stride = stride();
  const std::size_t n_rows = old_stride == 0 ? 0 : rows_.size() / old_stride;
  words_ = words;
  std::vector<std::uint64_t> rows(n_rows * stride(), 0);
  for (std::size_t r = 0; r < n_rows; ++r) {
    for (std::size_t i = 0; i < local_.size(); ++i) {
      std::copy_n(rows_.data() + (r * old_stride) + (i * old_words), old_words,
                  rows.data() + (r * stride()) + (i * words_));
    }
  }
  rows_ = std::move(rows);
}

std::uint32_t BlockIndex::new_row() {
  if (!free_rows_.empty()) {
    const std::uint32_t row = free_rows_.back();
    free_rows_.pop_back();
    return row;  // released rows are all zero
  }
  const auto row = static_cast<std::uint32_t>(stride() == 0 ? 0 : rows_.size() / stride());
  rows_.resize(rows_.size() + stride(), 0);
  return row;
}

bool BlockIndex::row_empty(std::uint32_t row) const noexcept {
  const std::uint64_t* p = row_ptr(row);
  return std::all_of(p, p + stride(), [](std::uint64_t w) { return w == 0; });
}

void BlockIndex::release_row(std::uint32_t row) { free_rows_.push_back(row); }

bool BlockIndex::store_local(std::uint32_t lane, TierId tier, std::uint64_t hash) {
  const int li = local_index(tier);
  if (li < 0) return false;
  BlockSlot& slot = table_.find_or_insert(hash);
  if (slot.row == kNoRow) slot.row = new_row();
  std::uint64_t& word = row_ptr(slot.row)[(static_cast<std::size_t>(li) * words_) + (lane / 64)];
  const std::uint64_t bit = std::uint64_t{1} << (lane % 64);
  if ((word & bit) != 0) return false;
  word |= bit;
  ++lane_blocks_[lane][tier];
  ++tier_blocks_[tier];
  return true;
}

bool BlockIndex::remove_local(std::uint32_t lane, TierId tier, std::uint64_t hash) {
  const int li = local_index(tier);
  if (li < 0) return false;
  BlockSlot* slot = table_.find(hash);
  if (slot == nullptr || slot->row == kNoRow) return false;
  std::uint64_t& word = row_ptr(slot->row)[(static_cast<std::size_t>(li) * words_) + (lane / 64)];
  const std::uint64_t bit = std::uint64_t{1} << (lane % 64);
  if ((word & bit) == 0) return false;
  word &= ~bit;
  --lane_blocks_[lane][tier];
  --tier_blocks_[tier];
  if (row_empty(slot->row)) {
    release_row(slot->row);
    slot->row = kNoRow;
    if (slot->shared == 0) table_.erase(hash);
  }
  return true;
}

bool BlockIndex::store_shared(TierId tier, std::uint64_t hash) {
  if (!is_shared(tier)) return false;
  BlockSlot& slot = table_.find_or_insert(hash);
  const auto bit = static_cast<std::uint8_t>(1U << static_cast<unsigned>(tier));
  if ((slot.shared & bit) != 0) return false;
  slot.shared |= bit;
  ++tier_blocks_[tier];
  return true;
}

bool BlockIndex::remove_shared(TierId tier, std::uint64_t hash) {
  if (!is_shared(tier)) return false;
  BlockSlot* slot = table_.find(hash);
  const auto bit = static_cast<std::uint8_t>(1U << static_cast<unsigned>(tier));
  if (slot == nullptr || (slot->shared & bit) == 0) return false;
  slot->shared &= static_cast<std::uint8_t>(~bit);
  --tier_blocks_[tier];
  if (slot->shared == 0 && slot->row == kNoRow) table_.erase(hash);
  return true;
}

void BlockIndex::clear_lane(std::uint32_t lane) {
  if (lane >= lane_blocks_.size()) return;
  TierBlockCounts& mine = lane_blocks_[lane];
  if (total(mine) == 0) return;
  const std::size_t w = lane / 64;
  const std::uint64_t bit = std::uint64_t{1} << (lane % 64);
  std::vector<std::uint64_t> emptied;  // keys to erase after the pass (erasing moves slots)
  table_.for_each([&](BlockSlot& slot) {
    if (slot.row == kNoRow) return;
    std::uint64_t* row = row_ptr(slot.row);
    bool touched = false;
    for (std::size_t i = 0; i < local_.size(); ++i) {
      std::uint64_t& word = row[(i * words_) + w];
      if ((word & bit) != 0) {
        word &= ~bit;
        touched = true;
      }
    }
    if (touched && row_empty(slot.row)) {
      release_row(slot.row);
      slot.row = kNoRow;
      if (slot.shared == 0) emptied.push_back(slot.key);
    }
  });
  for (std::uint64_t key : emptied) table_.erase(key);
  for (const TierId t : kTierIds) {
    tier_blocks_[t] -= mine[t];
    mine[t] = 0;
  }
}

bool BlockIndex::holds(std::uint32_t lane, std::uint64_t hash, TierId tier) const noexcept {
  const BlockSlot* slot = table_.find(hash);
  if (slot == nullptr) return false;
  if (is_shared(tier)) return (slot->shared & (1U << static_cast<unsigned>(tier))) != 0;
  const int li = local_index(tier);
  if (li < 0 || slot->row == kNoRow || lane / 64 >= words_) return false;
  const std::uint64_t word =
      row_ptr(slot->row)[(static_cast<std::size_t>(li) * words_) + (lane / 64)];
  return ((word >> (lane % 64)) & 1U) != 0;
}

TierBlockCounts BlockIndex::lane_blocks(std::uint32_t lane) const noexcept {
  return lane < lane_blocks_.size() ? lane_blocks_[lane] : TierBlockCounts{};
}

std::size_t BlockIndex::bytes() const noexcept {
  return table_.bytes() + (rows_.capacity() * sizeof(std::uint64_t)) +
         (free_rows_.capacity() * sizeof(std::uint32_t));
}

void BlockIndex::walk(std::span<const std::uint64_t> hashes, std::span<std::uint64_t> alive,
                      WalkCounters& out) const {
  const std::size_t words = words_;
  out.words_ = words;
  // A lane counts at most hashes.size() blocks per tier: that many bits, plus one.
  out.slices_ = static_cast<std::size_t>(std::bit_width(hashes.size())) + 1;
  out.s_.assign(kTierCount * words * out.slices_, 0);
  const std::size_t slices = out.slices_;
  auto counters = [&](TierId tier, std::size_t w) {
    return out.s_.data() + (((slot_of(tier) * words) + w) * slices);
  };
  const std::size_t n_local = local_.size();
  for (std::uint64_t hash : hashes) {
    const BlockSlot* slot = table_.find(hash);
    if (slot == nullptr) break;  // no lane holds it anywhere: every walk ends here
    const std::uint64_t* row = slot->row == kNoRow ? nullptr : row_ptr(slot->row);
    // The fastest shared tier holding the block (its bit is 1 << its TierId); none: 0.
    const bool any_shared = slot->shared != 0;
    const auto shared_tier = static_cast<TierId>(std::countr_zero(slot->shared));
    std::uint64_t any = 0;
    for (std::size_t w = 0; w < words; ++w) {
      std::uint64_t rest = alive[w];
      if (rest == 0) continue;
      if (row != nullptr) {
        for (std::size_t i = 0; i < n_local && rest != 0; ++i) {
          const std::uint64_t here = rest & row[(i * words) + w];
          if (here != 0) {
            add_lanes(counters(local_[i], w), here);
            rest &= ~here;
          }
        }
      }
      if (rest != 0) {
        if (any_shared) {
          add_lanes(counters(shared_tier, w), rest);
        } else {
          alive[w] &= ~rest;  // these lanes' prefixes end before this block
        }
      }
      any |= alive[w];
    }
    if (any == 0) break;
  }
  out.unpack();
}

}  // namespace kvbm::router::impl
