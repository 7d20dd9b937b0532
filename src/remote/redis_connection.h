// src/remote/redis_connection.h: one connection to a Redis server, with a
// deadline on everything it does.
//
// A small RAII wrapper over a hiredis context. hiredis connects (TCP with
// TCP_NODELAY, or a Unix socket), formats small commands and parses replies;
// this file adds what hiredis does not do:
//   - a deadline over a whole pipelined exchange (hiredis only offers a
//     per-syscall socket timeout): the socket is non-blocking and every wait
//     is a poll() bounded by the time left;
//   - SET values written straight from the caller's regions with sendmsg
//     (hiredis would copy each value twice: formatting, then its output
//     buffer), each value's header filled during the exchange (a
//     RequestFiller), only so far ahead that each sendmsg offers at least
//     512 KiB (several small values a call, a large one alone), so computing
//     it overlaps the sending;
//   - replies read from the socket straight into the reader's buffer, and
//     bulk replies handed to a sink while still there (the reply functions
//     are replaced), so a GET's bytes are verified in place and copied once,
//     into the destination, only when they verify.
//
// Thread-safety: none; one thread uses a connection at a time.

#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/env.h"
#include "kvbm/remote/remote_store.h"
#include "redis_url.h"

struct redisContext;

namespace kvbm::remote {

using Clock = std::chrono::steady_clock;

/// One reply, as the connection classifies it.
struct RedisReply {
  enum class Kind : std::uint8_t {
    kStatus,
    kError,
    kInteger,
    kNil,
    kBulk,
    kArray
  } kind = Kind::kNil;
  long long integer = 0;
  /// kBulk: the sink's verdict; kError: kOutOfMemory, kAccessDenied or kServerError
  RemoteStatus status = RemoteStatus::kOk;
  std::string error{};  ///< kError: the server's text (at most 200 bytes)
};

/// Receives the replies of one exchange, in order.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  /// A bulk string reply, still in the reader's buffer; returns the verdict.
  virtual RemoteStatus on_bulk(std::size_t index, std::span<const std::byte> value) = 0;
  /// Any reply, after on_bulk for a bulk one.
  virtual void on_reply(std::size_t index, const RedisReply& reply) = 0;
};

/// Fills the headers a request left blank (RedisRequest::add_set), in order, during the
/// exchange: header k just before its bytes are due, while the bytes before it go out.
class RequestFiller {
 public:
  virtual ~RequestFiller() = default;
  /// Writes blank header `k` (the k-th add_set of the request) into `out`.
  virtual void fill(std::size_t k, std::span<std::byte> out) = 0;
};

/// The bytes of a pipelined request: commands formatted here, and SET values
/// pointing at the caller's memory (which must outlive the exchange).
class RedisRequest {
 public:
  /// Appends a command of small arguments (formatted by hiredis).
  void add_command(std::initializer_list<std::string_view> args);
  /// Appends SET key <header + regions> [EX ttl_seconds], the header `header_bytes` long and
  /// blank: the exchange's RequestFiller writes it before it is sent.
  void add_set(std::string_view key, std::size_t header_bytes,
               std::span<const std::span<const std::byte>> regions, std::uint64_t ttl_seconds);
  [[nodiscard]] std::size_t replies() const noexcept { return replies_; }
  /// The number of blank headers (one per add_set).
  [[nodiscard]] std::size_t blanks() const noexcept { return blanks_.size(); }
  void clear() noexcept;

 private:
  friend class RedisConnection;
  struct Segment {
    const std::byte* external = nullptr;  ///< null: bytes_[offset, offset + size)
    std::size_t offset = 0;
    std::size_t size = 0;
  };
  struct Blank {
    std::size_t segment = 0;  ///< the segment that holds it: none from there on may go out
    std::size_t offset = 0;   ///< in bytes_
    std::size_t size = 0;
  };
  void append_internal(std::string_view s);
  std::string bytes_{};
  std::vector<Segment> segments_{};
  std::vector<Blank> blanks_{};
  std::size_t replies_ = 0;
};

/// A connection to one server.
class RedisConnection {
 public:
  /// A connection to `endpoint` whose sendmsg goes through env->syscalls() (null: io::syscalls(),
  /// the table in force), looked up at each call. `env` must outlive the connection.
  explicit RedisConnection(RedisEndpoint endpoint, const Env* env = nullptr)
      : endpoint_(std::move(endpoint)), env_(env) {}
  ~RedisConnection() { close(); }
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  [[nodiscard]] bool connected() const noexcept { return ctx_ != nullptr; }
  /// Connects (AUTH and SELECT included) within min(deadline, now +
  /// connect_timeout). kOk, or kUnavailable / kAccessDenied (AUTH refused)
  /// with last_error(), which never holds the password.
  RemoteStatus connect(Clock::time_point deadline, std::chrono::milliseconds connect_timeout);
  /// Sends the request and reads its replies, all before `deadline`. Returns
  /// kOk when every reply was read; otherwise the failure (kTimeout,
  /// kConnectionLost, kServerError for a protocol error), the connection is
  /// closed and replies_read() says how many replies the sink saw. The request's blank
  /// headers are written by `filler` (required when it has any), each before its segment is
  /// sent, and ahead of the sending until at least 512 KiB can go out in one sendmsg (or all
  /// are filled): while the socket cannot take more, the next ones are filled instead of waiting.
  RemoteStatus exchange(RedisRequest& request, ReplySink& sink, Clock::time_point deadline,
                        RequestFiller* filler = nullptr);
  [[nodiscard]] std::size_t replies_read() const noexcept { return replies_read_; }
  /// Closes the connection (nothing happens when it is closed).
  void close() noexcept;
  /// Returns the last failure's description.
  [[nodiscard]] const std::string& last_error() const noexcept { return last_error_; }
  [[nodiscard]] const RedisEndpoint& endpoint() const noexcept { return endpoint_; }

 private:
  friend struct ReplyFunctions;
  RemoteStatus fail(RemoteStatus status, std::string message);
  RemoteStatus read_available(ReplySink& sink, std::size_t expected);

  RedisEndpoint endpoint_;
  const Env* env_;
  redisContext* ctx_ = nullptr;
  std::string last_error_{};
  // State of the reply being parsed (used by the reply functions).
  ReplySink* sink_ = nullptr;
  std::size_t replies_read_ = 0;
  RedisReply reply_{};
};

}  // namespace kvbm::remote
