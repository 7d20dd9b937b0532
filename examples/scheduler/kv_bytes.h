// examples/scheduler/kv_bytes.h: the example's stand-in for a model's KV data.
//
// A real forward pass writes, for every token of a block, its keys and values
// into each (layer, outer) region of the block. Here the bytes of token slot
// `s` are derived from a *token seed*: a running mix of the block's parent
// sequence hash and the block's tokens up to `s`. So a block's bytes depend
// only on its sequence hash's inputs (its prefix and its tokens), exactly like
// real KV, and anyone holding the tokens can recompute what a block must
// contain. The scheduler uses this to check onboarded blocks (from G1, G2 or
// G3) and blocks that copy-on-write copied, byte for byte.
//
// With a null layout (metadata-only runs) every call does nothing and every
// check passes.
//
// Thread-safety: none; the scheduler calls it from its one thread. G1 must be
// host-addressable (KvBlockManager::device_emulated()).

#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "kvbm/hashing.h"
#include "kvbm/storage/layout.h"

namespace kvbm_example {

/// Mixes 64 bits (splitmix64's finalizer).
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// The seed before a block's first token: its parent's sequence hash value
/// (`kFirstBlockSeed` for the first block of a sequence).
inline constexpr std::uint64_t kFirstBlockSeed = 0x6B76626D5EEDULL;

/// Returns the seed of the token after one with seed `prev`.
[[nodiscard]] constexpr std::uint64_t next_token_seed(std::uint64_t prev,
                                                      kvbm::Token token) noexcept {
  return mix64(prev ^ (std::uint64_t{token} * 0xD6E8FEB86659FD93ULL));
}

/// Writes and checks the synthetic KV bytes of G1 blocks.
class KvBytes {
 public:
  /// `device_layout` is where G1 blocks live; nullptr: metadata only.
  explicit KvBytes(const kvbm::Layout* device_layout) : layout_(device_layout) {
    if (layout_ != nullptr) {
      const auto& c = layout_->config();
      token_bytes_ = std::size_t{c.inner_dim} * c.dtype_bytes;
    }
  }

  /// Returns true when bytes are written and checked.
  [[nodiscard]] bool enabled() const noexcept { return layout_ != nullptr; }

  /// Writes token slot `slot` of block `id` from `seed` in every region.
  void write_token(kvbm::BlockId id, std::uint32_t slot, std::uint64_t seed) {
    if (!enabled()) return;
    regions_.clear();
    layout_->append_regions(id, regions_);
    for (std::size_t r = 0; r < regions_.size(); ++r) {
      fill(scratch(), seed, r);
      std::memcpy(slot_ptr(regions_[r], slot), scratch_.data(), token_bytes_);
    }
  }

  /// Writes every slot of block `id` for `tokens`, the block following a
  /// block whose sequence hash value is `parent` (kFirstBlockSeed if none).
  void write_block(kvbm::BlockId id, std::uint64_t parent, std::span<const kvbm::Token> tokens) {
    std::uint64_t seed = parent;
    for (std::size_t s = 0; s < tokens.size(); ++s) {
      seed = next_token_seed(seed, tokens[s]);
      write_token(id, static_cast<std::uint32_t>(s), seed);
    }
  }

  /// Returns true when the first tokens.size() slots of block `id` hold what
  /// write_block(id, parent, tokens) would have written.
  [[nodiscard]] bool check_block(kvbm::BlockId id, std::uint64_t parent,
                                 std::span<const kvbm::Token> tokens) {
    if (!enabled()) return true;
    regions_.clear();
    layout_->append_regions(id, regions_);
    std::uint64_t seed = parent;
    for (std::size_t s = 0; s < tokens.size(); ++s) {
      seed = next_token_seed(seed, tokens[s]);
      for (std::size_t r = 0; r < regions_.size(); ++r) {
        fill(scratch(), seed, r);
        if (std::memcmp(slot_ptr(regions_[r], static_cast<std::uint32_t>(s)), scratch_.data(),
                        token_bytes_) != 0) {
          return false;
        }
      }
    }
    return true;
  }

  /// Copies the first `slots` token slots of block `src` into block `dst`
  /// (the copy of copy-on-write; a GPU would run a copy kernel here).
  void copy_slots(kvbm::BlockId src, kvbm::BlockId dst, std::uint32_t slots) {
    if (!enabled() || slots == 0) return;
    std::vector<kvbm::Region> from;
    layout_->append_regions(src, from);
    regions_.clear();
    layout_->append_regions(dst, regions_);
    for (std::size_t r = 0; r < regions_.size(); ++r) {
      std::memcpy(slot_ptr(regions_[r], 0), slot_ptr(from[r], 0), slots * token_bytes_);
    }
  }

 private:
  std::vector<std::uint8_t>& scratch() {
    scratch_.resize(token_bytes_);
    return scratch_;
  }
  // The bytes of one token in region `r`.
  static void fill(std::vector<std::uint8_t>& out, std::uint64_t seed, std::size_t r) {
    std::uint64_t x = seed ^ (r * 0xA24BAED4963EE407ULL);
    for (std::size_t i = 0; i < out.size(); i += 8) {
      x = mix64(x);
      std::memcpy(out.data() + i, &x, std::min<std::size_t>(8, out.size() - i));
    }
  }
  [[nodiscard]] std::uint8_t* slot_ptr(const kvbm::Region& region, std::uint32_t slot) const {
    return reinterpret_cast<std::uint8_t*>(region.addr) + std::size_t{slot} * token_bytes_;
  }

  const kvbm::Layout* layout_;
  std::size_t token_bytes_ = 0;
  std::vector<kvbm::Region> regions_;
  std::vector<std::uint8_t> scratch_;
};

}  // namespace kvbm_example
