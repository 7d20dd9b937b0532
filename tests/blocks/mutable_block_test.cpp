#include "kvbm/blocks/mutable_block.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace mutable_block_test {

using test::expect_balanced;
using test::seq;

BlockManager<G1> make_manager(std::size_t count = 4, std::size_t size = 16) {
  return BlockManager<G1>::builder().block_count(count).block_size(size).build();
}

// Throws UsageError whose message names the call and says "moved-from".
template <class F>
void expect_moved_from_error(F&& f, const std::string& call) {
  try {
    f();
    ADD_FAILURE() << call << " on a moved-from handle did not throw";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(call), std::string::npos) << what;
    EXPECT_NE(what.find("moved-from"), std::string::npos) << what;
  }
}

TEST(MutableBlock, AllocatedBlockIsValidAndKnowsItsPool) {
  auto m = make_manager(4, 32);
  auto blocks = m.allocate_blocks(2);
  ASSERT_TRUE(blocks);
  ASSERT_EQ(blocks->size(), 2U);
  EXPECT_TRUE((*blocks)[0].valid());
  EXPECT_EQ((*blocks)[0].block_size(), 32U);
  EXPECT_NE((*blocks)[0].block_id(), (*blocks)[1].block_id());
  EXPECT_LT((*blocks)[0].block_id(), 4U);
  const auto c = m.pool_counts();
  EXPECT_EQ(c.reset, 2U);
  EXPECT_EQ(c.in_use, 2U);
  EXPECT_EQ(c.mutable_out, 2U);
  expect_balanced(m);
}

TEST(MutableBlock, DropReturnsToResetPool) {
  auto m = make_manager();
  {
    auto blocks = m.allocate_blocks(3);
    ASSERT_TRUE(blocks);
    EXPECT_EQ(m.pool_counts().reset, 1U);
    expect_balanced(m);
  }
  const auto c = m.pool_counts();
  EXPECT_EQ(c.reset, 4U);
  EXPECT_EQ(c.in_use, 0U);
  EXPECT_EQ(c.mutable_out, 0U);
  EXPECT_EQ(c.inactive, 0U);
  EXPECT_EQ(m.available_blocks(), 4U);
  expect_balanced(m);
}

TEST(MutableBlock, MoveAssignmentReleasesTheOverwrittenBlock) {
  auto m = make_manager();
  auto blocks = m.allocate_blocks(2);
  ASSERT_TRUE(blocks);
  const BlockId second = (*blocks)[1].block_id();
  (*blocks)[0] = std::move((*blocks)[1]);  // block 0's block goes back to reset
  EXPECT_EQ((*blocks)[0].block_id(), second);
  EXPECT_FALSE((*blocks)[1].valid());
  EXPECT_EQ(m.pool_counts().in_use, 1U);
  EXPECT_EQ(m.pool_counts().reset, 3U);
  expect_balanced(m);
  // Self-move-assignment keeps the block.
  auto& self = (*blocks)[0];
  self = std::move(self);  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(self.valid());
  EXPECT_EQ(m.pool_counts().in_use, 1U);
  blocks.reset();
  EXPECT_EQ(m.pool_counts().reset, 4U);
  expect_balanced(m);
}

TEST(MutableBlock, StageGivesCompleteBlockWithSameIdAndHash) {
  auto m = make_manager();
  auto blocks = m.allocate_blocks(1);
  ASSERT_TRUE(blocks);
  MutableBlock<G1> block = std::move(blocks->front());
  const BlockId id = block.block_id();
  auto staged = std::move(block).stage(seq(0), 16);
  ASSERT_TRUE(staged.ok());
  EXPECT_FALSE(block.valid());  // NOLINT(bugprone-use-after-move)
  CompleteBlock<G1> complete = std::move(staged).value();
  EXPECT_TRUE(complete.valid());
  EXPECT_EQ(complete.block_id(), id);
  EXPECT_EQ(complete.sequence_hash(), seq(0));
  // Still counted as a mutable (not yet registered) block.
  EXPECT_EQ(m.pool_counts().mutable_out, 1U);
  expect_balanced(m);
}

TEST(MutableBlock, StageWithWrongBlockSizeHandsTheBlockBack) {
  auto m = make_manager(2, 16);
  auto blocks = m.allocate_blocks(1);
  ASSERT_TRUE(blocks);
  MutableBlock<G1> block = std::move(blocks->front());
  const BlockId id = block.block_id();

  auto staged = std::move(block).stage(seq(0), 15);
  ASSERT_FALSE(staged.ok());
  EXPECT_FALSE(static_cast<bool>(staged));
  StageError<G1> error = std::move(staged).error();
  EXPECT_NE(error.reason.find("block size mismatch"), std::string::npos) << error.reason;
  EXPECT_NE(error.reason.find("16"), std::string::npos) << error.reason;
  EXPECT_NE(error.reason.find("15"), std::string::npos) << error.reason;
  ASSERT_TRUE(error.block.valid());
  EXPECT_EQ(error.block.block_id(), id);
  // Nothing changed in the pool: the block is still out, mutable.
  EXPECT_EQ(m.pool_counts().mutable_out, 1U);
  EXPECT_EQ(m.pool_counts().reset, 1U);
  expect_balanced(m);

  // The handed-back block can be staged correctly and registered.
  auto retry = std::move(error.block).stage(seq(0), 16);
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry.value().block_id(), id);
  auto imm = m.register_block(std::move(retry).value());
  EXPECT_EQ(imm.block_id(), id);
  EXPECT_EQ(m.match_blocks(std::vector{seq(0)}).size(), 1U);
  expect_balanced(m);
}

TEST(MutableBlock, FailedStageErrorDroppedReturnsBlockToReset) {
  auto m = make_manager(2, 16);
  {
    auto blocks = m.allocate_blocks(1);
    ASSERT_TRUE(blocks);
    auto staged = std::move(blocks->front()).stage(seq(0), 0);
    ASSERT_FALSE(staged.ok());
    EXPECT_EQ(m.pool_counts().in_use, 1U);
  }
  EXPECT_EQ(m.pool_counts().reset, 2U);
  EXPECT_EQ(m.pool_counts().in_use, 0U);
  expect_balanced(m);
}

struct FakeTokenBlock {
  std::vector<std::uint32_t> tokens_;
  SequenceHash hash_;
  [[nodiscard]] const std::vector<std::uint32_t>& tokens() const { return tokens_; }
  [[nodiscard]] SequenceHash sequence_hash() const { return hash_; }
};

TEST(MutableBlock, CompleteFromTokenBlockChecksTokenCount) {
  auto m = make_manager(2, 4);
  auto blocks = m.allocate_blocks(1);
  ASSERT_TRUE(blocks);
  MutableBlock<G1> block = std::move(blocks->front());
  const BlockId id = block.block_id();

  const FakeTokenBlock short_block{{1, 2, 3}, seq(0)};
  auto bad = std::move(block).complete(short_block);
  ASSERT_FALSE(bad.ok());
  MutableBlock<G1> back = std::move(bad.error().block);
  EXPECT_EQ(back.block_id(), id);

  const FakeTokenBlock full{{1, 2, 3, 4}, seq(0)};
  auto good = std::move(back).complete(full);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good.value().sequence_hash(), seq(0));
  EXPECT_EQ(good.value().block_id(), id);
  expect_balanced(m);
}

TEST(MutableBlock, MovedFromHandleIsEmptyAndEveryCallThrows) {
  auto m = make_manager();
  auto blocks = m.allocate_blocks(1);
  ASSERT_TRUE(blocks);
  MutableBlock<G1> a = std::move(blocks->front());
  EXPECT_FALSE(blocks->front().valid());  // NOLINT(bugprone-use-after-move)
  MutableBlock<G1> b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(b.valid());

  expect_moved_from_error([&] { (void)a.block_id(); }, "MutableBlock::block_id");
  expect_moved_from_error([&] { (void)a.block_size(); }, "MutableBlock::block_size");
  expect_moved_from_error([&] { (void)std::move(a).stage(seq(0), 16); }, "MutableBlock::stage");
  const FakeTokenBlock tb{std::vector<std::uint32_t>(16, 7), seq(0)};
  expect_moved_from_error([&] { (void)std::move(a).complete(tb); }, "MutableBlock::stage");

  // The moved-from handle's destructor does nothing; only b returns a block.
  EXPECT_EQ(m.pool_counts().in_use, 1U);
  { MutableBlock<G1> gone = std::move(b); }
  EXPECT_EQ(m.pool_counts().in_use, 0U);
  expect_balanced(m);
}

TEST(MutableBlock, OutlivesItsManager) {
  std::optional<MutableBlock<G1>> block;
  {
    auto m = make_manager(2);
    auto blocks = m.allocate_blocks(2);
    ASSERT_TRUE(blocks);
    block.emplace(std::move((*blocks)[0]));
    // blocks[1] dropped before the manager, block kept past it.
  }
  ASSERT_TRUE(block->valid());
  EXPECT_EQ(block->block_size(), 16U);
  // Staging still works on an orphaned pool (no manager to register with).
  auto staged = std::move(*block).stage(seq(0), 16);
  ASSERT_TRUE(staged.ok());
  CompleteBlock<G1> complete = std::move(staged).value();
  EXPECT_TRUE(complete.valid());
  block.reset();
  // Dropping the last block frees the orphaned pool (ASan checks for leaks).
}

TEST(MutableBlock, DroppedBeforeItsManager) {
  auto m = std::make_unique<BlockManager<G1>>(make_manager(2));
  {
    auto blocks = m->allocate_blocks(2);
    ASSERT_TRUE(blocks);
  }
  expect_balanced(*m);
  m.reset();
}

}  // namespace mutable_block_test
}  // namespace kvbm
