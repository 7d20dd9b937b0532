// Tests of KvBlockManagerConfig::tiers (kvbm/kv_block_manager.h): the tiers given as one
// entry each build the same manager as the named fields, the named fields are translated
// into entries (config().tiers), and an invalid entry is named as "tiers[i]...", a named
// field as itself.

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "facade/facade_test_util.h"
#include "kvbm/kv_block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace tier_entries_test {

using test::chain;
using test::config;
using test::small_layout;
using test::TempDir;

// G1, G2 and G3 as entries (G3 in `dir`), in the order given.
KvBlockManagerConfig entries(const std::filesystem::path& dir, std::vector<TierId> order = {}) {
  if (order.empty()) order = {TierId::kG1, TierId::kG2, TierId::kG3};
  KvBlockManagerConfig c;
  c.layout = small_layout();
  c.pipeline.batch_config.flush_interval = std::chrono::milliseconds(1);
  c.bounce_blocks = 4;
  for (const TierId t : order) {
    TierEntry& e = c.tiers.emplace_back();
    e.id = t;
    e.size.blocks = t == TierId::kG1 ? 8 : 6;
    if (t == TierId::kG3) {
      e.disk.emplace();
      e.disk->directory = dir;
      e.disk->direct_io = DirectIo::kOff;
    }
  }
  return c;
}

// Expects build(c) to throw UsageError starting "KvBlockManagerConfig.<option>: " and holding
// `needle`.
void expect_option_error(KvBlockManagerConfig c, const std::string& option,
                         const std::string& needle = "") {
  SCOPED_TRACE(option);
  try {
    (void)KvBlockManager::build(std::move(c));
    ADD_FAILURE() << "expected KvBlockManagerConfig." << option << ": ...";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("KvBlockManagerConfig." + option + ": "), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST(TierEntries, EntriesBuildTheTiersInAnyOrderAndBlocksMoveDown) {
  TempDir dir;
  auto kv = KvBlockManager::build(entries(dir.path(), {TierId::kG3, TierId::kG1, TierId::kG2}));
  ASSERT_NE(kv->pool<G2>(), nullptr);
  ASSERT_NE(kv->pool<G3>(), nullptr);
  EXPECT_EQ(kv->pool<G1>()->total_blocks(), 8u);
  EXPECT_EQ(kv->pool<G3>()->total_blocks(), 6u);
  EXPECT_FALSE(kv->has_tier(TierId::kG4));
  ASSERT_EQ(kv->config().tiers.size(), 3u);  // fastest first
  EXPECT_EQ(kv->config().tiers[0].id, TierId::kG1);
  EXPECT_EQ(kv->config().tiers[2].id, TierId::kG3);
  const auto hashes = chain(4);
  {
    auto blocks = kv->device().allocate_blocks(4);
    ASSERT_TRUE(blocks.has_value());
    std::vector<CompleteBlock<G1>> complete;
    for (std::size_t i = 0; i < 4; ++i) {
      complete.push_back(std::move((*blocks)[i]).stage(hashes[i], kv->block_size()).value());
    }
    (void)kv->register_blocks(std::move(complete));
  }
  kv->drain();  // write-through, the default mode of each entry: G1 -> G2 -> G3
  const KvBlockManagerStats s = kv->stats();
  EXPECT_EQ(s.tier(TierId::kG3)->counters.registrations, 4u);
  kv->shutdown();
  EXPECT_EQ(kv->audit(), "");
}

TEST(TierEntries, NamedFieldsAreTranslatedIntoEntries) {
  TempDir dir;
  auto c = config(8, 6, 6, dir.path());
  c.host_to_disk = OffloadMode::kOnEviction;
  c.disk_workers = 8;
  auto kv = KvBlockManager::build(c);
  const auto& tiers = kv->config().tiers;
  ASSERT_EQ(tiers.size(), 3u);
  EXPECT_EQ(tiers[1].id, TierId::kG2);
  EXPECT_EQ(tiers[1].size.blocks, 6u);
  EXPECT_EQ(tiers[2].mode, OffloadMode::kOnEviction);
  ASSERT_TRUE(tiers[2].disk.has_value());
  EXPECT_EQ(tiers[2].disk->directory, dir.path());
  EXPECT_EQ(tiers[2].disk->workers, 8u);
  EXPECT_EQ(kv->stats().boundary(TierId::kG2)->mode, OffloadMode::kOnEviction);
  // Absent tiers have no entry.
  auto small = KvBlockManager::build(config(4, 0, 0));
  EXPECT_EQ(small->config().tiers.size(), 1u);
  EXPECT_EQ(small->pool<G2>(), nullptr);
}

TEST(TierEntries, AnInvalidEntryIsNamedByItsIndex) {
  TempDir dir;
  auto c = entries(dir.path());
  c.tiers[1].size.blocks = 0;
  expect_option_error(c, "tiers[1].size.blocks", "at least 1");
  c = entries(dir.path());
  c.tiers[2].id = TierId::kG2;
  expect_option_error(c, "tiers[2].id", "G2 has two entries");
  c = entries(dir.path(), {TierId::kG2, TierId::kG3});
  expect_option_error(c, "tiers", "no G1 entry");
  c = entries(dir.path());
  c.tiers[2].disk.reset();
  expect_option_error(c, "tiers[2].disk", "disk options");
  c = entries(dir.path());
  c.tiers[2].disk->workers = 1;
  expect_option_error(c, "tiers[2].disk.workers", "tiers[2].disk.queue_depth");
  c = entries(dir.path());
  c.tiers[1].policy.min_frequency = 99;
  expect_option_error(c, "tiers[1].policy.min_frequency", "15");
  c = entries(dir.path());
  c.tiers[0].listeners.push_back(nullptr);
  expect_option_error(c, "tiers[0].listeners", "null");
  c = entries(dir.path(), {TierId::kG1, TierId::kG3});
  expect_option_error(c, "tiers[1].size", "add a G2 entry");
  c = entries(dir.path());
  TierEntry& g4 = c.tiers.emplace_back();
  g4.id = TierId::kG4;
  g4.remote.emplace();
  expect_option_error(c, "tiers[3].remote.urls", "is empty");
  g4.remote->urls = {"redis://"};
  expect_option_error(c, "tiers[3].remote.urls[0]", "names no host");
  // Entries and named tier fields together are refused, naming the field.
  c = entries(dir.path());
  c.host.blocks = 4;
  expect_option_error(c, "tiers", "host is set");
}

// The named fields keep their own names in messages (translated, not renamed).
TEST(TierEntries, ANamedFieldIsNamedAsItself) {
  TempDir dir;
  auto c = config(4, 4, 4, dir.path());
  c.disk_workers = 1;
  expect_option_error(c, "disk_workers", "disk_queue_depth");
  c = config(4, 0, 0);
  c.disk_persistent = true;
  expect_option_error(c, "disk_persistent", "needs a disk tier");
  c = config(4, 4, 0);
  c.remote_listeners.push_back(nullptr);
  expect_option_error(c, "remote_listeners", "no remote tier");
}

}  // namespace tier_entries_test
}  // namespace kvbm
