// src/remote/remote_store_worker.cpp: a RemoteStore's workers: one
// connection each, a task's pipeline built, exchanged and its replies read
// (a cluster's redirects noted for the caller's next round), and each
// server's state, logged once per change (remote_store_impl.h).

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "io/bulk_xxh3.h"
#include "kvbm/logging.h"
#include "redis_cluster.h"
#include "remote_store_impl.h"

namespace kvbm {

using remote::RedisConnection;
using remote::RedisReply;
using remote::RedisRequest;
using remote::RemoteOp;

namespace {
constexpr std::size_t kNoItem = static_cast<std::size_t>(-1);  // a reply of no item (ASKING)

const char* command_of(RemoteOp op) {
  return op == RemoteOp::kExists ? "EXISTS" : op == RemoteOp::kGet ? "GET" : "SET";
}
}  // namespace

// --- server state: one log line per change ---

void RemoteStore::Impl::server_failed(Server& s, RemoteStatus kind, const std::string& why) {
  bool changed = false;
  std::chrono::milliseconds wait{};
  {
    std::lock_guard lock(s.state_mu);
    changed = s.available || s.failure != kind;
    if (s.available) {
      s.available_flag.store(false);
      metrics.set_servers_available(--servers_available);
    }
    s.available = false;
    s.failure = kind;
    if (kind == RemoteStatus::kAccessDenied) s.refusal = why;
    s.backoff = s.backoff.count() == 0 ? options.backoff_initial
                                       : std::min(s.backoff * 2, options.backoff_max);
    wait = s.backoff;
    s.retry_at = env->now() + s.backoff;
  }
  if (is_cluster) request_refresh();  // a failover may be on its way
  if (!changed) return;
  publish_state();
  if (kind == RemoteStatus::kAccessDenied) {
    logger()->error(
        "remote store {}: server {} refused access ({}); check the user and password (in the "
        "URL, RemoteStoreOptions::password_file or password_env) and the user's ACL (docs/"
        "remote.md); its blocks are misses until it accepts them (next attempt in {} ms)",
        options.pool_name, s.endpoint.display, why, wait.count());
    return;
  }
  logger()->warn(
      "remote store {}: server {} failed ({}: {}); its blocks are misses and its puts fail until "
      "it answers again (next attempt in {} ms, backoff up to {} ms)",
      options.pool_name, s.endpoint.display, to_string(kind), why, wait.count(),
      options.backoff_max.count());
}

void RemoteStore::Impl::server_succeeded(Server& s) {
  bool changed = false;
  {
    std::lock_guard lock(s.state_mu);
    changed = !s.available;
    s.available = true;
    s.backoff = std::chrono::milliseconds{0};
    s.retry_at = {};
    if (changed) {
      s.available_flag.store(true);
      metrics.set_servers_available(++servers_available);
    }
  }
  if (changed) {
    publish_state();
    logger()->info("remote store {}: server {} answers again", options.pool_name,
                   s.endpoint.display);
  }
}

void RemoteStore::Impl::server_full(Server& s, bool full, const std::string& why) {
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
        "allkeys-lru evicts old blocks instead)",
        options.pool_name, s.endpoint.display, why);
  } else {
    logger()->info("remote store {}: server {} accepts puts again", options.pool_name,
                   s.endpoint.display);
  }
}

void RemoteStore::Impl::access_denied(const Server& s, const std::string& why) {
  if (access_logged.exchange(true)) return;
  logger()->error(
      "remote store {}: server {} denied a command ({}); the ACL user needs the commands and the "
      "key pattern kvbm uses (docs/remote.md, 'Access control'); those blocks are misses "
      "(logged once; see kvbm_remote_errors_total{{kind=\"access_denied\"}})",
      options.pool_name, s.endpoint.display, why);
}

void RemoteStore::Impl::note_refusal(const std::string& text, const remote::RedisEndpoint& e) {
  detail::LockGuard lock(refusal_mu);
  last_refusal = {text, e.display, e.user.empty() ? std::string("default") : e.user};
}

void RemoteStore::Impl::note_access(Server& s, RemoteTask& t) {
  const RemoteBatch& b = *t.batch;
  bool denied = false, answered = false;
  for (std::size_t i : t.items) {
    denied |= b.status[i] == RemoteStatus::kAccessDenied;
    answered |= b.status[i] == RemoteStatus::kOk || b.status[i] == RemoteStatus::kNotFound;
  }
  const auto bit = static_cast<std::uint8_t>(1U << static_cast<unsigned>(b.op));
  if (!denied) {  // the common case: one load, no lock
    if (!answered || (s.refused_ops.load() & bit) == 0) return;
    if (s.refused_ops.fetch_and(static_cast<std::uint8_t>(~bit)) == bit) publish_state();
    return;
  }
  if (t.refusal.empty()) {  // refused at AUTH (now, or while in backoff after it)
    std::lock_guard lock(s.state_mu);
    t.refusal = s.refusal;
  }
  note_refusal(t.refusal, s.endpoint);
  if (s.refused_ops.fetch_or(bit) == 0) publish_state();
}

RemoteStatus RemoteStore::Impl::ensure_connected(Server& s, RedisConnection& conn,
                                                 remote::Clock::time_point io_deadline) {
  // A server in backoff fails at once, on every connection: one still open (a caller's spare,
  // idle while another connection timed out) would otherwise wait out the deadline again.
  bool waiting = false;
  RemoteStatus failure = RemoteStatus::kUnavailable;
  if (!s.available_flag.load()) {
    std::lock_guard lock(s.state_mu);
    waiting = !s.available && env->now() < s.retry_at;  // the backoff, on the Env's clock
    failure = s.failure;
  }
  if (!waiting && conn.connected()) return RemoteStatus::kOk;
  if (waiting) {
    if (is_cluster) request_refresh();  // until a replica takes its slots (rate-limited)
    return failure == RemoteStatus::kAccessDenied ? failure : RemoteStatus::kUnavailable;
  }
  // A connection alone proves little (a frozen server's kernel still accepts one): the server
  // counts as answering again after its first exchange (run()).
  const RemoteStatus st = conn.connect(io_deadline, options.connect_timeout);
  if (st == RemoteStatus::kOk) return st;
  server_failed(s, st, conn.last_error());
  return st == RemoteStatus::kAccessDenied ? st : RemoteStatus::kUnavailable;
}

// --- one task on one worker's connection ---

struct RemoteStore::Impl::TaskSink final : remote::ReplySink {
  Impl* impl = nullptr;
  RemoteBatch* batch = nullptr;
  RemoteTask* task = nullptr;
  const Server* server = nullptr;
  const std::vector<std::size_t>* reply_items = nullptr;  // reply index -> item, or kNoItem

  RemoteStatus on_bulk(std::size_t index, std::span<const std::byte> value) override {
    const std::size_t item = (*reply_items)[index];
    if (batch->op != RemoteOp::kGet || item == kNoItem) return RemoteStatus::kServerError;
    const RemoteGet& g = batch->gets[item];
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

  // An error reply's outcome: a redirect to follow (a cluster's MOVED or ASK), a cluster whose
  // map is worth asking again, an access denied (logged once), or the error as classified.
  RemoteStatus on_error(std::size_t item, const RedisReply& r) {
    if (impl->is_cluster) {
      if (auto redirect = remote::parse_cluster_redirect(r.error)) {
        batch->redirects[item] = {
            redirect->ask ? RemoteRedirect::Kind::kAsk : RemoteRedirect::Kind::kMoved,
            redirect->slot, std::move(redirect->node)};
        return RemoteStatus::kUnavailable;  // until the next round sends it again
      }
      if (remote::cluster_in_flux(r.error)) {
        impl->request_refresh();
        return RemoteStatus::kUnavailable;
      }
    }
    if (r.status == RemoteStatus::kAccessDenied) {
      // A key refusal names no key ("NOPERM this user has no permissions to access one of the
      // keys used as arguments"): the command and key are added, so the fix can be named.
      if (task->refusal.empty()) {
        task->refusal =
            r.error + " (" + command_of(batch->op) + " " + impl->key_of(batch->hash(item)) + ")";
      }
      impl->access_denied(*server, task->refusal);
    }
    return r.status;
  }

  void on_reply(std::size_t index, const RedisReply& r) override {
    const std::size_t item = (*reply_items)[index];
    if (item == kNoItem) return;  // ASKING's +OK (an error shows in the command's own reply)
    RemoteStatus st = RemoteStatus::kServerError;
    if (r.kind == RedisReply::Kind::kError) {
      st = on_error(item, r);
    } else if (batch->op == RemoteOp::kExists) {
      if (r.kind == RedisReply::Kind::kInteger) {
        st = RemoteStatus::kOk;
        batch->present[item] = r.integer > 0 ? 1 : 0;
      }
    } else if (batch->op == RemoteOp::kGet) {
      if (r.kind == RedisReply::Kind::kBulk || r.kind == RedisReply::Kind::kNil) st = r.status;
    } else if (r.kind == RedisReply::Kind::kStatus) {
      st = r.status;
    }
    batch->status[item] = st;
  }
};

void RemoteStore::Impl::build(const RemoteTask& t, RedisRequest& req,
                              std::vector<std::size_t>& reply_items) const {
  const RemoteBatch& b = *t.batch;
  req.clear();
  reply_items.clear();
  for (std::size_t i : t.items) {
    if (t.asking) {
      req.add_command({"ASKING"});
      reply_items.push_back(kNoItem);
    }
    reply_items.push_back(i);
    switch (b.op) {
      case RemoteOp::kExists:
        req.add_command({"EXISTS", key_of(b.hashes[i])});
        break;
      case RemoteOp::kGet:
        req.add_command({"GET", key_of(b.gets[i].hash)});
        break;
      case RemoteOp::kPut:  // the header is filled while the exchange sends (PutFiller)
        req.add_set(key_of(b.puts[i].hash), kRemoteHeaderBytes, b.puts[i].regions,
                    static_cast<std::uint64_t>(options.ttl.count()));
        break;
    }
  }
}

// The header of a put's k-th SET: its checksum computed while the SETs before it go out.
struct RemoteStore::Impl::PutFiller final : remote::RequestFiller {
  const Impl* impl = nullptr;
  const RemoteBatch* batch = nullptr;
  const std::vector<std::size_t>* items = nullptr;  // the task's items, in request order

  void fill(std::size_t k, std::span<std::byte> out) override {
    const RemotePut& p = batch->puts[(*items)[k]];
    RemoteHeader h;
    h.fingerprint = impl->fingerprint;
    h.sequence_hash = p.hash;
    h.prefix_hash = p.prefix_hash;
    h.has_prefix_hash = p.prefix_hash != 0;
    h.payload_bytes = impl->block_bytes;
    h.payload_checksum = io::bulk_xxh3(p.regions);
    encode_remote_header(h, out.first<kRemoteHeaderBytes>());
  }
};

void RemoteStore::Impl::run(Server& s, RedisConnection& conn, RedisRequest& req, RemoteTask& t) {
  RemoteBatch& b = *t.batch;
  auto fail_all = [&](const std::vector<std::size_t>& items, RemoteStatus st) {
    for (std::size_t i : items) b.status[i] = st;
  };
  // The deadline is a decision (Env clock); the socket waits below are bounded in real time.
  if (env->now() >= b.deadline) return fail_all(t.items, RemoteStatus::kTimeout);
  bool was_connected = conn.connected();
  if (auto st = ensure_connected(s, conn, b.io_deadline); st != RemoteStatus::kOk)
    return fail_all(t.items, st);
  RemoteTask left = t;
  std::vector<std::size_t> reply_items;
  TaskSink sink;
  sink.impl = this;
  sink.batch = &b;
  sink.task = &t;
  sink.server = &s;
  sink.reply_items = &reply_items;
  PutFiller filler;
  filler.impl = this;
  filler.batch = &b;
  filler.items = &left.items;
  for (int attempt = 0;; ++attempt) {
    build(left, req, reply_items);
    const RemoteStatus st = conn.exchange(req, sink, b.io_deadline, &filler);
    if (st == RemoteStatus::kOk) {
      server_succeeded(s);
      break;
    }
    // Replies already read keep their outcome; the rest get the failure, or one retry on a new
    // connection when an established one turned out broken (a restarted server).
    left.items.clear();
    for (std::size_t k = conn.replies_read(); k < reply_items.size(); ++k) {
      if (reply_items[k] != kNoItem) left.items.push_back(reply_items[k]);
    }
    if (st == RemoteStatus::kConnectionLost && attempt == 0 && was_connected &&
        env->now() < b.deadline && remote::Clock::now() < b.io_deadline) {
      was_connected = false;
      const RemoteStatus c = conn.connect(b.io_deadline, options.connect_timeout);
      if (c == RemoteStatus::kOk) continue;
      server_failed(s, c, conn.last_error());
      return fail_all(left.items,
                      c == RemoteStatus::kAccessDenied ? c : RemoteStatus::kUnavailable);
    }
    server_failed(s, st, conn.last_error());
    return fail_all(left.items, st);
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

void RemoteStore::Impl::run_task(Server& s, RedisConnection& conn, RedisRequest& req,
                                 RemoteTask& t) noexcept {
  try {
    run(s, conn, req, t);
    note_access(s, t);
  } catch (const std::exception& e) {  // allocation failure: never out of a worker
    for (std::size_t i : t.items) t.batch->status[i] = RemoteStatus::kServerError;
    conn.close();
    logger()->error("remote store {}: worker error: {}", options.pool_name, e.what());
  }
  t.done->count_down();
}

void RemoteStore::Impl::run_next(Server& s) noexcept {
  RemoteTask* t = nullptr;
  std::unique_ptr<CallerConnection> cc;
  {
    std::lock_guard lock(s.mu);
    if (s.queue.empty()) return;  // a caller ran it (run_own_tasks)
    t = s.queue.front();
    s.queue.pop_front();
    if (!s.spare.empty()) {
      cc = std::move(s.spare.back());
      s.spare.pop_back();
    }
  }
  try {
    if (!cc) cc = std::make_unique<CallerConnection>(s.endpoint, *env);
  } catch (const std::exception& e) {  // allocation failure: the task fails, the job ends
    for (std::size_t i : t->items) t->batch->status[i] = RemoteStatus::kServerError;
    logger()->error("remote store {}: worker error: {}", options.pool_name, e.what());
    t->done->count_down();
    return;
  }
  run_task(s, cc->conn, cc->req, *t);
  std::lock_guard lock(s.mu);
  s.spare.push_back(std::move(cc));
}

void RemoteStore::Impl::enqueue(Server& s, RemoteTask& t) {
  {
    std::lock_guard lock(s.mu);
    s.queue.push_back(&t);
  }
  // A refused post (the store being destroyed: no call runs then) leaves the task to the caller.
  (void)s.worker->post([this, &s] { run_next(s); });
}

// The caller takes its own tasks that no worker has taken yet. On a busy machine a woken worker
// may wait milliseconds for a core, and the caller, already running, does the work instead; on
// an idle one the workers take their share at once and the work splits between them and the
// caller. Every connection goes back to the server's pool (spare) for the next task.
void RemoteStore::Impl::run_own_tasks(Server& s, const RemoteBatch& b) {
  std::unique_ptr<CallerConnection> cc;
  for (;;) {
    RemoteTask* t = nullptr;
    {
      std::lock_guard lock(s.mu);
      const auto it = std::find_if(s.queue.begin(), s.queue.end(),
                                   [&](const RemoteTask* q) { return q->batch == &b; });
      if (it == s.queue.end()) break;
      t = *it;
      s.queue.erase(it);
      if (!cc && !s.spare.empty()) {
        cc = std::move(s.spare.back());
        s.spare.pop_back();
      }
    }
    if (!cc) cc = std::make_unique<CallerConnection>(s.endpoint, *env);
    run_task(s, cc->conn, cc->req, *t);
  }
  if (cc) {
    std::lock_guard lock(s.mu);
    s.spare.push_back(std::move(cc));
  }
}

}  // namespace kvbm
