// Tests of kvbm/remote/remote_value.h: the value format, byte by byte.

#include "kvbm/remote/remote_value.h"

#include <array>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvbm {
namespace remote_value_test {

constexpr std::uint64_t kFp = 0x1122334455667788ULL;
constexpr std::uint64_t kHash = 0xA1B2C3D4E5F60718ULL;

std::vector<std::byte> make_value(std::size_t payload, std::uint64_t prefix_hash = 0) {
  std::vector<std::byte> v(kRemoteHeaderBytes + payload);
  for (std::size_t i = 0; i < payload; ++i)
    v[kRemoteHeaderBytes + i] = static_cast<std::byte>(i * 31 + 7);
  RemoteHeader h;
  h.fingerprint = kFp;
  h.sequence_hash = kHash;
  h.prefix_hash = prefix_hash;
  h.has_prefix_hash = prefix_hash != 0;
  h.payload_bytes = payload;
  h.payload_checksum = remote_checksum(std::span(v).subspan(kRemoteHeaderBytes));
  encode_remote_header(h, std::span<std::byte, kRemoteHeaderBytes>(v.data(), kRemoteHeaderBytes));
  return v;
}

TEST(RemoteValueTest, LayoutIsLittleEndianAtFixedOffsets) {
  auto v = make_value(100);
  EXPECT_EQ(0, std::memcmp(v.data(), "KVG4", 4));
  EXPECT_EQ(v[4], std::byte{1});  // version 1, LE
  EXPECT_EQ(v[5], std::byte{0});
  EXPECT_EQ(v[6], std::byte{64});    // header bytes
  EXPECT_EQ(v[8], std::byte{0x88});  // fingerprint, low byte first
  EXPECT_EQ(v[15], std::byte{0x11});
  EXPECT_EQ(v[16], std::byte{0x18});  // sequence hash
  EXPECT_EQ(v[32], std::byte{100});   // payload bytes
  RemoteHeader h;
  ASSERT_EQ(decode_remote_header(v, h), RemoteValueError::kNone);
  EXPECT_EQ(h.fingerprint, kFp);
  EXPECT_EQ(h.sequence_hash, kHash);
  EXPECT_FALSE(h.has_prefix_hash);
  EXPECT_EQ(h.payload_bytes, 100u);
}

TEST(RemoteValueTest, VerifiesOnlyTheExactIdentity) {
  auto v = make_value(256, 0x5555);
  EXPECT_EQ(verify_remote_value(v, kFp, kHash, 0, 256), RemoteValueError::kNone);
  EXPECT_EQ(verify_remote_value(v, kFp, kHash, 0x5555, 256), RemoteValueError::kNone);
  EXPECT_EQ(verify_remote_value(v, kFp + 1, kHash, 0, 256), RemoteValueError::kWrongNamespace);
  EXPECT_EQ(verify_remote_value(v, kFp, kHash + 1, 0, 256), RemoteValueError::kWrongHash);
  EXPECT_EQ(verify_remote_value(v, kFp, kHash, 0x5556, 256), RemoteValueError::kWrongPrefixHash);
  EXPECT_EQ(verify_remote_value(v, kFp, kHash, 0, 255), RemoteValueError::kWrongSize);
  auto none = make_value(256);
  EXPECT_EQ(verify_remote_value(none, kFp, kHash, 0x5555, 256), RemoteValueError::kWrongPrefixHash);
  EXPECT_EQ(verify_remote_value(std::span(v).first(63), kFp, kHash, 0, 256),
            RemoteValueError::kTooShort);
  EXPECT_EQ(verify_remote_value(std::span(v).first(v.size() - 1), kFp, kHash, 0, 256),
            RemoteValueError::kWrongSize);
}

// The property the checks keep: no single-bit change anywhere in a value verifies.
TEST(RemoteValueTest, EveryBitFlipIsRefused) {
  const auto good = make_value(300, 0x77);
  for (std::size_t byte = 0; byte < good.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      auto v = good;
      v[byte] ^= static_cast<std::byte>(1 << bit);
      ASSERT_NE(verify_remote_value(v, kFp, kHash, 0x77, 300), RemoteValueError::kNone)
          << "byte " << byte << " bit " << bit;
    }
  }
}

RemoteNamespace make_ns(std::string model, std::string dtype, std::string user) {
  return RemoteNamespace{
      .model = std::move(model),
      .dtype = std::move(dtype),
      .layout =
          LayoutConfig{
              .num_layers = 2, .outer_dim = 2, .page_size = 16, .inner_dim = 64, .dtype_bytes = 2},
      .user_namespace = std::move(user)};
}

TEST(RemoteValueTest, FingerprintSeparatesEveryField) {
  const RemoteNamespace base = make_ns("ab", "c", "");
  std::set<std::uint64_t> seen = {remote_fingerprint(base)};
  auto add = [&](const RemoteNamespace& ns) {
    EXPECT_TRUE(seen.insert(remote_fingerprint(ns)).second);
  };
  add(make_ns("a", "bc", ""));  // the same concatenation, another split
  add(make_ns("ab", "", "c"));  // the same bytes in another field
  for (int field = 0; field < 5; ++field) {
    RemoteNamespace ns = base;
    std::uint32_t* f[5] = {&ns.layout.num_layers, &ns.layout.outer_dim, &ns.layout.page_size,
                           &ns.layout.inner_dim, &ns.layout.dtype_bytes};
    *f[field] += 1;
    add(ns);
  }
  EXPECT_EQ(remote_fingerprint(base), remote_fingerprint(make_ns("ab", "c", "")));  // stable
}

}  // namespace remote_value_test
}  // namespace kvbm
