// Misuse of KvBlockManager (kvbm/kv_block_manager.h): every invalid option
// fails in build() as "KvBlockManagerConfig.<option>: ...", tier sizes that
// overflow included; a shared metrics registry; blocks of another manager.

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "facade/facade_test_util.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/remote/remote_store.h"
#include "test_util.h"

namespace kvbm {
namespace kv_block_manager_misuse_test {

using test::chain;

constexpr std::size_t kSizeMax = std::numeric_limits<std::size_t>::max();

using test::config;
using test::small_layout;

/// A layout of 2^34-byte blocks (never allocated: the configs using it fail first).
LayoutConfig huge_layout() {
  return {
      .num_layers = 1024, .outer_dim = 2, .page_size = 4096, .inner_dim = 1024, .dtype_bytes = 2};
}

// A fresh directory for the G3 file.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("misuse") {}
};

/// A metadata-only config (nothing is allocated or written).
KvBlockManagerConfig metadata(std::size_t g1, std::size_t g2, std::size_t g3) {
  auto c = config(g1, g2, g3);
  c.move_bytes = false;
  return c;
}

/// Expects build(c) to throw UsageError "KvBlockManagerConfig.<option>: ..."
/// whose message also holds `needle`.
void expect_option_error(KvBlockManagerConfig c, const std::string& option,
                         const std::string& needle = "") {
  SCOPED_TRACE("option " + option);
  try {
    auto kv = KvBlockManager::build(std::move(c));
    ADD_FAILURE() << "expected KvBlockManagerConfig." << option << ": ...";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    const std::string prefix = "KvBlockManagerConfig." + option + ": ";
    EXPECT_EQ(what.substr(0, prefix.size()), prefix) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

/// Every pool of the manager balances and holds no block.
void expect_clean(KvBlockManager& kv) {
  EXPECT_EQ(kv.audit(), "");
  test::expect_balanced(kv.device());
  EXPECT_EQ(kv.device().pool_counts().in_use, 0U);
  if (kv.host() != nullptr) {
    test::expect_balanced(*kv.host());
    EXPECT_EQ(kv.host()->pool_counts().in_use, 0U);
  }
  if (kv.disk() != nullptr) {
    test::expect_balanced(*kv.disk());
    EXPECT_EQ(kv.disk()->pool_counts().in_use, 0U);
  }
}

/// Allocates, stages and registers one G1 block per hash through the facade.
std::vector<ImmutableBlock<G1>> compute(KvBlockManager& kv,
                                        const std::vector<SequenceHash>& hashes) {
  auto blocks = kv.device().allocate_blocks(hashes.size());
  EXPECT_TRUE(blocks.has_value());
  if (!blocks) return {};
  std::vector<CompleteBlock<G1>> complete;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    complete.push_back(test::stage_ok(std::move((*blocks)[i]), hashes[i]));
  }
  return kv.register_blocks(std::move(complete));
}

/// The value of kvbm_onboard_blocks_total{tier="G1",outcome="hit"}, or nullopt.
std::optional<double> onboard_hits(prometheus::Registry& registry) {
  for (const auto& family : registry.Collect()) {
    if (family.name != "kvbm_onboard_blocks_total") continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "tier" && label.value == "G1") return metric.counter.value;
      }
    }
  }
  return std::nullopt;
}

// ---- Tier sizes that overflow ----------------------------------------------

// blocks x block bytes (device, host, bounce), bytes that make too many
// blocks, and the disk file's size: each is named, before anything is
// allocated, in both modes.
TEST(KvBlockManagerMisuse, TierSizesThatOverflowAreNamed) {
  for (const bool move_bytes : {false, true}) {
    SCOPED_TRACE(move_bytes ? "move_bytes" : "metadata only");
    auto c = config(std::size_t{1} << 31, 4, 0);  // 2^31 x 2^34 bytes: wraps size_t
    c.layout = huge_layout();
    c.move_bytes = move_bytes;
    expect_option_error(c, "device.blocks", "overflow");

    c = config(std::size_t{1} << 29, 4, 0);  // 2^29 x 2^34 = 2^63 bytes: past a file offset
    c.layout = huge_layout();
    c.move_bytes = move_bytes;
    expect_option_error(c, "device.blocks", "overflow");

    c = config(1, std::size_t{1} << 31, 0);
    c.layout = huge_layout();
    c.move_bytes = move_bytes;
    c.device.blocks = 0;
    c.device.bytes = std::size_t{1} << 34;  // one block, given in bytes
    expect_option_error(c, "host.blocks", "overflow");

    c = config(4, 0, 0);
    c.move_bytes = move_bytes;
    c.host.bytes = kSizeMax;  // 2^53 blocks of 2 KiB: more than a pool holds
    expect_option_error(c, "host.bytes", "maximum");

    c = config(4, 0, 0);
    c.move_bytes = move_bytes;
    c.device = {.blocks = 0, .bytes = kSizeMax};
    expect_option_error(c, "device.bytes", "maximum");
  }
  // The disk file: 2^29 - 1 blocks of 2^34 bytes fit, their slots of 2^34 + 4096 bytes do not.
  auto c = metadata(0, 0, (std::size_t{1} << 29) - 1);
  c.layout = huge_layout();
  c.device.bytes = std::size_t{1} << 34;
  c.host.bytes = std::size_t{1} << 34;
  expect_option_error(c, "disk.blocks", "file");
  // The bounce buffer: 2^31 x 2 KiB fits, kSizeMax / 1024 x 2 KiB does not.
  c = metadata(4, 4, 4);
  c.bounce_blocks = kSizeMax / 1024;
  expect_option_error(c, "bounce_blocks", "overflow");
  // A block that alone passes 2^63 bytes, 2^64 - 64 (valid for LayoutConfig):
  // (2^29 - 1) x 2 x 708 x 3033169 x 8 = 64 x (2^29 - 1) x (2^29 + 1).
  c = metadata(1, 0, 0);
  c.layout = {.num_layers = (1U << 29) - 1,
              .outer_dim = 2,
              .page_size = 708,
              .inner_dim = 3033169,
              .dtype_bytes = 8};
  ASSERT_EQ(c.layout.block_bytes(), kSizeMax - 63);
  expect_option_error(c, "layout", "file offset");
}

// ---- Every option --------------------------------------------------------

TEST(KvBlockManagerMisuse, LayoutAndTiers) {
  auto c = metadata(4, 4, 0);
  c.layout.page_size = 0;
  expect_option_error(c, "layout", "page_size");
  c = metadata(4, 4, 0);
  c.layout.page_size = kMaxBlockSize + 1;  // the pools' limit, not the layout's
  expect_option_error(c, "layout.page_size", std::to_string(kMaxBlockSize));
  c = metadata(4, 4, 0);
  c.device_layout = static_cast<LayoutKind>(7);
  expect_option_error(c, "device_layout", "7");

  expect_option_error(metadata(0, 4, 0), "device.blocks");
  c = metadata(std::size_t{kMaxBlockCount} + 1, 4, 0);
  expect_option_error(c, "device.blocks", "maximum");
  c = metadata(4, 4, 0);
  c.device.bytes = 4096;
  expect_option_error(c, "device", "not both");
  c = metadata(4, 4, 0);
  c.host = {.blocks = 0, .bytes = 100};
  expect_option_error(c, "host.bytes", "no block");
  c = metadata(4, 4, std::size_t{kMaxBlockCount} + 1);
  expect_option_error(c, "disk.blocks", "maximum");
  expect_option_error(metadata(4, 0, 4), "disk", "host tier");
  for (const char* tier : {"device", "host", "disk"}) {
    c = metadata(4, 4, 4);
    auto& t = std::string(tier) == "device" ? c.device
              : std::string(tier) == "host" ? c.host
                                            : c.disk;
    t.eviction = static_cast<EvictionPolicy>(9);
    expect_option_error(c, std::string(tier) + ".eviction", "lru");
  }
}

TEST(KvBlockManagerMisuse, DiskOptions) {
  TempDir dir;
  expect_option_error(config(4, 4, 4), "disk_directory");
  expect_option_error(config(4, 4, 4, dir.path() / "missing"), "disk_directory", "does not exist");
  auto c = config(4, 4, 4, dir.path());
  c.disk_direct_io = static_cast<DirectIo>(5);
  expect_option_error(c, "disk_direct_io", "kPreferred");

  c = config(4, 4, 4, dir.path());
  c.disk_queue_depth = 300;
  expect_option_error(c, "disk_queue_depth", "256");
  c = config(4, 4, 4, dir.path());
  c.disk_workers = 1;  // fewer than the default queue depth (4)
  expect_option_error(c, "disk_workers", "disk_queue_depth");
  c = config(4, 4, 4, dir.path());
  c.disk_queue_depth = 8;
  c.disk_workers = 4;
  expect_option_error(c, "disk_workers", "disk_queue_depth");
  c = config(4, 4, 4, dir.path());
  c.disk_workers = 1000;
  expect_option_error(c, "disk_workers", "512");
  c = config(4, 4, 4, dir.path());
  c.bounce_blocks = 0;
  expect_option_error(c, "bounce_blocks", "at least 1");
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));

  // The edges are accepted.
  c = config(4, 4, 4, dir.path());
  c.disk_queue_depth = 2;
  c.disk_workers = 2;
  auto kv = KvBlockManager::build(c);
  expect_clean(*kv);
}

TEST(KvBlockManagerMisuse, OffloadOptions) {
  auto c = metadata(4, 4, 4);
  c.device_to_host = static_cast<OffloadMode>(9);
  expect_option_error(c, "device_to_host", "write_through");
  c = metadata(4, 4, 4);
  c.host_to_disk = static_cast<OffloadMode>(9);
  expect_option_error(c, "host_to_disk", "write_through");
  c = metadata(4, 4, 4);
  c.device_to_host_policy.min_frequency = 99;
  expect_option_error(c, "device_to_host_policy.min_frequency", "15");
  c = metadata(4, 4, 4);
  c.host_to_disk_policy.min_frequency = 16;
  expect_option_error(c, "host_to_disk_policy.min_frequency", "15");
  c = metadata(4, 4, 4);
  c.pipeline.batch_config.min_batch_size = 100;
  expect_option_error(c, "pipeline", "min_batch_size");
  c = metadata(4, 4, 4);
  c.host_to_disk_pipeline = PipelineConfig{};
  c.host_to_disk_pipeline->max_concurrent_transfers = 0;
  expect_option_error(c, "host_to_disk_pipeline", "max_concurrent_transfers");
  c = metadata(4, 4, 4);
  c.duplicate_policy = static_cast<DuplicatePolicy>(3);
  expect_option_error(c, "duplicate_policy", "kReject");
}

TEST(KvBlockManagerMisuse, EngineOptions) {
  auto c = config(4, 4, 0);
  c.copy_threads = 1000;
  expect_option_error(c, "copy_threads", "256");
  c = metadata(4, 4, 0);  // wrong in either mode
  c.copy_threads = 257;
  expect_option_error(c, "copy_threads", "256");
  c = config(4, 4, 0);
  c.cuda_device = -1;
  expect_option_error(c, "cuda_device", "-1");
  c = metadata(4, 4, 0);
  c.cuda_device = -2;
  expect_option_error(c, "cuda_device", "-2");
}

// One runtime: `clock` is shorthand for an Env on it, and may not name another clock than `env`.
TEST(KvBlockManagerMisuse, ClockAndEnvNamingTwoClocks) {
  auto c = metadata(4, 4, 0);
  c.env = std::make_shared<Env>(std::make_shared<ManualClock>());
  c.clock = std::make_shared<ManualClock>();
  expect_option_error(c, "clock", "env->clock()");
  c.clock = c.env->clock();  // the same clock twice: accepted
  EXPECT_NO_THROW((void)KvBlockManager::build(c));
}

TEST(KvBlockManagerMisuse, Listeners) {
  for (const char* which : {"device_listeners", "host_listeners", "disk_listeners"}) {
    auto c = metadata(4, 4, 4);
    auto& v = std::string(which) == "device_listeners" ? c.device_listeners
              : std::string(which) == "host_listeners" ? c.host_listeners
                                                       : c.disk_listeners;
    v.push_back(nullptr);
    expect_option_error(c, which, "null");
  }
}

// G4's options are checked before anything is built or connected (no server
// runs here): each URL by the store's own grammar, named by its index, and
// the key prefix. In a build without the remote tier too.
TEST(KvBlockManagerMisuse, RemoteOptions) {
  auto remote = [](std::vector<std::string> urls) {
    auto c = config(4, 4, 0);
    c.remote.urls = std::move(urls);
    c.remote.model = "model-a@1";
    return c;
  };
  const std::vector<std::pair<std::string, std::string>> bad_urls = {
      {"redis://", "'redis://' names no host; use redis://host:port"},
      {"http://x:1",
       "'http://x:1' is not understood; use redis://[:password@]host:port[/db] or "
       "unix:///path.sock[?db=N]"},
      {"redis://host:notaport",
       "'redis://host:notaport' has a bad port 'notaport'; give a number from 1 to 65535"},
      {"redis://host:70000",
       "'redis://host:70000' has port 70000, out of range; give a number from 1 to 65535"},
      {"redis://host:0", "has port 0, out of range"},
      {"redis://host:6379/x", "has a bad database number 'x'; give 0 or more"},
      {"redis://[localhost:6379", "unclosed '['"},
      {"unix://relative.sock", "needs an absolute socket path; use unix:///"},
      {"unix:///r.sock?x=1", "?db=N"},
      {"", "is empty; use redis://"},
  };
  for (const auto& [url, why] : bad_urls) {
    expect_option_error(remote({url}), "remote.urls[0]", why);
    expect_option_error(remote({"redis://127.0.0.1:6379/0", url}), "remote.urls[1]", why);
  }
  // A password in a bad URL is masked.
  expect_option_error(remote({"redis://:s3cret@host:port/0"}), "remote.urls[0]",
                      "'redis://:****@host:port/0' has a bad port 'port'");
  try {
    (void)KvBlockManager::build(remote({"redis://user:s3cret@:1"}));
    ADD_FAILURE() << "expected KvBlockManagerConfig.remote.urls[0]: ...";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).find("s3cret"), std::string::npos) << e.what();
  }

  auto c = remote({"redis://127.0.0.1:6379/0"});
  c.remote.key_prefix = "";
  expect_option_error(c, "remote.key_prefix", "is empty; give the first part of every G4 key");
  c.remote.key_prefix = "a:b";
  expect_option_error(c, "remote.key_prefix", "'a:b' holds a ':'");
  expect_option_error(c, "remote.key_prefix", "use a prefix without ':'");
  // Without G4 nothing of it is looked at.
  c.remote.urls.clear();
  c.remote.model.clear();
  auto kv = KvBlockManager::build(c);
  expect_clean(*kv);

  // The grammar itself, as the store and kvbm-replay --remote ask it.
  EXPECT_EQ(remote_url_error("redis://127.0.0.1:6379/0"), "");
  EXPECT_EQ(remote_url_error("redis://:pw@[::1]:6380"), "");
  EXPECT_EQ(remote_url_error("redis://cache-0"), "");
  EXPECT_EQ(remote_url_error("unix:///run/redis.sock?db=3"), "");
  const std::string why = remote_url_error("redis://host:notaport");
  EXPECT_EQ(why.rfind("'redis://host:notaport' has a bad port 'notaport'; give", 0), 0U) << why;
}

// Two managers on one registry: the second is refused, naming the option,
// and the first is untouched.
TEST(KvBlockManagerMisuse, ASharedRegistryHoldsOneManager) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto c = metadata(4, 4, 4);
  c.metrics_registry = registry;
  auto first = KvBlockManager::build(c);
  expect_option_error(c, "metrics_registry", "another KvBlockManager");
  auto blocks = first->device().allocate_blocks(4);
  ASSERT_TRUE(blocks);
  EXPECT_EQ(test::metric_value(*registry, "kvbm_allocations_total", "G1"), 4.0);
  blocks.reset();
  // A pool of the same name on the registry is refused the same way.
  auto other = std::make_shared<prometheus::Registry>();
  auto pool =
      BlockManager<G2>::builder().block_count(2).block_size(4).metrics_registry(other).build();
  c.metrics_registry = other;
  expect_option_error(c, "metrics_registry", "kvbm_");
  expect_clean(*first);
}

// ---- Explicit offload -------------------------------------------------------

// Blocks offloaded explicitly to G2 go on to G3 when G2 -> G3 is
// write-through, as write-through and on-eviction copies do, whatever the
// G1 -> G2 mode; evicted from G1 and G2, they onboard from G3.
TEST(KvBlockManagerOffload, ExplicitOffloadContinuesToDiskWhenWriteThrough) {
  for (const auto mode : {OffloadMode::kNone, OffloadMode::kOnEviction}) {
    SCOPED_TRACE(std::string("device_to_host ") + std::string(to_string(mode)));
    auto c = metadata(4, 4, 16);
    c.device_to_host = mode;
    c.host_to_disk = OffloadMode::kWriteThrough;
    auto kv = KvBlockManager::build(c);
    const auto a = chain(4, 31);
    {
      auto blocks = compute(*kv, a);
      ASSERT_EQ(kv->offload(blocks).wait(), TransferStatus::kDone);
    }
    kv->drain();
    EXPECT_EQ(test::present(*kv->host(), a), std::vector<bool>(4, true));
    EXPECT_EQ(test::present(*kv->disk(), a), std::vector<bool>(4, true));
    EXPECT_EQ(kv->disk()->pool_counts().inactive, 4U);
    // Evict a from G1 and G2 (G2 already holds it: nothing is copied down
    // again): only G3 keeps it.
    EXPECT_EQ(kv->device().reset_inactive_pool(), 4U);
    EXPECT_EQ(kv->host()->reset_inactive_pool(), 4U);
    EXPECT_EQ(kv->probe(a).from(TierId::kG3), 4U);
    auto h = kv->onboard(a);
    ASSERT_EQ(h.wait(), TransferStatus::kDone) << h.error();
    EXPECT_EQ(h.counts().from(TierId::kG3), 4U);
    EXPECT_EQ(h.take_blocks().size(), 4U);
    kv->shutdown();
    expect_clean(*kv);
  }
}

// ---- Blocks of another manager ----------------------------------------------

/// Expects `f` to throw UsageError whose message holds every one of `parts`.
using test::expect_usage_error;

// offload() and register_blocks() refuse a block of another KvBlockManager,
// of a standalone pool, or a moved-from handle, before doing anything: a
// list with one such block moves none, and the blocks stay with the caller.
TEST(KvBlockManagerMisuse, BlocksOfAnotherManagerAreRefused) {
  auto c = metadata(8, 8, 8);
  c.device_to_host = OffloadMode::kNone;  // only explicit offloads move blocks
  auto kv = KvBlockManager::build(c);
  auto other = KvBlockManager::build(c);
  auto standalone = BlockManager<G1>::builder().block_count(4).block_size(4).build();
  auto no_host = KvBlockManager::build(metadata(4, 0, 0));

  const auto mine_hashes = chain(2, 1);
  const auto theirs_hashes = chain(2, 2);
  auto mine = compute(*kv, mine_hashes);
  auto theirs = compute(*other, theirs_hashes);
  auto loose = test::make_registered(standalone, chain(2, 3));

  auto mixed = mine;
  mixed.push_back(theirs[0]);
  expect_usage_error([&] { (void)kv->offload(mixed); },
                     {"KvBlockManager::offload", "block 2", "another manager"});
  expect_usage_error([&] { (void)kv->offload(loose); }, {"offload", "block 0", "another manager"});
  expect_usage_error([&] { (void)no_host->offload(theirs); }, {"offload", "another manager"});
  auto moved = mine;
  auto taken = std::move(moved[1]);
  expect_usage_error([&] { (void)kv->offload(moved); }, {"offload", "block 1", "moved-from"});
  kv->drain();
  other->drain();
  EXPECT_EQ(test::present(*kv->host(), mine_hashes), std::vector<bool>(2, false));
  EXPECT_EQ(test::present(*kv->host(), theirs_hashes), std::vector<bool>(2, false));
  EXPECT_EQ(test::present(*other->host(), theirs_hashes), std::vector<bool>(2, false));
  EXPECT_EQ(kv->host()->pool_counts().reset, 8U);

  // register_blocks: a foreign CompleteBlock stays with the caller, and its
  // own manager still takes it.
  auto fresh = other->device().allocate_blocks(1);
  ASSERT_TRUE(fresh);
  std::vector<CompleteBlock<G1>> staged;
  staged.push_back(test::stage_ok(std::move(fresh->front()), test::root(99)));
  expect_usage_error([&] { (void)kv->register_blocks(std::move(staged)); },
                     {"KvBlockManager::register_blocks", "another manager"});
  ASSERT_EQ(staged.size(), 1U);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(staged[0].valid());
  EXPECT_FALSE(kv->device().registry()->is_present<G1>(test::root(99)));
  EXPECT_EQ(other->register_blocks(std::move(staged)).size(), 1U);

  // Their own manager offloads them.
  EXPECT_EQ(kv->offload(mine).wait(), TransferStatus::kDone);
  EXPECT_EQ(other->offload(theirs).wait(), TransferStatus::kDone);
  EXPECT_EQ(test::present(*kv->host(), mine_hashes), std::vector<bool>(2, true));
  EXPECT_EQ(test::present(*kv->host(), theirs_hashes), std::vector<bool>(2, false));
  EXPECT_EQ(test::present(*other->host(), theirs_hashes), std::vector<bool>(2, true));

  mine.clear();
  mixed.clear();
  moved.clear();
  { auto drop = std::move(taken); }
  theirs.clear();
  loose.clear();
  for (auto* m : {kv.get(), other.get(), no_host.get()}) {
    m->drain();
    expect_clean(*m);
  }
  test::expect_balanced(standalone);
}

// ---- Metrics on a shared registry -------------------------------------------

// Every series a manager adds to a shared registry leaves with the manager:
// a scrape after its destruction shows none, and the next manager on the
// registry builds and counts from zero.
TEST(KvBlockManagerMetrics, SeriesLeaveASharedRegistryWithTheirManager) {
  auto registry = std::make_shared<prometheus::Registry>();
  for (std::uint32_t round = 0; round < 2; ++round) {
    SCOPED_TRACE("manager " + std::to_string(round));
    auto c = metadata(4, 8, 16);
    c.metrics_registry = registry;
    c.device_to_host = OffloadMode::kOnEviction;  // its series, and the explicit pipeline's
    auto kv = KvBlockManager::build(c);
    const auto hashes = chain(4, 10 + round);
    {
      auto blocks = compute(*kv, hashes);
      EXPECT_EQ(kv->offload(blocks).wait(), TransferStatus::kDone);
      auto h = kv->onboard(hashes);
      ASSERT_EQ(h.wait(), TransferStatus::kDone);
      EXPECT_EQ(h.counts().from(TierId::kG1), 4U);
    }
    EXPECT_EQ(onboard_hits(*registry), 4.0);  // this manager's count only
    kv->drain();
    expect_clean(*kv);
    kv.reset();

    for (const auto& family : registry->Collect()) {
      EXPECT_TRUE(family.metric.empty()) << family.name << " outlived its manager";
    }
    const std::string scrape = prometheus::TextSerializer().Serialize(registry->Collect());
    EXPECT_EQ(scrape.find("kvbm_"), std::string::npos) << scrape;
  }
}

}  // namespace kv_block_manager_misuse_test
}  // namespace kvbm
