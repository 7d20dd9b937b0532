// src/python/buffers.cpp: block bytes to and from NumPy (or any DLPack) buffers.
//
//   view(block) / region_view(block, layer, outer)   an array over the block's own memory
//   write(blocks, src, rows) / read(blocks, dst, rows) copies between rows of a buffer and blocks
//   store(hashes, src, rows) / load(hashes, dst, rows) the engine path: allocate, copy, register
//                                                      / onboard, copy out, in one call
//
// A buffer is C-contiguous host memory seen as rows of block_bytes bytes (any
// dtype of whole bytes; its size must be a whole number of blocks), used in
// place and checked first (host_bytes.h): a destination must be writable, and
// nothing is converted. A block's bytes in a row are its (layer, outer)
// regions in that order, whatever the pool's layout, so a row written to G1
// reads back the same from G2 or after a trip through G3. `rows` (integers)
// picks the row of each block; without it block i is row i. The buffer's
// address is used as given: _address(buffer) returns it as C++ sees it.
// Every block handle is checked to be one of this manager's.
//
// G1 memory is host memory when device_emulated; on a GPU it is device memory:
// views are then DLPack tensors on that device (torch.from_dlpack reads them)
// and copies go through host_write / host_read (CUDA copies, complete on return).

#include <algorithm>
#include <cstring>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvbm/config.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/storage/host_access.h"
#include "python/bindings.h"
#include "python/block_rows.h"
#include "python/host_bytes.h"
#include "python/integers.h"

namespace kvbm::python {

namespace {

using namespace nb::literals;

template <TierMarker T>
const Layout& layout_of(KvBlockManager& kv) {
  KVBM_CHECK(kv.config().move_bytes,
             "block bytes: the manager was built with move_bytes = False "
             "(metadata only); it holds no bytes");
  if constexpr (std::is_same_v<T, G1>) {
    return kv.device_layout();
  } else {
    KVBM_CHECK(kv.host() != nullptr, "block bytes: the manager has no G2");
    return kv.host_layout();
  }
}

template <TierMarker T>
bool host_accessible(KvBlockManager& kv) {
  if constexpr (std::is_same_v<T, G1>) return kv.device_emulated();
  return true;
}

/// Checks that `b` is a live block of this manager's pool of tier T.
template <TierMarker T, class Block>
void check_own(KvBlockManager& kv, const Block* b, std::size_t i, const char* what) {
  KVBM_CHECK(b != nullptr && b->valid(), what, ": block ", i, " was released");
  KVBM_CHECK(require_pool<T>(kv, what).owns(*b), what, ": block ", i, " (id ", b->block_id(),
             ") belongs to another KvBlockManager; pass blocks of this manager (each manager "
             "reads and writes only its own)");
}

template <TierMarker T, class Block>
std::vector<BlockId> ids_of(KvBlockManager& kv, const std::vector<Block*>& blocks,
                            const char* what) {
  std::vector<BlockId> ids;
  ids.reserve(blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    check_own<T>(kv, blocks[i], i, what);
    ids.push_back(blocks[i]->block_id());
  }
  return ids;
}

template <TierMarker T, class Block>
void copy_blocks(Manager& m, const std::vector<Block*>& blocks, nb::handle buffer, nb::handle rows,
                 bool into_block, const char* what) {
  const auto lease = m.lease();
  KvBlockManager& kv = *lease;
  const Layout& layout = layout_of<T>(kv);
  const bool device = !host_accessible<T>(kv);
  const std::vector<BlockId> ids = ids_of<T>(kv, blocks, what);
  const Rows r = rows_of(buffer, rows, kv.block_bytes(), ids.size(),
                         into_block ? Access::kRead : Access::kWrite, what);
  nb::gil_scoped_release release;
  std::vector<Region> scratch;
  for (std::size_t i = 0; i < ids.size(); ++i)
    copy_block(layout, ids[i], r.row(i), into_block, device, scratch);
}

/// An array over [addr, addr + size) that keeps `owner` alive.
nb::object array_over(std::uintptr_t addr, std::size_t size, bool writable, bool device,
                      int device_id, nb::handle owner) {
  const std::size_t shape[1] = {size};
  if (!device) {
    if (writable) {
      return nb::cast(nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>(
          reinterpret_cast<std::uint8_t*>(addr), 1, shape, owner));
    }
    return nb::cast(nb::ndarray<nb::numpy, const std::uint8_t, nb::ndim<1>>(
        reinterpret_cast<const std::uint8_t*>(addr), 1, shape, owner));
  }
  return nb::cast(nb::ndarray<std::uint8_t, nb::ndim<1>>(
      reinterpret_cast<std::uint8_t*>(addr), 1, shape, owner, nullptr, nb::dtype<std::uint8_t>(),
      nb::device::cuda::value, device_id));
}

/// The owner of a view: the manager's memory (a strong reference that close() does not
/// drop) and the Python block object.
nb::object view_owner(const Manager::Lease& lease, nb::handle block_obj) {
  auto* kv = new std::shared_ptr<KvBlockManager>(lease.shared());
  nb::capsule memory(
      kv, [](void* p) noexcept { delete static_cast<std::shared_ptr<KvBlockManager>*>(p); });
  return nb::make_tuple(memory, block_obj);
}

template <TierMarker T, class Block>
void def_views(nb::class_<Manager>& cls, bool writable) {
  cls.def(
      "view",
      [writable](nb::handle self, nb::handle_t<Block> block_obj) {
        Manager& m = nb::cast<Manager&>(self);
        const Block& b = nb::cast<const Block&>(block_obj);
        const auto lease = m.lease();
        KvBlockManager& kv = *lease;
        check_own<T>(kv, &b, 0, "view");
        const Layout& layout = layout_of<T>(kv);
        KVBM_CHECK(layout.kind() == LayoutKind::kFullyContiguous,
                   "view: the pool's layout is layer separated, so a block is not one range of "
                   "memory; use region_view(block, layer, outer), or set "
                   "config.device_layout = LayoutKind.FULLY_CONTIGUOUS");
        const Region r = layout.block_region(b.block_id());
        return array_over(r.addr, r.size, writable, !host_accessible<T>(kv),
                          kv.config().cuda_device, view_owner(lease, block_obj));
      },
      "block"_a,
      "Returns a uint8 array over the block's memory (no copy; read-only for a registered block). "
      "It keeps the manager's memory alive; its bytes are the block's only while the block is "
      "held.");
  cls.def(
      "region_view",
      [writable](nb::handle self, nb::handle_t<Block> block_obj, std::uint32_t layer,
                 std::uint32_t outer) {
        Manager& m = nb::cast<Manager&>(self);
        const Block& b = nb::cast<const Block&>(block_obj);
        const auto lease = m.lease();
        KvBlockManager& kv = *lease;
        check_own<T>(kv, &b, 0, "region_view");
        const Region r = layout_of<T>(kv).region(b.block_id(), layer, outer);
        return array_over(r.addr, r.size, writable, !host_accessible<T>(kv),
                          kv.config().cuda_device, view_owner(lease, block_obj));
      },
      "block"_a, "layer"_a, "outer"_a,
      "Returns a uint8 array over one (layer, outer) region of the block.");
}

template <TierMarker T, class Block>
void def_copies(nb::class_<Manager>& cls, const char* name, bool into_block, const char* doc) {
  const char* buffer_name = into_block ? "src" : "dst";
  cls.def(
      name,
      [name, into_block](Manager& m, const std::vector<Block*>& blocks, nb::handle buffer,
                         nb::handle rows) {
        copy_blocks<T>(m, blocks, buffer, rows, into_block, name);
      },
      "blocks"_a, nb::arg(buffer_name), "rows"_a = nb::none(), doc);
}

template <TierMarker T>
std::size_t store_into(KvBlockManager& kv, const std::vector<SequenceHash>& hashes,
                       const Rows& rows) {
  BlockManager<T>* pool = kv.template pool<T>();
  KVBM_CHECK(pool != nullptr, "store: the manager has no ", tier_name<T>(),
             "; store into G1 (tier=TierId.G1)");
  const Layout& layout = layout_of<T>(kv);
  const bool device = !host_accessible<T>(kv);
  const std::vector<bool> present = pool->registry()->template presence<T>(hashes);
  std::vector<std::size_t> missing;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (!present[i]) missing.push_back(i);
  }
  std::vector<MutableBlock<T>> blocks = pool->allocate_at_most(missing.size());
  std::vector<CompleteBlock<T>> complete;
  complete.reserve(blocks.size());
  std::vector<Region> scratch;
  for (std::size_t k = 0; k < blocks.size(); ++k) {
    copy_block(layout, blocks[k].block_id(), rows.row(missing[k]), true, device, scratch);
    auto staged = std::move(blocks[k]).stage(hashes[missing[k]], kv.block_size());
    KVBM_CHECK(staged.ok(), "store: ", staged.error().reason);
    complete.push_back(std::move(staged).value());
  }
  if constexpr (std::is_same_v<T, G1>) {
    auto registered = kv.register_blocks(std::move(complete));
  } else {
    auto registered = pool->register_blocks(std::move(complete));
  }
  return hashes.size() - missing.size() + blocks.size();
}

std::size_t store(Manager& m, nb::handle values, nb::handle src, nb::handle rows, bool chained,
                  TierId tier) {
  const auto lease = m.lease();
  KvBlockManager& kv = *lease;
  const auto hashes = hashes_of(values, chained, "store: hashes");
  const Rows r = rows_of(src, rows, kv.block_bytes(), hashes.size(), Access::kRead, "store");
  KVBM_CHECK(tier == TierId::kG1 || tier == TierId::kG2, "store: blocks are stored into G1 or G2");
  nb::gil_scoped_release release;
  return tier == TierId::kG1 ? store_into<G1>(kv, hashes, r) : store_into<G2>(kv, hashes, r);
}

/// Copies the leading blocks of `hashes` (from `from` on) that `pool` holds into rows
/// from..; returns how many. They are copied straight out of the tier, with no landing in G1.
template <TierMarker T>
std::size_t copy_out_held(KvBlockManager& kv, BlockManager<T>& pool,
                          std::span<const SequenceHash> hashes, const Rows& rows, std::size_t from,
                          std::vector<Region>& scratch) {
  const std::vector<ImmutableBlock<T>> held = pool.match_blocks(hashes.subspan(from));
  const Layout& layout = layout_of<T>(kv);
  const bool device = !host_accessible<T>(kv);
  for (std::size_t i = 0; i < held.size(); ++i) {
    copy_block(layout, held[i].block_id(), rows.row(from + i), false, device, scratch);
  }
  return held.size();
}

std::size_t load(Manager& m, nb::handle values, nb::handle dst, nb::handle rows_arg, bool chained,
                 std::optional<std::string> mode, std::optional<double> deadline_s) {
  const auto lease = m.lease();
  KvBlockManager& kv = *lease;
  const auto hashes = hashes_of(values, chained, "load: hashes");
  const Rows rows = rows_of(dst, rows_arg, kv.block_bytes(), hashes.size(), Access::kWrite, "load");
  std::optional<OnboardOptions> options;
  if (mode || deadline_s) options = onboard_options(mode.value_or("auto"), deadline_s);
  (void)layout_of<G1>(kv);  // checks that the manager holds bytes
  nb::gil_scoped_release release;
  std::vector<Region> scratch;
  // What G1 and then G2 hold is copied out directly: the caller's buffer is where the bytes
  // go, so landing them in G1 first would only add a copy. The rest (G3, G4: read and
  // verified) is onboarded, then copied out of G1.
  const std::span<const SequenceHash> all(hashes);
  std::size_t n = copy_out_held(kv, kv.device(), all, rows, 0, scratch);
  if (n < hashes.size() && kv.host() != nullptr) {
    n += copy_out_held(kv, *kv.host(), all, rows, n, scratch);
  }
  if (n == hashes.size()) return n;
  const std::vector<SequenceHash> rest(hashes.begin() + static_cast<std::ptrdiff_t>(n),
                                       hashes.end());
  // With a deadline, take_blocks() returns by it: what arrived, the rest abandoned.
  OnboardHandle h = options ? kv.onboard(rest, *options) : kv.onboard(rest);
  std::vector<ImmutableBlock<G1>> blocks = h.take_blocks();
  const Layout& layout = layout_of<G1>(kv);
  const bool device = !host_accessible<G1>(kv);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    copy_block(layout, blocks[i].block_id(), rows.row(n + i), false, device, scratch);
  }
  return n + blocks.size();
}

}  // namespace

void bind_buffers(nb::class_<Manager>& cls) {
  def_views<G1, MutableBlock<G1>>(cls, true);
  def_views<G2, MutableBlock<G2>>(cls, true);
  def_views<G1, ImmutableBlock<G1>>(cls, false);
  def_views<G2, ImmutableBlock<G2>>(cls, false);

  const char* write_doc =
      "Copies rows of `src` into the blocks (row i, or rows[i], into block i); GIL released. "
      "`src`: a C-contiguous host array of whole blocks, read in place.";
  const char* read_doc =
      "Copies the blocks into rows of `dst` (block i into row i, or rows[i]). `dst`: a "
      "writable C-contiguous host array of whole blocks, written in place.";
  def_copies<G1, MutableBlock<G1>>(cls, "write", true, write_doc);
  def_copies<G2, MutableBlock<G2>>(cls, "write", true, write_doc);
  def_copies<G1, ImmutableBlock<G1>>(cls, "read", false, read_doc);
  def_copies<G2, ImmutableBlock<G2>>(cls, "read", false, read_doc);
  def_copies<G1, MutableBlock<G1>>(cls, "read", false, read_doc);
  def_copies<G2, MutableBlock<G2>>(cls, "read", false, read_doc);

  cls.def("store", &store, "hashes"_a, "src"_a, "rows"_a = nb::none(), "chained"_a = false,
          "tier"_a = TierId::kG2,
          "Stores block i's bytes (row i of src, or rows[i]; or the i-th buffer of a list) under "
          "hashes[i]: blocks the tier already holds are skipped, the others allocated (as many "
          "as fit), copied and registered, and go down to G3/G4 as the config says. Returns how "
          "many of the hashes the tier now holds. Hashes are flat by default (engine keys).");
  cls.def("load", &load, "hashes"_a, "dst"_a, "rows"_a = nb::none(), "chained"_a = false,
          "mode"_a = nb::none(), "deadline"_a = nb::none(),
          "Onboards the longest prefix of `hashes` held in any tier (every block read from G3 or "
          "G4 verified), copies block i into row i of dst (or rows[i]; or the i-th buffer of a "
          "list) and returns the prefix's length: a block that fails its check ends the prefix, "
          "and is never copied. `dst` is written in place: C-contiguous, writable, host memory. "
          "What G1 and G2 hold is copied out directly; for the rest, mode ('auto', 'load_all', "
          "'recompute_all') and deadline (seconds) act as in onboard(): by the deadline, load "
          "returns with what arrived, and the caller computes the rest.");
  cls.def(
      "block_address",
      [](Manager& m, const ImmutableBlock<G1>& b) {
        const auto lease = m.lease();
        check_own<G1>(*lease, &b, 0, "block_address");
        return layout_of<G1>(*lease).block_region(b.block_id()).addr;
      },
      "block"_a, "The address of a G1 block's memory (fully contiguous layout), as C++ sees it.");
  cls.def_static(
      "_address",
      [](nb::handle buffer) {
        return reinterpret_cast<std::uintptr_t>(
            host_bytes(buffer, Access::kRead, "_address: buffer").bytes.data());
      },
      "buffer"_a, "The address of a buffer as the extension receives it (for zero-copy tests).");
}

}  // namespace kvbm::python
