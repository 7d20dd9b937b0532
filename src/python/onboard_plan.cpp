// src/python/onboard_plan.cpp: the onboarding plan and the measured costs in Python.
//
// OnboardPlan (kvbm/onboard_plan.h) is a read-only object: mode ("auto",
// "load_all", "recompute_all"), blocks, found and load (dicts by tier name:
// device, host, disk, remote), compute_blocks, compute_tokens, the times in
// seconds (load_time_s, load_tail_s, compute_time_s, expected_time_s),
// estimates_known, deadline_s (None: none), loaded and copies.
// KvBlockManager.transfer_costs() (kvbm/transfer_costs.h) is a dict:
// {"block_bytes", "paths": {"G3_to_G1": {...}, ...}, "prefill": {...}}, each
// path with its model (known, latency_s, per_block_s, ratio_p50, ratio_p99)
// and its block sizes' windows (batches, recorded, p50_s, p99_s,
// bytes_per_second).

#include "kvbm/onboard_plan.h"

#include <chrono>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <optional>
#include <string>

#include "kvbm/transfer_costs.h"
#include "python/bindings.h"

namespace kvbm::python {
namespace {

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

// A per-tier count by the tier's Python name (OnboardCounts' attributes).
nb::dict by_tier(const TierArray<std::size_t>& a) {
  static constexpr std::array<const char*, kTierCount> kNames = {"device", "host", "disk",
                                                                 "remote"};
  nb::dict d;
  for (const TierId t : kTierIds) d[kNames[TierArray<int>::index(t)]] = a[t];
  return d;
}

nb::dict model_dict(const TransferCostModel& m) {
  nb::dict d;
  d["known"] = m.known;
  d["latency_s"] = m.latency_s;
  d["per_block_s"] = m.per_block_s;
  d["ratio_p50"] = m.ratio_p50;
  d["ratio_p99"] = m.ratio_p99;
  return d;
}

nb::dict summary_dict(const TransferCostSummary& s) {
  nb::dict d;
  d["block_bytes"] = s.block_bytes;
  d["batches"] = s.batches;
  d["recorded"] = s.recorded;
  d["p50_s"] = seconds(s.p50);
  d["p99_s"] = seconds(s.p99);
  d["bytes_per_second"] = s.bytes_per_second;
  d["model"] = model_dict(s.model);
  return d;
}

}  // namespace

nb::dict transfer_costs_dict(const TransferCosts& c) {
  nb::dict paths;
  for (const TransferPathCost& p : c.paths) {
    nb::dict d;
    d["from"] = std::string(to_string(p.from));
    d["to"] = std::string(to_string(p.to));
    d["model"] = model_dict(p.model);
    nb::list sizes;
    for (const auto& s : p.sizes) sizes.append(summary_dict(s));
    d["sizes"] = sizes;
    paths[p.path.c_str()] = d;
  }
  nb::dict prefill;
  prefill["configured_tokens_per_second"] = c.prefill.configured_tokens_per_second;
  prefill["reported"] =
      c.prefill.reported ? nb::object(summary_dict(*c.prefill.reported)) : nb::none();
  prefill["model"] = model_dict(c.prefill.model);
  nb::dict out;
  out["block_bytes"] = c.block_bytes;
  out["paths"] = paths;
  out["prefill"] = prefill;
  return out;
}

OnboardOptions onboard_options(const std::string& mode, std::optional<double> deadline_s) {
  OnboardOptions o;
  o.mode = parse_onboard_mode(mode);
  if (deadline_s) {
    KVBM_CHECK(*deadline_s >= 0, "deadline: ", *deadline_s, " s is negative; give 0 or more");
    o.deadline = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(*deadline_s));
  }
  return o;
}

void bind_onboard_plan(nb::module_& m) {
  using P = OnboardPlan;
  nb::class_<P>(m, "OnboardPlan",
                "Load or recompute: how much of a prefix an onboarding loads, per tier, and how "
                "much is left to compute (KvBlockManager.plan_onboard; docs/onboarding.md).")
      .def_prop_ro("mode", [](const P& p) { return std::string(to_string(p.mode)); })
      .def_ro("blocks", &P::blocks, "blocks asked for")
      .def_prop_ro(
          "found", [](const P& p) { return by_tier(p.found); }, "the prefix found, per tier")
      .def_prop_ro(
          "load", [](const P& p) { return by_tier(p.load); },
          "the part handed back, per tier (device: G1 hits, no copy)")
      .def_ro("compute_blocks", &P::compute_blocks)
      .def_ro("compute_tokens", &P::compute_tokens)
      .def_prop_ro("load_time_s", [](const P& p) { return seconds(p.load_time); })
      .def_prop_ro("load_tail_s", [](const P& p) { return seconds(p.load_tail); })
      .def_prop_ro("compute_time_s", [](const P& p) { return seconds(p.compute_time); })
      .def_prop_ro("expected_time_s", [](const P& p) { return seconds(p.expected_time); })
      .def_ro("estimates_known", &P::estimates_known)
      .def_prop_ro("deadline_s",
                   [](const P& p) -> std::optional<double> {
                     if (!p.deadline) return std::nullopt;
                     return seconds(*p.deadline);
                   })
      .def_prop_ro("loaded", &P::loaded, "blocks handed back (hits and copies)")
      .def_prop_ro("copies", &P::copies, "blocks copied into G1")
      .def("__repr__", [](const P& p) {
        return "OnboardPlan(mode=" + std::string(to_string(p.mode)) +
               ", loaded=" + std::to_string(p.loaded()) + ", copies=" + std::to_string(p.copies()) +
               ", compute_blocks=" + std::to_string(p.compute_blocks) +
               ", expected_time_s=" + std::to_string(seconds(p.expected_time)) + ")";
      });
}

}  // namespace kvbm::python
