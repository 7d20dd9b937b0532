// kvbm/remote/remote_value.h: the value format of the remote tier (G4).
//
// A block in the remote store is one value: a 64-byte header followed by the
// block's bytes, contiguous. Unlike the disk slot footer (a cache of one
// process), the value is an exchange format between hosts, so every field is
// little-endian whatever the host:
//
//   offset size field
//        0    4 magic "KVG4" (0x4B 0x56 0x47 0x34)
//        4    2 format version (kRemoteFormatVersion)
//        6    2 header bytes (64)
//        8    8 namespace fingerprint (remote_fingerprint() of the writer)
//       16    8 sequence hash of the block
//       24    8 prefix hash: an optional second, independent 64-bit hash of
//               the block's prefix given by the caller (0: none). It is extra
//               identity: a reader that names one accepts only a value that
//               carries the same, so a collision of the sequence hash alone
//               is not enough to be served another prefix's bytes.
//       32    8 payload bytes
//       40    8 payload checksum: XXH3-64 of the payload
//       48    4 flags (bit 0: the prefix hash is present)
//       52    4 reserved, 0
//       56    8 header checksum: XXH3-64 of bytes [0, 56)
//       64    - payload
//
// Thread-safety: the functions are pure.

#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kvbm/storage/layout.h"

namespace kvbm {

inline constexpr std::uint16_t kRemoteFormatVersion = 1;
inline constexpr std::size_t kRemoteHeaderBytes = 64;

/// What identifies the blocks of one model and layout in a shared store.
/// Two writers share blocks only when every field is equal.
struct RemoteNamespace {
  std::string model{};  ///< model name and weight version, e.g. "llama-3.1-8b@rev3"
  std::string
      dtype{};  ///< element type, e.g. "bf16" (dtype_bytes alone cannot tell bf16 from fp16)
  LayoutConfig
      layout{};  ///< the block's dimensions (layers, outer, tokens per block, inner, dtype bytes)
  std::string
      user_namespace{};  ///< any further separation the deployment wants (tenant, cache salt)
};

/// Returns the namespace fingerprint: XXH3-64 of a tag, the five LayoutConfig
/// fields (u32 LE) and the three strings, each preceded by its length (u64
/// LE) so that no two different namespaces give the same input.
[[nodiscard]] std::uint64_t remote_fingerprint(const RemoteNamespace& ns) noexcept;

/// The decoded header of a value.
struct RemoteHeader {
  std::uint64_t fingerprint = 0;
  std::uint64_t sequence_hash = 0;
  std::uint64_t prefix_hash = 0;  ///< meaningful only when has_prefix_hash
  bool has_prefix_hash = false;
  std::uint64_t payload_bytes = 0;
  std::uint64_t payload_checksum = 0;
};

/// Why a value was refused.
enum class RemoteValueError : std::uint8_t {
  kNone,
  kTooShort,    ///< fewer bytes than a header
  kBadMagic,    ///< not a kvbm value
  kBadVersion,  ///< another format version or header size
  kBadHeaderChecksum,
  kWrongNamespace,   ///< another model, layout or user namespace
  kWrongHash,        ///< another sequence hash
  kWrongPrefixHash,  ///< the reader named a prefix hash and the value carries another (or none)
  kWrongSize,        ///< payload size differs from the header's or the reader's
  kBadPayloadChecksum,
};

/// Returns a short name of the error ("bad_magic", ...).
[[nodiscard]] std::string_view to_string(RemoteValueError e) noexcept;

/// Returns XXH3-64 of `bytes`.
[[nodiscard]] std::uint64_t remote_checksum(std::span<const std::byte> bytes) noexcept;

/// Writes the 64-byte header for `h` into `out` (header checksum included).
void encode_remote_header(const RemoteHeader& h,
                          std::span<std::byte, kRemoteHeaderBytes> out) noexcept;

/// Decodes and checks a header: magic, version, size and header checksum.
/// Nothing about identity is checked.
[[nodiscard]] RemoteValueError decode_remote_header(std::span<const std::byte> value,
                                                    RemoteHeader& out) noexcept;

/// Verifies a whole value against what the reader expects: the header, the
/// namespace fingerprint, the sequence hash, the prefix hash when
/// `expected_prefix_hash` is non-zero, the payload size and its checksum.
/// Returns kNone when the payload (value past the header) may be used.
[[nodiscard]] RemoteValueError verify_remote_value(std::span<const std::byte> value,
                                                   std::uint64_t fingerprint,
                                                   std::uint64_t sequence_hash,
                                                   std::uint64_t expected_prefix_hash,
                                                   std::size_t payload_bytes) noexcept;

}  // namespace kvbm
