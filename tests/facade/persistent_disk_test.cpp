// Tests of KvBlockManager with a persistent G3 (disk_persistent): blocks
// survive a restart and a crash (fork and SIGKILL) with every byte checked,
// one process owns the directory, and another namespace is never served.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "facade/facade_test_util.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/storage/storage.h"
#include "skip_or_fail.h"
#include "test_util.h"

namespace kvbm {
namespace persistent_disk_test {

using test::Bytes;
using test::compute;
using test::pattern;
using test::read_block;
using test::write_block;

class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("persist") {}
};

KvBlockManagerConfig persistent_config(const std::filesystem::path& dir,
                                       std::string ns = "model-a@1") {
  KvBlockManagerConfig c = test::config(8, 8, 64, dir);
  c.disk_persistent = true;
  c.disk_namespace = std::move(ns);
  c.device_to_host = OffloadMode::kWriteThrough;
  c.host_to_disk = OffloadMode::kWriteThrough;
  return c;
}

// Onboards each hash alone (recovered blocks are first blocks) and checks the
// bytes; returns how many came from G3.
std::size_t onboard_and_check(KvBlockManager& kv, const std::vector<std::uint64_t>& values) {
  std::size_t from_disk = 0;
  for (const std::uint64_t v : values) {
    const std::vector<SequenceHash> one = {SequenceHash(v, std::nullopt, 0)};
    OnboardHandle h = kv.onboard(one);
    EXPECT_EQ(h.wait(), TransferStatus::kDone) << h.error();
    from_disk += h.counts().from(TierId::kG3);
    const auto blocks = h.take_blocks();
    if (blocks.size() != 1) {
      ADD_FAILURE() << "block " << v << " was not served";
      continue;
    }
    EXPECT_EQ(read_block(kv.device_layout(), blocks[0].block_id()), pattern(v, kv.block_bytes()))
        << "block " << v << " came back with other bytes";
  }
  return from_disk;
}

std::vector<SequenceHash> roots(std::uint64_t first, std::size_t n) {
  std::vector<SequenceHash> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(test::root(first + i));
  return out;
}

TEST(PersistentDiskTest, BlocksSurviveARestartWithEveryByte) {
  TempDir dir;
  const auto hashes = roots(0x5000, 20);
  {
    auto kv = KvBlockManager::build(persistent_config(dir.path()));
    ASSERT_TRUE(kv->disk_recovery().has_value());
    EXPECT_EQ(kv->disk_recovery()->recovered, 0U);
    for (std::size_t i = 0; i < hashes.size(); i += 4) {
      compute(*kv, {hashes.begin() + static_cast<std::ptrdiff_t>(i),
                    hashes.begin() + static_cast<std::ptrdiff_t>(i + 4)});
      kv->drain();
    }
    EXPECT_EQ(kv->disk()->pool_counts().inactive, hashes.size());
  }
  auto kv = KvBlockManager::build(persistent_config(dir.path()));
  ASSERT_TRUE(kv->disk_recovery().has_value());
  EXPECT_EQ(kv->disk_recovery()->recovered, hashes.size());
  EXPECT_EQ(kv->disk()->pool_counts().inactive, hashes.size())
      << "recovered blocks are cached, not in use";
  EXPECT_TRUE(kv->disk()->pool_counts().balanced());
  std::vector<std::uint64_t> values;
  for (const auto& h : hashes) values.push_back(h.value());
  EXPECT_EQ(onboard_and_check(*kv, values), hashes.size());
  kv->drain();
  EXPECT_EQ(kv->audit(), "");
}

TEST(PersistentDiskTest, OneProcessOwnsTheDirectory) {
  TempDir dir;
  auto first = KvBlockManager::build(persistent_config(dir.path()));
  try {
    (void)KvBlockManager::build(persistent_config(dir.path()));
    ADD_FAILURE() << "a second manager on a held directory must be refused";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("KvBlockManagerConfig.disk_directory"), std::string::npos) << what;
    EXPECT_NE(what.find("in use by process " + std::to_string(::getpid())), std::string::npos)
        << what;
  }
}

TEST(PersistentDiskTest, AnotherNamespaceIsNeverServed) {
  TempDir dir;
  const auto hashes = roots(0x6000, 4);
  {
    auto kv = KvBlockManager::build(persistent_config(dir.path(), "model-a@1"));
    compute(*kv, hashes);
    kv->drain();
  }
  auto other = KvBlockManager::build(persistent_config(dir.path(), "model-b@1"));
  ASSERT_TRUE(other->disk_recovery().has_value());
  EXPECT_EQ(other->disk_recovery()->recovered, 0U);
  EXPECT_EQ(other->probe(hashes).total(), 0U);
}

TEST(PersistentDiskTest, PersistenceNeedsBytesAndADiskTier) {
  TempDir dir;
  auto c = persistent_config(dir.path());
  c.move_bytes = false;
  EXPECT_THROW((void)KvBlockManager::build(c), UsageError);
  c = persistent_config(dir.path());
  c.disk.blocks = 0;
  EXPECT_THROW((void)KvBlockManager::build(c), UsageError);
}

TEST(PersistentDiskTest, AfterSigkillOnlyWholeBlocksComeBack) {
  if (cuda_device_available()) {
    // This process has initialized CUDA (the probe), and a forked child cannot use it.
    KVBM_SKIP_OR_FAIL(
        "GPU present: the writer is a forked child, which cannot use the GPU this process "
        "opened; the crash is tested where G1 is emulated (no CUDA device)");
  }
  const std::uint32_t seed = test::test_seed();
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 6; ++trial) {
    TempDir dir;
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Computes blocks forever; every one goes down to G3.
      try {
        auto kv = KvBlockManager::build(persistent_config(dir.path()));
        for (std::uint64_t v = 0x7000;; v += 4) {
          compute(*kv, roots(v, 4));
          kv->drain();
        }
      } catch (...) {
      }
      ::_exit(3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + rng() % 120));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "trial " << trial << ": the writer ended on its own";

    auto kv = KvBlockManager::build(persistent_config(dir.path()));
    ASSERT_TRUE(kv->disk_recovery().has_value());
    const RecoverySummary summary = *kv->disk_recovery();
    // Every recovered block is whole: onboarding checks every byte.
    std::vector<std::uint64_t> values;
    for (std::uint64_t v = 0x7000; values.size() < summary.recovered && v < 0x7000 + 64 * 1024;
         ++v) {
      if (kv->probe(std::vector<SequenceHash>{SequenceHash(v, std::nullopt, 0)})
              .from(TierId::kG3) == 1)
        values.push_back(v);
    }
    EXPECT_EQ(values.size(), summary.recovered) << "trial " << trial << " (seed " << seed << ")";
    EXPECT_EQ(onboard_and_check(*kv, values), values.size())
        << "trial " << trial << " (seed " << seed << ")";
    kv->drain();
    EXPECT_EQ(kv->audit(), "");
  }
}

}  // namespace persistent_disk_test
}  // namespace kvbm
