// src/python/stats.cpp: KvBlockManager.stats() as a dict, read from the C++
// structs of kvbm/kv_block_manager_stats.h field by field.
//
// Each struct has one table of (name, member) here; a static_assert ties the
// table to the struct's size, so a field added in C++ fails the build until it
// is listed, and reaches Python under its C++ name.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <optional>
#include <string>

#include "kvbm/kv_block_manager.h"
#include "kvbm/kv_block_manager_stats.h"
#include "python/bindings.h"

namespace kvbm::python {
namespace {

template <class S, class V>
struct Field {
  const char* name;
  V S::*member;
};

template <class S, class V, std::size_t N>
void put(nb::dict& d, const S& s, const std::array<Field<S, V>, N>& fields) {
  for (const auto& f : fields) d[f.name] = s.*(f.member);
}

using PC = PoolCounts;
constexpr std::array<Field<PC, std::size_t>, 7> kPoolCounts{{
    {"total", &PC::total},
    {"reset", &PC::reset},
    {"inactive", &PC::inactive},
    {"evictable", &PC::evictable},
    {"in_use", &PC::in_use},
    {"mutable_out", &PC::mutable_out},
    {"immutable_out", &PC::immutable_out},
}};
static_assert(sizeof(PC) == kPoolCounts.size() * sizeof(std::size_t),
              "PoolCounts has a field kPoolCounts does not list: add it");

using PD = PoolCounterDelta;
constexpr std::array<Field<PD, std::uint64_t>, 11> kPoolCounters{{
    {"allocations", &PD::allocations},
    {"allocations_from_reset", &PD::allocations_from_reset},
    {"evictions", &PD::evictions},
    {"registrations", &PD::registrations},
    {"duplicate_blocks", &PD::duplicate_blocks},
    {"registration_dedup", &PD::registration_dedup},
    {"stagings", &PD::stagings},
    {"match_hashes_requested", &PD::match_hashes_requested},
    {"match_blocks_returned", &PD::match_blocks_returned},
    {"scan_hashes_requested", &PD::scan_hashes_requested},
    {"scan_blocks_returned", &PD::scan_blocks_returned},
}};
static_assert(sizeof(PD) == kPoolCounters.size() * sizeof(std::uint64_t),
              "PoolCounterDelta has a field kPoolCounters does not list: add it");

using OC = OffloadCounts;
constexpr std::array<Field<OC, std::uint64_t>, 9> kOffloadCounts{{
    {"enqueued", &OC::enqueued},
    {"transferred", &OC::transferred},
    {"already_present", &OC::already_present},
    {"filtered", &OC::filtered},
    {"evicted", &OC::evicted},
    {"no_space", &OC::no_space},
    {"copy_failed", &OC::copy_failed},
    {"cancelled_containers", &OC::cancelled_containers},
    {"batches", &OC::batches},
}};
static_assert(sizeof(OC) == kOffloadCounts.size() * sizeof(std::uint64_t),
              "OffloadCounts has a field kOffloadCounts does not list: add it");

using TC = TransferCounts;
constexpr std::array<Field<TC, std::uint64_t>, 3> kTransferCounts{{
    {"blocks", &TC::blocks},
    {"bytes", &TC::bytes},
    {"failed_blocks", &TC::failed_blocks},
}};
static_assert(sizeof(TC) == kTransferCounts.size() * sizeof(std::uint64_t),
              "TransferCounts has a field kTransferCounts does not list: add it");

using RS = RemoteStoreStats;
constexpr std::array<Field<RS, std::uint64_t>, 6> kRemoteStats{{
    {"hits", &RS::hits},
    {"misses", &RS::misses},
    {"puts", &RS::puts},
    {"failed_puts", &RS::failed_puts},
    {"read_bytes", &RS::read_bytes},
    {"written_bytes", &RS::written_bytes},
}};
// RemoteStoreStats's shape: the counters kRemoteStats lists, the two arrays, then the state
// and the refusal (remote_dict). A field added there changes its size: list it here too.
struct RemoteStatsShape {
  std::array<std::uint64_t, kRemoteStats.size() + kRemoteStatusCount + kRemoteRefusalCount> n;
  RemoteState state;
  std::array<std::size_t, 3> servers;
  std::array<std::string, 3> refusal;
};
static_assert(sizeof(RS) == sizeof(RemoteStatsShape),
              "RemoteStoreStats has a field remote_dict does not show: add it");

nb::str name_of(TierId t) { return nb::str(std::string(to_string(t)).c_str()); }

nb::dict tiers_dict(const KvBlockManagerStats& s) {
  nb::dict tiers;
  for (const auto& t : s.tiers) {
    if (!t.pooled()) continue;  // its store's stats: remote_dict
    nb::dict d;
    put(d, t.blocks, kPoolCounts);
    put(d, t.counters, kPoolCounters);
    tiers[name_of(t.tier)] = d;
  }
  return tiers;
}

nb::dict boundaries_dict(const KvBlockManagerStats& s) {
  nb::dict boundaries;
  for (const auto& b : s.boundaries) {
    nb::dict d;
    put(d, b.counts, kOffloadCounts);
    d["mode"] = std::string(to_string(b.mode));
    const std::string key =
        std::string(to_string(b.upper)) + "->" + std::string(to_string(b.lower));
    boundaries[nb::str(key.c_str())] = d;
  }
  return boundaries;
}

nb::dict onboarding_dict(const OnboardStats& o) {
  nb::dict onboarded;
  for (const auto& src : o.onboarded) onboarded[name_of(src.tier)] = src.blocks;
  nb::dict d;
  d["hits"] = o.hits;
  d["onboarded"] = onboarded;
  d["failed"] = o.failed;
  d["cancelled"] = o.cancelled;
  return d;
}

nb::object remote_dict(const RemoteStoreStats* r) {
  if (r == nullptr) return nb::none();
  nb::dict d;
  put(d, *r, kRemoteStats);
  nb::dict by_status;
  for (std::size_t i = 0; i < kRemoteStatusCount; ++i) {
    by_status[nb::str(std::string(to_string(static_cast<RemoteStatus>(i))).c_str())] =
        r->blocks_by_status[i];
  }
  d["blocks_by_status"] = by_status;
  nb::dict refused;
  for (std::size_t i = 0; i < kRemoteRefusalCount; ++i) {
    refused[nb::str(std::string(to_string(static_cast<RemoteRefusal>(i))).c_str())] =
        r->refused_by_reason[i];
  }
  d["refused_by_reason"] = refused;
  // "refused" (credentials or ACL: the refusal says which), "down" or "ok".
  d["state"] = nb::str(std::string(to_string(r->state)).c_str());
  d["servers"] = r->servers;
  d["servers_down"] = r->servers_down;
  d["servers_refused"] = r->servers_refused;
  d["refusal"] = nb::str(r->refusal.c_str());
  d["refused_server"] = nb::str(r->refused_server.c_str());
  d["refused_user"] = nb::str(r->refused_user.c_str());
  return d;
}

}  // namespace

nb::object recovery_dict(const std::optional<RecoverySummary>& r) {
  if (!r) return nb::none();
  nb::dict d;
  d["scanned"] = r->scanned;
  d["recovered"] = r->recovered;
  d["discarded"] = r->discarded_total();
  d["reset_reason"] = r->reset_reason;
  d["bytes_read"] = r->bytes_read;
  d["elapsed_s"] = std::chrono::duration<double>(r->elapsed).count();
  return d;
}

nb::dict stats_dict(const KvBlockManagerStats& s) {
  nb::dict transfers;
  for (const auto& p : s.transfers) {
    nb::dict d;
    put(d, p.counts, kTransferCounts);
    transfers[nb::str(p.path.c_str())] = d;
  }
  nb::dict out;
  out["tiers"] = tiers_dict(s);
  out["boundaries"] = boundaries_dict(s);
  out["transfers"] = transfers;
  out["onboarding"] = onboarding_dict(s.onboarding);
  out["remote"] = remote_dict(s.store(TierId::kG4));
  return out;
}

}  // namespace kvbm::python
