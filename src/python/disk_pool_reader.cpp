// src/python/disk_pool_reader.cpp: kvbm.DiskPoolReader, a read-only view of a
// persistent disk pool another process owns (kvbm/disk/disk_pool_reader.h).

#include "kvbm/disk/disk_pool_reader.h"

#include <cstddef>
#include <cstdint>
#include <nanobind/stl/string.h>
#include <span>
#include <string>
#include <vector>

#include "kvbm/error.h"
#include "python/bindings.h"
#include "python/host_bytes.h"
#include "python/integers.h"

namespace kvbm::python {
namespace {

/// The destination of one block: a buffer, or a tuple of buffers (its segments, in order).
struct Destination {
  std::vector<HostBytes> buffers;
  std::vector<std::span<std::byte>> segments;
};

Destination destination(nb::handle item, const std::string& what) {
  Destination d;
  auto add = [&](nb::handle part, const std::string& part_what) {
    HostBytes b = host_bytes(part, Access::kWrite, part_what.c_str());
    d.segments.emplace_back(reinterpret_cast<std::byte*>(b.bytes.data()), b.bytes.size());
    d.buffers.push_back(std::move(b));
  };
  if (nb::isinstance<nb::tuple>(item)) {
    std::size_t j = 0;
    for (nb::handle part : nb::borrow<nb::tuple>(item)) {
      add(part, what + "[" + std::to_string(j++) + "]");
    }
  } else {
    add(item, what);
  }
  return d;
}

}  // namespace

void bind_disk_pool_reader(nb::module_& m) {
  nb::class_<DiskPoolReader>(
      m, "DiskPoolReader",
      "Reads the blocks of a persistent disk pool (a G3 directory) that another process owns, "
      "from an index of its slot headers that refresh() rebuilds. Every read is verified "
      "(header, hash, layout and namespace, checksum): a stale index entry is a miss, never "
      "wrong bytes.")
      .def(
          "__init__",
          [](DiskPoolReader* self, const std::string& directory, const LayoutConfig& layout,
             const std::string& namespace_id, const std::string& file_name) {
            DiskPoolReaderOptions o;
            o.directory = directory;
            o.config = layout;
            o.namespace_id = namespace_id;
            o.file_name = file_name;
            new (self) DiskPoolReader(std::move(o));
          },
          nb::arg("directory"), nb::arg("layout"), nb::arg("namespace") = "",
          nb::arg("file_name") = "",
          "The owner's disk_directory, layout and disk_namespace; opens nothing (call refresh()).")
      .def("refresh", &DiskPoolReader::refresh, nb::call_guard<nb::gil_scoped_release>(),
           "Re-reads the file's slot headers; returns the number of blocks indexed (0 when the "
           "file does not exist yet or holds another pool: see last_error).")
      .def(
          "count_prefix",
          [](const DiskPoolReader& r, nb::handle hashes) {
            const auto h =
                integers_of<std::uint64_t>(hashes, "DiskPoolReader.count_prefix: hashes");
            std::size_t n = 0;
            while (n < h.size() && r.contains(h[n])) ++n;
            return n;
          },
          nb::arg("hashes"), "The number of leading hashes indexed.")
      .def(
          "__contains__",
          [](const DiskPoolReader& r, nb::handle hash) {
            const auto h = integers_of<std::uint64_t>(nb::make_tuple(hash), "DiskPoolReader: hash");
            return r.contains(h[0]);
          },
          nb::arg("hash"))
      .def("__len__", &DiskPoolReader::size)
      .def_prop_ro("block_bytes", &DiskPoolReader::block_bytes)
      .def_prop_ro("last_error", &DiskPoolReader::last_error,
                   "Why the last refresh() found nothing to read ('' when it read the file).")
      .def(
          "read",
          [](DiskPoolReader& r, nb::handle hashes, nb::handle dsts) {
            const auto h = integers_of<std::uint64_t>(hashes, "DiskPoolReader.read: hashes");
            KVBM_CHECK(nb::isinstance<nb::sequence>(dsts) && !nb::isinstance<nb::str>(dsts),
                       "DiskPoolReader.read: dsts must be a list of buffers (or tuples of "
                       "segments), one per hash");
            const std::size_t n = nb::len(dsts);
            KVBM_CHECK(n == h.size(), "DiskPoolReader.read: ", n, " buffers for ", h.size(),
                       " hashes; give one buffer per hash");
            std::vector<Destination> d;
            d.reserve(n);
            std::size_t i = 0;
            for (nb::handle item : nb::borrow<nb::sequence>(dsts)) {
              d.push_back(
                  destination(item, "DiskPoolReader.read: dsts[" + std::to_string(i++) + "]"));
              std::size_t total = 0;
              for (const auto& s : d.back().segments) total += s.size();
              KVBM_CHECK(total == r.block_bytes(), "DiskPoolReader.read: dsts[", i - 1, "] holds ",
                         total, " bytes; a block is ", r.block_bytes());
            }
            nb::gil_scoped_release release;
            std::size_t done = 0;
            while (done < n && r.read(h[done], d[done].segments)) ++done;
            return done;
          },
          nb::arg("hashes"), nb::arg("dsts"),
          "Reads the blocks of `hashes` into `dsts` in order, up to the first that is not "
          "indexed or fails verification; returns how many were read.");
}

}  // namespace kvbm::python
