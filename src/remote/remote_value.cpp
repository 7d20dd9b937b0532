#include "kvbm/remote/remote_value.h"

#define XXH_INLINE_ALL
#include <cstring>

#include <xxhash.h>

#include "io/bulk_xxh3.h"

namespace kvbm {
namespace {

constexpr unsigned char kMagic[4] = {'K', 'V', 'G', '4'};
constexpr std::size_t kHashedBytes = 56;
constexpr std::uint32_t kFlagPrefixHash = 1;

void put_le(std::byte* out, std::uint64_t v, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(v >> (8 * i));
}
std::uint64_t get_le(const std::byte* in, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i)
    v |= std::uint64_t{std::to_integer<unsigned char>(in[i])} << (8 * i);
  return v;
}

}  // namespace

std::uint64_t remote_fingerprint(const RemoteNamespace& ns) noexcept {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  static constexpr char kTag[] = "kvbm-remote-namespace";
  XXH3_64bits_update(&state, kTag, sizeof(kTag) - 1);
  std::byte dims[5 * 4];
  put_le(dims + 0, ns.layout.num_layers, 4);
  put_le(dims + 4, ns.layout.outer_dim, 4);
  put_le(dims + 8, ns.layout.page_size, 4);
  put_le(dims + 12, ns.layout.inner_dim, 4);
  put_le(dims + 16, ns.layout.dtype_bytes, 4);
  XXH3_64bits_update(&state, dims, sizeof(dims));
  // Each string is length-prefixed: ("ab", "c") and ("a", "bc") differ.
  for (const std::string* s : {&ns.model, &ns.dtype, &ns.user_namespace}) {
    std::byte len[8];
    put_le(len, s->size(), 8);
    XXH3_64bits_update(&state, len, sizeof(len));
    XXH3_64bits_update(&state, s->data(), s->size());
  }
  return XXH3_64bits_digest(&state);
}

std::string_view to_string(RemoteValueError e) noexcept {
  switch (e) {
    case RemoteValueError::kNone:
      return "none";
    case RemoteValueError::kTooShort:
      return "too_short";
    case RemoteValueError::kBadMagic:
      return "bad_magic";
    case RemoteValueError::kBadVersion:
      return "bad_version";
    case RemoteValueError::kBadHeaderChecksum:
      return "bad_header_checksum";
    case RemoteValueError::kWrongNamespace:
      return "wrong_namespace";
    case RemoteValueError::kWrongHash:
      return "wrong_hash";
    case RemoteValueError::kWrongPrefixHash:
      return "wrong_prefix_hash";
    case RemoteValueError::kWrongSize:
      return "wrong_size";
    case RemoteValueError::kBadPayloadChecksum:
      return "bad_payload_checksum";
  }
  return "unknown";
}

std::uint64_t remote_checksum(std::span<const std::byte> bytes) noexcept {
  return io::bulk_xxh3(bytes);
}

void encode_remote_header(const RemoteHeader& h,
                          std::span<std::byte, kRemoteHeaderBytes> out) noexcept {
  std::byte* p = out.data();
  std::memcpy(p, kMagic, 4);
  put_le(p + 4, kRemoteFormatVersion, 2);
  put_le(p + 6, kRemoteHeaderBytes, 2);
  put_le(p + 8, h.fingerprint, 8);
  put_le(p + 16, h.sequence_hash, 8);
  put_le(p + 24, h.has_prefix_hash ? h.prefix_hash : 0, 8);
  put_le(p + 32, h.payload_bytes, 8);
  put_le(p + 40, h.payload_checksum, 8);
  put_le(p + 48, h.has_prefix_hash ? kFlagPrefixHash : 0, 4);
  put_le(p + 52, 0, 4);
  put_le(p + 56, XXH3_64bits(p, kHashedBytes), 8);
}

RemoteValueError decode_remote_header(std::span<const std::byte> value,
                                      RemoteHeader& out) noexcept {
  if (value.size() < kRemoteHeaderBytes) return RemoteValueError::kTooShort;
  const std::byte* p = value.data();
  if (std::memcmp(p, kMagic, 4) != 0) return RemoteValueError::kBadMagic;
  if (get_le(p + 4, 2) != kRemoteFormatVersion || get_le(p + 6, 2) != kRemoteHeaderBytes) {
    return RemoteValueError::kBadVersion;
  }
  if (get_le(p + 56, 8) != XXH3_64bits(p, kHashedBytes))
    return RemoteValueError::kBadHeaderChecksum;
  out.fingerprint = get_le(p + 8, 8);
  out.sequence_hash = get_le(p + 16, 8);
  out.has_prefix_hash = (get_le(p + 48, 4) & kFlagPrefixHash) != 0;
  out.prefix_hash = get_le(p + 24, 8);
  out.payload_bytes = get_le(p + 32, 8);
  out.payload_checksum = get_le(p + 40, 8);
  return RemoteValueError::kNone;
}

RemoteValueError verify_remote_value(std::span<const std::byte> value, std::uint64_t fingerprint,
                                     std::uint64_t sequence_hash,
                                     std::uint64_t expected_prefix_hash,
                                     std::size_t payload_bytes) noexcept {
  RemoteHeader h;
  if (auto e = decode_remote_header(value, h); e != RemoteValueError::kNone) return e;
  if (h.fingerprint != fingerprint) return RemoteValueError::kWrongNamespace;
  if (h.sequence_hash != sequence_hash) return RemoteValueError::kWrongHash;
  if (expected_prefix_hash != 0 && (!h.has_prefix_hash || h.prefix_hash != expected_prefix_hash)) {
    return RemoteValueError::kWrongPrefixHash;
  }
  if (h.payload_bytes != payload_bytes || value.size() - kRemoteHeaderBytes != payload_bytes) {
    return RemoteValueError::kWrongSize;
  }
  if (remote_checksum(value.subspan(kRemoteHeaderBytes)) != h.payload_checksum) {
    return RemoteValueError::kBadPayloadChecksum;
  }
  return RemoteValueError::kNone;
}

}  // namespace kvbm
