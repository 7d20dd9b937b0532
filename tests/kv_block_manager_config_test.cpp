// Tests of kvbm/kv_block_manager_config.h: the config header stands alone (this file
// includes nothing else of kvbm), and a config is written with it alone, by named fields
// or as tier entries.

#include "kvbm/kv_block_manager_config.h"

#include <gtest/gtest.h>

namespace kvbm {
namespace kv_block_manager_config_test {

TEST(KvBlockManagerConfigHeader, AConfigIsWrittenWithThisHeaderAlone) {
  KvBlockManagerConfig c;
  c.layout = {.num_layers = 2, .outer_dim = 2, .page_size = 16, .inner_dim = 64, .dtype_bytes = 2};
  c.device.blocks = 8;
  c.duplicate_policy = DuplicatePolicy::kAllow;
  c.disk_direct_io = DirectIo::kOff;
  TierEntry& g3 = c.tiers.emplace_back();
  g3.id = TierId::kG3;
  g3.mode = OffloadMode::kOnEviction;
  g3.disk.emplace().io_engine = DiskIoEngine::kThreadPool;
  EXPECT_EQ(c.tiers.front().disk->io_engine, DiskIoEngine::kThreadPool);
  EXPECT_EQ(to_string(DiskIoEngine::kIoUring), "io_uring");
  EXPECT_EQ(to_string(OffloadMode::kOnEviction), "on_eviction");
}

}  // namespace kv_block_manager_config_test
}  // namespace kvbm
