// src/python/block_rows.h: a caller's buffer as rows of block bytes, and one block's copy.
//
// What the bindings that copy block bytes share (buffers.cpp for KvBlockManager,
// hybrid_kv_block_manager.cpp for each group of HybridKvBlockManager): a buffer
// is C-contiguous host memory seen as rows of block_bytes bytes (or a list of
// one-block buffers, a block in segments as a tuple), used in place
// (host_bytes.h); a block's bytes in a row are its (layer, outer) regions in
// order, whatever the pool's layout.

#pragma once

#include <cstddef>
#include <cstdint>
#include <nanobind/nanobind.h>
#include <span>
#include <vector>

#include "kvbm/storage/layout.h"
#include "python/host_bytes.h"

namespace kvbm::python {

/// Where each block's bytes go or come from: one row of block_bytes per block.
/// Holds the callers' arrays for as long as their bytes are used.
/// A block's bytes may also lie in several segments (a tuple of arrays in a list: a page
/// whose K and V halves are apart in the caller's pool), read or written in order.
struct Rows {
  std::vector<HostBytes> buffers;
  std::vector<std::span<std::uint8_t>> segments;  // block i <-> segments[first[i], first[i+1])
  std::vector<std::size_t> first{0};

  std::span<const std::span<std::uint8_t>> row(std::size_t i) const {
    return std::span(segments).subspan(first[i], first[i + 1] - first[i]);
  }
  void add_row(std::uint8_t* p, std::size_t n) {
    segments.emplace_back(p, n);
    first.push_back(segments.size());
  }
};

/// The rows of `buffer` (one array of whole blocks, row i = block i or rows[i]) or of a
/// list or tuple of one-block arrays, checked for `access` in place; `call` names the call
/// in errors. Throws UsageError when the buffer cannot hold `blocks` blocks.
[[nodiscard]] Rows rows_of(nb::handle buffer, nb::handle rows, std::size_t block_bytes,
                           std::size_t blocks, Access access, const char* call);

/// Copies between block `id`'s regions in `layout` and a row of block_bytes (into the
/// block when `into_block`); `device`: G1 in device memory (CUDA copies). `scratch`
/// is reused between calls.
void copy_block(const Layout& layout, BlockId id, std::span<const std::span<std::uint8_t>> row,
                bool into_block, bool device, std::vector<Region>& scratch);

}  // namespace kvbm::python
