// src/remote/remote_store_cluster.cpp: a RemoteStore's Redis Cluster: the slot
// map, discovered with CLUSTER SLOTS on a background worker and asked again
// after a MOVED, a node that fails or a cluster in flux (remote_store_impl.h).

#include <algorithm>

#include <spdlog/spdlog.h>

#include "kvbm/logging.h"
#include "redis_cluster.h"
#include "remote_store_impl.h"

namespace kvbm {

void RemoteStore::Impl::start_cluster() {
  {
    detail::WriterLock lock(topo_mu);
    slot_owner.assign(kRedisClusterSlots, kNoServer);
    if (options.replica_reads) slot_replica.assign(kRedisClusterSlots, kNoServer);
  }
  refresh_subscription = env->clock()->subscribe(refresh_mu.native(), refresh_cv);
  refresher = env->make_worker("kvbm-remote-cluster");
  request_refresh();
}

void RemoteStore::Impl::request_refresh() {
  if (!refresher || refresh_queued.exchange(true)) return;  // one queued is enough
  if (!refresher->post([this] {
        refresh_queued = false;
        refresh();
      })) {
    refresh_queued = false;  // stopping
  }
}

void RemoteStore::Impl::wait_discovered(remote::Clock::time_point deadline) {
  detail::UniqueLock lock(discovery_mu);
  discovery_cv.wait_until(lock.native(), deadline,
                          [&]() KVBM_REQUIRES(discovery_mu) { return discovered; });
}

std::size_t RemoteStore::Impl::server_of_node_locked(const std::string& node) {
  if (auto it = server_by_node.find(node); it != server_by_node.end()) return it->second;
  auto e = remote::cluster_node_endpoint(node, seeds.front());
  if (!e) return kNoServer;
  e->readonly = options.replica_reads;
  return add_server(std::move(*e), node);
}

std::size_t RemoteStore::Impl::follow_redirect(const RemoteRedirect& r) {
  std::size_t s = 0;
  {
    detail::WriterLock lock(topo_mu);
    s = server_of_node_locked(r.node);
    if (s == kNoServer) return static_cast<std::size_t>(-1);
    if (r.kind == RemoteRedirect::Kind::kMoved) {
      slot_owner[r.slot] = static_cast<std::uint16_t>(s);
      if (!slot_replica.empty()) slot_replica[r.slot] = kNoServer;  // until the next map
    }
  }
  if (r.kind == RemoteRedirect::Kind::kMoved) request_refresh();  // more slots may have moved
  return s;
}

namespace {

// Nodes to ask, best first: servers that answer, the URL's seeds, then the rest.
template <class Impl>
std::vector<remote::RedisEndpoint> candidates(Impl& impl) {
  std::vector<remote::RedisEndpoint> good, bad;
  {
    detail::ReaderLock lock(impl.topo_mu);
    for (const auto& s : impl.servers) {
      (s->available_flag.load() ? good : bad).push_back(s->endpoint);
    }
  }
  good.insert(good.end(), impl.seeds.begin(), impl.seeds.end());
  good.insert(good.end(), bad.begin(), bad.end());
  return good;
}

}  // namespace

bool RemoteStore::Impl::wait_refresh_until(Clock::time_point t) {
  detail::UniqueLock lock(refresh_mu);
  while (!refresh_stop && env->now() < t) env->clock()->wait_until(lock.native(), refresh_cv, t);
  return !refresh_stop;
}

void RemoteStore::Impl::refresh() {
  // At most one map every backoff_initial of the Env's clock: a burst of MOVED or failures asks
  // once.
  if (!wait_refresh_until(last_refresh + options.backoff_initial)) return;  // stopping
  last_refresh = env->now();

  std::vector<remote::ClusterSlotRange> ranges;
  std::string error, from;
  RemoteStatus st = RemoteStatus::kUnavailable;
  for (const auto& e : candidates(*this)) {
    st = remote::query_cluster_slots(e, remote::Clock::now() + options.connect_timeout, ranges,
                                     error);
    if (st == RemoteStatus::kOk) {
      from = e.display;
      break;
    }
    if (st == RemoteStatus::kAccessDenied) {
      from = e.display;
      discovery_refusal = remote_refusal_of(error);
      note_refusal(error, e);
      break;  // the same credentials everywhere: another node refuses them too
    }
  }
  const bool denied = st == RemoteStatus::kAccessDenied;
  if (discovery_denied.exchange(denied) != denied) publish_state();
  map_expires = (env->now() + options.backoff_max).time_since_epoch().count();
  if (st == RemoteStatus::kOk) {
    install(ranges, from);
  } else if (!discovery_failing) {
    discovery_failing = true;
    if (st == RemoteStatus::kAccessDenied) {
      logger()->error(
          "remote store {}: cluster node {} refused access ({}); check the user and password and "
          "the user's ACL (it needs +cluster|slots, docs/remote.md); every block is a miss",
          options.pool_name, from, error);
    } else {
      logger()->warn(
          "remote store {}: no node of the cluster answers CLUSTER SLOTS (last: {}: {}); blocks "
          "on unknown slots are misses until one does",
          options.pool_name, to_string(st), error);
    }
  }
  {
    detail::LockGuard lock(discovery_mu);
    discovered = true;
  }
  discovery_cv.notify_all();
}

void RemoteStore::Impl::install(const std::vector<remote::ClusterSlotRange>& ranges,
                                const std::string& from) {
  std::vector<std::uint16_t> owner(kRedisClusterSlots, kNoServer);
  std::vector<std::uint16_t> replica(options.replica_reads ? kRedisClusterSlots : 0, kNoServer);
  std::vector<std::string> primaries;
  std::size_t covered = 0;
  {
    detail::WriterLock lock(topo_mu);
    for (const auto& r : ranges) {
      const std::size_t s = server_of_node_locked(r.primary);
      if (s == kNoServer) continue;
      // With replica reads, the range's replicas take its slots in turn.
      std::vector<std::size_t> reps;
      for (const auto& node : r.replicas) {
        if (!replica.empty()) reps.push_back(server_of_node_locked(node));
      }
      std::erase(reps, std::size_t{kNoServer});
      for (std::size_t slot = r.first; slot <= r.last && slot < kRedisClusterSlots; ++slot) {
        owner[slot] = static_cast<std::uint16_t>(s);
        if (!reps.empty()) replica[slot] = static_cast<std::uint16_t>(reps[slot % reps.size()]);
        ++covered;
      }
      primaries.push_back(r.primary);
    }
    slot_owner.swap(owner);
    slot_replica.swap(replica);
  }
  std::sort(primaries.begin(), primaries.end());
  primaries.erase(std::unique(primaries.begin(), primaries.end()), primaries.end());
  std::string layout;
  for (const auto& p : primaries) layout += (layout.empty() ? "" : ", ") + p;
  layout += "; " + std::to_string(covered) + " of 16384 slots served";
  if (layout == last_layout && !discovery_failing) return;
  discovery_failing = false;
  last_layout = layout;
  logger()->info("remote store {}: cluster map from {}: {} primaries ({})", options.pool_name, from,
                 primaries.size(), layout);
}

}  // namespace kvbm
