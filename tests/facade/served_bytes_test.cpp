// Adversarial tests of what KvBlockManager serves: a random workload of
// prompts that share, repeat, swap and shift a few distinct blocks, through
// every tier kept small, where every onboarded block's bytes are compared with
// the exact tokens of the request that asked for it, and no block is ever
// reported for a prefix that was never computed.

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "facade/facade_test_util.h"
#include "kvbm/hashing.h"
#include "kvbm/kv_block_manager.h"
#include "kvbm/storage/storage.h"

namespace kvbm {
namespace served_bytes_test {

using test::Bytes;
constexpr std::uint32_t kBlockTokens = 4;

using test::read_block;
using test::small_layout;
using test::write_block;

// A fresh directory for the G3 file.
class TempDir : public test::TempDir {
 public:
  TempDir() : test::TempDir("served") {}
};

// The bytes a model would compute for the block that ends the first `tokens`
// of a prompt: the token count, the tokens themselves, then a pattern that
// depends on all of them. Exact identity, no hash: two different prefixes
// never have equal bytes.
Bytes kv_bytes(std::span<const Token> prefix, std::size_t n) {
  Bytes out(n, 0);
  const auto count = static_cast<std::uint32_t>(prefix.size());
  std::memcpy(out.data(), &count, 4);
  std::memcpy(out.data() + 4, prefix.data(), prefix.size() * sizeof(Token));
  std::uint64_t x = count;
  for (const Token t : prefix) x = x * 1000003U + t;
  for (std::size_t i = 4 + prefix.size() * sizeof(Token); i < n; ++i) {
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ULL;
    out[i] = static_cast<std::uint8_t>(x >> 56);
  }
  return out;
}

std::string key_of(std::span<const Token> prefix) {
  std::string k;
  for (const Token t : prefix) k += std::to_string(t) + ",";
  return k;
}

struct Scenario {
  OffloadMode device_to_host;
  OffloadMode host_to_disk;
  const char* name;
};

class ServedBytesTest : public ::testing::TestWithParam<Scenario> {
 protected:
  void SetUp() override {
    KvBlockManagerConfig c;
    c.layout = small_layout();
    c.device.blocks = 8;
    c.host.blocks = 12;
    c.disk.blocks = 24;
    c.disk_directory = dir_.path();
    c.disk_direct_io = DirectIo::kOff;
    c.device_to_host = GetParam().device_to_host;
    c.host_to_disk = GetParam().host_to_disk;
    c.pipeline.batch_config.flush_interval = std::chrono::milliseconds(1);
    c.bounce_blocks = 4;
    kv_ = KvBlockManager::build(c);
  }

  // Serves one request: onboards what the tiers hold, checks every served
  // block's bytes and that its prefix was computed before, computes the rest.
  // Returns the number of blocks served.
  std::size_t serve(const std::vector<Token>& tokens, const SaltHash salt = kNoSalt) {
    std::vector<std::uint64_t> block_hashes;
    std::vector<SequenceHash> hashes;
    hash_blocks(tokens, kBlockTokens, salt, std::nullopt, block_hashes, hashes);
    const std::string salt_key = std::to_string(salt.value()) + "|";

    const OnboardCounts probed = kv_->probe(hashes);
    OnboardHandle h = kv_->onboard(hashes);
    EXPECT_EQ(h.wait(), TransferStatus::kDone) << h.error();
    std::vector<ImmutableBlock<G1>> blocks = h.take_blocks();
    // The probe is a snapshot: write-through copies run beside it, so a block
    // G1 evicted may have landed in G2 since (or been evicted below), and
    // onboard cuts the prefix where G1 has no room. Only the handle's counts
    // must agree with what it returns. With on-eviction on both boundaries
    // nothing moves between the two calls, and G1 always has room here.
    if (GetParam().device_to_host == OffloadMode::kOnEviction &&
        GetParam().host_to_disk == OffloadMode::kOnEviction) {
      EXPECT_EQ(blocks.size(), probed.total()) << "probe and onboard disagree";
    }
    EXPECT_EQ(blocks.size(), h.counts().total());
    from_host_ += h.counts().from(TierId::kG2);
    from_disk_ += h.counts().from(TierId::kG3);
    for (std::size_t j = 0; j < blocks.size(); ++j) {
      const std::span<const Token> prefix(tokens.data(), (j + 1) * kBlockTokens);
      EXPECT_EQ(blocks[j].sequence_hash(), hashes[j]);
      EXPECT_TRUE(computed_.count(salt_key + key_of(prefix)))
          << "served block " << j << " of a prefix never computed: " << key_of(prefix);
      EXPECT_EQ(read_block(kv_->device_layout(), blocks[j].block_id()),
                kv_bytes(prefix, kv_->block_bytes()))
          << "block " << j << " of " << key_of(tokens) << " holds another prefix's bytes";
    }
    const std::size_t served = blocks.size();
    if (served < hashes.size()) {
      auto fresh = kv_->device().allocate_blocks(hashes.size() - served);
      if (!fresh) {
        // Write-through copies in flight hold their G1 blocks: let them land.
        kv_->drain();
        fresh = kv_->device().allocate_blocks(hashes.size() - served);
      }
      EXPECT_TRUE(fresh.has_value());
      if (!fresh) return served;
      std::vector<CompleteBlock<G1>> complete;
      for (std::size_t j = served; j < hashes.size(); ++j) {
        const std::span<const Token> prefix(tokens.data(), (j + 1) * kBlockTokens);
        auto& b = (*fresh)[j - served];
        write_block(kv_->device_layout(), b.block_id(), kv_bytes(prefix, kv_->block_bytes()));
        complete.push_back(std::move(b).stage(hashes[j], kBlockTokens).value());
        computed_.insert(salt_key + key_of(prefix));
      }
      auto registered = kv_->register_blocks(std::move(complete));
      for (auto& b : registered) blocks.push_back(std::move(b));
    }
    return served;
  }

  void expect_balanced() {
    EXPECT_EQ(kv_->audit(), "");
    EXPECT_TRUE(kv_->device().pool_counts().balanced());
    EXPECT_TRUE(kv_->host()->pool_counts().balanced());
    EXPECT_TRUE(kv_->disk()->pool_counts().balanced());
  }

  TempDir dir_;
  std::unique_ptr<KvBlockManager> kv_;
  std::set<std::string> computed_;  // salt|prefix tokens of every block computed
  std::size_t from_host_ = 0;       // blocks served from G2
  std::size_t from_disk_ = 0;       // blocks served from G3
};

// A block of kBlockTokens tokens, all equal to `v`, or a given pattern.
std::vector<Token> blocks_of(std::initializer_list<std::vector<Token>> blocks) {
  std::vector<Token> out;
  for (const auto& b : blocks) out.insert(out.end(), b.begin(), b.end());
  return out;
}
const std::vector<Token> kA = {1, 2, 3, 4};
const std::vector<Token> kB = {5, 6, 7, 8};
const std::vector<Token> kC = {1, 2, 3, 5};

TEST_P(ServedBytesTest, RepeatedBlocksOfAnotherPromptAreNeverServed) {
  EXPECT_EQ(serve(blocks_of({kA, kA})), 0U);
  EXPECT_EQ(serve(blocks_of({kB})), 0U);
  kv_->drain();
  // [B, B] shares only [B] with what was computed: [A, A]'s second block
  // must not be served as its second.
  EXPECT_EQ(serve(blocks_of({kB, kB})), 1U);
  EXPECT_EQ(serve(blocks_of({kA, kA})), 2U);
  EXPECT_EQ(serve(blocks_of({kB, kB})), 2U);
  expect_balanced();
}

TEST_P(ServedBytesTest, SwappedAndShiftedPromptsGetOnlyTheirTruePrefix) {
  // Eight blocks in all: G1 holds every one, so the figures do not depend on eviction.
  EXPECT_EQ(serve(blocks_of({kA, kB})), 0U);
  EXPECT_EQ(serve(blocks_of({kB})), 0U);
  kv_->drain();
  EXPECT_EQ(kv_->probe(std::vector<SequenceHash>{}).total(), 0U);
  EXPECT_EQ(serve(blocks_of({kB, kA})), 1U);  // swapped: only [B] is shared
  EXPECT_EQ(serve(blocks_of({kC, kA})), 0U);  // shifted
  EXPECT_EQ(serve(blocks_of({kA, kC})), 1U);  // only [A] is shared
  EXPECT_EQ(serve(blocks_of({kA, kB, kC})), 2U);
  expect_balanced();
}

TEST_P(ServedBytesTest, SaltsNeverShareBlocks) {
  const SaltHash t1 = SaltBuilder().cache_salt("tenant-1").build();
  const SaltHash t2 = SaltBuilder().cache_salt("tenant-2").build();
  EXPECT_EQ(serve(blocks_of({kA, kA, kB}), t1), 0U);
  kv_->drain();
  EXPECT_EQ(serve(blocks_of({kA, kA, kB}), t1), 3U);
  EXPECT_EQ(serve(blocks_of({kA, kA, kB}), t2), 0U);
  EXPECT_EQ(serve(blocks_of({kA, kA, kB}), kNoSalt), 0U);
  expect_balanced();
}

TEST_P(ServedBytesTest, RandomWorkloadServesOnlyTheRequestersBytes) {
  // Four distinct blocks, prompts of 1..6 blocks, two salts: prompts share,
  // repeat, swap and shift blocks constantly, and every tier is small, so
  // blocks move down and back up all the time.
  const std::vector<std::vector<Token>> alphabet = {kA, kB, kC, {9, 9, 9, 9}};
  const SaltHash salts[] = {kNoSalt, SaltBuilder().cache_salt("other").build()};
  std::mt19937 rng(20261124);
  std::size_t served = 0;
  std::size_t requests = 0;
  for (int i = 0; i < 600; ++i) {
    std::vector<Token> tokens;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int b = 0; b < n; ++b) {
      const auto& block = alphabet[rng() % alphabet.size()];
      tokens.insert(tokens.end(), block.begin(), block.end());
    }
    served += serve(tokens, salts[rng() % 2]);
    ++requests;
    if (i % 50 == 0) kv_->drain();
    if (HasFailure()) break;
  }
  kv_->drain();
  expect_balanced();
  // The checks above had something to check: blocks came back from every tier.
  EXPECT_GT(served, requests / 2);
  EXPECT_GT(from_host_, 0U) << "no block was served from G2";
  EXPECT_GT(from_disk_, 0U) << "no block was served from G3";
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ServedBytesTest,
    ::testing::Values(Scenario{OffloadMode::kWriteThrough, OffloadMode::kWriteThrough,
                               "write_through"},
                      Scenario{OffloadMode::kOnEviction, OffloadMode::kOnEviction, "on_eviction"},
                      Scenario{OffloadMode::kWriteThrough, OffloadMode::kOnEviction, "mixed"}),
    [](const auto& p) { return std::string(p.param.name); });

}  // namespace served_bytes_test
}  // namespace kvbm
