// src/python/block_rows.cpp: rows of a caller's buffer and one block's copy (block_rows.h).

#include "python/block_rows.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "kvbm/error.h"
#include "kvbm/storage/host_access.h"
#include "python/integers.h"

namespace kvbm::python {

Rows rows_of(nb::handle buffer, nb::handle rows, std::size_t block_bytes, std::size_t blocks,
             Access access, const char* call) {
  const std::string what = std::string(call) + (access == Access::kWrite ? ": dst" : ": src");
  Rows r;
  r.segments.reserve(blocks);
  r.first.reserve(blocks + 1);
  if (nb::isinstance<nb::list>(buffer) || nb::isinstance<nb::tuple>(buffer)) {
    KVBM_CHECK(rows.is_none(), what,
               ": rows= picks rows of one array; with a list of buffers, buffer i is block i");
    nb::sequence seq = nb::borrow<nb::sequence>(buffer);
    const std::size_t n = nb::len(seq);
    KVBM_CHECK(n == blocks, what, ": ", n, " buffers for ", blocks,
               " hashes; give one buffer per hash");
    std::size_t i = 0;
    for (nb::handle item : seq) {
      const std::string item_what = what + "[" + std::to_string(i) + "]";
      std::size_t total = 0;
      if (nb::isinstance<nb::tuple>(item)) {  // one block in segments
        std::size_t j = 0;
        for (nb::handle part : nb::borrow<nb::tuple>(item)) {
          const std::string part_what = item_what + "[" + std::to_string(j++) + "]";
          HostBytes b = host_bytes(part, access, part_what.c_str());
          total += b.bytes.size();
          r.segments.push_back(b.bytes);
          r.buffers.push_back(std::move(b));
        }
      } else {
        HostBytes b = host_bytes(item, access, item_what.c_str());
        total = b.bytes.size();
        r.segments.push_back(b.bytes);
        r.buffers.push_back(std::move(b));
      }
      KVBM_CHECK(total == block_bytes, item_what, ": holds ", total, " bytes; a block is ",
                 block_bytes);
      r.first.push_back(r.segments.size());
      ++i;
    }
    return r;
  }
  HostBytes b = host_bytes(buffer, access, what.c_str());
  const auto bytes = b.bytes;
  r.buffers.push_back(std::move(b));
  KVBM_CHECK(bytes.size() % block_bytes == 0, what, ": the buffer holds ", bytes.size(),
             " bytes, not a whole number of blocks of ", block_bytes, " bytes");
  const std::size_t count = bytes.size() / block_bytes;
  if (!rows.is_none()) {
    const std::string rows_what = std::string(call) + ": rows";
    const std::vector<std::int64_t> picked = integers_of<std::int64_t>(rows, rows_what.c_str());
    KVBM_CHECK(picked.size() == blocks, rows_what, ": ", picked.size(), " rows for ", blocks,
               " blocks; give one row per block");
    for (std::size_t i = 0; i < blocks; ++i) {
      const std::int64_t row = picked[i];
      KVBM_CHECK(row >= 0 && static_cast<std::size_t>(row) < count, rows_what, ": row ", row,
                 " is outside the buffer's ", count, " blocks");
      r.add_row(bytes.data() + static_cast<std::size_t>(row) * block_bytes, block_bytes);
    }
  } else {
    KVBM_CHECK(blocks <= count, what, ": ", blocks, " blocks but the buffer holds only ", count);
    for (std::size_t i = 0; i < blocks; ++i) r.add_row(bytes.data() + i * block_bytes, block_bytes);
  }
  return r;
}

// The segments of a row hold block_bytes in all (checked by rows_of).
void copy_block(const Layout& layout, BlockId id, std::span<const std::span<std::uint8_t>> row,
                bool into_block, bool device, std::vector<Region>& scratch) {
  scratch.clear();
  layout.append_regions(id, scratch);
  std::size_t seg = 0;
  std::size_t seg_off = 0;
  for (const Region& r : scratch) {
    auto* mem = reinterpret_cast<std::uint8_t*>(r.addr);
    std::size_t off = 0;
    while (off < r.size) {
      while (seg_off == row[seg].size()) {  // skip spent (and empty) segments
        ++seg;
        seg_off = 0;
      }
      const std::size_t n = std::min(r.size - off, row[seg].size() - seg_off);
      std::uint8_t* user = row[seg].data() + seg_off;
      // G1 in device memory: host_write/host_read (a CUDA copy, complete on return).
      if (!device && into_block) {
        std::memcpy(mem + off, user, n);
      } else if (!device) {
        std::memcpy(user, mem + off, n);
      } else if (into_block) {
        host_write(r.addr + off, user, n);
      } else {
        host_read(user, r.addr + off, n);
      }
      off += n;
      seg_off += n;
    }
  }
}

}  // namespace kvbm::python
