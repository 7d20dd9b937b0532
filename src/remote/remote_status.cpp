#include <cstdint>

#include "kvbm/remote/remote_store.h"

namespace kvbm {

std::string_view to_string(RemoteStatus s) noexcept {
  switch (s) {
    case RemoteStatus::kOk:
      return "ok";
    case RemoteStatus::kNotFound:
      return "not_found";
    case RemoteStatus::kCorrupt:
      return "corrupt";
    case RemoteStatus::kUnavailable:
      return "unavailable";
    case RemoteStatus::kTimeout:
      return "timeout";
    case RemoteStatus::kOutOfMemory:
      return "oom";
    case RemoteStatus::kServerError:
      return "server_error";
    case RemoteStatus::kConnectionLost:
      return "connection_lost";
  }
  return "unknown";
}

std::optional<ErrorKind> error_kind_of(RemoteStatus s) noexcept {
  switch (s) {
    case RemoteStatus::kOk:
    case RemoteStatus::kNotFound:
      return std::nullopt;
    case RemoteStatus::kCorrupt:
      return ErrorKind::kCorrupt;
    case RemoteStatus::kUnavailable:
    case RemoteStatus::kConnectionLost:
      return ErrorKind::kUnavailable;
    case RemoteStatus::kTimeout:
      return ErrorKind::kTimeout;
    case RemoteStatus::kOutOfMemory:
      return ErrorKind::kNoSpace;
    case RemoteStatus::kServerError:
      return ErrorKind::kIo;
  }
  return ErrorKind::kInternal;
}

std::size_t jump_consistent_hash(std::uint64_t key, std::size_t servers) noexcept {
  // Lamping and Veach, "A Fast, Minimal Memory, Consistent Hash Algorithm" (2014).
  std::int64_t b = -1, j = 0;
  while (j < static_cast<std::int64_t>(servers)) {
    b = j;
    key = key * 2862933555777941757ULL + 1;
    j = static_cast<std::int64_t>(
        static_cast<double>(b + 1) *
        (static_cast<double>(1LL << 31) / static_cast<double>((key >> 33) + 1)));
  }
  return static_cast<std::size_t>(b < 0 ? 0 : b);
}

}  // namespace kvbm
