// kvbm/sequence_hash.h: the identity of a block of tokens and its whole prefix.
//
// A SequenceHash is a positional lineage hash: `value` chains the parent's
// sequence hash with the block's own content hash, `parent` is the parent's
// value (absent for the first block), and `position` is the block's index in
// its sequence. Two blocks with equal `value` are treated as holding the same
// KV data. Computing one from tokens lives in kvbm/hashing.h; this header only
// holds the value type, so the block and pool headers stay light.
//
// Thread-safety: a plain value type.

#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "kvbm/error.h"

namespace kvbm {

/// Positional lineage hash of a block: chained value, parent value, position.
class SequenceHash {
 public:
  /// A hash with value 0 at position 0; used only as a placeholder.
  constexpr SequenceHash() noexcept = default;

  /// Builds a hash from a chained value, the parent's chained value (absent
  /// exactly for position 0) and the block's position in its sequence.
  SequenceHash(std::uint64_t value, std::optional<std::uint64_t> parent, std::uint32_t position)
      : value_(value), parent_(parent.value_or(0)), position_(position) {
    KVBM_CHECK(parent.has_value() == (position != 0), "SequenceHash: a block at position ",
               position,
               (position == 0 ? " is the first of its sequence and must not have a parent"
                              : " must name its parent's sequence hash"));
  }

  /// Returns the chained hash that identifies the block and its whole prefix.
  [[nodiscard]] constexpr std::uint64_t value() const noexcept { return value_; }
  /// Returns the parent's chained hash; meaningful only when has_parent().
  [[nodiscard]] constexpr std::uint64_t parent() const noexcept { return parent_; }
  /// Returns true unless this is the first block of its sequence.
  [[nodiscard]] constexpr bool has_parent() const noexcept { return position_ != 0; }
  /// Returns the block's index in its sequence.
  [[nodiscard]] constexpr std::uint32_t position() const noexcept { return position_; }

  friend constexpr bool operator==(const SequenceHash&, const SequenceHash&) noexcept = default;

 private:
  std::uint64_t value_ = 0;
  std::uint64_t parent_ = 0;
  std::uint32_t position_ = 0;
};

}  // namespace kvbm

template <>
struct std::hash<kvbm::SequenceHash> {
  std::size_t operator()(const kvbm::SequenceHash& h) const noexcept { return h.value(); }
};
