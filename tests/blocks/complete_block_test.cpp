#include "kvbm/blocks/complete_block.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace complete_block_test {

using test::expect_balanced;
using test::present;
using test::seq;
using test::stage_ok;

BlockManager<G2> make_manager(std::size_t count = 4) {
  return BlockManager<G2>::builder().block_count(count).block_size(8).build();
}

CompleteBlock<G2> staged_block(BlockManager<G2>& m, const SequenceHash& h) {
  auto blocks = m.allocate_blocks(1);
  EXPECT_TRUE(blocks);
  return stage_ok(std::move(blocks->front()), h);
}

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

TEST(CompleteBlock, DropReturnsToResetPoolAndIsNotMatchable) {
  auto m = make_manager();
  {
    auto c = staged_block(m, seq(0));
    EXPECT_EQ(m.pool_counts().mutable_out, 1U);
    expect_balanced(m);
  }
  const auto c = m.pool_counts();
  EXPECT_EQ(c.reset, 4U);
  EXPECT_EQ(c.in_use, 0U);
  EXPECT_EQ(c.inactive, 0U);
  EXPECT_TRUE(m.match_blocks(std::vector{seq(0)}).empty());
  EXPECT_EQ(present(m, {seq(0)}), std::vector<bool>{false});
  expect_balanced(m);
}

TEST(CompleteBlock, StagedHashIsNotVisibleUntilRegistered) {
  auto m = make_manager();
  auto c = staged_block(m, seq(0));
  EXPECT_TRUE(m.match_blocks(std::vector{seq(0)}).empty());
  EXPECT_FALSE(m.registry()->is_present<G2>(seq(0)));
  auto imm = m.register_block(std::move(c));
  EXPECT_FALSE(c.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(m.registry()->is_present<G2>(seq(0)));
  expect_balanced(m);
}

TEST(CompleteBlock, ResetToMutableKeepsTheBlockAndDropsTheHash) {
  auto m = make_manager();
  auto c = staged_block(m, seq(0));
  const BlockId id = c.block_id();
  MutableBlock<G2> back = std::move(c).reset_to_mutable();
  EXPECT_FALSE(c.valid());  // NOLINT(bugprone-use-after-move)
  ASSERT_TRUE(back.valid());
  EXPECT_EQ(back.block_id(), id);
  EXPECT_EQ(m.pool_counts().mutable_out, 1U);
  expect_balanced(m);
  // It can be staged again with another hash and registered under that one.
  auto again = stage_ok(std::move(back), seq(0, 7));
  EXPECT_EQ(again.block_id(), id);
  auto imm = m.register_block(std::move(again));
  EXPECT_EQ(imm.sequence_hash(), seq(0, 7));
  EXPECT_TRUE(m.match_blocks(std::vector{seq(0)}).empty());
  EXPECT_EQ(m.match_blocks(std::vector{seq(0, 7)}).size(), 1U);
  expect_balanced(m);
}

TEST(CompleteBlock, ResetToMutableThenDropReturnsToReset) {
  auto m = make_manager(1);
  { auto back = staged_block(m, seq(0)).reset_to_mutable(); }
  EXPECT_EQ(m.pool_counts().reset, 1U);
  expect_balanced(m);
}

TEST(CompleteBlock, RegisterGivesImmutableBlockWithSameIdAndHash) {
  auto m = make_manager();
  auto c = staged_block(m, seq(0));
  const BlockId id = c.block_id();
  ImmutableBlock<G2> imm = m.register_block(std::move(c));
  ASSERT_TRUE(imm.valid());
  EXPECT_EQ(imm.block_id(), id);
  EXPECT_EQ(imm.sequence_hash(), seq(0));
  EXPECT_EQ(imm.use_count(), 1U);
  const auto counts = m.pool_counts();
  EXPECT_EQ(counts.mutable_out, 0U);
  EXPECT_EQ(counts.immutable_out, 1U);
  expect_balanced(m);
}

TEST(CompleteBlock, MoveAssignmentReleasesTheOverwrittenBlock) {
  auto m = make_manager();
  auto a = staged_block(m, seq(0));
  auto b = staged_block(m, seq(1));
  const BlockId bid = b.block_id();
  a = std::move(b);
  EXPECT_FALSE(b.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.block_id(), bid);
  EXPECT_EQ(a.sequence_hash(), seq(1));
  EXPECT_EQ(m.pool_counts().in_use, 1U);
  expect_balanced(m);
}

TEST(CompleteBlock, MovedFromHandleIsEmptyAndEveryCallThrows) {
  auto m = make_manager();
  auto a = staged_block(m, seq(0));
  CompleteBlock<G2> b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(b.valid());
  expect_moved_from_error([&] { (void)a.block_id(); }, "CompleteBlock::block_id");
  expect_moved_from_error([&] { (void)a.sequence_hash(); }, "CompleteBlock::sequence_hash");
  expect_moved_from_error([&] { (void)std::move(a).reset_to_mutable(); },
                          "CompleteBlock::reset_to_mutable");
  try {
    (void)m.register_block(std::move(a));
    ADD_FAILURE() << "register_block of a moved-from block did not throw";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("moved from"), std::string::npos) << e.what();
  }
  EXPECT_EQ(m.pool_counts().in_use, 1U);
  expect_balanced(m);
}

TEST(CompleteBlock, OutlivesItsManager) {
  std::optional<CompleteBlock<G2>> c;
  {
    auto m = make_manager(2);
    c.emplace(staged_block(m, seq(0)));
  }
  ASSERT_TRUE(c->valid());
  EXPECT_EQ(c->sequence_hash(), seq(0));
  c.reset();  // returns the block to the orphaned pool, which then goes away
}

TEST(CompleteBlock, ResetToMutableAfterManagerIsGone) {
  std::optional<MutableBlock<G2>> back;
  {
    auto m = make_manager(2);
    auto c = staged_block(m, seq(0));
    back.emplace(std::move(c).reset_to_mutable());
  }
  ASSERT_TRUE(back->valid());
  back.reset();
}

}  // namespace complete_block_test
}  // namespace kvbm
