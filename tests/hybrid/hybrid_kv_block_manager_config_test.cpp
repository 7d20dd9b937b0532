// tests/hybrid/hybrid_kv_block_manager_config_test.cpp: each group's KvBlockManagerConfig:
// its layout, its share of every tier (by bytes, or given), its G3 directory and namespace,
// its G4 namespace, and the refusals.

#include "kvbm/hybrid/hybrid_kv_block_manager_config.h"

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hybrid/hybrid_test_util.h"
#include "kvbm/hybrid/hybrid_kv_block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace hybrid_kv_block_manager_config_test {

using test::TempDir;

TEST(GroupLayout, HasTheGroupsTokensAndBytesPerBlock) {
  const LayoutConfig w = group_layout(test::window(1));
  EXPECT_EQ(w.page_size, 16u);
  EXPECT_EQ(w.block_bytes(), 1024u);
  // A snapshot whose bytes the block size does not divide: a few bytes more, never fewer.
  const auto odd = KvCacheGroupSpec::recurrent_state(GroupId{0}, 16, 1000, {0});
  EXPECT_EQ(group_layout(odd).block_bytes(), 1008u);
  // Known dimensions that give exactly the bytes per block are kept.
  auto dims = KvCacheGroupSpec::full(GroupId{0}, 16, 2 * 2 * 16 * 8 * 64 * 2, {0, 1});
  dims.layout = {.dtype = "bf16", .dtype_bytes = 2, .num_kv_heads = 8, .head_size = 64};
  const LayoutConfig l = group_layout(dims);
  EXPECT_EQ(l.num_layers, 2u);
  EXPECT_EQ(l.outer_dim, 2u);
  EXPECT_EQ(l.inner_dim, 512u);
  EXPECT_EQ(l.block_bytes(), dims.bytes_per_block);
}

// Each tier's bytes give every group the same number of blocks; a given count wins.
TEST(GroupConfigs, SplitEachTierByBytes) {
  TempDir dir("hybrid");
  HybridKvBlockManagerConfig c;
  c.base.device.bytes = 10 * (1024 + 4096);
  c.base.host.bytes = 20 * (1024 + 4096) + 100;
  c.base.disk.bytes = 30 * (1024 + 4096);
  c.base.disk_directory = dir.path();
  c.base.disk_namespace = "model-a@1";
  c.groups = {test::full(0), test::state(1)};
  auto configs = group_configs(c);
  ASSERT_EQ(configs.size(), 2u);
  for (std::size_t g = 0; g < 2; ++g) {
    const auto& tiers = configs[g].tiers;
    ASSERT_EQ(tiers.size(), 3u);
    EXPECT_EQ(tiers[0].size.blocks, 10u);
    EXPECT_EQ(tiers[1].size.blocks, 20u);
    EXPECT_EQ(tiers[2].size.blocks, 30u);
    EXPECT_EQ(configs[g].layout.block_bytes(), c.groups[g].bytes_per_block);
  }
  EXPECT_EQ(configs[0].tiers[2].disk->directory, dir.path() / "group-0-full");
  EXPECT_EQ(configs[1].tiers[2].disk->directory, dir.path() / "group-1-state");
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() / "group-1-state"));
  EXPECT_EQ(configs[0].tiers[2].disk->name_space, "model-a@1/group:0:full:16");
  EXPECT_EQ(configs[1].tiers[2].disk->name_space, "model-a@1/group:1:state:16");
  c.group_blocks = {TierArray<std::size_t>{{0, 7, 0, 0}}, TierArray<std::size_t>{}};
  configs = group_configs(c);
  EXPECT_EQ(configs[0].tiers[1].size.blocks, 7u);
  EXPECT_EQ(configs[0].tiers[0].size.blocks, 10u);
  EXPECT_EQ(configs[1].tiers[1].size.blocks, 20u);
  auto m = HybridKvBlockManager::build(c);
  EXPECT_EQ(m->group(0).host()->total_blocks(), 7u);
  EXPECT_EQ(m->group(1).device().total_blocks(), 10u);
  EXPECT_EQ(m->group(1).block_size(), 16u);
  EXPECT_EQ(m->audit(), "");
}

TEST(GroupConfigs, G4NamespacePerGroup) {
  HybridKvBlockManagerConfig c;
  c.base.device.bytes = 1 << 20;
  c.base.host.bytes = 1 << 20;
  c.base.remote.urls = {"redis://127.0.0.1:1/0"};
  c.base.remote.user_namespace = "tenant-a";
  c.groups = {test::full(0), test::window(1)};
  const auto configs = group_configs(c);
  ASSERT_EQ(configs[1].tiers.size(), 3u);
  EXPECT_EQ(configs[0].tiers[2].remote->user_namespace, "tenant-a/group:0:full:16");
  EXPECT_EQ(configs[1].tiers[2].remote->user_namespace, "tenant-a/group:1:swa128:16");
}

TEST(GroupConfigs, Refusals) {
  HybridKvBlockManagerConfig c;
  c.base.device.bytes = 1024;  // not one block of each group
  c.groups = {test::full(0), test::window(1)};
  test::expect_usage_error([&] { (void)group_configs(c); },
                           {"HybridKvBlockManagerConfig", "G1", "holds no block of group 0"});
  c.base.device.bytes = 0;
  c.base.device.blocks = 4;  // blocks without a base layout
  test::expect_usage_error([&] { (void)group_configs(c); }, {"size.blocks", "base.layout"});
  c.base.device.blocks = 0;
  c.base.device.bytes = 1 << 20;
  c.group_blocks.resize(1);
  test::expect_usage_error([&] { (void)group_configs(c); }, {"group_blocks", "one per group"});
  c.group_blocks.clear();
  c.groups[1].id = GroupId{5};
  EXPECT_THROW((void)group_configs(c), UsageError);
  c.groups[1].id = GroupId{1};
  c.base.host.bytes = 1 << 20;
  c.base.disk.bytes = 1 << 20;
  c.base.disk_directory = "/nonexistent-kvbm-dir";
  test::expect_usage_error(
      [&] { (void)HybridKvBlockManager::build(c); },
      {"HybridKvBlockManager group 0", "disk.directory", "/nonexistent-kvbm-dir"});
}

}  // namespace hybrid_kv_block_manager_config_test
}  // namespace kvbm
