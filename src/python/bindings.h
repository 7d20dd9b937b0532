// src/python/bindings.h: what the files of the Python extension (kvbm._kvbm) share.
//
// The extension is a thin layer over the public API (docs/python.md): each
// bind_*() adds one area to the module. Conventions kept by every file:
//
//   * hashes cross as 1-D uint64 arrays (or lists) of sequence hash values;
//     make_hashes() turns them into SequenceHash values, either chained (one
//     sequence from position 0: block i has position i and block i-1 as its
//     parent, as hash_tokens() produced them) or flat (every value a block of
//     its own at position 0: opaque keys, as the engine integrations use);
//   * buffers cross as nb::ndarray (DLPack or the buffer protocol): their
//     address reaches C++ unchanged, nothing is copied on the way in;
//   * every call that may wait (a copy, an onboarding, a drain, a disk or
//     network round trip) releases the GIL; Python objects are read before
//     the release and written after it.
//
// Lifetime: a Manager is shared by the Python KvBlockManager and every array
// viewing its memory, so the memory outlives the last view. Block handles are
// the library's own (they stay safe after the manager is gone).

#pragma once

#include <cstdint>
#include <memory>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <span>
#include <string>
#include <vector>

#include "kvbm/events/kv_events.h"
#include "kvbm/kv_block_manager.h"

namespace kvbm::python {

namespace nb = nanobind;

/// A 1-D array of sequence hash values (uint64) in host memory.
using HashArray = nb::ndarray<const std::uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
/// Any C-contiguous host buffer, read or written as bytes.
using HostBuffer = nb::ndarray<nb::c_contig, nb::device::cpu>;
/// Row indices into a buffer of whole blocks.
using RowArray = nb::ndarray<const std::int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

class EventCollector;

/// The manager behind the Python KvBlockManager.
struct Manager {
  std::shared_ptr<KvBlockManager> kv;
  /// KV events (null when the manager was built without them): the publisher
  /// is fed by listeners on every pool; the collector keeps what it publishes
  /// for take_events() (absent when events go to a ZeroMQ socket only).
  std::shared_ptr<events::KvEventPublisher> publisher;
  std::shared_ptr<EventCollector> collector;

  /// Returns the manager; throws UsageError after close().
  [[nodiscard]] KvBlockManager& get() const;
};

/// Returns the SequenceHash values of `values`, chained or flat (file comment).
[[nodiscard]] std::vector<SequenceHash> make_hashes(std::span<const std::uint64_t> values,
                                                    bool chained);

/// Returns the bytes of a host buffer and its size.
[[nodiscard]] std::span<std::uint8_t> bytes_of(const HostBuffer& buffer);

void bind_errors(nb::module_& m);
void bind_hashing(nb::module_& m);
void bind_config(nb::module_& m);
void bind_blocks(nb::module_& m);
void bind_manager(nb::module_& m);
void bind_buffers(nb::class_<Manager>& cls);
void bind_events(nb::module_& m);
void bind_event_methods(nb::class_<Manager>& cls);
/// Attaches an event publisher to `config` (listeners on G1, G2, G3) and
/// stores it in `manager`: `endpoint` empty keeps events for take_events(),
/// else they are published on that ZeroMQ PUB endpoint as well.
void attach_events(Manager& manager, KvBlockManagerConfig& config, const std::string& endpoint);

}  // namespace kvbm::python
