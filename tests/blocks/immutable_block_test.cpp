#include "kvbm/blocks/immutable_block.h"

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kvbm/block_manager.h"
#include "test_util.h"

namespace kvbm {
namespace immutable_block_test {

using test::expect_balanced;
using test::present;
using test::register_one;
using test::seq;

BlockManager<G1> make_manager(std::size_t count = 4) {
  return BlockManager<G1>::builder().block_count(count).block_size(16).build();
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

TEST(ImmutableBlock, CopiesShareOneReferenceCount) {
  auto m = make_manager();
  auto a = register_one(m, seq(0));
  EXPECT_EQ(a.use_count(), 1U);
  {
    ImmutableBlock<G1> b = a;  // NOLINT(performance-unnecessary-copy-initialization)
    EXPECT_EQ(a.use_count(), 2U);
    EXPECT_EQ(b.use_count(), 2U);
    EXPECT_EQ(a, b);
    EXPECT_EQ(b.block_id(), a.block_id());
    ImmutableBlock<G1> c = b;
    EXPECT_EQ(a.use_count(), 3U);
    // A moved handle carries its reference: the count does not change.
    ImmutableBlock<G1> d = std::move(c);
    EXPECT_FALSE(c.valid());  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(a.use_count(), 3U);
    EXPECT_EQ(m.pool_counts().immutable_out, 1U);  // one block, three handles
    expect_balanced(m);
  }
  EXPECT_EQ(a.use_count(), 1U);
  EXPECT_EQ(m.pool_counts().inactive, 0U);
  expect_balanced(m);
}

TEST(ImmutableBlock, MatchAddsAReference) {
  auto m = make_manager();
  auto a = register_one(m, seq(0));
  auto matched = m.match_blocks(std::vector{seq(0)});
  ASSERT_EQ(matched.size(), 1U);
  EXPECT_EQ(matched[0], a);
  EXPECT_EQ(a.use_count(), 2U);
  matched.clear();
  EXPECT_EQ(a.use_count(), 1U);
  expect_balanced(m);
}

TEST(ImmutableBlock, LastDropMovesToInactiveAndStaysMatchable) {
  auto m = make_manager();
  BlockId id = 0;
  {
    auto a = register_one(m, seq(0));
    id = a.block_id();
    auto b = a;
    a = ImmutableBlock<G1>(b);  // copy-assign over itself via a temporary
    EXPECT_EQ(b.use_count(), 2U);
    ImmutableBlock<G1> moved = std::move(a);
    EXPECT_EQ(m.pool_counts().inactive, 0U);
  }
  auto c = m.pool_counts();
  EXPECT_EQ(c.inactive, 1U);
  EXPECT_EQ(c.evictable, 1U);
  EXPECT_EQ(c.in_use, 0U);
  EXPECT_EQ(c.reset, 3U);
  EXPECT_EQ(present(m, {seq(0)}), std::vector<bool>{true});
  expect_balanced(m);

  auto matched = m.match_blocks(std::vector{seq(0)});
  ASSERT_EQ(matched.size(), 1U);
  EXPECT_EQ(matched[0].block_id(), id);
  EXPECT_EQ(matched[0].sequence_hash(), seq(0));
  EXPECT_EQ(matched[0].use_count(), 1U);
  c = m.pool_counts();
  EXPECT_EQ(c.inactive, 0U);
  EXPECT_EQ(c.immutable_out, 1U);
  expect_balanced(m);
}

TEST(ImmutableBlock, CopyAssignmentReleasesTheOverwrittenBlock) {
  auto m = make_manager();
  auto a = register_one(m, seq(0));
  auto b = register_one(m, seq(1));
  a = b;  // block of seq(0) loses its only reference -> inactive
  EXPECT_EQ(a, b);
  EXPECT_EQ(b.use_count(), 2U);
  EXPECT_EQ(m.pool_counts().inactive, 1U);
  EXPECT_EQ(m.pool_counts().immutable_out, 1U);
  // Self-assignment keeps the count.
  auto& self = a;
  a = self;
  EXPECT_EQ(b.use_count(), 2U);
  expect_balanced(m);
}

TEST(ImmutableBlock, MovedFromHandleIsEmptyAndEveryCallThrows) {
  auto m = make_manager();
  auto a = register_one(m, seq(0));
  ImmutableBlock<G1> b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(b.valid());
  EXPECT_FALSE(a == b);
  expect_moved_from_error([&] { (void)a.block_id(); }, "ImmutableBlock::block_id");
  expect_moved_from_error([&] { (void)a.sequence_hash(); }, "ImmutableBlock::sequence_hash");
  expect_moved_from_error([&] { (void)a.use_count(); }, "ImmutableBlock::use_count");
  expect_moved_from_error([&] { (void)a.downgrade(); }, "ImmutableBlock::downgrade");
  // Copying an empty handle gives an empty handle and touches nothing.
  ImmutableBlock<G1> empty_copy = a;  // NOLINT(bugprone-use-after-move)
  EXPECT_FALSE(empty_copy.valid());
  EXPECT_EQ(empty_copy, a);
  EXPECT_EQ(b.use_count(), 1U);
  // Copy-assigning an empty handle releases the target's block.
  ImmutableBlock<G1> c = b;
  c = a;
  EXPECT_FALSE(c.valid());
  EXPECT_EQ(b.use_count(), 1U);
  expect_balanced(m);
}

TEST(ImmutableBlock, ConcurrentCopiesAndDropsKeepTheCount) {
  auto m = make_manager();
  auto a = register_one(m, seq(0));
  constexpr int kThreads = 4;
  constexpr int kIterations = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&a] {
      for (int i = 0; i < kIterations; ++i) {
        ImmutableBlock<G1> copy = a;
        ImmutableBlock<G1> again = copy;
        (void)again.block_id();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(a.use_count(), 1U);
  expect_balanced(m);
}

TEST(ImmutableBlock, ConcurrentLastDropsAndMatchesStayBalanced) {
  auto m = make_manager(2);
  { auto a = register_one(m, seq(0)); }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m] {
      for (int i = 0; i < 500; ++i) {
        auto matched = m.match_blocks(std::vector{seq(0)});
        if (matched.size() != 1U) std::abort();
        auto copy = matched[0];
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto c = m.pool_counts();
  EXPECT_EQ(c.inactive, 1U);
  EXPECT_EQ(c.in_use, 0U);
  expect_balanced(m);
}

TEST(ImmutableBlock, DroppedAfterManagerIsDestroyed) {
  std::optional<ImmutableBlock<G1>> a;
  std::optional<ImmutableBlock<G1>> b;
  {
    auto m = make_manager(2);
    a.emplace(register_one(m, seq(0)));
    b.emplace(*a);
    EXPECT_EQ(a->use_count(), 2U);
  }
  // The pool lives on while handles are out.
  ASSERT_TRUE(a->valid());
  EXPECT_EQ(a->sequence_hash(), seq(0));
  EXPECT_EQ(a->use_count(), 2U);
  // A weak reference taken now cannot upgrade: the manager is gone.
  auto weak = a->downgrade();
  EXPECT_FALSE(weak.upgrade().has_value());
  a.reset();
  EXPECT_EQ(b->use_count(), 1U);
  b.reset();  // last block back: the orphaned pool goes away (ASan: no leak)
  EXPECT_FALSE(weak.upgrade().has_value());
}

TEST(ImmutableBlock, ConcurrentDropsAfterManagerIsDestroyed) {
  std::vector<ImmutableBlock<G1>> copies;
  {
    auto m = make_manager(2);
    auto a = register_one(m, seq(0));
    auto b = register_one(m, seq(1));
    for (int i = 0; i < 8; ++i) copies.push_back(i % 2 == 0 ? a : b);
  }
  std::vector<std::thread> threads;
  for (auto& c : copies) {
    threads.emplace_back([block = std::move(c)]() mutable {
      ImmutableBlock<G1> copy = block;
      auto gone = std::move(block);
    });
  }
  for (auto& t : threads) t.join();
  // The last drop freed the orphaned pool; ASan reports a leak or a use after free.
}

TEST(ImmutableBlock, ManagerDestroyedWhileAnotherThreadDropsTheLastBlock) {
  for (int i = 0; i < 100; ++i) {
    auto m = std::make_unique<BlockManager<G1>>(make_manager(2));
    auto a = register_one(*m, seq(0));
    auto mut = m->allocate_blocks(1);
    ASSERT_TRUE(mut);
    std::thread t([block = std::move(a), blocks = std::move(*mut)]() mutable {
      auto gone = std::move(block);
      blocks.clear();
    });
    m.reset();
    t.join();
  }
}

TEST(ImmutableBlock, DroppedBeforeManagerIsDestroyed) {
  auto m = std::make_unique<BlockManager<G1>>(make_manager(2));
  {
    auto a = register_one(*m, seq(0));
    auto b = a;
  }
  EXPECT_EQ(m->pool_counts().inactive, 1U);
  expect_balanced(*m);
  m.reset();
}

TEST(ImmutableBlock, ManagerMovedWhileBlocksAreOut) {
  std::optional<ImmutableBlock<G1>> a;
  auto m1 = make_manager(2);
  a.emplace(register_one(m1, seq(0)));
  auto m2 = std::move(m1);
  EXPECT_EQ(m2.pool_counts().immutable_out, 1U);
  a.reset();
  EXPECT_EQ(m2.pool_counts().inactive, 1U);
  expect_balanced(m2);
  // Move-assigning over a manager with blocks out orphans its pool safely.
  auto held = register_one(m2, seq(1));
  m2 = make_manager(3);
  EXPECT_EQ(m2.total_blocks(), 3U);
  EXPECT_EQ(held.sequence_hash(), seq(1));
}

}  // namespace immutable_block_test
}  // namespace kvbm
