// Tests of kvbm/disk/disk_pool_reader.h and DiskStorage::open_read_only(): a
// reader of a pool another storage (another process, in the last test) owns
// and writes. It finds nothing before the file exists, indexes what the owner
// wrote without taking its lock, serves only verified bytes of the hash asked
// for (a slot rewritten behind its index is a miss and leaves the index), sees
// nothing of another layout or namespace, and never writes.

#include "kvbm/disk/disk_pool_reader.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "disk/disk_test_util.h"
#include "kvbm/disk/disk_storage.h"
#include "kvbm/error.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvbm {
namespace disk_pool_reader_test {

namespace fs = std::filesystem;
using test::payload_of;
using test::SlotBuffer;
using test::TempDir;

// 2 x 2 x 4 x 128 x 2 = 4 KiB blocks.
const LayoutConfig kLayout{
    .num_layers = 2, .outer_dim = 2, .page_size = 4, .inner_dim = 128, .dtype_bytes = 2};

/// Writes the block of `hash` into `slot` of the owner's pool.
void write(const DiskStorage& disk, BlockId slot, std::uint64_t hash) {
  SlotBuffer buf(disk.slot_bytes());
  const auto bytes = payload_of(hash, disk.block_bytes());
  std::memcpy(buf.p, bytes.data(), bytes.size());
  ASSERT_TRUE(disk.write_slot(slot, buf.span(), hash));
}

class DiskPoolReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    auto base = test::target_base(test::kTargets[1], why);
    if (!base) KVBM_SKIP_OR_FAIL(why);
    tmp_ = std::make_unique<TempDir>(*base);
    dir_ = tmp_->path() / "rank0";
  }
  DiskStorageOptions owner_options(std::string ns = "model|layout=page_first") const {
    DiskStorageOptions o;
    o.directory = dir_;
    o.config = kLayout;
    o.num_blocks = 16;
    o.persistent = true;
    o.namespace_id = std::move(ns);
    return o;
  }
  std::unique_ptr<DiskStorage> owner(std::string ns = "model|layout=page_first") const {
    auto r = DiskStorage::create(owner_options(std::move(ns)));
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? std::move(r).value() : nullptr;
  }
  DiskPoolReader reader(std::string ns = "model|layout=page_first") const {
    return DiskPoolReader({.directory = dir_, .config = kLayout, .namespace_id = std::move(ns)});
  }
  std::vector<std::byte> read(DiskPoolReader& r, std::uint64_t hash, bool& ok) const {
    std::vector<std::byte> out(kLayout.block_bytes());
    ok = r.read(hash, std::span<std::byte>(out));
    return out;
  }
  std::unique_ptr<TempDir> tmp_;
  fs::path dir_;
};

TEST_F(DiskPoolReaderTest, BeforeTheOwnerCreatesItsFileNothingIsIndexed) {
  DiskPoolReader r = reader();
  EXPECT_EQ(r.refresh(), 0U);
  EXPECT_NE(r.last_error().find("does not exist"), std::string::npos) << r.last_error();
  EXPECT_FALSE(r.contains(1));
  bool ok = true;
  (void)read(r, 1, ok);
  EXPECT_FALSE(ok);

  fs::create_directories(dir_);
  fs::permissions(dir_, fs::perms::owner_all);
  EXPECT_EQ(r.refresh(), 0U);  // the directory, no file yet
  EXPECT_NE(r.last_error().find("does not exist"), std::string::npos) << r.last_error();
}

TEST_F(DiskPoolReaderTest, IndexesWhatTheOwnerWroteWhileItHoldsTheLock) {
  auto disk = owner();
  ASSERT_NE(disk, nullptr);
  DiskPoolReader r = reader();
  EXPECT_EQ(r.refresh(), 0U);  // an empty pool
  EXPECT_EQ(r.last_error(), "");
  for (std::uint64_t h = 1; h <= 5; ++h) write(*disk, static_cast<BlockId>(h * 2), 100 + h);
  EXPECT_FALSE(r.contains(101));  // a snapshot until the next refresh
  EXPECT_EQ(r.refresh(), 5U);
  EXPECT_EQ(r.size(), 5U);
  for (std::uint64_t h = 101; h <= 105; ++h) {
    EXPECT_TRUE(r.contains(h));
    bool ok = false;
    EXPECT_EQ(read(r, h, ok), payload_of(h, kLayout.block_bytes())) << h;
    EXPECT_TRUE(ok) << h;
  }
  EXPECT_FALSE(r.contains(106));

  // Segments: the block's bytes in order, as a page whose halves lie apart.
  std::vector<std::byte> a(1000), b(kLayout.block_bytes() - 1000);
  const std::span<std::byte> parts[] = {a, b};
  ASSERT_TRUE(r.read(103, std::span<const std::span<std::byte>>(parts)));
  a.insert(a.end(), b.begin(), b.end());
  EXPECT_EQ(a, payload_of(103, kLayout.block_bytes()));

  std::vector<std::byte> small(kLayout.block_bytes() - 1);
  EXPECT_THROW((void)r.read(101, std::span<std::byte>(small)), UsageError);
}

TEST_F(DiskPoolReaderTest, ASlotRewrittenBehindTheIndexIsAMissNeverTheNewBytes) {
  auto disk = owner();
  ASSERT_NE(disk, nullptr);
  write(*disk, 3, 7);
  DiskPoolReader r = reader();
  ASSERT_EQ(r.refresh(), 1U);
  write(*disk, 3, 8);  // the owner evicted 7 and reused its slot
  bool ok = true;
  (void)read(r, 7, ok);
  EXPECT_FALSE(ok);
  EXPECT_FALSE(r.contains(7)) << "a failed read leaves the index";
  EXPECT_FALSE(r.contains(8));
  ASSERT_EQ(r.refresh(), 1U);
  EXPECT_EQ(read(r, 8, ok), payload_of(8, kLayout.block_bytes()));
  EXPECT_TRUE(ok);
}

TEST_F(DiskPoolReaderTest, AnotherLayoutOrNamespaceIsNeverRead) {
  auto disk = owner("model-a|dtype=bfloat16");
  ASSERT_NE(disk, nullptr);
  write(*disk, 0, 1);
  DiskPoolReader other_ns = reader("model-a|dtype=float16");
  EXPECT_EQ(other_ns.refresh(), 0U);
  EXPECT_NE(other_ns.last_error().find("another layout or namespace"), std::string::npos)
      << other_ns.last_error();
  EXPECT_FALSE(other_ns.contains(1));

  LayoutConfig same_bytes = kLayout;
  same_bytes.num_layers = 4;
  same_bytes.outer_dim = 1;
  DiskPoolReader other_layout(
      {.directory = dir_, .config = same_bytes, .namespace_id = "model-a|dtype=bfloat16"});
  EXPECT_EQ(other_layout.refresh(), 0U);
  EXPECT_FALSE(other_layout.contains(1));
  DiskPoolReader same = reader("model-a|dtype=bfloat16");
  EXPECT_EQ(same.refresh(), 1U);
}

TEST_F(DiskPoolReaderTest, AReadOnlyStorageNeverWrites) {
  auto disk = owner();
  ASSERT_NE(disk, nullptr);
  write(*disk, 1, 5);
  auto opened = DiskStorage::open_read_only(owner_options());
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  const auto& ro = *opened.value();
  EXPECT_TRUE(ro.read_only());
  EXPECT_EQ(ro.num_blocks(), 16U);
  SlotBuffer buf(ro.slot_bytes());
  EXPECT_THROW((void)ro.write_slot(1, buf.span(), 9), UsageError);
  EXPECT_THROW((void)ro.invalidate_header(1), UsageError);
  EXPECT_TRUE(ro.read_slot(1, buf.span(), 5));
  opened =
      DiskStorage::open_read_only(owner_options());  // the destructor leaves the file as it was
  ASSERT_TRUE(opened.ok());
  EXPECT_TRUE(opened.value()->read_slot(1, buf.span(), 5));
}

TEST_F(DiskPoolReaderTest, AFileThatRecordsNoSlotsIsRefusedNotScanned) {
  {
    auto created = owner();
    ASSERT_NE(created, nullptr);
  }
  // The superblock (the file's last 4 KiB) rewritten to record 0 slots, with a
  // valid checksum, and the file cut to it: only a crafted file looks so.
  const fs::path file = dir_ / "kvbm.slots";
  std::vector<char> sector(4096);
  {
    std::ifstream in(file, std::ios::binary);
    in.seekg(-4096, std::ios::end);
    in.read(sector.data(), 4096);
  }
  const std::uint64_t zero = 0;
  std::memcpy(sector.data() + 32, &zero, 8);  // num_blocks
  const std::uint64_t sum = XXH3_64bits(sector.data(), 56);
  std::memcpy(sector.data() + 56, &sum, 8);  // checksum
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(sector.data(), 4096);
  }
  DiskPoolReader r = reader();
  EXPECT_EQ(r.refresh(), 0U);
  EXPECT_NE(r.last_error().find("no slots"), std::string::npos) << r.last_error();
}

// The owner is another process that keeps rewriting its slots with new hashes
// while this one refreshes and reads: every read that succeeds returns the
// bytes of the hash asked for.
TEST_F(DiskPoolReaderTest, ReadsBesideAWritingOwnerProcessReturnOnlyWholeBlocks) {
  {
    auto created = owner();
    ASSERT_NE(created, nullptr);
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto r = DiskStorage::create(owner_options());
    if (!r.ok()) ::_exit(2);
    auto disk = std::move(r).value();
    SlotBuffer buf(disk->slot_bytes());
    for (std::uint64_t round = 0;; ++round) {
      for (BlockId s = 0; s < 16; ++s) {
        const std::uint64_t hash = round * 16 + s + 1;
        const auto bytes = payload_of(hash, disk->block_bytes());
        std::memcpy(buf.p, bytes.data(), bytes.size());
        if (!disk->write_slot(s, buf.span(), hash)) ::_exit(3);
      }
    }
  }
  DiskPoolReader r = reader();
  std::size_t served = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < until) {
    r.refresh();
    for (std::uint64_t h = 1; h < 100000 && served < 1000000; ++h) {
      if (!r.contains(h)) continue;
      bool ok = false;
      const auto bytes = read(r, h, ok);
      if (!ok) continue;
      ++served;
      ASSERT_EQ(bytes, payload_of(h, kLayout.block_bytes())) << "hash " << h;
    }
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status)) << "the writer stopped on its own: " << status;
  EXPECT_GT(served, 0U) << "no read was served beside the writer";
  RecordProperty("served", static_cast<int>(served));
}

}  // namespace disk_pool_reader_test
}  // namespace kvbm
