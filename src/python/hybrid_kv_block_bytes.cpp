// src/python/hybrid_kv_block_bytes.cpp: HybridKvBlockManager.write() and read(), the
// bytes of one group's G1 blocks to and from a caller's buffer (block_rows.h: rows of
// block_bytes(group), used in place). write() fills only blocks the request is still
// computing: a computed block may be registered and shared by other requests.

#include <cstddef>
#include <nanobind/stl/vector.h>
#include <string>
#include <vector>

#include "python/block_rows.h"
#include "python/hybrid_kv_block_manager.h"

namespace kvbm::python::hybrid_facade {

namespace {

using namespace nb::literals;

/// Copies rows of `buffer` into (or out of) group g's blocks `ids` in G1.
void copy_group_blocks(HybridKvBlockManager& kv, std::size_t g, const std::vector<BlockId>& ids,
                       nb::handle buffer, bool into_block, const char* call) {
  KvBlockManager& group = kv.group(g);
  KVBM_CHECK(group.config().move_bytes, "HybridKvBlockManager.", call,
             ": the manager was built with move_bytes = False (metadata only); it holds no bytes");
  const Rows rows = rows_of(buffer, nb::none(), group.block_bytes(), ids.size(),
                            into_block ? Access::kRead : Access::kWrite, call);
  const Layout& layout = group.device_layout();
  const bool device = !group.device_emulated();
  nb::gil_scoped_release release;
  std::vector<Region> scratch;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    copy_block(layout, ids[i], rows.row(i), into_block, device, scratch);
  }
}

/// How many rows of `group`'s blocks `buffer` holds (a list: its length).
std::size_t rows_in(nb::handle buffer, std::size_t block_bytes, const char* call) {
  if (nb::isinstance<nb::list>(buffer) || nb::isinstance<nb::tuple>(buffer)) {
    return nb::len(buffer);
  }
  const std::string what = std::string(call) + ": src";
  const std::size_t n = host_bytes(buffer, Access::kRead, what.c_str()).bytes.size();
  KVBM_CHECK(n % block_bytes == 0, what, ": the buffer holds ", n,
             " bytes, not a whole number of blocks of ", block_bytes, " bytes");
  return n / block_bytes;
}

/// The G1 ids of group g's blocks [first, first + n) that `r` is computing.
std::vector<BlockId> writable_ids(const HybridKvBlockManager& kv, const Request& r, std::size_t g,
                                  std::size_t first, std::size_t n) {
  const std::size_t done = r.computed_tokens() / kv.spec(g).tokens_per_block;
  std::vector<BlockId> ids;
  for (std::size_t i = first; i < first + n; ++i) {
    KVBM_CHECK(i >= done, "HybridKvBlockManager.write: block ", i, " of group ", g,
               " is computed (the request's first ", r.computed_tokens(),
               " tokens), possibly registered and shared; write only blocks from ", done, " on");
    KVBM_CHECK(r.holds_block(g, i), "HybridKvBlockManager.write: the request holds no block ", i,
               " of group ", g, " (it holds [", r.held_range(g).first, ", ", r.held_range(g).last,
               ")); allocate() first");
    ids.push_back(r.block_id(g, i));
  }
  return ids;
}

}  // namespace

void bind_bytes(nb::class_<HybridManager>& cls) {
  cls.def(
         "write",
         [](HybridManager& m, const Request& r, std::size_t g, std::size_t first, nb::handle src) {
           const auto kv = m.get();
           check_group(*kv, g, "write");
           check_request(*kv, r, "write");
           const std::size_t n = rows_in(src, kv->group(g).block_bytes(), "write");
           copy_group_blocks(*kv, g, writable_ids(*kv, r, g, first, n), src, true, "write");
         },
         "request"_a, "group"_a, "first"_a, "src"_a,
         "Copies row i of `src` (a C-contiguous host array of whole blocks of block_bytes(group), "
         "or a list of one-block buffers) into group `group`'s block first + i of the request, "
         "which must be held and not yet computed; GIL released.")
      .def(
          "read",
          [](HybridManager& m, const Hit& hit, std::size_t g, nb::handle dst) {
            const auto kv = m.get();
            check_group(*kv, g, "read");
            check_hit(*kv, hit, "read");
            std::vector<BlockId> ids;
            for (const auto& b : hit.blocks[g]) ids.push_back(b.block_id());
            copy_group_blocks(*kv, g, ids, dst, false, "read");
            return ids.size();
          },
          "hit"_a, "group"_a, "dst"_a,
          "Copies group `group`'s blocks of a hit (hit.ranges[group], in order) into rows 0.. of "
          "`dst` (writable, C-contiguous host memory); returns how many.")
      .def(
          "read",
          [](HybridManager& m, const Request& r, std::size_t g, nb::handle dst) {
            const auto kv = m.get();
            check_group(*kv, g, "read");
            check_request(*kv, r, "read");
            std::vector<BlockId> ids;
            const BlockRange held = r.held_range(g);
            for (std::size_t i = held.first; i < held.last; ++i) {
              if (r.holds_block(g, i)) ids.push_back(r.block_id(g, i));
            }
            copy_group_blocks(*kv, g, ids, dst, false, "read");
            return ids.size();
          },
          "request"_a, "group"_a, "dst"_a,
          "Copies the blocks group `group` of the request holds (held_range, holes skipped) into "
          "rows 0.. of `dst`; returns how many.");
}

}  // namespace kvbm::python::hybrid_facade
