// kvbm/storage/layout.h: where a block's bytes live.
//
// A block of KV cache holds, for every layer and every outer index (K and V,
// or one index for MLA-style caches), `page_size` tokens of `inner_dim`
// elements (heads x head size) of `dtype_bytes` bytes each: one *region* of
// region_bytes() per (layer, outer). A Layout maps (block, layer, outer) to an
// address and a size, in one of two arrangements:
//
//   * fully contiguous: a block's regions are adjacent, in (layer, outer)
//     order, so the whole block is one region of block_bytes();
//   * layer separated: one allocation per (layer, outer), as engines allocate
//     their per-layer KV tensors; block b's region is at base[layer][outer] +
//     b * stride.
//
// Addresses are plain integers (std::uintptr_t): a layout may describe host
// memory, device memory or offsets in a file alike. A Layout is a value; it
// does not own memory. plan_copies() turns pairs of blocks into the list of
// (source, destination, size) copies a transfer engine executes, merging
// adjacent ones.
//
// Thread-safety: const members may be called concurrently.

#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/blocks/block_id.h"

namespace kvbm {

/// Dimensions of one block of KV cache.
struct LayoutConfig {
  std::uint32_t num_layers = 0;   ///< transformer layers
  std::uint32_t outer_dim = 2;    ///< 2 for separate K and V, 1 for MLA-style caches
  std::uint32_t page_size = 0;    ///< tokens per block
  std::uint32_t inner_dim = 0;    ///< elements per token per (layer, outer): heads x head size
  std::uint32_t dtype_bytes = 2;  ///< bytes per element

  /// Bytes of one (layer, outer) region of one block. Throws UsageError when
  /// the product overflows size_t (never for a config that validate() accepts).
  [[nodiscard]] std::size_t region_bytes() const {
    std::size_t n = 0;  // two 32-bit factors cannot overflow; the third can
    if (__builtin_mul_overflow(std::size_t{page_size} * inner_dim, dtype_bytes, &n)) [[unlikely]] {
      throw_overflow();
    }
    return n;
  }
  /// Number of regions of one block: num_layers x outer_dim.
  [[nodiscard]] std::size_t regions_per_block() const noexcept {
    return std::size_t{num_layers} * outer_dim;
  }
  /// Bytes of one whole block. Throws UsageError when the product overflows
  /// size_t (never for a config that validate() accepts).
  [[nodiscard]] std::size_t block_bytes() const {
    std::size_t n = 0;
    if (__builtin_mul_overflow(regions_per_block(), region_bytes(), &n)) [[unlikely]] {
      throw_overflow();
    }
    return n;
  }
  /// Throws UsageError naming the first field that is out of range, or the
  /// product of the dimensions when the block size overflows size_t.
  void validate() const;

  friend bool operator==(const LayoutConfig&, const LayoutConfig&) = default;

 private:
  [[noreturn]] void throw_overflow() const;
};

/// How a pool arranges its blocks in memory.
enum class LayoutKind : std::uint8_t { kFullyContiguous, kLayerSeparated };

/// Returns "fully_contiguous" or "layer_separated".
std::string_view to_string(LayoutKind kind) noexcept;

/// A span of bytes at an address.
struct Region {
  std::uintptr_t addr = 0;
  std::size_t size = 0;
  friend bool operator==(const Region&, const Region&) = default;
};

/// One copy of `size` bytes from `src` to `dst`.
struct CopyOp {
  std::uintptr_t src = 0;
  std::uintptr_t dst = 0;
  std::size_t size = 0;
  friend bool operator==(const CopyOp&, const CopyOp&) = default;
};

/// The placement of `num_blocks` blocks in memory.
class Layout {
 public:
  /// Blocks of block_bytes() each, `block_stride` apart (0: block_bytes(),
  /// else at least that) starting at `base`.
  static Layout fully_contiguous(const LayoutConfig& config, std::size_t num_blocks,
                                 std::uintptr_t base, std::size_t block_stride = 0);
  /// One base address per (layer, outer), in (layer, outer) order; block b's
  /// region sits at base + b x `region_stride` (0: region_bytes(), else at
  /// least that).
  static Layout layer_separated(const LayoutConfig& config, std::size_t num_blocks,
                                std::vector<std::uintptr_t> bases, std::size_t region_stride = 0);

  [[nodiscard]] LayoutKind kind() const noexcept { return kind_; }
  [[nodiscard]] const LayoutConfig& config() const noexcept { return config_; }
  [[nodiscard]] std::size_t num_blocks() const noexcept { return num_blocks_; }
  /// Bytes between consecutive blocks (contiguous) or regions (separated).
  [[nodiscard]] std::size_t stride() const noexcept { return stride_; }
  /// The base addresses: one (contiguous) or num_layers x outer_dim (separated).
  [[nodiscard]] std::span<const std::uintptr_t> bases() const noexcept { return bases_; }

  /// Returns the region of (block, layer, outer). Throws UsageError when an
  /// index is out of range.
  [[nodiscard]] Region region(BlockId block, std::uint32_t layer, std::uint32_t outer) const;
  /// Returns a fully contiguous block's single region. Throws UsageError for
  /// a layer-separated layout.
  [[nodiscard]] Region block_region(BlockId block) const;
  /// Appends the block's regions in (layer, outer) order.
  void append_regions(BlockId block, std::vector<Region>& out) const;
  /// Returns the number of bytes from the lowest to the highest address the
  /// layout touches, for each base (what the backing allocations must hold).
  [[nodiscard]] std::size_t bytes_per_base() const noexcept;

 private:
  Layout() = default;
  LayoutKind kind_ = LayoutKind::kFullyContiguous;
  LayoutConfig config_{};
  std::size_t num_blocks_ = 0;
  std::size_t stride_ = 0;
  std::vector<std::uintptr_t> bases_;
};

/// Appends the copies that move blocks src_blocks[i] of `src` to
/// dst_blocks[i] of `dst`, merging copies that are adjacent in both source
/// and destination. Throws UsageError when the layouts' configs differ, the
/// spans differ in length, or a block id is out of range.
void plan_copies(const Layout& src, std::span<const BlockId> src_blocks, const Layout& dst,
                 std::span<const BlockId> dst_blocks, std::vector<CopyOp>& out);

}  // namespace kvbm
