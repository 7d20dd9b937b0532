#include "redis_connection.h"

extern "C" {  // sds.h (which hiredis.h includes first) has no C++ guard
#include <hiredis/sds.h>
}
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <hiredis/hiredis.h>

#include "kvbm/error.h"
#include "kvbm/io/syscalls.h"

namespace kvbm::remote {
namespace {

constexpr std::size_t kReadChunk = std::size_t{256} * 1024;  // least room offered to one read()
// Least bytes offered to one sendmsg() while headers are left to fill: small values (64 KiB)
// go out several to a call, as a pipelining client sends them, rather than one call (and one
// TCP push) per value, which costs the server and the loopback stack CPU per byte; a value of
// this size or more still goes out as soon as its own header is filled.
constexpr std::size_t kSendChunk = std::size_t{512} * 1024;

// An error reply's status: a full server, an access refused, or any other error.
RemoteStatus classify_error(std::string_view e) {
  if (e.starts_with("OOM")) return RemoteStatus::kOutOfMemory;
  if (e.starts_with("NOAUTH") || e.starts_with("NOPERM") || e.starts_with("WRONGPASS")) {
    return RemoteStatus::kAccessDenied;
  }
  return RemoteStatus::kServerError;
}

int remaining_ms(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>((left + 999) / 1000, INT_MAX));
}

}  // namespace

// --- requests ---

void RedisRequest::append_internal(std::string_view s) {
  const std::size_t offset = bytes_.size();
  bytes_.append(s);
  if (!segments_.empty() && segments_.back().external == nullptr &&
      segments_.back().offset + segments_.back().size == offset) {
    segments_.back().size += s.size();
  } else {
    segments_.push_back({nullptr, offset, s.size()});
  }
}

void RedisRequest::add_command(std::initializer_list<std::string_view> args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (auto a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  char* cmd = nullptr;
  const int n =
      redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), argv.data(), lens.data());
  if (n < 0 || cmd == nullptr) throw std::bad_alloc();
  append_internal(std::string_view(cmd, static_cast<std::size_t>(n)));
  redisFreeCommand(cmd);
  ++replies_;
}

void RedisRequest::add_set(std::string_view key, std::size_t header_bytes,
                           std::span<const std::span<const std::byte>> regions,
                           std::uint64_t ttl_seconds) {
  std::size_t value_bytes = header_bytes;
  for (auto r : regions) value_bytes += r.size();
  std::string head = ttl_seconds != 0 ? "*5\r\n$3\r\nSET\r\n$" : "*3\r\n$3\r\nSET\r\n$";
  head += std::to_string(key.size());
  head += "\r\n";
  head += key;
  head += "\r\n$";
  head += std::to_string(value_bytes);
  head += "\r\n";
  append_internal(head);
  blanks_.push_back({segments_.size() - 1, bytes_.size(), header_bytes});
  append_internal(std::string(header_bytes, '\0'));
  for (auto r : regions) {
    if (!r.empty()) segments_.push_back({r.data(), 0, r.size()});
  }
  std::string tail = "\r\n";
  if (ttl_seconds != 0) {
    const std::string ttl = std::to_string(ttl_seconds);
    tail += "$2\r\nEX\r\n$" + std::to_string(ttl.size()) + "\r\n" + ttl + "\r\n";
  }
  append_internal(tail);
  ++replies_;
}

void RedisRequest::clear() noexcept {
  bytes_.clear();
  segments_.clear();
  blanks_.clear();
  replies_ = 0;
}

// --- reply functions: every reply lands in the connection's one RedisReply ---

struct ReplyFunctions {
  static RedisConnection* conn(const redisReadTask* t) {
    return static_cast<RedisConnection*>(t->privdata);
  }

  static void* create_string(const redisReadTask* t, char* str, std::size_t len) {
    RedisConnection* c = conn(t);
    RedisReply& r = c->reply_;
    if (t->parent != nullptr) return &r;  // an element of an array: not a reply we asked for
    switch (t->type) {
      case REDIS_REPLY_ERROR:
        r.kind = RedisReply::Kind::kError;
        r.error.assign(str, std::min<std::size_t>(len, 200));
        r.status = classify_error(r.error);
        c->last_error_ = r.error;
        break;
      case REDIS_REPLY_STATUS:
        r.kind = RedisReply::Kind::kStatus;
        r.status = RemoteStatus::kOk;
        break;
      default:
        r.kind = RedisReply::Kind::kBulk;
        r.status = c->sink_ != nullptr
                       ? c->sink_->on_bulk(c->replies_read_,
                                           std::as_bytes(std::span<const char>(str, len)))
                       : RemoteStatus::kServerError;
        break;
    }
    return &r;
  }
  static void* create_array(const redisReadTask* t, int /*elements*/) {
    RedisReply& r = conn(t)->reply_;
    if (t->parent == nullptr) {
      r.kind = RedisReply::Kind::kArray;
      r.status = RemoteStatus::kServerError;
    }
    return &r;
  }
  static void* create_integer(const redisReadTask* t, long long v) {
    RedisReply& r = conn(t)->reply_;
    if (t->parent == nullptr) {
      r.kind = RedisReply::Kind::kInteger;
      r.integer = v;
      r.status = RemoteStatus::kOk;
    }
    return &r;
  }
  static void* create_nil(const redisReadTask* t) {
    RedisReply& r = conn(t)->reply_;
    if (t->parent == nullptr) {
      r.kind = RedisReply::Kind::kNil;
      r.status = RemoteStatus::kNotFound;
    }
    return &r;
  }
  static void free_object(void*) {}

  static redisReplyObjectFunctions* table() {
    static redisReplyObjectFunctions fns{create_string, create_array, create_integer, create_nil,
                                         free_object};
    return &fns;
  }
};

// --- connection ---

RemoteStatus RedisConnection::fail(RemoteStatus status, std::string message) {
  last_error_ = std::move(message);
  close();
  return status;
}

void RedisConnection::close() noexcept {
  if (ctx_ != nullptr) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  sink_ = nullptr;
}

RemoteStatus RedisConnection::connect(Clock::time_point deadline,
                                      std::chrono::milliseconds connect_timeout) {
  close();
  const auto dl = std::min(deadline, Clock::now() + connect_timeout);
  redisContext* c = endpoint_.unix_socket
                        ? redisConnectUnixNonBlock(endpoint_.path.c_str())
                        : redisConnectNonBlock(endpoint_.host.c_str(), endpoint_.port);
  if (c == nullptr) return fail(RemoteStatus::kUnavailable, "cannot allocate a connection");
  if (c->err != 0) {
    std::string msg = c->errstr;
    redisFree(c);
    return fail(RemoteStatus::kUnavailable, msg);
  }
  for (;;) {
    pollfd p{c->fd, POLLOUT, 0};
    const int rc = ::poll(&p, 1, remaining_ms(dl));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) {
      redisFree(c);
      return fail(RemoteStatus::kUnavailable, rc == 0 ? "connect timed out" : std::strerror(errno));
    }
    break;
  }
  int so_error = 0;
  socklen_t len = sizeof(so_error);
  if (::getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
  if (so_error != 0) {
    redisFree(c);
    return fail(RemoteStatus::kUnavailable, std::strerror(so_error));
  }
  if (!endpoint_.unix_socket) {
    int one = 1;
    (void)::setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  c->reader->fn = ReplyFunctions::table();
  c->reader->privdata = this;
  c->reader->maxbuf = 0;  // keep the reader's buffer: values are large and come often
  ctx_ = c;

  // AUTH and SELECT, pipelined, within the same deadline.
  RedisRequest setup;
  if (!endpoint_.user.empty()) {
    setup.add_command({"AUTH", endpoint_.user, endpoint_.password});
  } else if (!endpoint_.password.empty()) {
    setup.add_command({"AUTH", endpoint_.password});
  }
  const bool auth = setup.replies() != 0;
  if (endpoint_.readonly) setup.add_command({"READONLY"});
  const std::string db = std::to_string(endpoint_.db);
  if (endpoint_.db != 0) setup.add_command({"SELECT", db});
  if (setup.replies() == 0) return RemoteStatus::kOk;
  struct SetupSink final : ReplySink {
    bool auth = false;
    RemoteStatus result = RemoteStatus::kOk;
    RemoteStatus on_bulk(std::size_t, std::span<const std::byte>) override {
      return RemoteStatus::kServerError;
    }
    void on_reply(std::size_t index, const RedisReply& r) override {
      if (r.kind == RedisReply::Kind::kStatus || result != RemoteStatus::kOk) return;
      // AUTH refused (WRONGPASS, or a password to a server that has none) is an access
      // denied; the server's text never repeats the password.
      result = auth && index == 0 ? RemoteStatus::kAccessDenied : RemoteStatus::kUnavailable;
    }
  } sink;
  sink.auth = auth;
  if (auto st = exchange(setup, sink, dl); st != RemoteStatus::kOk) {
    return fail(RemoteStatus::kUnavailable, "AUTH/SELECT: " + last_error_);
  }
  if (sink.result != RemoteStatus::kOk) {
    return fail(sink.result,
                std::string(sink.result == RemoteStatus::kAccessDenied ? "AUTH refused: "
                                                                       : "SELECT refused: ") +
                    last_error_);
  }
  return RemoteStatus::kOk;
}

RemoteStatus RedisConnection::read_available(ReplySink& sink, std::size_t expected) {
  // Read straight into the reader's buffer (an sds string) instead of through redisReaderFeed,
  // which would copy every byte of every value once more.
  redisReader* reader = ctx_->reader;
  if (reader->err != 0)
    return fail(RemoteStatus::kServerError, std::string("protocol: ") + reader->errstr);
  if (sdsavail(reader->buf) < kReadChunk) {
    sds grown = sdsMakeRoomFor(reader->buf, kReadChunk);
    if (grown == nullptr)
      return fail(RemoteStatus::kServerError, "out of memory for the read buffer");
    reader->buf = grown;
  }
  const std::size_t room = std::min<std::size_t>(sdsavail(reader->buf), INT_MAX);
  const ssize_t n = ::read(ctx_->fd, reader->buf + reader->len, room);
  if (n == 0) return fail(RemoteStatus::kConnectionLost, "the server closed the connection");
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return RemoteStatus::kOk;
    return fail(RemoteStatus::kConnectionLost, std::strerror(errno));
  }
  sdsIncrLen(reader->buf, static_cast<int>(n));
  reader->len = sdslen(reader->buf);
  for (;;) {
    void* obj = nullptr;
    if (redisReaderGetReply(reader, &obj) != REDIS_OK) {
      return fail(RemoteStatus::kServerError, std::string("protocol: ") + reader->errstr);
    }
    if (obj == nullptr) return RemoteStatus::kOk;
    if (replies_read_ >= expected)
      return fail(RemoteStatus::kServerError, "a reply nobody asked for");
    sink.on_reply(replies_read_, reply_);
    ++replies_read_;
    reply_ = {};
  }
}

namespace {

/// Sends what it can of iov[next, limit) without waiting; moves `next` (and the partly sent
/// iovec) past what went out and adds it to `sent`. Returns false on a failure of the socket
/// (errno set).
bool send_some(const io::SyscallTable& sys, int fd, std::vector<iovec>& iov, std::size_t& next,
               std::size_t limit, std::size_t& sent) {
  msghdr m{};
  m.msg_iov = &iov[next];
  m.msg_iovlen = std::min<std::size_t>(limit - next, IOV_MAX);
  const std::int64_t n = sys.sendmsg(fd, &m, MSG_NOSIGNAL);
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  auto left = static_cast<std::size_t>(n);
  sent += left;
  while (left > 0) {
    if (left >= iov[next].iov_len) {
      left -= iov[next].iov_len;
      ++next;
    } else {
      iov[next].iov_base = static_cast<char*>(iov[next].iov_base) + left;
      iov[next].iov_len -= left;
      left = 0;
    }
  }
  return true;
}

}  // namespace

RemoteStatus RedisConnection::exchange(RedisRequest& request, ReplySink& sink,
                                       Clock::time_point deadline, RequestFiller* filler) {
  replies_read_ = 0;
  reply_ = {};
  if (ctx_ == nullptr) return fail(RemoteStatus::kConnectionLost, "not connected");
  KVBM_CHECK(filler != nullptr || request.blanks_.empty(),
             "RedisConnection::exchange: a request with blank headers needs a RequestFiller");
  sink_ = &sink;
  std::vector<iovec> iov;
  std::vector<std::size_t> ends;  // ends[i]: the request's bytes up to the end of segment i
  iov.reserve(request.segments_.size());
  ends.reserve(request.segments_.size());
  for (const auto& s : request.segments_) {
    const void* base = s.external != nullptr
                           ? static_cast<const void*>(s.external)
                           : static_cast<const void*>(request.bytes_.data() + s.offset);
    iov.push_back({const_cast<void*>(base), s.size});
    ends.push_back((ends.empty() ? 0 : ends.back()) + s.size);
  }
  // Segments before `ready` may go out: those before the first header not yet filled.
  std::size_t filled = 0, next = 0, sent = 0;
  const auto ready = [&] {
    return filled < request.blanks_.size() ? request.blanks_[filled].segment : iov.size();
  };
  // Bytes that may go out and have not: fewer than kSendChunk makes the next header worth
  // filling before anything is sent.
  const auto sendable = [&] {
    const std::size_t r = ready();
    return (r == 0 ? 0 : ends[r - 1]) - sent;
  };
  const auto fill_next = [&] {
    const auto& b = request.blanks_[filled];
    filler->fill(filled,
                 std::as_writable_bytes(std::span(request.bytes_)).subspan(b.offset, b.size));
    ++filled;
  };
  const std::size_t expected = request.replies();
  while (replies_read_ < expected) {
    if (Clock::now() >= deadline)
      return fail(RemoteStatus::kTimeout, "no answer within the command timeout");
    if (filled < request.blanks_.size() && sendable() < kSendChunk) {
      fill_next();  // too little to send until it is filled
      continue;
    }
    // With headers left to fill, look without waiting: a socket that cannot take more (or has
    // nothing to read) leaves time to fill the next one.
    const bool work = filled < request.blanks_.size();
    pollfd p{ctx_->fd, static_cast<short>(POLLIN | (next < ready() ? POLLOUT : 0)), 0};
    const int rc = ::poll(&p, 1, work ? 0 : remaining_ms(deadline));
    if (rc < 0) {
      if (errno == EINTR) continue;
      return fail(RemoteStatus::kConnectionLost, std::strerror(errno));
    }
    if (rc == 0) {
      if (work) fill_next();
      continue;
    }
    if ((p.revents & POLLOUT) != 0 && next < ready() &&
        !send_some(env_ != nullptr ? env_->syscalls() : io::syscalls(), ctx_->fd, iov, next,
                   ready(), sent))
      return fail(RemoteStatus::kConnectionLost, std::strerror(errno));
    if ((p.revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
      if (auto st = read_available(sink, expected); st != RemoteStatus::kOk) return st;
    }
  }
  sink_ = nullptr;
  return RemoteStatus::kOk;
}

}  // namespace kvbm::remote
