// Tests of host_write / host_read / host_addressable (kvbm/storage/host_access.h): a region of
// every kind of storage written from the host and read back, whole and at odd offsets; on a GPU
// the device tier is real device memory, which the CPU cannot touch, and the copies are what
// a CUDA engine then reads.

#include "kvbm/storage/host_access.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/storage/layout.h"
#include "kvbm/storage/storage.h"
#include "kvbm/transfer/cuda_engine.h"
#include "kvbm/transfer/transfer_engine.h"
#include "skip_or_fail.h"
#include "test_util.h"

namespace kvbm {
namespace host_access_test {

std::vector<std::byte> random_bytes(std::size_t n, std::mt19937_64& rng) {
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

struct Kind {
  const char* name;
  std::unique_ptr<Storage> (*make)(std::size_t);
};

std::unique_ptr<Storage> host(std::size_t n) { return make_host_storage(n); }
std::unique_ptr<Storage> pinned(std::size_t n) { return make_pinned_storage(n); }
std::unique_ptr<Storage> device(std::size_t n) { return make_device_storage(n); }

TEST(HostAccess, EveryKindOfStorageRoundTripsWholeAndAtOddOffsets) {
  std::mt19937_64 rng(test::test_seed());
  constexpr std::size_t kBytes = 3 * 4096 + 17;
  for (const Kind& k : {Kind{"host", host}, Kind{"pinned", pinned}, Kind{"device", device}}) {
    SCOPED_TRACE(k.name);
    auto s = k.make(kBytes);
    EXPECT_EQ(host_addressable(s->base()), s->host_accessible());
    const auto whole = random_bytes(kBytes, rng);
    host_write(s->base(), whole.data(), whole.size());
    std::vector<std::byte> back(kBytes);
    host_read(back.data(), s->base(), back.size());
    EXPECT_EQ(back, whole);
    // A piece at an odd offset changes only its bytes.
    const auto piece = random_bytes(1001, rng);
    host_write(s->base() + 333, piece.data(), piece.size());
    host_read(back.data(), s->base(), back.size());
    auto expected = whole;
    std::copy(piece.begin(), piece.end(), expected.begin() + 333);
    EXPECT_EQ(back, expected);
    std::vector<std::byte> tail(5);
    host_read(tail.data(), s->base() + kBytes - 5, 5);
    EXPECT_TRUE(std::equal(tail.begin(), tail.end(), expected.end() - 5));
    host_write(s->base(), nullptr, 0);  // nothing to copy: nothing touched
    host_read(nullptr, s->base(), 0);
    host_read(back.data(), s->base(), back.size());
    EXPECT_EQ(back, expected);
  }
}

TEST(HostAccess, HostMemoryIsAddressable) {
  std::vector<std::byte> v(64);
  EXPECT_TRUE(host_addressable(reinterpret_cast<std::uintptr_t>(v.data())));
  auto p = make_pinned_storage(4096);
  EXPECT_TRUE(host_addressable(p->base()));
}

// What host_write put into device memory is what a CUDA engine's next copy reads, at once: the
// write is over when it returns (a plain cudaMemcpy from pageable memory returns once the bytes
// are staged; the engine's non-blocking stream would not wait for the rest).
TEST(HostAccess, AWriteIsCompleteForTheNextEngineCopy) {
  if (!cuda_device_available())
    KVBM_SKIP_OR_FAIL("no GPU: no usable CUDA device: GPU test skipped");
  std::mt19937_64 rng(test::test_seed());
  const LayoutConfig config{4, 2, 16, 1024, 2};  // 32 KiB regions, 256 KiB blocks
  constexpr std::size_t kBlocks = 32;
  auto dev = make_device_storage(config.block_bytes() * kBlocks);
  auto back = make_pinned_storage(config.block_bytes() * kBlocks);
  const Layout d = Layout::fully_contiguous(config, kBlocks, dev->base());
  const Layout h = Layout::fully_contiguous(config, kBlocks, back->base());
  CudaTransferEngine down(d, h, CudaDirection::kDeviceToHost);
  for (int round = 0; round < 20; ++round) {
    const auto bytes = random_bytes(dev->size(), rng);  // pageable
    host_write(dev->base(), bytes.data(), bytes.size());
    std::vector<TransferPair> pairs;
    for (BlockId b = 0; b < kBlocks; ++b) pairs.push_back({b, b});
    ASSERT_TRUE(down.submit(pairs)->wait().ok());
    const auto* got = reinterpret_cast<const std::byte*>(back->base());
    ASSERT_TRUE(std::equal(bytes.begin(), bytes.end(), got)) << "round " << round;
  }
}

}  // namespace host_access_test
}  // namespace kvbm
