#include "kvbm/remote/remote_store.h"

#include <spdlog/spdlog.h>
#define XXH_INLINE_ALL
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <latch>
#include <mutex>
#include <thread>

#include <xxhash.h>

#include "kvbm/error.h"
#include "kvbm/logging.h"
#include "redis_connection.h"
#include "remote_metrics.h"

namespace kvbm {

using remote::Clock;
using remote::RedisConnection;
using remote::RedisReply;
using remote::RedisRequest;
using remote::RemoteOp;

namespace {

/// One batch handed to the workers; the caller waits on `done`.
struct Batch {
  RemoteOp op;
  std::span<const std::uint64_t> hashes;
  std::span<const RemotePut> puts;
  std::span<const RemoteGet> gets;
  std::vector<RemoteStatus> status;
  std::vector<std::uint8_t> present;
  Clock::time_point deadline;
  std::latch done;
  Batch(RemoteOp o, std::size_t n, std::ptrdiff_t tasks, Clock::time_point dl)
      : op(o), status(n, RemoteStatus::kOk), present(n, 0), deadline(dl), done(tasks) {}
};

/// A slice of a batch for one server.
struct Task {
  Batch* batch = nullptr;
  std::vector<std::size_t> items;  // indices into the batch
};

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

struct RemoteStore::Impl {
  struct Server {
    remote::RedisEndpoint endpoint;
    std::mutex mu;  // queue and stop
    std::condition_variable cv;
    std::deque<Task*> queue;
    bool stop = false;
    std::mutex state_mu;  // the fields below
    bool available = true;
    bool full = false;
    std::chrono::milliseconds backoff{0};
    Clock::time_point retry_at{};
    std::atomic<bool> available_flag{true};
    std::vector<std::thread> workers;
  };

  RemoteStoreOptions options;
  std::uint64_t fingerprint = 0;
  std::size_t block_bytes = 0;
  std::string key_head;  // "<prefix>:<fingerprint hex>:"
  std::vector<std::unique_ptr<Server>> servers;
  remote::RemoteMetrics metrics;
  std::atomic<std::size_t> servers_available{0};
  std::atomic<bool> corrupt_logged{false};
  struct Counters {
    std::atomic<std::uint64_t> hits{0}, misses{0}, puts{0}, failed_puts{0}, read_bytes{0},
        written_bytes{0};
    std::array<std::atomic<std::uint64_t>, kRemoteStatusCount> by_status{};
  } counters;

  explicit Impl(RemoteStoreOptions o)
      : options(std::move(o)), metrics(options.metrics_registry, options.pool_name) {}

  ~Impl() {
    for (auto& s : servers) {
      {
        std::lock_guard lock(s->mu);
        s->stop = true;
      }
      s->cv.notify_all();
    }
    for (auto& s : servers) {
      for (auto& t : s->workers) t.join();
    }
  }

  [[nodiscard]] std::string key_of(std::uint64_t hash) const { return key_head + hex16(hash); }

  [[nodiscard]] std::size_t server_of(std::uint64_t hash) const noexcept {
    if (servers.size() == 1) return 0;
    const std::uint64_t in[2] = {fingerprint, hash};
    return jump_consistent_hash(XXH3_64bits(in, sizeof(in)), servers.size());
  }

  // --- server state: one log line per change ---

  void server_failed(Server& s, RemoteStatus kind, const std::string& why) {
    bool changed = false;
    std::chrono::milliseconds wait{};
    {
      std::lock_guard lock(s.state_mu);
      changed = s.available;
      s.available = false;
      s.backoff = changed ? options.backoff_initial : std::min(s.backoff * 2, options.backoff_max);
      wait = s.backoff;
      s.retry_at = Clock::now() + s.backoff;
    }
    if (changed) {
      s.available_flag.store(false);
      metrics.set_servers_available(--servers_available);
      logger()->warn(
          "remote store {}: server {} failed ({}: {}); its blocks are misses and its puts fail "
          "until it "
          "answers again (next attempt in {} ms, backoff up to {} ms)",
          options.pool_name, s.endpoint.display, to_string(kind), why, wait.count(),
          options.backoff_max.count());
    }
  }

  void server_succeeded(Server& s) {
    bool changed = false;
    {
      std::lock_guard lock(s.state_mu);
      changed = !s.available;
      s.available = true;
      s.backoff = std::chrono::milliseconds{0};
      s.retry_at = {};
    }
    if (changed) {
      s.available_flag.store(true);
      metrics.set_servers_available(++servers_available);
      logger()->info("remote store {}: server {} answers again", options.pool_name,
                     s.endpoint.display);
    }
  }

  void server_full(Server& s, bool full, const std::string& why) {
    bool changed = false;
    {
      std::lock_guard lock(s.state_mu);
      changed = s.full != full;
      s.full = full;
    }
    if (!changed) return;
    if (full) {
      logger()->warn(
          "remote store {}: server {} is full ({}); puts fail until it has room (maxmemory-policy "
          "allkeys-lru "
          "evicts old blocks instead)",
          options.pool_name, s.endpoint.display, why);
    } else {
      logger()->info("remote store {}: server {} accepts puts again", options.pool_name,
                     s.endpoint.display);
    }
  }

  RemoteStatus ensure_connected(Server& s, RedisConnection& conn, Clock::time_point deadline) {
    if (conn.connected()) return RemoteStatus::kOk;
    {
      std::lock_guard lock(s.state_mu);
      if (!s.available && Clock::now() < s.retry_at) return RemoteStatus::kUnavailable;
    }
    const RemoteStatus st = conn.connect(deadline, options.connect_timeout);
    if (st == RemoteStatus::kOk) {
      server_succeeded(s);
      return st;
    }
    server_failed(s, st, conn.last_error());
    return RemoteStatus::kUnavailable;
  }

  // --- one task on one worker's connection ---

  struct TaskSink final : remote::ReplySink {
    Impl* impl = nullptr;
    Batch* batch = nullptr;
    const std::vector<std::size_t>* items = nullptr;  // the items of this exchange, in reply order

    RemoteStatus on_bulk(std::size_t index, std::span<const std::byte> value) override {
      if (batch->op != RemoteOp::kGet) return RemoteStatus::kServerError;
      const RemoteGet& g = batch->gets[(*items)[index]];
      const auto e =
          verify_remote_value(value, impl->fingerprint, g.hash, g.prefix_hash, impl->block_bytes);
      if (e != RemoteValueError::kNone) {
        if (!impl->corrupt_logged.exchange(true)) {
          logger()->warn(
              "remote store {}: block {} failed verification ({}); it is a miss (logged once; see "
              "kvbm_remote_errors_total{{kind=\"corrupt\"}})",
              impl->options.pool_name, impl->key_of(g.hash), to_string(e));
        }
        return RemoteStatus::kCorrupt;
      }
      const std::byte* src = value.data() + kRemoteHeaderBytes;
      for (auto r : g.regions) {
        std::memcpy(r.data(), src, r.size());
        src += r.size();
      }
      return RemoteStatus::kOk;
    }

    void on_reply(std::size_t index, const RedisReply& r) override {
      const std::size_t item = (*items)[index];
      RemoteStatus st = RemoteStatus::kServerError;
      switch (batch->op) {
        case RemoteOp::kExists:
          if (r.kind == RedisReply::Kind::kInteger) {
            st = RemoteStatus::kOk;
            batch->present[item] = r.integer > 0 ? 1 : 0;
          } else if (r.kind == RedisReply::Kind::kError) {
            st = r.status;
          }
          break;
        case RemoteOp::kGet:
          if (r.kind == RedisReply::Kind::kBulk || r.kind == RedisReply::Kind::kNil ||
              r.kind == RedisReply::Kind::kError) {
            st = r.status;
          }
          break;
        case RemoteOp::kPut:
          if (r.kind == RedisReply::Kind::kStatus || r.kind == RedisReply::Kind::kError)
            st = r.status;
          break;
      }
      batch->status[item] = st;
    }
  };

  void build(const Batch& b, const std::vector<std::size_t>& items, RedisRequest& req) const {
    req.clear();
    for (std::size_t i : items) {
      switch (b.op) {
        case RemoteOp::kExists:
          req.add_command({"EXISTS", key_of(b.hashes[i])});
          break;
        case RemoteOp::kGet:
          req.add_command({"GET", key_of(b.gets[i].hash)});
          break;
        case RemoteOp::kPut: {
          const RemotePut& p = b.puts[i];
          XXH3_state_t state;
          XXH3_64bits_reset(&state);
          for (auto r : p.regions) XXH3_64bits_update(&state, r.data(), r.size());
          RemoteHeader h;
          h.fingerprint = fingerprint;
          h.sequence_hash = p.hash;
          h.prefix_hash = p.prefix_hash;
          h.has_prefix_hash = p.prefix_hash != 0;
          h.payload_bytes = block_bytes;
          h.payload_checksum = XXH3_64bits_digest(&state);
          std::array<std::byte, kRemoteHeaderBytes> header;
          encode_remote_header(h, header);
          req.add_set(key_of(p.hash), header, p.regions,
                      static_cast<std::uint64_t>(options.ttl.count()));
          break;
        }
      }
    }
  }

  void run(Server& s, RedisConnection& conn, RedisRequest& req, Task& t) {
    Batch& b = *t.batch;
    auto fail_all = [&](const std::vector<std::size_t>& items, RemoteStatus st) {
      for (std::size_t i : items) b.status[i] = st;
    };
    if (Clock::now() >= b.deadline) return fail_all(t.items, RemoteStatus::kTimeout);
    bool was_connected = conn.connected();
    if (auto st = ensure_connected(s, conn, b.deadline); st != RemoteStatus::kOk)
      return fail_all(t.items, st);
    std::vector<std::size_t> items = t.items;
    TaskSink sink;
    sink.impl = this;
    sink.batch = &b;
    sink.items = &items;
    for (int attempt = 0;; ++attempt) {
      build(b, items, req);
      const RemoteStatus st = conn.exchange(req, sink, b.deadline);
      if (st == RemoteStatus::kOk) {
        server_succeeded(s);
        break;
      }
      // Replies already read keep their outcome; the rest get the failure, or one retry on a new
      // connection when an established one turned out broken (a restarted server).
      items.erase(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(conn.replies_read()));
      if (st == RemoteStatus::kConnectionLost && attempt == 0 && was_connected &&
          Clock::now() < b.deadline) {
        was_connected = false;
        const RemoteStatus c = conn.connect(b.deadline, options.connect_timeout);
        if (c == RemoteStatus::kOk) continue;
        server_failed(s, c, conn.last_error());
        return fail_all(items, RemoteStatus::kUnavailable);
      }
      server_failed(s, st, conn.last_error());
      return fail_all(items, st);
    }
    if (b.op == RemoteOp::kPut) {
      bool oom = false, stored = false;
      for (std::size_t i : t.items) {
        oom |= b.status[i] == RemoteStatus::kOutOfMemory;
        stored |= b.status[i] == RemoteStatus::kOk;
      }
      if (oom)
        server_full(s, true, conn.last_error());
      else if (stored)
        server_full(s, false, {});
    }
  }

  void worker(Server& s) {
    RedisConnection conn(s.endpoint);
    RedisRequest req;
    for (;;) {
      Task* t = nullptr;
      {
        std::unique_lock lock(s.mu);
        s.cv.wait(lock, [&] { return s.stop || !s.queue.empty(); });
        if (s.queue.empty()) return;  // stopping and drained
        t = s.queue.front();
        s.queue.pop_front();
      }
      try {
        run(s, conn, req, *t);
      } catch (const std::exception& e) {  // allocation failure: never out of a worker
        for (std::size_t i : t->items) t->batch->status[i] = RemoteStatus::kServerError;
        conn.close();
        logger()->error("remote store {}: worker error: {}", options.pool_name, e.what());
      }
      t->batch->done.count_down();
    }
  }

  // --- batches ---

  template <class KeyOf>
  void dispatch(std::size_t n, KeyOf hash_of, std::vector<Task>& tasks, bool split) {
    std::vector<std::vector<std::size_t>> per_server(servers.size());
    for (std::size_t i = 0; i < n; ++i) per_server[server_of(hash_of(i))].push_back(i);
    for (auto& items : per_server) {
      if (items.empty()) continue;
      const std::size_t parts = split ? std::min(options.connections_per_server, items.size()) : 1;
      const std::size_t per = (items.size() + parts - 1) / parts;
      for (std::size_t p = 0; p < items.size(); p += per) {
        Task t;
        t.items.assign(
            items.begin() + static_cast<std::ptrdiff_t>(p),
            items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), p + per)));
        tasks.push_back(std::move(t));
      }
    }
  }

  template <class KeyOf>
  std::unique_ptr<Batch> execute(RemoteOp op, std::size_t n, KeyOf hash_of, auto fill) {
    const auto start = Clock::now();
    std::vector<Task> tasks;
    tasks.reserve(servers.size() * options.connections_per_server);
    dispatch(n, hash_of, tasks,
             op != RemoteOp::kExists);  // before the batch: its latch needs the count
    auto b = std::make_unique<Batch>(op, n, static_cast<std::ptrdiff_t>(tasks.size()),
                                     start + options.command_timeout);
    fill(*b);
    for (auto& t : tasks) {
      t.batch = b.get();
      Server& s = *servers[server_of(hash_of(t.items.front()))];
      {
        std::lock_guard lock(s.mu);
        s.queue.push_back(&t);
      }
      s.cv.notify_one();
    }
    b->done.wait();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    remote::RemoteCallCounts c;
    for (std::size_t i = 0; i < n; ++i) {
      const RemoteStatus st = b->status[i];
      if (st != RemoteStatus::kOk && st != RemoteStatus::kNotFound)
        ++c.by_status[static_cast<std::size_t>(st)];
      if (op == RemoteOp::kGet) {
        if (st == RemoteStatus::kOk) {
          ++c.hits;
          c.read_bytes += block_bytes;
        } else {
          ++c.misses;
        }
      } else if (op == RemoteOp::kPut) {
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
    metrics.record(op, seconds, c);
    return b;
  }
};

RemoteStore::RemoteStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemoteStore::~RemoteStore() = default;

std::unique_ptr<RemoteStore> RemoteStore::create(RemoteStoreOptions options) {
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
  std::vector<remote::RedisEndpoint> endpoints;
  for (const auto& url : options.urls) endpoints.push_back(remote::parse_redis_url(url));

  auto impl = std::make_unique<Impl>(std::move(options));
  impl->fingerprint = remote_fingerprint(impl->options.name_space);
  impl->block_bytes = impl->options.name_space.layout.block_bytes();
  impl->key_head = impl->options.key_prefix + ":" + hex16(impl->fingerprint) + ":";
  for (auto& e : endpoints) {
    auto s = std::make_unique<Impl::Server>();
    s->endpoint = std::move(e);
    impl->servers.push_back(std::move(s));
  }
  impl->servers_available = impl->servers.size();
  impl->metrics.set_servers_available(impl->servers.size());
  for (auto& s : impl->servers) {
    for (std::size_t i = 0; i < impl->options.connections_per_server; ++i) {
      s->workers.emplace_back([raw = impl.get(), srv = s.get()] { raw->worker(*srv); });
    }
  }
  return std::unique_ptr<RemoteStore>(new RemoteStore(std::move(impl)));
}

std::vector<bool> RemoteStore::exists(std::span<const std::uint64_t> hashes) {
  auto b = impl_->execute(
      RemoteOp::kExists, hashes.size(), [&](std::size_t i) { return hashes[i]; },
      [&](Batch& batch) { batch.hashes = hashes; });
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
  auto b = impl_->execute(
      RemoteOp::kPut, blocks.size(), [&](std::size_t i) { return blocks[i].hash; },
      [&](Batch& batch) { batch.puts = blocks; });
  return std::move(b->status);
}

std::vector<RemoteStatus> RemoteStore::get(std::span<const RemoteGet> blocks) {
  for (const auto& g : blocks) {
    KVBM_CHECK(total_bytes(g.regions) == impl_->block_bytes, "RemoteStore::get: block ", g.hash,
               " has ", total_bytes(g.regions), " bytes of destination; the store's blocks have ",
               impl_->block_bytes);
  }
  auto b = impl_->execute(
      RemoteOp::kGet, blocks.size(), [&](std::size_t i) { return blocks[i].hash; },
      [&](Batch& batch) { batch.gets = blocks; });
  return std::move(b->status);
}

std::size_t RemoteStore::block_bytes() const noexcept { return impl_->block_bytes; }
std::uint64_t RemoteStore::fingerprint() const noexcept { return impl_->fingerprint; }
std::string RemoteStore::key_of(std::uint64_t hash) const { return impl_->key_of(hash); }
std::size_t RemoteStore::server_of(std::uint64_t hash) const noexcept {
  return impl_->server_of(hash);
}
std::size_t RemoteStore::server_count() const noexcept { return impl_->servers.size(); }
bool RemoteStore::server_available(std::size_t i) const {
  KVBM_CHECK(i < impl_->servers.size(), "RemoteStore::server_available: no server ", i);
  return impl_->servers[i]->available_flag.load();
}

RemoteStoreStats RemoteStore::stats() const noexcept {
  const auto& c = impl_->counters;
  RemoteStoreStats s;
  s.hits = c.hits;
  s.misses = c.misses;
  s.puts = c.puts;
  s.failed_puts = c.failed_puts;
  s.read_bytes = c.read_bytes;
  s.written_bytes = c.written_bytes;
  for (std::size_t i = 0; i < kRemoteStatusCount; ++i) s.blocks_by_status[i] = c.by_status[i];
  return s;
}

}  // namespace kvbm
