#include "kvbm/remote/remote_store.h"

#define XXH_INLINE_ALL
#include <algorithm>
#include <atomic>
#include <numeric>

#include <xxhash.h>

#include "kvbm/error.h"
#include "remote_store_impl.h"

namespace kvbm {

using remote::RemoteOp;

namespace {

constexpr std::size_t kNoIndex = static_cast<std::size_t>(-1);
constexpr int kMaxRounds = 5;  // a cluster call: the first send and up to 4 redirects

std::string hex16(std::uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = kDigits[v & 15];
  return s;
}

std::size_t total_bytes(auto regions) {
  std::size_t n = 0;
  for (auto r : regions) n += r.size();
  return n;
}

}  // namespace

RemoteStore::Impl::~Impl() {
  {
    detail::LockGuard lock(refresh_mu);
    refresh_stop = true;  // a refresh waiting out its rate limit gives up
  }
  refresh_cv.notify_all();
  if (refresher) refresher->stop();  // no server is added after this
  std::vector<Server*> all;
  {
    detail::ReaderLock lock(topo_mu);
    for (auto& s : servers) all.push_back(s.get());
  }
  for (Server* s : all) s->worker->stop();  // no call runs: the queues are empty
}

std::string RemoteStore::Impl::key_of(std::uint64_t hash) const { return key_head + hex16(hash); }

std::size_t RemoteStore::Impl::server_of(std::uint64_t hash, bool read) const {
  if (is_cluster) {
    if (slot_owner.empty()) return servers.size();
    const std::uint16_t slot = redis_key_slot(key_of(hash));
    if (read && !slot_replica.empty()) {
      const std::uint16_t replica = slot_replica[slot];
      if (replica != kNoServer && servers[replica]->available_flag.load()) return replica;
    }
    const std::uint16_t owner = slot_owner[slot];
    return owner == kNoServer ? servers.size() : owner;
  }
  if (servers.size() == 1) return 0;
  const std::uint64_t in[2] = {fingerprint, hash};
  return jump_consistent_hash(XXH3_64bits(in, sizeof(in)), servers.size());
}

std::size_t RemoteStore::Impl::add_server(remote::RedisEndpoint endpoint, const std::string& node) {
  if (auto it = server_by_node.find(node); it != server_by_node.end()) return it->second;
  auto s = std::make_unique<Server>();
  s->endpoint = std::move(endpoint);
  Server* raw = s.get();
  servers.push_back(std::move(s));
  server_by_node.emplace(node, servers.size() - 1);
  metrics.set_servers_available(++servers_available);
  raw->worker =
      env->make_worker("kvbm-remote " + raw->endpoint.display, options.connections_per_server);
  return servers.size() - 1;
}

// --- calls: a batch split by server and over each server's workers, in rounds ---

namespace {

/// Sends `pending` items of a batch, each to `target[i]` when set (a redirect) or to the server
/// of its hash, split over each server's workers; returns when every worker is done.
template <class Impl>
void run_round(Impl& impl, RemoteBatch& b, const std::vector<std::size_t>& pending,
               const std::vector<std::size_t>& target, const std::vector<std::uint8_t>& asking) {
  using Server = typename Impl::Server;
  std::vector<std::vector<std::size_t>> groups;  // (server, asking) -> items
  std::vector<Server*> group_server;
  bool unrouted = false;
  {
    detail::ReaderLock lock(impl.topo_mu);
    const std::size_t n = impl.servers.size();
    const bool read = b.op != RemoteOp::kPut;
    groups.resize(2 * n);
    for (std::size_t i : pending) {
      const std::size_t s = target[i] != kNoIndex ? target[i] : impl.server_of(b.hash(i), read);
      if (s >= n) {  // a cluster slot no node serves (not discovered yet, or uncovered)
        b.status[i] = RemoteStatus::kUnavailable;
        if (impl.discovery_denied) {
          b.status[i] = RemoteStatus::kAccessDenied;
          ++b.refused[static_cast<std::size_t>(impl.discovery_refusal.load())];
        }
        unrouted = true;
        continue;
      }
      groups[2 * s + asking[i]].push_back(i);
    }
    for (std::size_t s = 0; s < n; ++s) group_server.push_back(impl.servers[s].get());
  }
  if (unrouted) impl.request_refresh();
  const bool split = b.op != RemoteOp::kExists;  // EXISTS: one small pipeline per server
  std::vector<RemoteTask> tasks;
  std::vector<Server*> task_server;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& items = groups[g];
    if (items.empty()) continue;
    const std::size_t parts =
        split ? std::min(impl.options.connections_per_server, items.size()) : 1;
    const std::size_t per = (items.size() + parts - 1) / parts;
    for (std::size_t p = 0; p < items.size(); p += per) {
      RemoteTask t;
      t.batch = &b;
      t.asking = (g % 2) != 0;
      t.items.assign(items.begin() + static_cast<std::ptrdiff_t>(p),
                     items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), p + per)));
      tasks.push_back(std::move(t));
      task_server.push_back(group_server[g / 2]);
    }
  }
  std::latch done(static_cast<std::ptrdiff_t>(tasks.size()));
  for (std::size_t k = 0; k < tasks.size(); ++k) {
    tasks[k].done = &done;
    impl.enqueue(*task_server[k], tasks[k]);
  }
  // The caller works too: what no worker has taken yet, server by server.
  for (std::size_t k = 0; k < tasks.size(); ++k) {
    if (k == 0 || task_server[k] != task_server[k - 1]) impl.run_own_tasks(*task_server[k], b);
  }
  done.wait();
  for (const RemoteTask& t : tasks) {  // the refused items, by the kind of their task's refusal
    if (t.refusal.empty()) continue;
    const auto kind = static_cast<std::size_t>(remote_refusal_of(t.refusal));
    for (std::size_t i : t.items) b.refused[kind] += b.status[i] == RemoteStatus::kAccessDenied;
  }
}

}  // namespace

std::unique_ptr<RemoteBatch> RemoteStore::Impl::execute(RemoteOp op, std::size_t n, auto fill) {
  const auto start = remote::Clock::now();  // real time: the latency metric, the socket bound
  const auto now = env->now();              // the Env's: decisions
  auto b = std::make_unique<RemoteBatch>(op, n, now + options.command_timeout,
                                         start + options.command_timeout, is_cluster);
  fill(*b);
  if (is_cluster) {
    wait_discovered(b->io_deadline);
    if (now.time_since_epoch().count() > map_expires) request_refresh();  // every backoff_max
  }
  std::vector<std::size_t> pending(n);
  std::iota(pending.begin(), pending.end(), std::size_t{0});
  std::vector<std::size_t> target(n, kNoIndex);  // a redirect's server
  std::vector<std::uint8_t> asking(n, 0);
  for (int round = 1; !pending.empty(); ++round) {
    run_round(*this, *b, pending, target, asking);
    if (!is_cluster) break;
    // Items redirected go again, to the node named (ASK: after ASKING), within the deadline.
    std::vector<std::size_t> again;
    for (std::size_t i : pending) {
      RemoteRedirect& r = b->redirects[i];
      if (r.kind == RemoteRedirect::Kind::kNone) continue;
      const std::size_t s =
          round < kMaxRounds && env->now() < b->deadline ? follow_redirect(r) : kNoIndex;
      if (s != kNoIndex) {
        target[i] = s;
        asking[i] = r.kind == RemoteRedirect::Kind::kAsk ? 1 : 0;
        b->status[i] = RemoteStatus::kOk;
        again.push_back(i);
      }
      r = {};
    }
    pending = std::move(again);
  }
  record(*b, std::chrono::duration<double>(remote::Clock::now() - start).count());
  return b;
}

void RemoteStore::Impl::record(const RemoteBatch& b, double seconds) {
  remote::RemoteCallCounts c;
  c.refused = b.refused;
  for (const RemoteStatus st : b.status) {
    if (st != RemoteStatus::kOk && st != RemoteStatus::kNotFound)
      ++c.by_status[static_cast<std::size_t>(st)];
    if (b.op == RemoteOp::kGet) {
      if (st == RemoteStatus::kOk) {
        ++c.hits;
        c.read_bytes += block_bytes;
      } else {
        ++c.misses;
      }
    } else if (b.op == RemoteOp::kPut) {
      if (st == RemoteStatus::kOk) {
        ++c.puts;
        c.written_bytes += block_bytes;
      } else {
        ++c.failed_puts;
      }
    }
  }
  counters.hits += c.hits;
  counters.misses += c.misses;
  counters.puts += c.puts;
  counters.failed_puts += c.failed_puts;
  counters.read_bytes += c.read_bytes;
  counters.written_bytes += c.written_bytes;
  for (std::size_t i = 0; i < kRemoteStatusCount; ++i) counters.by_status[i] += c.by_status[i];
  for (std::size_t i = 0; i < kRemoteRefusalCount; ++i) counters.refused[i] += c.refused[i];
  metrics.record(b.op, seconds, c);
}

// --- the tier's state ---

RemoteState RemoteStore::Impl::tier_state(std::size_t& known, std::size_t& down,
                                          std::size_t& refused) const {
  detail::ReaderLock lock(topo_mu);
  known = servers.size();
  down = refused = 0;
  for (const auto& s : servers) {
    if (s->refused_ops.load() != 0) {
      ++refused;
      continue;
    }
    std::lock_guard state_lock(s->state_mu);
    if (!s->available) ++(s->failure == RemoteStatus::kAccessDenied ? refused : down);
  }
  if (refused > 0 || discovery_denied) return RemoteState::kRefused;
  return down > 0 ? RemoteState::kDown : RemoteState::kOk;
}

void RemoteStore::Impl::publish_state() {
  std::lock_guard lock(state_publish_mu);  // the last change is the one left set
  std::size_t known = 0, down = 0, refused = 0;
  metrics.set_state(tier_state(known, down, refused));
}

// --- the public API ---

RemoteStore::RemoteStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemoteStore::~RemoteStore() = default;

namespace {

void check_options(const RemoteStoreOptions& options) {
  KVBM_CHECK(!options.urls.empty(),
             "RemoteStoreOptions::urls is empty; name at least one server, e.g. "
             "redis://127.0.0.1:6379/0");
  options.name_space.layout.validate();
  KVBM_CHECK(options.connections_per_server >= 1,
             "RemoteStoreOptions::connections_per_server must be at least 1");
  KVBM_CHECK(options.connect_timeout.count() > 0 && options.command_timeout.count() > 0,
             "RemoteStoreOptions: connect_timeout and command_timeout must be positive");
  KVBM_CHECK(options.backoff_initial.count() > 0 && options.backoff_initial <= options.backoff_max,
             "RemoteStoreOptions: need 0 < backoff_initial <= backoff_max");
  KVBM_CHECK(options.ttl.count() >= 0, "RemoteStoreOptions::ttl must not be negative");
  KVBM_CHECK(!options.key_prefix.empty() && options.key_prefix.find(':') == std::string::npos,
             "RemoteStoreOptions::key_prefix must be non-empty and hold no ':'");
  const bool cluster = std::any_of(options.urls.begin(), options.urls.end(),
                                   [](const std::string& u) { return remote::is_cluster_url(u); });
  KVBM_CHECK(cluster || !options.replica_reads,
             "RemoteStoreOptions::replica_reads needs a Redis Cluster (a redis+cluster:// URL)");
  KVBM_CHECK(!cluster || options.urls.size() == 1,
             "RemoteStoreOptions::urls: a redis+cluster:// URL must be the only one (list more "
             "nodes in it: redis+cluster://host:port,host:port)");
}

/// The endpoints of the URLs (a cluster's: its seeds), credentials applied.
std::vector<remote::RedisEndpoint> endpoints_of(const RemoteStoreOptions& options) {
  std::vector<remote::RedisEndpoint> out;
  if (remote::is_cluster_url(options.urls.front())) {
    out = remote::parse_cluster_url(options.urls.front()).seeds;
  } else {
    for (const auto& url : options.urls) out.push_back(remote::parse_redis_url(url));
  }
  const remote::CredentialSources from{options.username, options.password_file,
                                       options.password_env};
  for (auto& e : out) {
    const std::string why = remote::apply_credentials(e, from);
    KVBM_CHECK(why.empty(), "RemoteStoreOptions: ", why);
    if (!e.unix_socket && !e.user.empty() && e.display.find('@') == std::string::npos) {
      e.display.insert(e.display.find("://") + 3, e.user + "@");
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<RemoteStore> RemoteStore::create(RemoteStoreOptions options) {
  check_options(options);
  auto endpoints = endpoints_of(options);
  const bool cluster = remote::is_cluster_url(options.urls.front());
  auto impl = std::make_unique<Impl>(std::move(options));
  impl->fingerprint = remote_fingerprint(impl->options.name_space);
  impl->block_bytes = impl->options.name_space.layout.block_bytes();
  impl->key_head = impl->options.key_prefix + ":" + hex16(impl->fingerprint) + ":";
  impl->metrics.set_servers_available(0);
  if (cluster) {
    impl->is_cluster = true;
    impl->seeds = std::move(endpoints);
    impl->start_cluster();
  } else {
    detail::WriterLock lock(impl->topo_mu);
    for (std::size_t i = 0; i < endpoints.size(); ++i) {
      // Named by position: two URLs of one server are two servers, as they always were.
      impl->add_server(std::move(endpoints[i]), std::to_string(i));
    }
  }
  return std::unique_ptr<RemoteStore>(new RemoteStore(std::move(impl)));
}

std::vector<bool> RemoteStore::exists(std::span<const std::uint64_t> hashes) {
  auto b = impl_->execute(RemoteOp::kExists, hashes.size(),
                          [&](RemoteBatch& batch) { batch.hashes = hashes; });
  std::vector<bool> out(hashes.size());
  for (std::size_t i = 0; i < hashes.size(); ++i)
    out[i] = b->status[i] == RemoteStatus::kOk && b->present[i] != 0;
  return out;
}

std::vector<RemoteStatus> RemoteStore::put(std::span<const RemotePut> blocks) {
  for (const auto& p : blocks) {
    KVBM_CHECK(total_bytes(p.regions) == impl_->block_bytes, "RemoteStore::put: block ", p.hash,
               " has ", total_bytes(p.regions), " bytes in its regions; the store's blocks have ",
               impl_->block_bytes);
  }
  auto b = impl_->execute(RemoteOp::kPut, blocks.size(),
                          [&](RemoteBatch& batch) { batch.puts = blocks; });
  return std::move(b->status);
}

std::vector<RemoteStatus> RemoteStore::get(std::span<const RemoteGet> blocks) {
  for (const auto& g : blocks) {
    KVBM_CHECK(total_bytes(g.regions) == impl_->block_bytes, "RemoteStore::get: block ", g.hash,
               " has ", total_bytes(g.regions), " bytes of destination; the store's blocks have ",
               impl_->block_bytes);
  }
  auto b = impl_->execute(RemoteOp::kGet, blocks.size(),
                          [&](RemoteBatch& batch) { batch.gets = blocks; });
  return std::move(b->status);
}

std::size_t RemoteStore::block_bytes() const noexcept { return impl_->block_bytes; }
std::uint64_t RemoteStore::fingerprint() const noexcept { return impl_->fingerprint; }
std::string RemoteStore::key_of(std::uint64_t hash) const { return impl_->key_of(hash); }
std::size_t RemoteStore::server_of(std::uint64_t hash) const noexcept {
  detail::ReaderLock lock(impl_->topo_mu);
  return impl_->server_of(hash);
}
bool RemoteStore::cluster() const noexcept { return impl_->is_cluster; }
std::size_t RemoteStore::server_count() const noexcept {
  detail::ReaderLock lock(impl_->topo_mu);
  return impl_->servers.size();
}
bool RemoteStore::server_available(std::size_t i) const {
  detail::ReaderLock lock(impl_->topo_mu);
  KVBM_CHECK(i < impl_->servers.size(), "RemoteStore::server_available: no server ", i);
  return impl_->servers[i]->available_flag.load();
}

RemoteStoreStats RemoteStore::stats() const {
  const auto& c = impl_->counters;
  RemoteStoreStats s;
  s.hits = c.hits;
  s.misses = c.misses;
  s.puts = c.puts;
  s.failed_puts = c.failed_puts;
  s.read_bytes = c.read_bytes;
  s.written_bytes = c.written_bytes;
  for (std::size_t i = 0; i < kRemoteStatusCount; ++i) s.blocks_by_status[i] = c.by_status[i];
  for (std::size_t i = 0; i < kRemoteRefusalCount; ++i) s.refused_by_reason[i] = c.refused[i];
  s.state = impl_->tier_state(s.servers, s.servers_down, s.servers_refused);
  detail::LockGuard lock(impl_->refusal_mu);
  s.refusal = impl_->last_refusal.text;
  s.refused_server = impl_->last_refusal.server;
  s.refused_user = impl_->last_refusal.user;
  return s;
}

}  // namespace kvbm
