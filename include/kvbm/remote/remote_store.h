// kvbm/remote/remote_store.h: a remote tier (G4) of KV blocks on Redis.
//
// A RemoteStore is a client of one or several Redis servers, or of one Redis
// Cluster (redis+cluster://: keys placed by the cluster's slot map, MOVED and
// ASK followed, the map rediscovered after a failover), that many engine
// instances share. A block is one value (kvbm/remote/remote_value.h: a 64-byte
// header, then the block's bytes) under a key that carries the namespace
// fingerprint (model, layout, dtype, user namespace), so that blocks of another
// namespace are never seen; every instance that lists the same URLs in the same
// order finds a block on the same server. exists(), put() and get() split a
// batch by server and over its `connections_per_server` workers, which
// pipeline it: one round trip per batch and worker; the calling thread runs the
// parts no worker has taken yet on a connection of its own. The calling thread waits
// at most `command_timeout` (plus the time to hand back), whatever the servers
// do. docs/remote.md has the key and value format, sharding, the I/O, failure
// handling and the metrics.
//
// Errors: a bad URL or option throws UsageError at create() (remote_url_error()
// checks a URL beforehand, by the same grammar), a batch whose blocks do not
// have the store's block size throws it too; nothing else throws for a
// server's behaviour. A server that is down, slow, restarted or full degrades
// to misses and failed puts with a RemoteStatus naming the kind, and is retried
// with backoff. A server that refuses the credentials or an ACL right degrades
// the same way, but stats() and the metrics report the tier as refused (not
// down) with the server's reply, until an attempt of the same command passes. get() reports a block
// found only after its header and payload checksum verified; the destination of a block that is not
// kOk is untouched.
//
// Lifetime: destroying the store stops its workers (after their current
// batch, bounded by the timeout) and closes the connections.
// Thread-safety: exists(), put(), get() and the accessors may be called from
// any number of threads at once; batches queue on the workers.

#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvbm/error.h"
#include "kvbm/remote/remote_value.h"

namespace prometheus {
class Registry;
}

namespace kvbm {

class Env;  // kvbm/env.h

/// The outcome of one block in a remote call.
enum class RemoteStatus : std::uint8_t {
  kOk,              ///< done: stored, or found and verified
  kNotFound,        ///< no such key (never written, evicted, expired)
  kCorrupt,         ///< a value was there but failed verification; a miss
  kUnavailable,     ///< the server cannot be reached (or is in backoff)
  kTimeout,         ///< the call's deadline passed before the server answered
  kOutOfMemory,     ///< the server refused the write: maxmemory with noeviction
  kServerError,     ///< any other error reply or an unexpected reply
  kConnectionLost,  ///< the connection broke during the call
  kAccessDenied,    ///< the server refused the credentials or the user's rights (ACL)
};
/// Number of RemoteStatus values (arrays indexed by a RemoteStatus are this long).
inline constexpr std::size_t kRemoteStatusCount = 9;
static_assert(static_cast<std::size_t>(RemoteStatus::kAccessDenied) + 1 == kRemoteStatusCount,
              "a RemoteStatus was added or removed: update kRemoteStatusCount and to_string()");

/// Returns a short name ("ok", "not_found", "corrupt", "unavailable", ...).
[[nodiscard]] std::string_view to_string(RemoteStatus s) noexcept;

/// The tier's state, as each server's last attempts left it.
enum class RemoteState : std::uint8_t {
  kOk,       ///< every server answered its last attempt (or none was made yet)
  kDown,     ///< a server does not answer (down, slow, restarting): its blocks are misses
  kRefused,  ///< a server refuses the credentials, a command or kvbm's keys (ACL): misses
};
/// Number of RemoteState values.
inline constexpr std::size_t kRemoteStateCount = 3;

/// Returns "ok", "down" or "refused".
[[nodiscard]] std::string_view to_string(RemoteState s) noexcept;

/// Why a server refused an access: the kind of its error reply.
enum class RemoteRefusal : std::uint8_t {
  kWrongPass,  ///< WRONGPASS: a wrong password, an unknown or disabled user
  kNoAuth,     ///< NOAUTH: the server needs a password and none was given
  kNoPerm,     ///< NOPERM: the ACL user may not run the command or touch the key
  kOther,      ///< any other refusal of AUTH (a password to a server that has none)
};
/// Number of RemoteRefusal values.
inline constexpr std::size_t kRemoteRefusalCount = 4;

/// Returns "wrongpass", "noauth", "noperm" or "other".
[[nodiscard]] std::string_view to_string(RemoteRefusal r) noexcept;
/// Returns the kind of a refusal from the server's text ("... WRONGPASS invalid ...").
[[nodiscard]] RemoteRefusal remote_refusal_of(std::string_view error) noexcept;

/// Returns the ErrorKind of a failed remote call (kCorrupt, kUnavailable,
/// kTimeout, kNoSpace for a full server, kRefused for an access denied, kIo
/// for an error reply); none for
/// kOk and kNotFound, which are outcomes, not failures.
[[nodiscard]] std::optional<ErrorKind> error_kind_of(RemoteStatus s) noexcept;

/// How to reach the servers and which blocks are ours.
struct RemoteStoreOptions {
  /// One URL per server: redis://[[user]:password@]host:port[/db] or
  /// unix:///path/to.sock[?db=N]. The order decides where keys live: give
  /// every instance the same list. Or a single Redis Cluster URL:
  /// redis+cluster://[[user]:password@]host:port[,host:port...] (any nodes
  /// of the cluster; the rest is discovered).
  std::vector<std::string> urls{};
  /// ACL user for every URL that names none ("": the default user).
  std::string username{};
  /// A file holding the password (one trailing newline dropped), for URLs
  /// that carry none. At most one of the URL, password_file, password_env.
  std::string password_file{};
  /// An environment variable holding the password, as password_file.
  std::string password_env{};
  /// Cluster only: exists() and get() ask a replica of each slot (READONLY;
  /// the primary when the slot has none or it is failing), put() its primary.
  /// Replication is asynchronous: a block just written may be a miss on the
  /// replica, never wrong bytes (every value is verified). Off by default.
  bool replica_reads = false;
  RemoteNamespace name_space{};     ///< model, dtype, layout, user namespace
  std::string key_prefix = "kvbm";  ///< first part of every key
  std::size_t connections_per_server = 2;
  std::chrono::milliseconds connect_timeout{250};
  std::chrono::milliseconds command_timeout{1000};  ///< bound on one whole call
  std::chrono::milliseconds backoff_initial{100};   ///< first wait after a failure
  std::chrono::milliseconds backoff_max{5000};      ///< longest wait between attempts
  std::chrono::seconds ttl{0};  ///< 0: keys never expire (SET ... EX ttl otherwise)
  std::shared_ptr<prometheus::Registry> metrics_registry{};  ///< null: no metrics
  std::string pool_name = "G4";                              ///< the `pool` label
  /// The runtime (kvbm/env.h); null: Env::standard(). Its clock decides when a
  /// call's deadline (command_timeout) has passed, when a backoff is over and
  /// when a cluster's map is due again; socket waits stay bounded by the same
  /// durations in real time. Its workers run each server's queue.
  std::shared_ptr<Env> env{};
};

/// Returns "" when `url` is a valid server URL (RemoteStoreOptions::urls);
/// otherwise the URL, its password masked, then what is wrong and what to
/// write instead: "'redis://host:x' has a bad port 'x'; give a number from 1
/// to 65535, ...". The grammar create() parses with; connects to nothing, and
/// works in a kvbm built without the remote tier.
[[nodiscard]] std::string remote_url_error(std::string_view url);

/// Returns "" when `url` may join the server URLs `given` (a command line's --remote options,
/// one at a time): valid (remote_url_error()), and no redis+cluster:// URL beside another URL,
/// since a cluster is named by one URL that lists its nodes. Otherwise what is wrong, as
/// remote_url_error() says it.
[[nodiscard]] std::string remote_url_joins_error(std::span<const std::string> given,
                                                 std::string_view url);

/// One block to write: its identity and its bytes, in one or more regions
/// whose sizes add up to the store's block_bytes().
struct RemotePut {
  std::uint64_t hash = 0;         ///< the block's sequence hash
  std::uint64_t prefix_hash = 0;  ///< optional second hash of the prefix (0: none)
  std::span<const std::span<const std::byte>> regions{};
};

/// One block to read: its identity and where its bytes go (regions adding up
/// to block_bytes()). Left untouched unless the block comes back kOk.
struct RemoteGet {
  std::uint64_t hash = 0;
  std::uint64_t prefix_hash = 0;  ///< non-zero: the value must carry this prefix hash
  std::span<const std::span<std::byte>> regions{};
};

/// Counters since construction (the same as the metrics, without a registry),
/// and the tier's state now.
struct RemoteStoreStats {
  std::uint64_t hits = 0, misses = 0;
  std::uint64_t puts = 0, failed_puts = 0;
  std::uint64_t read_bytes = 0, written_bytes = 0;
  std::array<std::uint64_t, kRemoteStatusCount> blocks_by_status{};  ///< indexed by RemoteStatus
  /// Blocks refused (RemoteStatus::kAccessDenied), by the kind of refusal (RemoteRefusal).
  std::array<std::uint64_t, kRemoteRefusalCount> refused_by_reason{};

  /// kRefused while a server refuses the last attempt of some command (or, on a cluster, the
  /// slot map); else kDown while a server does not answer; else kOk.
  RemoteState state = RemoteState::kOk;
  std::size_t servers = 0;          ///< servers known (on a cluster: nodes discovered)
  std::size_t servers_down = 0;     ///< of them, not answering
  std::size_t servers_refused = 0;  ///< of them, refusing (not counted as down)
  /// The last refusal seen (also after it ended; "" when none): the server's reply with the
  /// command and key it refused ("NOPERM No permissions to access a key (SET kvbm:...)",
  /// "AUTH refused: WRONGPASS ...", "NOAUTH ..."), the server's URL (user kept, never the
  /// password) and the ACL user ("default" when the URL and options name none).
  std::string refusal{}, refused_server{}, refused_user{};

  [[nodiscard]] std::uint64_t count(RemoteStatus s) const noexcept {
    return blocks_by_status[static_cast<std::size_t>(s)];
  }
  [[nodiscard]] std::uint64_t count(RemoteRefusal r) const noexcept {
    return refused_by_reason[static_cast<std::size_t>(r)];
  }
};

/// A client of the remote tier.
class RemoteStore {
 public:
  /// Parses the URLs, starts the workers and returns; connections are made
  /// by the workers on first use, so a server that is down at start is only
  /// a miss. Throws UsageError on a bad URL or option.
  [[nodiscard]] static std::unique_ptr<RemoteStore> create(RemoteStoreOptions options);
  ~RemoteStore();
  RemoteStore(const RemoteStore&) = delete;
  RemoteStore& operator=(const RemoteStore&) = delete;

  /// Returns, for each hash, whether its key exists (false as well when its
  /// server fails). Presence only: get() still verifies.
  [[nodiscard]] std::vector<bool> exists(std::span<const std::uint64_t> hashes);
  /// Stores the blocks; one status per block (kOk, or why not).
  [[nodiscard]] std::vector<RemoteStatus> put(std::span<const RemotePut> blocks);
  /// Fetches the blocks; one status per block: kOk only for a verified block.
  [[nodiscard]] std::vector<RemoteStatus> get(std::span<const RemoteGet> blocks);

  /// Returns the bytes of one block's payload.
  [[nodiscard]] std::size_t block_bytes() const noexcept;
  /// Returns the namespace fingerprint every key and header carries.
  [[nodiscard]] std::uint64_t fingerprint() const noexcept;
  /// Returns the key of a block.
  [[nodiscard]] std::string key_of(std::uint64_t hash) const;
  /// Returns the index (into urls; on a cluster, into the nodes discovered so
  /// far) of the server holding a block; server_count() when no node holds its slot.
  [[nodiscard]] std::size_t server_of(std::uint64_t hash) const noexcept;
  /// Returns whether the store is a client of a Redis Cluster.
  [[nodiscard]] bool cluster() const noexcept;
  /// Returns the number of servers (on a cluster: nodes discovered so far).
  [[nodiscard]] std::size_t server_count() const noexcept;
  /// Returns whether the last attempt on server `i` succeeded.
  [[nodiscard]] bool server_available(std::size_t i) const;
  /// Returns the counters and the tier's state (RemoteStoreStats::state).
  [[nodiscard]] RemoteStoreStats stats() const;

 private:
  struct Impl;
  explicit RemoteStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Returns the server a key hash maps to among `servers`: jump consistent
/// hash (Lamping and Veach), stable for a given count and moving only 1/n of
/// the keys when a server is appended.
[[nodiscard]] std::size_t jump_consistent_hash(std::uint64_t key, std::size_t servers) noexcept;

/// Number of hash slots of a Redis Cluster.
inline constexpr std::size_t kRedisClusterSlots = 16384;

/// Returns the Redis Cluster hash slot of a key: CRC16 (XMODEM) of the key,
/// or of its hash tag (the text between the first '{' and the next '}' when
/// that is non-empty), modulo 16384; what CLUSTER KEYSLOT answers.
[[nodiscard]] std::uint16_t redis_key_slot(std::string_view key) noexcept;

}  // namespace kvbm
