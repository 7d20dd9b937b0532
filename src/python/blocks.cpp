// src/python/blocks.cpp: block handles, onboarding and offload handles in Python.
//
// The handles are the library's own, one Python class per tier:
// MutableBlockG1/G2 (allocated, writable, not yet registered) and
// ImmutableBlockG1/G2/G3 (registered, shared). Dropping the Python object, or
// release(), returns the block to its pool on any thread, also after the
// manager is gone. A released handle is empty: valid is False and any other
// use raises kvbm.UsageError naming the call.

#include <array>
#include <chrono>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <optional>
#include <string>
#include <utility>

#include "kvbm/kv_block_manager.h"
#include "python/bindings.h"

namespace kvbm::python {

namespace {

using namespace nb::literals;

template <class Handle>
void release(Handle& h) {
  Handle gone = std::move(h);  // returns the block to its pool here
}

template <TierMarker T>
void bind_immutable(nb::module_& m, const char* name) {
  using B = ImmutableBlock<T>;
  nb::class_<B>(m, name, "A registered block (shared); see kvbm/blocks/immutable_block.h.")
      .def_prop_ro("valid", &B::valid, "False once released")
      .def_prop_ro("tier", [](const B&) { return std::string(tier_name<T>()); })
      .def_prop_ro("block_id", &B::block_id, "the block's index in its pool")
      .def_prop_ro("sequence_hash", [](const B& b) { return b.sequence_hash().value(); })
      .def_prop_ro("position", [](const B& b) { return b.sequence_hash().position(); })
      .def_prop_ro("parent",
                   [](const B& b) -> std::optional<std::uint64_t> {
                     const SequenceHash& h = b.sequence_hash();
                     if (!h.has_parent()) return std::nullopt;
                     return h.parent();
                   })
      .def_prop_ro("use_count", &B::use_count, "strong references (a snapshot)")
      .def(
          "clone", [](const B& b) { return B(b); }, "Returns another strong handle on the block.")
      .def("release", &release<B>, "Drops this handle now (the block stays cached if registered).")
      .def("__repr__", [name](const B& b) {
        if (!b.valid()) return std::string("<kvbm.") + name + " released>";
        return std::string("<kvbm.") + name + " id=" + std::to_string(b.block_id()) +
               " hash=" + std::to_string(b.sequence_hash().value()) + ">";
      });
}

template <TierMarker T>
void bind_mutable(nb::module_& m, const char* name) {
  using B = MutableBlock<T>;
  nb::class_<B>(m, name,
                "An allocated block, exclusively owned and writable; KvBlockManager.register() "
                "stages and registers it.")
      .def_prop_ro("valid", &B::valid, "False once released or registered")
      .def_prop_ro("tier", [](const B&) { return std::string(tier_name<T>()); })
      .def_prop_ro("block_id", &B::block_id)
      .def_prop_ro("block_size", &B::block_size, "tokens")
      .def("release", &release<B>, "Returns the block to the free pool now.");
}

/// TierId and TransferStatus.
void bind_enums(nb::module_& m) {
  nb::enum_<TierId>(m, "TierId", "A tier: G1 device, G2 host, G3 disk, G4 remote.")
      .value("G1", TierId::kG1)
      .value("G2", TierId::kG2)
      .value("G3", TierId::kG3)
      .value("G4", TierId::kG4);
  nb::enum_<TransferStatus>(m, "TransferStatus")
      .value("QUEUED", TransferStatus::kQueued)
      .value("WAITING", TransferStatus::kWaiting)
      .value("BATCHED", TransferStatus::kBatched)
      .value("TRANSFERRING", TransferStatus::kTransferring)
      .value("DONE", TransferStatus::kDone)
      .value("FAILED", TransferStatus::kFailed)
      .value("CANCELLED", TransferStatus::kCancelled);
}

/// The Python attribute of each tier's count in OnboardCounts (docs/python.md).
struct CountName {
  TierId tier;
  const char* name;
  const char* doc;
};
constexpr std::array<CountName, kTierCount> kCountNames = {{
    {TierId::kG1, "device", "already in G1"},
    {TierId::kG2, "host", "from G2"},
    {TierId::kG3, "disk", "from G3"},
    {TierId::kG4, "remote", "from G4 (through G2), verified"},
}};

/// OnboardCounts: where an onboarded prefix comes from.
void bind_onboard_counts(nb::module_& m) {
  auto cls = nb::class_<OnboardCounts>(m, "OnboardCounts",
                                       "Where an onboarded (or probed) prefix comes from.");
  cls.def(nb::init<>());
  for (const CountName& n : kCountNames) {
    const TierId t = n.tier;
    cls.def_prop_rw(
        n.name, [t](const OnboardCounts& c) { return c.found[t]; },
        [t](OnboardCounts& c, std::size_t v) { c.found[t] = v; }, n.doc);
  }
  cls.def("from_tier", &OnboardCounts::from, "tier"_a, "The prefix blocks that came from a tier.")
      .def_rw("failed", &OnboardCounts::failed, "copies that failed (the prefix ends before)")
      .def_rw("no_space", &OnboardCounts::no_space, "found below G1 but no room in G1")
      .def_rw("abandoned", &OnboardCounts::abandoned,
              "found below G1, not arrived when the onboarding was cut (never served)")
      .def_prop_ro("total", &OnboardCounts::total, "device + host + disk + remote")
      .def("__repr__", [](const OnboardCounts& c) {
        std::string s = "OnboardCounts(";
        for (const CountName& n : kCountNames) {
          s += std::string(n.name) + "=" + std::to_string(c.found[n.tier]) + ", ";
        }
        return s + "failed=" + std::to_string(c.failed) +
               ", no_space=" + std::to_string(c.no_space) +
               ", abandoned=" + std::to_string(c.abandoned) + ")";
      });
}

/// OnboardHandle: one onboarding.
void bind_onboard_handle(nb::module_& m) {
  nb::class_<OnboardHandle>(
      m, "OnboardHandle",
      "One onboarding (KvBlockManager.onboard); dropping it releases the prefix.")
      .def_prop_ro("valid", &OnboardHandle::valid)
      .def("status", &OnboardHandle::status)
      .def(
          "wait",
          [](const OnboardHandle& h,
             std::optional<double> timeout_s) -> std::optional<TransferStatus> {
            nb::gil_scoped_release release;
            if (!timeout_s) return h.wait();
            const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::duration<double>(*timeout_s));
            if (!h.wait_for(ns)) return std::nullopt;
            return h.status();
          },
          "timeout_s"_a = nb::none(),
          "Waits until the onboarding ends (or timeout_s passes: then returns None); returns the "
          "status.")
      .def("cancel", &OnboardHandle::cancel, nb::call_guard<nb::gil_scoped_release>(),
           "Discards the onboarding; returns False when it had already finished.")
      .def("take_blocks", &OnboardHandle::take_blocks, nb::call_guard<nb::gil_scoped_release>(),
           "Waits, then returns the prefix's G1 blocks in order (once).")
      .def("take_arrived", &OnboardHandle::take_arrived, nb::call_guard<nb::gil_scoped_release>(),
           "Returns at once the leading blocks that have arrived (the prefix) and abandons the "
           "rest (counts().abandoned: compute them); copies still running keep their G1 blocks "
           "until they end, and are never served.")
      .def("arrived", &OnboardHandle::arrived, nb::call_guard<nb::gil_scoped_release>(),
           "How many leading blocks have arrived now (what take_arrived() would return).")
      .def("counts", &OnboardHandle::counts, nb::call_guard<nb::gil_scoped_release>())
      .def("sources", &OnboardHandle::sources, nb::call_guard<nb::gil_scoped_release>(),
           "Waits, then returns the tier each block came from.")
      .def_prop_ro("plan", &OnboardHandle::plan,
                   "The OnboardPlan it followed (onboard with mode=), decided before any copy; "
                   "None for a plain onboard.")
      .def(
          "error",
          [](const OnboardHandle& h) {
            const std::optional<Error> e = h.error();
            return e ? e->message : std::string();
          },
          nb::call_guard<nb::gil_scoped_release>(),
          "Waits, then returns the first problem's message ('' when none); error_kind() says "
          "what kind it was.")
      .def(
          "error_kind",
          [](const OnboardHandle& h) -> std::optional<std::string> {
            const std::optional<Error> e = h.error();
            if (!e) return std::nullopt;
            return std::string(to_string(e->kind));
          },
          nb::call_guard<nb::gil_scoped_release>(),
          "Waits, then returns the first problem's kind ('io', 'no_space', 'corrupt', "
          "'unavailable', 'timeout', ...), or None.");
}

/// TransferHandle: one offload.
void bind_transfer_handle(nb::module_& m) {
  nb::class_<TransferHandle>(m, "TransferHandle", "One offload (KvBlockManager.offload).")
      .def_prop_ro("valid", &TransferHandle::valid)
      .def("status", &TransferHandle::status)
      .def_prop_ro("block_count", &TransferHandle::block_count)
      .def("wait", &TransferHandle::wait, nb::call_guard<nb::gil_scoped_release>())
      .def("cancel", &TransferHandle::cancel, nb::call_guard<nb::gil_scoped_release>());
}
}  // namespace

void bind_blocks(nb::module_& m) {
  bind_enums(m);

  bind_mutable<G1>(m, "MutableBlockG1");
  bind_mutable<G2>(m, "MutableBlockG2");
  bind_immutable<G1>(m, "ImmutableBlockG1");
  bind_immutable<G2>(m, "ImmutableBlockG2");
  bind_immutable<G3>(m, "ImmutableBlockG3");

  bind_onboard_counts(m);
  bind_onboard_handle(m);
  bind_transfer_handle(m);
}

}  // namespace kvbm::python
