// Each offload stage on its own, driven by hand with a ManualClock:
// PolicyEvaluator (policies, AllOf, timeout, metrics), PreconditionAwaiter
// (select between event and cancellation), Batcher (min, max, interval,
// preconditions never mixed), TransferExecutor (sweep, seal, eviction,
// dedup, full destination, failed copies, concurrency, pieces).

#include <atomic>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "offload/offload_test_util.h"

namespace kvbm {
namespace stages_test {

using namespace std::chrono_literals;
using test::chain;
using test::eventually;
using test::FakeEngine;
using test::seq;
using test::SlowPolicy;
using test::Tiers;
using Container = OffloadContainer<G1>;

/// A container of the given blocks and its handle.
std::pair<Container, TransferHandle> make(const std::vector<ImmutableBlock<G1>>& blocks,
                                          std::shared_ptr<Precondition> pre = nullptr) {
  return Container::make(blocks, std::move(pre));
}

std::vector<SequenceHash> hashes_of(const Container& c) {
  std::vector<SequenceHash> out;
  for (const auto& b : c.blocks) out.push_back(b.sequence_hash());
  return out;
}

// ---------------------------------------------------------------- policies

class ThrowingPolicy final : public OffloadPolicy {
 public:
  std::string_view name() const noexcept override { return "throws"; }
  void evaluate(std::span<const SequenceHash>, std::vector<bool>&) override {
    throw std::runtime_error("policy broke");
  }
};

struct PolicyFixture : ::testing::Test {
  Tiers t;
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::shared_ptr<OffloadMetrics> metrics = std::make_shared<OffloadMetrics>(registry, "p");

  double metric(std::string_view name, std::string_view policy) {
    return test::offload_metric(*registry, name, "p", "policy", policy).value_or(-1);
  }
};

TEST_F(PolicyFixture, NoPolicyPassesEverything) {
  auto blocks = test::make_registered(t.g1, chain(4));
  PolicyEvaluator<G1> e({}, 100ms, clock, metrics);
  auto [c, h] = make(blocks);
  EXPECT_TRUE(e.evaluate(c));
  EXPECT_EQ(c.blocks.size(), 4u);
  EXPECT_TRUE(h.report().blocks.empty());
}

TEST_F(PolicyFixture, PresenceSkipsBlocksAlreadyInTheDestination) {
  auto blocks = test::make_registered(t.g1, chain(4));
  auto in_g2 = test::register_one(t.g2, seq(1));
  PolicyEvaluator<G1> e({std::make_shared<PresencePolicy<G2>>(t.g2.registry())}, 100ms, clock,
                        metrics);
  auto [c, h] = make(blocks);
  EXPECT_TRUE(e.evaluate(c));
  EXPECT_EQ(hashes_of(c), (std::vector<SequenceHash>{seq(0), seq(2), seq(3)}));
  EXPECT_EQ(h.report().hashes(BlockOutcome::kFiltered), std::vector<SequenceHash>{seq(1)});
  EXPECT_EQ(metric("kvbm_offload_policy_passed_blocks_total", "presence"), 3);
  EXPECT_EQ(metric("kvbm_offload_policy_filtered_blocks_total", "presence"), 1);
}

TEST_F(PolicyFixture, FrequencyPassesBlocksSeenOften) {
  auto blocks = test::make_registered(t.g1, chain(4));  // each touched once
  t.tracker->touch(seq(2).value());
  t.tracker->touch(seq(3).value());
  t.tracker->touch(seq(3).value());
  PolicyEvaluator<G1> e({std::make_shared<FrequencyPolicy>(t.tracker, 2)}, 100ms, clock, metrics);
  auto [c, h] = make(blocks);
  EXPECT_TRUE(e.evaluate(c));
  EXPECT_EQ(hashes_of(c), (std::vector<SequenceHash>{seq(2), seq(3)}));
  EXPECT_EQ(metric("kvbm_offload_policy_filtered_blocks_total", "frequency"), 2);

  PolicyEvaluator<G1> none({std::make_shared<FrequencyPolicy>(t.tracker, 15)}, 100ms, clock);
  auto [c2, h2] = make(blocks);
  EXPECT_FALSE(none.evaluate(c2));  // everything filtered
  EXPECT_EQ(h2.report().count(BlockOutcome::kFiltered), 4u);
}

TEST_F(PolicyFixture, FrequencyRejectsAThresholdNothingCanReach) {
  EXPECT_THROW(FrequencyPolicy(t.tracker, FrequencyTracker::kMaxCount + 1), UsageError);
  EXPECT_THROW(FrequencyPolicy(nullptr, 1), UsageError);
}

TEST_F(PolicyFixture, AllOfIsFlattenedAndCountedPerMember) {
  auto blocks = test::make_registered(t.g1, chain(4));
  auto in_g2 = test::register_one(t.g2, seq(0));
  t.tracker->touch(seq(0).value());
  t.tracker->touch(seq(1).value());
  auto all = std::make_shared<AllOfPolicy>(std::vector<std::shared_ptr<OffloadPolicy>>{
      std::make_shared<PresencePolicy<G2>>(t.g2.registry()),
      std::make_shared<FrequencyPolicy>(t.tracker, 2)});
  PolicyEvaluator<G1> e({all}, 100ms, clock, metrics);
  ASSERT_EQ(e.policies().size(), 2u);
  auto [c, h] = make(blocks);
  EXPECT_TRUE(e.evaluate(c));
  EXPECT_EQ(hashes_of(c), std::vector<SequenceHash>{seq(1)});
  // presence saw 4 and filtered seq(0); frequency saw the other 3, passed seq(1)
  EXPECT_EQ(metric("kvbm_offload_policy_passed_blocks_total", "presence"), 3);
  EXPECT_EQ(metric("kvbm_offload_policy_filtered_blocks_total", "presence"), 1);
  EXPECT_EQ(metric("kvbm_offload_policy_passed_blocks_total", "frequency"), 1);
  EXPECT_EQ(metric("kvbm_offload_policy_filtered_blocks_total", "frequency"), 2);

  // AllOf used directly (not through the evaluator) is the same conjunction.
  std::vector<bool> pass(4, true);
  const auto hs = chain(4);
  all->evaluate(hs, pass);
  EXPECT_EQ(pass, (std::vector<bool>{false, true, false, false}));
}

TEST_F(PolicyFixture, APolicyOverTheTimeoutFilters) {
  auto blocks = test::make_registered(t.g1, chain(3));
  PolicyEvaluator<G1> on_time({std::make_shared<SlowPolicy>(clock, 100ms)}, 100ms, clock, metrics);
  auto [c1, h1] = make(blocks);
  EXPECT_TRUE(on_time.evaluate(c1));  // exactly the timeout: not over it
  EXPECT_EQ(metric("kvbm_offload_policy_timeouts_total", "slow"), 0);

  PolicyEvaluator<G1> late({std::make_shared<SlowPolicy>(clock, 100ms + 1ns)}, 100ms, clock,
                           metrics);
  auto [c2, h2] = make(blocks);
  EXPECT_FALSE(late.evaluate(c2));
  EXPECT_EQ(h2.report().count(BlockOutcome::kFiltered), 3u);
  EXPECT_EQ(metric("kvbm_offload_policy_timeouts_total", "slow"), 1);
  EXPECT_EQ(metric("kvbm_offload_policy_filtered_blocks_total", "slow"), 3);
}

TEST_F(PolicyFixture, AThrowingPolicyFilters) {
  auto blocks = test::make_registered(t.g1, chain(2));
  PolicyEvaluator<G1> e({std::make_shared<ThrowingPolicy>()}, 100ms, clock, metrics);
  auto [c, h] = make(blocks);
  EXPECT_FALSE(e.evaluate(c));
  EXPECT_EQ(metric("kvbm_offload_policy_filtered_blocks_total", "throws"), 2);
}

TEST_F(PolicyFixture, EvaluatorRejectsBadArguments) {
  EXPECT_THROW(PolicyEvaluator<G1>({nullptr}, 100ms, clock), UsageError);
  EXPECT_THROW(PolicyEvaluator<G1>({}, 0ms, clock), UsageError);
  EXPECT_THROW(PolicyEvaluator<G1>({}, 1ms, nullptr), UsageError);
  EXPECT_THROW(PresencePolicy<G2>(nullptr), UsageError);
}

// ------------------------------------------------------------ preconditions

struct AwaiterFixture : ::testing::Test {
  Tiers t;
  std::mutex mu;
  std::vector<Container> out;
  PreconditionAwaiter<G1> awaiter{[this](Container&& c) {
    std::lock_guard lock(mu);
    out.push_back(std::move(c));
  }};
  std::size_t delivered() {
    std::lock_guard lock(mu);
    return out.size();
  }
};

TEST_F(AwaiterFixture, NoPreconditionPassesAtOnce) {
  auto blocks = test::make_registered(t.g1, chain(2));
  auto [c, h] = make(blocks);
  awaiter.submit(std::move(c));
  EXPECT_EQ(delivered(), 1u);
  EXPECT_EQ(h.status(), TransferStatus::kWaiting);
}

TEST_F(AwaiterFixture, WaitsForTheEventThenPassesOnItsThread) {
  auto blocks = test::make_registered(t.g1, chain(2));
  auto event = std::make_shared<HostEvent>();
  std::thread::id sink_thread;
  PreconditionAwaiter<G1> a([&](Container&&) { sink_thread = std::this_thread::get_id(); });
  auto [c, h] = make(blocks, event);
  a.submit(std::move(c));
  EXPECT_EQ(a.waiting(), 1u);
  EXPECT_EQ(h.status(), TransferStatus::kWaiting);
  std::thread signaller([&] { event->signal(); });
  const auto id = signaller.get_id();
  signaller.join();
  EXPECT_EQ(sink_thread, id);
  EXPECT_EQ(a.waiting(), 0u);
}

TEST_F(AwaiterFixture, CancelWhileWaitingDropsAtOnce) {
  auto blocks = test::make_registered(t.g1, chain(3));
  auto event = std::make_shared<HostEvent>();
  auto [c, h] = make(blocks, event);
  awaiter.submit(std::move(c));
  ASSERT_EQ(awaiter.waiting(), 1u);
  EXPECT_TRUE(h.cancel());  // P6: the token side of the select wins
  EXPECT_EQ(awaiter.waiting(), 0u);
  EXPECT_EQ(h.status(), TransferStatus::kCancelled);
  event->signal();
  EXPECT_EQ(delivered(), 0u);
  blocks.clear();
  test::expect_balanced(t.g1);
  EXPECT_EQ(t.g1.pool_counts().in_use, 0u);
}

TEST_F(AwaiterFixture, EventAndCancelRaceHaveOneWinner) {
  auto blocks = test::make_registered(t.g1, chain(1));
  for (int i = 0; i < 200; ++i) {
    auto event = std::make_shared<HostEvent>();
    auto [c, h] = make(blocks, event);
    awaiter.submit(std::move(c));
    const std::size_t before = delivered();
    std::thread a([&] { event->signal(); });
    std::thread b([&, h = h] { h.cancel(); });
    a.join();
    b.join();
    // Either the event won (the container went on, where the cancel still
    // reaches it through its token) or the token did (dropped); never lost.
    const bool passed = delivered() == before + 1;
    EXPECT_EQ(h.status(), TransferStatus::kCancelled) << "iteration " << i;
    if (passed) {
      std::lock_guard lock(mu);
      EXPECT_TRUE(out.back().cancelled());
    }
    EXPECT_EQ(awaiter.waiting(), 0u);
  }
}

TEST_F(AwaiterFixture, CloseCancelsTheWaiting) {
  auto blocks = test::make_registered(t.g1, chain(1));
  auto event = std::make_shared<HostEvent>();
  auto [c, h] = make(blocks, event);
  awaiter.submit(std::move(c));
  awaiter.close();
  EXPECT_EQ(h.status(), TransferStatus::kCancelled);
  auto [c2, h2] = make(blocks);
  awaiter.submit(std::move(c2));
  EXPECT_EQ(h2.status(), TransferStatus::kCancelled);
  event->signal();
  EXPECT_EQ(delivered(), 0u);
}

TEST_F(AwaiterFixture, ACancelledContainerIsDroppedOnArrival) {
  auto blocks = test::make_registered(t.g1, chain(1));
  auto [c, h] = make(blocks);
  h.token().cancel();  // the token alone, not through the handle
  awaiter.submit(std::move(c));
  EXPECT_EQ(delivered(), 0u);
  EXPECT_EQ(h.status(), TransferStatus::kCancelled);
}

// ------------------------------------------------------------------ batcher

struct BatcherFixture : ::testing::Test {
  Tiers t{128, 8};
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  std::vector<ImmutableBlock<G1>> blocks = test::make_registered(t.g1, chain(100));
  std::vector<OffloadBatch<G1>> out;

  /// A container of `n` blocks starting at block `from`.
  std::pair<Container, TransferHandle> part(std::size_t from, std::size_t n,
                                            std::shared_ptr<Precondition> pre = nullptr) {
    return make({blocks.begin() + static_cast<std::ptrdiff_t>(from),
                 blocks.begin() + static_cast<std::ptrdiff_t>(from + n)},
                std::move(pre));
  }
  static BatchConfig config(std::size_t min, std::size_t max, std::chrono::nanoseconds flush) {
    BatchConfig c;
    c.min_batch_size = min;
    c.max_batch_size = max;
    c.flush_interval = flush;
    return c;
  }
  std::vector<std::size_t> sizes() const {
    std::vector<std::size_t> s;
    for (const auto& b : out) s.push_back(b.block_count());
    return s;
  }
};

TEST_F(BatcherFixture, FlushesAtMinBatchSize) {
  Batcher<G1> b(config(4, 8, 1h), clock);
  for (std::size_t i = 0; i < 3; ++i) b.add(part(i, 1).first, out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(b.pending_blocks(), 3u);
  auto [c, h] = part(3, 1);
  b.add(std::move(c), out);
  EXPECT_EQ(sizes(), std::vector<std::size_t>{4});
  EXPECT_EQ(out[0].containers.size(), 4u);
  EXPECT_EQ(h.status(), TransferStatus::kBatched);
  EXPECT_EQ(b.pending_blocks(), 0u);
}

TEST_F(BatcherFixture, NeverExceedsMaxBatchSizeNorSplitsAContainer) {
  Batcher<G1> b(config(8, 8, 1h), clock);
  b.add(part(0, 3).first, out);
  b.add(part(3, 3).first, out);
  EXPECT_TRUE(out.empty());
  b.add(part(6, 3).first, out);  // 9 > 8: the pending 6 go first
  EXPECT_EQ(sizes(), std::vector<std::size_t>{6});
  b.add(part(9, 20).first, out);  // larger than max: flushes 3, then a batch of its own
  EXPECT_EQ(sizes(), (std::vector<std::size_t>{6, 3, 20}));
  EXPECT_EQ(b.pending_blocks(), 0u);
}

TEST_F(BatcherFixture, FlushesAfterFlushInterval) {
  Batcher<G1> b(config(8, 64, 10ms), clock);
  EXPECT_FALSE(b.deadline());
  b.add(part(0, 1).first, out);
  clock->advance(4ms);
  b.add(part(1, 1).first, out);
  EXPECT_EQ(b.deadline(), clock->now() + 6ms);  // from the first arrival
  clock->advance(5ms);
  b.poll(out);
  EXPECT_TRUE(out.empty());
  clock->advance(1ms);
  b.poll(out);
  EXPECT_EQ(sizes(), std::vector<std::size_t>{2});
  EXPECT_FALSE(b.deadline());
}

TEST_F(BatcherFixture, NeverMixesDifferentUnmetPreconditions) {
  Batcher<G1> b(config(8, 64, 1h), clock);
  auto e1 = std::make_shared<HostEvent>();
  auto e2 = std::make_shared<HostEvent>();
  b.add(part(0, 1, e1).first, out);
  b.add(part(1, 1, e1).first, out);  // same precondition: together
  EXPECT_TRUE(out.empty());
  b.add(part(2, 1, e2).first, out);  // a different, unmet one: flush first
  ASSERT_EQ(sizes(), std::vector<std::size_t>{2});
  for (const auto& c : out[0].containers) EXPECT_EQ(c.precondition, e1);
  b.add(part(3, 1).first, out);  // none (met) next to unmet e2: flush
  EXPECT_EQ(sizes(), (std::vector<std::size_t>{2, 1}));
  e1->signal();
  e2->signal();
  b.add(part(4, 1, e1).first, out);  // all met: may mix
  b.add(part(5, 1, e2).first, out);
  b.add(part(6, 1).first, out);
  EXPECT_EQ(b.pending_containers(), 4u);
  EXPECT_EQ(out.size(), 2u);
}

TEST_F(BatcherFixture, CancelledContainersAreSweptAndNotCounted) {
  Batcher<G1> b(config(4, 8, 10ms), clock);
  auto [c1, h1] = part(0, 2);
  auto [c2, h2] = part(2, 1);
  b.add(std::move(c1), out);
  b.add(std::move(c2), out);
  EXPECT_TRUE(h1.cancel());
  EXPECT_EQ(b.sweep(), 1u);
  EXPECT_EQ(b.pending_blocks(), 1u);
  auto [c3, h3] = part(3, 1);
  h3.cancel();
  b.add(std::move(c3), out);  // dropped on arrival
  EXPECT_EQ(b.pending_containers(), 1u);
  EXPECT_EQ(h3.status(), TransferStatus::kCancelled);
  b.add(part(4, 2).first, out);
  b.add(part(6, 1).first, out);  // 1 + 2 + 1 = 4 live blocks: flush
  EXPECT_EQ(sizes(), std::vector<std::size_t>{4});
}

TEST_F(BatcherFixture, RejectsABadConfig) {
  EXPECT_THROW(Batcher<G1>(config(9, 8, 1ms), clock), UsageError);
  EXPECT_THROW(Batcher<G1>(config(1, 8, 1ms), nullptr), UsageError);
}

// ----------------------------------------------------------------- executor

struct ExecutorFixture : ::testing::Test {
  Tiers t{64, 16};
  std::shared_ptr<FakeEngine> engine = std::make_shared<FakeEngine>();
  std::shared_ptr<FakeEngine> gated = std::make_shared<FakeEngine>(true);

  OffloadBatch<G1> batch_of(std::vector<Container> cs) {
    OffloadBatch<G1> b;
    b.containers = std::move(cs);
    return b;
  }
  void expect_clean() { test::expect_clean(t); }
};

TEST_F(ExecutorFixture, CopiesAndRegistersInTheDestination) {
  TransferExecutor<G1, G2> x(t.g2, engine, 1, 64);
  auto blocks = test::make_registered(t.g1, chain(4));
  auto [c, h] = make(blocks);
  x.launch(batch_of({}));  // empty: nothing happens
  std::vector<Container> cs;
  cs.push_back(std::move(c));
  x.launch(batch_of(std::move(cs)));
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.report().count(BlockOutcome::kTransferred), 4u);
  EXPECT_EQ(engine->pairs_submitted(), 4u);
  EXPECT_EQ(test::present(t.g2, chain(4)), std::vector<bool>(4, true));
  blocks.clear();
  expect_clean();
}

TEST_F(ExecutorFixture, SweepsCancelledContainersBeforeUpgrade) {
  TransferExecutor<G1, G2> x(t.g2, engine, 1, 64);
  auto blocks = test::make_registered(t.g1, chain(4, 1));
  auto [c1, h1] = make({blocks[0], blocks[1]});
  auto [c2, h2] = make({blocks[2], blocks[3]});
  EXPECT_TRUE(h1.cancel());
  std::vector<Container> cs;
  cs.push_back(std::move(c1));
  cs.push_back(std::move(c2));
  x.launch(batch_of(std::move(cs)));
  EXPECT_EQ(h1.status(), TransferStatus::kCancelled);
  EXPECT_EQ(h2.wait(), TransferStatus::kDone);
  EXPECT_EQ(engine->pairs_submitted(), 2u);
  EXPECT_EQ(test::present(t.g2, chain(4, 1)), (std::vector<bool>{false, false, true, true}));
  blocks.clear();
  expect_clean();
}

TEST_F(ExecutorFixture, BlocksEvictedBeforeUpgradeAreDroppedAndReported) {
  TransferExecutor<G1, G2> x(t.g2, engine, 1, 64);
  auto blocks = test::make_registered(t.g1, chain(4));
  auto [c, h] = make(blocks);
  blocks.erase(blocks.begin() + 2, blocks.end());  // seq(2), seq(3) now inactive
  {
    auto all = t.g1.allocate_blocks(t.g1.available_blocks());  // evicts them
    ASSERT_TRUE(all.has_value());
  }
  std::vector<Container> cs;
  cs.push_back(std::move(c));
  x.launch(batch_of(std::move(cs)));
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.report().hashes(BlockOutcome::kEvicted), (std::vector<SequenceHash>{seq(2), seq(3)}));
  EXPECT_EQ(engine->pairs_submitted(), 2u);
  blocks.clear();
  expect_clean();
}

TEST_F(ExecutorFixture, AFullDestinationMovesWhatFits) {
  Tiers small(64, 3);
  TransferExecutor<G1, G2> x(small.g2, engine, 1, 64);
  auto blocks = test::make_registered(small.g1, chain(5));
  auto [c, h] = make(blocks);
  std::vector<Container> cs;
  cs.push_back(std::move(c));
  x.launch(batch_of(std::move(cs)));
  EXPECT_EQ(h.wait(), TransferStatus::kFailed);
  EXPECT_EQ(h.report().count(BlockOutcome::kTransferred), 3u);
  const auto failed = h.failed_blocks();
  ASSERT_EQ(failed.size(), 2u);
  for (const auto& f : failed) EXPECT_EQ(f.outcome, BlockOutcome::kNoSpace);
  EXPECT_EQ(engine->pairs_submitted(), 3u);
  blocks.clear();
  test::expect_clean(small);
}

TEST_F(ExecutorFixture, ADestinationWithNoRoomAtAllFailsEveryBlock) {
  Tiers small(64, 2);
  auto held = small.g2.allocate_blocks(2);
  TransferExecutor<G1, G2> x(small.g2, engine, 1, 64);
  auto blocks = test::make_registered(small.g1, chain(2));
  auto [c, h] = make(blocks);
  std::vector<Container> cs;
  cs.push_back(std::move(c));
  x.launch(batch_of(std::move(cs)));
  EXPECT_EQ(h.wait(), TransferStatus::kFailed);
  EXPECT_EQ(h.report().count(BlockOutcome::kNoSpace), 2u);
  EXPECT_EQ(engine->submit_count(), 0u);
  EXPECT_EQ(x.in_flight(), 0u);
}

TEST_F(ExecutorFixture, AFailedCopyIsNeverRegistered) {
  TransferExecutor<G1, G2> x(t.g2, engine, 1, 64);
  auto blocks = test::make_registered(t.g1, chain(4));
  engine->fail_src(blocks[1].block_id());
  auto [c, h] = make(blocks);
  std::vector<Container> cs;
  cs.push_back(std::move(c));
  x.launch(batch_of(std::move(cs)));
  EXPECT_EQ(h.wait(), TransferStatus::kFailed);
  ASSERT_EQ(h.failed_blocks().size(), 1u);
  EXPECT_EQ(h.failed_blocks()[0], (BlockResult{seq(1), BlockOutcome::kCopyFailed}));
  ASSERT_TRUE(h.report().error.has_value());
  EXPECT_EQ(h.report().error->message, "fake failure");
  EXPECT_EQ(test::present(t.g2, chain(4)), (std::vector<bool>{true, false, true, true}));
  blocks.clear();
  expect_clean();
}

TEST_F(ExecutorFixture, AnEngineThatRefusesFailsTheBatch) {
  TransferExecutor<G1, G2> x(t.g2, engine, 1, 64);
  engine->refuse(true);
  auto blocks = test::make_registered(t.g1, chain(3));
  auto [c, h] = make(blocks);
  std::vector<Container> cs;
  cs.push_back(std::move(c));
  x.launch(batch_of(std::move(cs)));
  EXPECT_EQ(h.wait(), TransferStatus::kFailed);
  EXPECT_EQ(h.report().count(BlockOutcome::kCopyFailed), 3u);
  ASSERT_TRUE(h.report().error.has_value());
  EXPECT_EQ(h.report().error->kind, ErrorKind::kRefused);
  EXPECT_THAT(h.report().error->message, ::testing::HasSubstr("refused"));
  EXPECT_EQ(test::present(t.g2, chain(3)), std::vector<bool>(3, false));
  blocks.clear();
  expect_clean();
}

TEST_F(ExecutorFixture, DeduplicatesWithinTheBatchAndAgainstTheDestination) {
  TransferExecutor<G1, G2> x(t.g2, engine, 1, 64);
  auto blocks = test::make_registered(t.g1, chain(3));
  auto present = test::register_one(t.g2, seq(2));
  auto [c1, h1] = make({blocks[0], blocks[1], blocks[2]});
  auto [c2, h2] = make({blocks[1], blocks[0]});
  std::vector<Container> cs;
  cs.push_back(std::move(c1));
  cs.push_back(std::move(c2));
  x.launch(batch_of(std::move(cs)));
  EXPECT_EQ(h1.wait(), TransferStatus::kDone);
  EXPECT_EQ(h2.wait(), TransferStatus::kDone);
  EXPECT_EQ(engine->pairs_submitted(), 2u);  // seq(0), seq(1) once each
  EXPECT_EQ(h1.report().count(BlockOutcome::kTransferred), 2u);
  EXPECT_EQ(h1.report().hashes(BlockOutcome::kAlreadyPresent), std::vector<SequenceHash>{seq(2)});
  EXPECT_EQ(h2.report().count(BlockOutcome::kTransferred), 2u);
  blocks.clear();
  present = ImmutableBlock<G2>(std::move(present));
}

TEST_F(ExecutorFixture, SubmitsInPiecesOfMaxBatchSize) {
  TransferExecutor<G1, G2> x(t.g2, engine, 1, 4);
  auto blocks = test::make_registered(t.g1, chain(10));
  auto [c, h] = make(blocks);
  std::vector<Container> cs;
  cs.push_back(std::move(c));
  x.launch(batch_of(std::move(cs)));
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  const auto submits = engine->submits();
  ASSERT_EQ(submits.size(), 3u);
  EXPECT_EQ(submits[0].size(), 4u);
  EXPECT_EQ(submits[1].size(), 4u);
  EXPECT_EQ(submits[2].size(), 2u);
}

TEST_F(ExecutorFixture, AtMostMaxConcurrentTransfersInFlight) {
  std::atomic<int> freed{0};
  TransferExecutor<G1, G2> x(t.g2, gated, 2, 64, [&] { ++freed; });
  auto blocks = test::make_registered(t.g1, chain(3));
  std::vector<TransferHandle> hs;
  for (int i = 0; i < 2; ++i) {
    auto [c, h] = make({blocks[static_cast<std::size_t>(i)]});
    hs.push_back(h);
    std::vector<Container> cs;
    cs.push_back(std::move(c));
    x.launch(batch_of(std::move(cs)));
  }
  EXPECT_FALSE(x.can_launch());
  EXPECT_EQ(x.in_flight(), 2u);
  EXPECT_THROW(x.launch(batch_of({})), UsageError);
  EXPECT_EQ(hs[0].status(), TransferStatus::kTransferring);
  gated->release_one();
  EXPECT_EQ(freed, 1);
  EXPECT_TRUE(x.can_launch());
  EXPECT_EQ(hs[0].status(), TransferStatus::kDone);
  gated->release_all();
  x.wait_idle();
  EXPECT_EQ(x.peak_in_flight(), 2u);
}

TEST_F(ExecutorFixture, AnUnmetPreconditionIsAUsageError) {
  TransferExecutor<G1, G2> x(t.g2, engine, 1, 64);
  auto blocks = test::make_registered(t.g1, chain(1));
  auto [c, h] = make(blocks, std::make_shared<HostEvent>());
  std::vector<Container> cs;
  cs.push_back(std::move(c));
  EXPECT_THROW(x.launch(batch_of(std::move(cs))), UsageError);
}

TEST_F(ExecutorFixture, CancelAfterTheSealWaitsForCompletion) {
  TransferExecutor<G1, G2> x(t.g2, gated, 1, 64);
  auto blocks = test::make_registered(t.g1, chain(2));
  auto [c, h] = make(blocks);
  std::vector<Container> cs;
  cs.push_back(std::move(c));
  x.launch(batch_of(std::move(cs)));
  EXPECT_TRUE(h.token().is_sealed());
  std::atomic<bool> returned{false};
  bool cancelled = true;
  std::thread canceller([&, h = h] {
    cancelled = h.cancel();
    returned = true;
  });
  ASSERT_TRUE(eventually([&, h = h] { return h.token().cancel_requested(); }));
  EXPECT_FALSE(returned);
  EXPECT_EQ(t.g1.pool_counts().in_use, 2u);  // pinned by the transfer (and `blocks`)
  gated->release_all();
  canceller.join();
  EXPECT_FALSE(cancelled);
  EXPECT_EQ(h.status(), TransferStatus::kDone);
  blocks.clear();
  expect_clean();
}

TEST_F(ExecutorFixture, RejectsBadArguments) {
  EXPECT_THROW((TransferExecutor<G1, G2>(t.g2, nullptr, 1, 1)), UsageError);
  EXPECT_THROW((TransferExecutor<G1, G2>(t.g2, engine, 0, 1)), UsageError);
  EXPECT_THROW((TransferExecutor<G1, G2>(t.g2, engine, 1, 0)), UsageError);
}

}  // namespace stages_test
}  // namespace kvbm
