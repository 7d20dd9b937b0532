// src/remote/remote_store_impl.h: the inside of a RemoteStore, shared by its
// two source files.
//
// remote_store.cpp: the calls, which split a batch over servers and their
// workers and follow a cluster's redirects in rounds. remote_store_worker.cpp:
// the workers (one connection each, per server) that pipeline a task, the
// calling thread's share of its own call (run_own_tasks), and each server's
// state. remote_store_cluster.cpp: the
// servers of a Redis Cluster and its slot map, discovered (CLUSTER SLOTS) on
// a background worker when the store starts and again after MOVED, a
// failover or a node that fails.
//
// Servers are only ever added (a cluster node seen once keeps its workers
// until the store is destroyed; one that died stays in backoff), so a
// Server* stays valid for the store's life.
//
// Time (kvbm/env.h): every decision reads the Env's clock (options.env):
// a batch's `deadline` (has the call's command_timeout passed?), a server's
// `retry_at` (is its backoff over?), `map_expires` and the refresher's rate
// limit (is a new slot map due?). Every wait on a socket is bounded by
// `io_deadline`, the same command_timeout on std::chrono::steady_clock
// (remote::Clock), since a poll needs a real bound; with a ManualClock a
// frozen server still ends a call after command_timeout of real time.
//
// Each server's queue is run by a detail::Worker of connections_per_server
// threads from the Env: one job is posted per task queued, and whoever takes
// the task first (a worker's job, or the calling thread in run_own_tasks)
// runs it on a connection borrowed from the server's pool (`spare`).
//
// Locks: topo_mu (servers, slot map) is taken before a Server's mu or
// state_mu, never after; nothing logs or does I/O under topo_mu.

#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <latch>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvbm/detail/mutex.h"
#include "kvbm/detail/worker.h"
#include "kvbm/env.h"
#include "kvbm/remote/remote_store.h"
#include "redis_cluster.h"
#include "redis_connection.h"
#include "remote_metrics.h"

namespace kvbm {

/// Why an item must be sent again, to another node (a cluster's redirect).
struct RemoteRedirect {
  enum class Kind : std::uint8_t { kNone, kMoved, kAsk } kind = Kind::kNone;
  std::uint16_t slot = 0;
  std::string node{};  ///< "host:port"
};

/// One call's blocks; workers fill the outcome of the items they were given.
struct RemoteBatch {
  remote::RemoteOp op;
  std::span<const std::uint64_t> hashes;
  std::span<const RemotePut> puts;
  std::span<const RemoteGet> gets;
  std::vector<RemoteStatus> status;
  std::vector<std::uint8_t> present;
  std::vector<RemoteRedirect> redirects;  ///< cluster only: one per item
  /// Items refused (kAccessDenied), by RemoteRefusal; filled by the caller after each round.
  std::array<std::uint64_t, kRemoteRefusalCount> refused{};
  Clock::time_point deadline;             ///< on the Env's clock: past it, items are kTimeout
  remote::Clock::time_point io_deadline;  ///< real time: the bound of every socket wait
  RemoteBatch(remote::RemoteOp o, std::size_t n, Clock::time_point dl, remote::Clock::time_point io,
              bool cluster)
      : op(o), status(n, RemoteStatus::kOk), present(n, 0), deadline(dl), io_deadline(io) {
    if (cluster) redirects.resize(n);
  }
  /// The sequence hash of item `i`, from the span of its operation.
  [[nodiscard]] std::uint64_t hash(std::size_t i) const {
    switch (op) {
      case remote::RemoteOp::kExists:
        return hashes[i];
      case remote::RemoteOp::kGet:
        return gets[i].hash;
      case remote::RemoteOp::kPut:
        return puts[i].hash;
    }
    return 0;
  }
};

/// A slice of a batch for one server; the caller waits on `done`.
struct RemoteTask {
  RemoteBatch* batch = nullptr;
  std::latch* done = nullptr;
  std::size_t server = 0;
  bool asking = false;             ///< each command preceded by ASKING (an ASK redirect)
  std::vector<std::size_t> items;  ///< indices into the batch
  /// The first refusal among its items: the server's reply, the command and key ("" if none).
  std::string refusal{};
};

struct RemoteStore::Impl {
  static constexpr std::uint16_t kNoServer = 0xFFFF;

  /// A connection of a server's pool, borrowed by whoever runs a task (a worker's job or a
  /// calling thread).
  struct CallerConnection {
    CallerConnection(remote::RedisEndpoint e, const Env& env) : conn(std::move(e), &env) {}
    remote::RedisConnection conn;
    remote::RedisRequest req;
  };

  struct Server {
    remote::RedisEndpoint endpoint;
    std::mutex mu;  // queue and spare
    std::deque<RemoteTask*> queue;
    std::vector<std::unique_ptr<CallerConnection>> spare;  ///< idle connections (mu)
    std::mutex state_mu;                                   // the fields below
    bool available = true;
    bool full = false;
    RemoteStatus failure = RemoteStatus::kUnavailable;  ///< why the last attempt failed
    std::string refusal{};  ///< the last AUTH refusal's text (failure kAccessDenied)
    std::chrono::milliseconds backoff{0};
    Clock::time_point retry_at{};  ///< on the Env's clock
    std::atomic<bool> available_flag{true};
    /// Bit (1 << RemoteOp) set while the command's last attempt on this server was refused.
    std::atomic<std::uint8_t> refused_ops{0};
    std::unique_ptr<detail::Worker> worker;  ///< runs the queue; stopped by ~Impl
  };

  RemoteStoreOptions options;
  std::shared_ptr<Env> env;  ///< options.env, or Env::standard()
  std::uint64_t fingerprint = 0;
  std::size_t block_bytes = 0;
  std::string key_head;  // "<prefix>:<fingerprint hex>:"
  remote::RemoteMetrics metrics;
  std::atomic<std::size_t> servers_available{0};
  std::atomic<bool> corrupt_logged{false};
  std::atomic<bool> access_logged{false};
  /// The last refusal, for stats() (RemoteStoreStats::refusal and the server and user).
  struct Refusal {
    std::string text, server, user;
  };
  mutable detail::Mutex refusal_mu;
  Refusal last_refusal KVBM_GUARDED_BY(refusal_mu);
  std::mutex state_publish_mu;  // orders kvbm_remote_state updates; taken before topo_mu
  struct Counters {
    std::atomic<std::uint64_t> hits{0}, misses{0}, puts{0}, failed_puts{0}, read_bytes{0},
        written_bytes{0};
    std::array<std::atomic<std::uint64_t>, kRemoteStatusCount> by_status{};
    std::array<std::atomic<std::uint64_t>, kRemoteRefusalCount> refused{};
  } counters;

  // --- servers and, on a cluster, the slot map ---
  bool is_cluster = false;
  std::vector<remote::RedisEndpoint> seeds;  ///< cluster: nodes named by the URL
  mutable detail::SharedMutex topo_mu;
  std::vector<std::unique_ptr<Server>> servers KVBM_GUARDED_BY(topo_mu);
  std::unordered_map<std::string, std::size_t> server_by_node KVBM_GUARDED_BY(topo_mu);
  std::vector<std::uint16_t> slot_owner KVBM_GUARDED_BY(topo_mu);  ///< cluster: slot -> server
  /// Cluster with replica_reads: slot -> a replica's server (kNoServer: none).
  std::vector<std::uint16_t> slot_replica KVBM_GUARDED_BY(topo_mu);

  // --- cluster discovery (remote_store_cluster.cpp) ---
  detail::Mutex discovery_mu;
  std::condition_variable discovery_cv;
  bool discovered KVBM_GUARDED_BY(discovery_mu) = false;  ///< first attempt finished
  std::atomic<bool> refresh_queued{false};
  std::atomic<bool> discovery_denied{false};  ///< the last CLUSTER SLOTS was refused (AUTH, ACL)
  std::atomic<RemoteRefusal> discovery_refusal{RemoteRefusal::kOther};  ///< its kind, when denied
  /// When the map is old enough to be asked for again unprompted (Env clock ticks): a map
  /// misses replicas that were still syncing, and nodes that joined without a redirect yet.
  std::atomic<Clock::duration::rep> map_expires{0};
  Clock::time_point last_refresh{};    // the refresher's own (Env clock)
  detail::Mutex refresh_mu;            // the refresher's rate-limit wait
  std::condition_variable refresh_cv;  // stopping, or the Env's clock moved
  bool refresh_stop KVBM_GUARDED_BY(refresh_mu) = false;
  Clock::Subscription refresh_subscription;
  std::string last_layout{};                  // the refresher's own: primaries, for the log
  bool discovery_failing = false;             // the refresher's own
  std::unique_ptr<detail::Worker> refresher;  // last: stopped first

  explicit Impl(RemoteStoreOptions o)
      : options(std::move(o)),
        env(Env::or_standard(options.env)),
        metrics(options.metrics_registry, options.pool_name) {}
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  [[nodiscard]] std::string key_of(std::uint64_t hash) const;
  /// The server of a hash now: jump hash over the URLs, or the cluster's slot
  /// owner; for a read with replica_reads, the slot's replica while it answers.
  [[nodiscard]] std::size_t server_of(std::uint64_t hash, bool read = false) const
      KVBM_REQUIRES_SHARED(topo_mu);
  /// Adds a server and starts its workers (returns the one already there).
  std::size_t add_server(remote::RedisEndpoint endpoint, const std::string& node)
      KVBM_REQUIRES(topo_mu);

  // server state: one log line per change (remote_store_worker.cpp)
  void server_failed(Server& s, RemoteStatus kind, const std::string& why);
  void server_succeeded(Server& s);
  void server_full(Server& s, bool full, const std::string& why);
  void access_denied(const Server& s, const std::string& why);
  /// After a task: marks its command refused on `s` (some item kAccessDenied, recording the
  /// refusal) or accepted again (some item answered); publishes a change of the tier's state.
  void note_access(Server& s, RemoteTask& t);
  /// Records the last refusal (stats()).
  void note_refusal(const std::string& text, const remote::RedisEndpoint& e);
  /// The tier's state now, with the servers known, down and refusing (remote_store.cpp).
  RemoteState tier_state(std::size_t& known, std::size_t& down, std::size_t& refused) const
      KVBM_EXCLUDES(topo_mu);
  /// Sets kvbm_remote_state to tier_state(); called after a server's state changed.
  void publish_state();
  RemoteStatus ensure_connected(Server& s, remote::RedisConnection& conn,
                                remote::Clock::time_point io_deadline);

  // the workers (remote_store_worker.cpp)
  struct TaskSink;
  struct PutFiller;
  void build(const RemoteTask& t, remote::RedisRequest& req,
             std::vector<std::size_t>& reply_items) const;
  void run(Server& s, remote::RedisConnection& conn, remote::RedisRequest& req, RemoteTask& t);
  /// run(), then counts the task done; never throws.
  void run_task(Server& s, remote::RedisConnection& conn, remote::RedisRequest& req,
                RemoteTask& t) noexcept;
  /// A worker's job: takes the task at the head of `s`'s queue (none: a caller took it) and
  /// runs it on a pooled connection.
  void run_next(Server& s) noexcept;
  /// The calling thread runs the tasks of batch `b` still queued on `s`, on a pooled
  /// connection (a spare one, or a new one).
  void run_own_tasks(Server& s, const RemoteBatch& b);
  /// Queues task `t` on `s` and posts a job for it to the server's worker.
  void enqueue(Server& s, RemoteTask& t);

  // calls (remote_store.cpp)
  std::unique_ptr<RemoteBatch> execute(remote::RemoteOp op, std::size_t n, auto fill);
  void record(const RemoteBatch& b, double seconds);

  // the cluster (remote_store_cluster.cpp)
  void start_cluster();
  /// Asks the refresher for a new slot map (at most one queued; rate-limited).
  void request_refresh();
  void refresh();
  /// The refresher waits on the Env's clock until `t`; false when the store stops first.
  bool wait_refresh_until(Clock::time_point t) KVBM_EXCLUDES(refresh_mu);
  /// Makes `ranges` the slot map (adding the servers it names); logs a change.
  void install(const std::vector<remote::ClusterSlotRange>& ranges, const std::string& from);
  /// Waits (up to `deadline`) for the first discovery to finish.
  void wait_discovered(remote::Clock::time_point deadline) KVBM_EXCLUDES(discovery_mu);
  /// The server of cluster node "host:port", added (workers started) when new;
  /// kNoServer when the text is no host:port.
  std::size_t server_of_node_locked(const std::string& node) KVBM_REQUIRES(topo_mu);
  /// The server of a redirect's node (added when new; a MOVED slot now points
  /// at it); SIZE_MAX when the node is no host:port.
  std::size_t follow_redirect(const RemoteRedirect& r) KVBM_EXCLUDES(topo_mu);
};

}  // namespace kvbm
