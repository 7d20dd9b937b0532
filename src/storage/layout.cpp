#include "kvbm/storage/layout.h"

#include <cstdint>
#include <limits>
#include <utility>

#include "kvbm/error.h"

namespace kvbm {
namespace {

constexpr std::uintptr_t kMaxAddr = std::numeric_limits<std::uintptr_t>::max();

/// Returns a * b, or nullopt-like false through `ok` when it overflows size_t.
bool mul_fits(std::size_t a, std::size_t b, std::size_t& out) noexcept {
  return !__builtin_mul_overflow(a, b, &out);
}

/// Returns the bytes from a base to the end of the last block's region, or
/// throws when that (or base + it) does not fit in an address.
std::size_t checked_extent(std::size_t num_blocks, std::size_t stride, std::size_t unit,
                           std::uintptr_t base, const char* factory) {
  std::size_t last = 0;
  KVBM_CHECK(mul_fits(num_blocks - 1, stride, last) && last <= kMaxAddr - unit, factory,
             ": num_blocks (", num_blocks, ") x stride (", stride,
             ") overflows an address; use fewer blocks or a smaller stride");
  const std::size_t extent = last + unit;
  KVBM_CHECK(base <= kMaxAddr - extent, factory, ": base address 0x", std::hex, base, std::dec,
             " plus the layout's extent (", extent, " bytes) overflows an address");
  return extent;
}

}  // namespace

void LayoutConfig::validate() const {
  KVBM_CHECK(num_layers > 0, "LayoutConfig: num_layers must be > 0 (got 0)");
  KVBM_CHECK(outer_dim == 1 || outer_dim == 2,
             "LayoutConfig: outer_dim must be 1 (MLA) or 2 (K and V), got ", outer_dim);
  KVBM_CHECK(page_size > 0, "LayoutConfig: page_size (tokens per block) must be > 0 (got 0)");
  KVBM_CHECK(inner_dim > 0, "LayoutConfig: inner_dim (heads x head size) must be > 0 (got 0)");
  KVBM_CHECK(dtype_bytes == 1 || dtype_bytes == 2 || dtype_bytes == 4 || dtype_bytes == 8,
             "LayoutConfig: dtype_bytes must be 1, 2, 4 or 8, got ", dtype_bytes);
  (void)block_bytes();  // throws when the product overflows
}

void LayoutConfig::throw_overflow() const {
  detail::throw_usage_error(
      __FILE__, __LINE__,
      detail::concat("LayoutConfig: page_size x inner_dim x dtype_bytes x num_layers x outer_dim (",
                     page_size, " x ", inner_dim, " x ", dtype_bytes, " x ", num_layers, " x ",
                     outer_dim, ") overflows size_t; the block size must fit in memory"));
}

std::string_view to_string(LayoutKind kind) noexcept {
  switch (kind) {
    case LayoutKind::kFullyContiguous:
      return "fully_contiguous";
    case LayoutKind::kLayerSeparated:
      return "layer_separated";
  }
  return "unknown";
}

Layout Layout::fully_contiguous(const LayoutConfig& config, std::size_t num_blocks,
                                std::uintptr_t base, std::size_t block_stride) {
  config.validate();
  KVBM_CHECK(num_blocks > 0, "Layout::fully_contiguous: num_blocks must be > 0");
  const std::size_t block = config.block_bytes();
  const std::size_t stride = block_stride == 0 ? block : block_stride;
  KVBM_CHECK(stride >= block, "Layout::fully_contiguous: block_stride (", block_stride,
             ") is smaller than block_bytes() (", block, "); pass 0 or at least ", block);
  (void)checked_extent(num_blocks, stride, block, base, "Layout::fully_contiguous");
  Layout layout;
  layout.kind_ = LayoutKind::kFullyContiguous;
  layout.config_ = config;
  layout.num_blocks_ = num_blocks;
  layout.stride_ = stride;
  layout.bases_.push_back(base);
  return layout;
}

Layout Layout::layer_separated(const LayoutConfig& config, std::size_t num_blocks,
                               std::vector<std::uintptr_t> bases, std::size_t region_stride) {
  config.validate();
  KVBM_CHECK(num_blocks > 0, "Layout::layer_separated: num_blocks must be > 0");
  KVBM_CHECK(bases.size() == config.regions_per_block(), "Layout::layer_separated: expected ",
             config.regions_per_block(), " base addresses (num_layers ", config.num_layers,
             " x outer_dim ", config.outer_dim, "), got ", bases.size());
  const std::size_t region = config.region_bytes();
  const std::size_t stride = region_stride == 0 ? region : region_stride;
  KVBM_CHECK(stride >= region, "Layout::layer_separated: region_stride (", region_stride,
             ") is smaller than region_bytes() (", region, "); pass 0 or at least ", region);
  for (const std::uintptr_t base : bases) {
    (void)checked_extent(num_blocks, stride, region, base, "Layout::layer_separated");
  }
  Layout layout;
  layout.kind_ = LayoutKind::kLayerSeparated;
  layout.config_ = config;
  layout.num_blocks_ = num_blocks;
  layout.stride_ = stride;
  layout.bases_ = std::move(bases);
  return layout;
}

Region Layout::region(BlockId block, std::uint32_t layer, std::uint32_t outer) const {
  KVBM_CHECK(block < num_blocks_, "Layout::region: block ", block, " out of range (the layout has ",
             num_blocks_, " blocks)");
  KVBM_CHECK(layer < config_.num_layers, "Layout::region: layer ", layer,
             " out of range (num_layers ", config_.num_layers, ")");
  KVBM_CHECK(outer < config_.outer_dim, "Layout::region: outer ", outer,
             " out of range (outer_dim ", config_.outer_dim, ")");
  const std::size_t r = std::size_t{layer} * config_.outer_dim + outer;
  const std::size_t rb = config_.region_bytes();
  const std::uintptr_t block_off = std::uintptr_t{block} * stride_;
  if (kind_ == LayoutKind::kFullyContiguous) return {bases_[0] + block_off + r * rb, rb};
  return {bases_[r] + block_off, rb};
}

Region Layout::block_region(BlockId block) const {
  KVBM_CHECK(kind_ == LayoutKind::kFullyContiguous,
             "Layout::block_region: a layer-separated block has no single region; use region() or "
             "append_regions()");
  KVBM_CHECK(block < num_blocks_, "Layout::block_region: block ", block,
             " out of range (the layout has ", num_blocks_, " blocks)");
  return {bases_[0] + std::uintptr_t{block} * stride_, config_.block_bytes()};
}

void Layout::append_regions(BlockId block, std::vector<Region>& out) const {
  KVBM_CHECK(block < num_blocks_, "Layout::append_regions: block ", block,
             " out of range (the layout has ", num_blocks_, " blocks)");
  const std::size_t n = config_.regions_per_block();
  const std::size_t rb = config_.region_bytes();
  const std::uintptr_t block_off = std::uintptr_t{block} * stride_;
  out.reserve(out.size() + n);
  for (std::size_t r = 0; r < n; ++r) {
    if (kind_ == LayoutKind::kFullyContiguous) {
      out.push_back({bases_[0] + block_off + r * rb, rb});
    } else {
      out.push_back({bases_[r] + block_off, rb});
    }
  }
}

std::size_t Layout::bytes_per_base() const noexcept {
  const std::size_t unit =
      kind_ == LayoutKind::kFullyContiguous ? config_.block_bytes() : config_.region_bytes();
  return (num_blocks_ - 1) * stride_ + unit;
}

namespace {

/// Appends `op` to out[first..], merging it into the last op when it continues
/// that op in both source and destination.
inline void append_merged(std::vector<CopyOp>& out, std::size_t first, const CopyOp& op) {
  if (out.size() > first) {
    CopyOp& last = out.back();
    if (last.src + last.size == op.src && last.dst + last.size == op.dst) {
      last.size += op.size;
      return;
    }
  }
  out.push_back(op);
}

/// The address of region r of a block at offset 0: the per-region base.
inline std::uintptr_t region_base(const Layout& l, std::size_t r, std::size_t region_bytes) {
  return l.kind() == LayoutKind::kFullyContiguous ? l.bases()[0] + r * region_bytes : l.bases()[r];
}

}  // namespace

void plan_copies(const Layout& src, std::span<const BlockId> src_blocks, const Layout& dst,
                 std::span<const BlockId> dst_blocks, std::vector<CopyOp>& out) {
  KVBM_CHECK(src.config() == dst.config(),
             "plan_copies: the source and destination layouts describe blocks of different "
             "shapes (LayoutConfig differs); a transfer needs identical configs");
  KVBM_CHECK(src_blocks.size() == dst_blocks.size(), "plan_copies: ", src_blocks.size(),
             " source blocks but ", dst_blocks.size(),
             " destination blocks; pass one of each per copy");
  for (std::size_t i = 0; i < src_blocks.size(); ++i) {
    KVBM_CHECK(src_blocks[i] < src.num_blocks(), "plan_copies: source block ", src_blocks[i],
               " (index ", i, ") out of range (the source layout has ", src.num_blocks(),
               " blocks)");
    KVBM_CHECK(dst_blocks[i] < dst.num_blocks(), "plan_copies: destination block ", dst_blocks[i],
               " (index ", i, ") out of range (the destination layout has ", dst.num_blocks(),
               " blocks)");
  }

  const std::size_t first = out.size();
  const LayoutConfig& cfg = src.config();
  const std::size_t n = src_blocks.size();
  if (src.kind() == LayoutKind::kFullyContiguous && dst.kind() == LayoutKind::kFullyContiguous) {
    // One op per block; consecutive blocks on both sides merge.
    const std::size_t bytes = cfg.block_bytes();
    const std::uintptr_t sb = src.bases()[0];
    const std::uintptr_t db = dst.bases()[0];
    out.reserve(first + n);
    for (std::size_t i = 0; i < n; ++i) {
      append_merged(out, first,
                    {sb + std::uintptr_t{src_blocks[i]} * src.stride(),
                     db + std::uintptr_t{dst_blocks[i]} * dst.stride(), bytes});
    }
    return;
  }

  // At least one side is layer separated: one op per region, emitted region by
  // region so that the same region of consecutive blocks (adjacent in a
  // layer-separated layout) merges.
  const std::size_t regions = cfg.regions_per_block();
  const std::size_t rb = cfg.region_bytes();
  out.reserve(first + n * regions);
  for (std::size_t r = 0; r < regions; ++r) {
    const std::uintptr_t sb = region_base(src, r, rb);
    const std::uintptr_t db = region_base(dst, r, rb);
    for (std::size_t i = 0; i < n; ++i) {
      append_merged(out, first,
                    {sb + std::uintptr_t{src_blocks[i]} * src.stride(),
                     db + std::uintptr_t{dst_blocks[i]} * dst.stride(), rb});
    }
  }
}

}  // namespace kvbm
