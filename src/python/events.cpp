// src/python/events.cpp: KV events (kvbm/events/kv_events.h) in Python.
//
// KvBlockManager(config, events=True) attaches a KvEventPublisher to G1, G2
// and G3 (media "GPU", "CPU", "STORAGE"); its sink is an EventCollector that
// keeps every batch until take_events() returns it, and, given a ZeroMQ
// endpoint (events="tcp://*:5557"), also publishes it there in vLLM's wire
// format. take_events() flushes first, so it returns every event reported so
// far, in the order the pools changed.

#include <mutex>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>
#include <string>
#include <utility>
#include <vector>

#include "kvbm/config.h"
#include "kvbm/events/event_sink.h"
#include "kvbm/events/kv_events.h"
#include "python/bindings.h"
#include "python/integers.h"

namespace kvbm::python {

/// Keeps published batches for take_events(); forwards each to `next` when set.
class EventCollector final : public events::EventSink {
 public:
  explicit EventCollector(std::shared_ptr<events::EventSink> next) : next_(std::move(next)) {}

  void publish(std::uint64_t sequence, const events::KvEventBatch& batch,
               std::span<const std::uint8_t> payload) override {
    {
      std::lock_guard lock(mu_);
      for (const auto& e : batch.events) events_.push_back(e);
    }
    if (next_) next_->publish(sequence, batch, payload);
  }

  /// Returns and forgets every event kept so far.
  std::vector<events::KvEvent> take() {
    std::lock_guard lock(mu_);
    return std::exchange(events_, {});
  }

 private:
  std::shared_ptr<events::EventSink> next_;
  std::mutex mu_;
  std::vector<events::KvEvent> events_;
};

EventTap make_event_tap(const std::string& endpoint) {
  std::shared_ptr<events::EventSink> zmq;
  if (!endpoint.empty()) {
#if KVBM_HAVE_ZMQ
    events::ZmqEventSinkOptions options;
    options.endpoint = endpoint;
    zmq = std::make_shared<events::ZmqEventSink>(options);
#else
    KVBM_CHECK(false,
               "events: this build has no ZeroMQ publisher (install libzmq3-dev and cppzmq-dev); "
               "use events=True and take_events()");
#endif
  }
  EventTap tap;
  tap.collector = std::make_shared<EventCollector>(std::move(zmq));
  events::KvEventPublisherOptions options;
  options.background_flush =
      !endpoint.empty();  // a socket's subscribers should not wait for take_events()
  tap.publisher = std::make_shared<events::KvEventPublisher>(tap.collector, options);
  return tap;
}

std::vector<events::KvEvent> take_events(const EventTap& tap) {
  tap.publisher->flush();
  return tap.collector->take();
}

void attach_events(Manager& manager, KvBlockManagerConfig& config, const std::string& endpoint) {
  EventTap tap = make_event_tap(endpoint);
  manager.collector = tap.collector;
  manager.publisher = tap.publisher;
  const std::uint32_t block_size = config.layout.page_size;
  config.device_listeners.push_back(manager.publisher->listener(events::kMediumGpu, block_size));
  config.host_listeners.push_back(manager.publisher->listener(events::kMediumCpu, block_size));
  config.disk_listeners.push_back(manager.publisher->listener(events::kMediumDisk, block_size));
}

void bind_events(nb::module_& m) {
  using namespace events;
  using namespace nb::literals;
  nb::class_<BlockStored>(m, "BlockStored",
                          "Blocks registered under new hashes (one parent chain).")
      .def(
          "__init__",
          [](BlockStored* self, nb::handle block_hashes, std::optional<std::uint64_t> parent,
             std::string medium, std::uint32_t block_size, nb::handle token_ids,
             std::optional<std::int64_t> lora_id) {
            BlockStored e;
            e.block_hashes = integers_of<std::uint64_t>(block_hashes, "BlockStored: block_hashes");
            e.parent_block_hash = parent;
            if (!token_ids.is_none()) {
              e.token_ids = integers_of<std::uint32_t>(token_ids, "BlockStored: token_ids");
            }
            e.block_size = block_size;
            e.lora_id = lora_id;
            e.medium = std::move(medium);
            new (self) BlockStored(std::move(e));
          },
          "block_hashes"_a, "parent_block_hash"_a = nb::none(), "medium"_a = "GPU",
          "block_size"_a = 0, "token_ids"_a = nb::none(), "lora_id"_a = nb::none(),
          "An event as a pool publishes it: `block_hashes` in chain order under "
          "`parent_block_hash` (None for a root), in `medium` ('GPU', 'CPU', 'STORAGE', "
          "'REMOTE').")
      .def_ro("block_hashes", &BlockStored::block_hashes)
      .def_ro("parent_block_hash", &BlockStored::parent_block_hash)
      .def_ro("token_ids", &BlockStored::token_ids)
      .def_ro("block_size", &BlockStored::block_size)
      .def_ro("lora_id", &BlockStored::lora_id)
      .def_ro("medium", &BlockStored::medium)
      .def_ro("group_idx", &BlockStored::group_idx, "the KV cache group; None for a dense model")
      .def_ro("kv_cache_spec_kind", &BlockStored::kv_cache_spec_kind,
              "the group's kind in vLLM's words ('full_attention', 'sliding_window', ...)")
      .def_ro("kv_cache_spec_sliding_window", &BlockStored::kv_cache_spec_sliding_window,
              "W of a sliding-window group; else None")
      .def("__repr__", [](const BlockStored& e) {
        return "BlockStored(medium=" + e.medium +
               ", blocks=" + std::to_string(e.block_hashes.size()) + ")";
      });
  nb::class_<BlockRemoved>(m, "BlockRemoved", "Registered blocks that left their pool.")
      .def(
          "__init__",
          [](BlockRemoved* self, nb::handle block_hashes, std::string medium) {
            new (self)
                BlockRemoved{integers_of<std::uint64_t>(block_hashes, "BlockRemoved: block_hashes"),
                             std::move(medium), std::nullopt};
          },
          "block_hashes"_a, "medium"_a = "GPU")
      .def_ro("block_hashes", &BlockRemoved::block_hashes)
      .def_ro("medium", &BlockRemoved::medium)
      .def_ro("group_idx", &BlockRemoved::group_idx, "the KV cache group; None for a dense model")
      .def("__repr__", [](const BlockRemoved& e) {
        return "BlockRemoved(medium=" + e.medium +
               ", blocks=" + std::to_string(e.block_hashes.size()) + ")";
      });
  nb::class_<AllBlocksCleared>(m, "AllBlocksCleared", "Everything a pool held is gone.")
      .def(
          "__init__",
          [](AllBlocksCleared* self, std::string medium) {
            new (self) AllBlocksCleared{std::move(medium)};
          },
          "medium"_a = "")
      .def_ro("medium", &AllBlocksCleared::medium);
}

void bind_event_methods(nb::class_<Manager>& cls) {
  cls.def(
      "take_events",
      [](Manager& m) {
        const auto lease = m.lease();  // raises after close()
        KVBM_CHECK(m.publisher != nullptr,
                   "take_events: the manager was built without events; pass events=True to "
                   "KvBlockManager");
        std::vector<events::KvEvent> out;
        {
          nb::gil_scoped_release release;
          out = take_events(EventTap{m.publisher, m.collector});
        }
        return out;
      },
      "Returns every KV event (BlockStored, BlockRemoved, AllBlocksCleared) since the last call, "
      "in order; needs events=True (or an endpoint) at construction.");
}

}  // namespace kvbm::python
