#include <array>
#include <cstdint>
#include <string_view>

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
    case RemoteStatus::kAccessDenied:
      return "access_denied";
  }
  return "unknown";
}

std::string_view to_string(RemoteState s) noexcept {
  switch (s) {
    case RemoteState::kOk:
      return "ok";
    case RemoteState::kDown:
      return "down";
    case RemoteState::kRefused:
      return "refused";
  }
  return "unknown";
}

std::string_view to_string(RemoteRefusal r) noexcept {
  switch (r) {
    case RemoteRefusal::kWrongPass:
      return "wrongpass";
    case RemoteRefusal::kNoAuth:
      return "noauth";
    case RemoteRefusal::kNoPerm:
      return "noperm";
    case RemoteRefusal::kOther:
      return "other";
  }
  return "unknown";
}

RemoteRefusal remote_refusal_of(std::string_view error) noexcept {
  // Searched, not matched at the start: kvbm puts "AUTH refused: " or "CLUSTER SLOTS: " before it.
  if (error.find("WRONGPASS") != std::string_view::npos) return RemoteRefusal::kWrongPass;
  if (error.find("NOAUTH") != std::string_view::npos) return RemoteRefusal::kNoAuth;
  if (error.find("NOPERM") != std::string_view::npos) return RemoteRefusal::kNoPerm;
  return RemoteRefusal::kOther;
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
    case RemoteStatus::kAccessDenied:
      return ErrorKind::kRefused;
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

namespace {

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0, no reflection), the
// checksum Redis Cluster places keys with; table built at compile time.
constexpr std::array<std::uint16_t, 256> make_crc16_table() {
  std::array<std::uint16_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t crc = i << 8;
    for (int b = 0; b < 8; ++b) crc = (crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1;
    t[i] = static_cast<std::uint16_t>(crc);
  }
  return t;
}
constexpr std::array<std::uint16_t, 256> kCrc16 = make_crc16_table();

constexpr std::uint16_t crc16(std::string_view s) noexcept {
  std::uint16_t crc = 0;
  for (char c : s) {
    crc = static_cast<std::uint16_t>((crc << 8) ^
                                     kCrc16[((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xFF]);
  }
  return crc;
}
// The check value of CRC16/XMODEM ("123456789" -> 0x31C3), as the Redis Cluster spec gives it.
static_assert(crc16("123456789") == 0x31C3);

}  // namespace

std::uint16_t redis_key_slot(std::string_view key) noexcept {
  // Hash tag: only the part between the first '{' and the next '}', when that part is non-empty.
  if (const auto open = key.find('{'); open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return static_cast<std::uint16_t>(crc16(key) % kRedisClusterSlots);
}

}  // namespace kvbm
