#include "replay/option_checks.h"

#include <string>

#include "kvbm/router/kv_router.h"

namespace kvbm::replay {

std::string check_soak(const Options& o) {
  if (o.soak_seconds > 0 && (o.realtime || !o.sweep.empty()))
    return "--soak replays as fast as possible, once per pass: not with --realtime or --sweep";
  return {};
}

namespace {

// --persist and --remote against the tiers.
std::string check_storage(const Options& o) {
  if (o.persist && o.disk_dir.empty())
    return "--persist keeps G3 in a directory that outlives the run: add --disk-dir DIR";
  if (o.persist && o.metadata_only)
    return "--persist keeps G3's bytes: not with --metadata-only, which writes none";
  if (!o.remote.empty() && o.metadata_only)
    return "--remote stores bytes in Redis: not with --metadata-only, which moves none";
  if (!o.remote.empty() && o.host.blocks == 0 && o.host.bytes == 0 && !o.host.unlimited)
    return "--remote goes through G2 both ways: give G2 some blocks (--host-blocks)";
  return {};
}

// The instance, router and sweep options together.
std::string check_cluster(const Options& o) {
  if (o.instances > 1 && o.soak_seconds > 0)
    return "--soak replays through one instance: not with --instances";
  const bool clustered = o.router.has_value() || !o.sweep_instances.empty();
  if (clustered && o.assign_given)
    return "--assign places requests without a router: give --router or --assign, not both";
  if (clustered && o.soak_seconds > 0)
    return "--soak replays through one instance: not with --router or --sweep-instances";
  if (!o.sweep_instances.empty() && !o.sweep.empty())
    return "--sweep varies G1 and --sweep-instances the cluster: give one of them";
  if (!o.sweep_instances.empty() && o.instances != 1)
    return "--sweep-instances gives the instance counts: leave out --instances";
  if (!clustered &&
      (o.router_zmq || o.router_no_events || o.router_tier_cost ||
       o.router_load_weight != router::KvRouterOptions{}.load_weight || !o.sweep_routers.empty()))
    return "the --router-* and --sweep-routers options need --router or --sweep-instances";
  return {};
}

std::string check_overlap(const Options& o) {
  if (o.overlap_offload && o.g1_g2 != OffloadMode::kWriteThrough &&
      o.g2_g3 != OffloadMode::kWriteThrough)
    return "--overlap-offload applies to write-through copies: add --offload-mode write_through";
  return {};
}

}  // namespace

std::string check_together(const Options& o) {
  std::string e = check_storage(o);
  if (e.empty()) e = check_cluster(o);
  if (e.empty()) e = check_overlap(o);
  return e;
}

}  // namespace kvbm::replay
