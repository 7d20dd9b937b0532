// OffloadPipeline end to end with a fake engine and a ManualClock: every
// option reaches its stage, cancellation at every stage, eviction while
// queued, a full destination, failed copies, metrics and shutdown with work
// in flight. After each, both pools are balanced and nothing is held.

#include <atomic>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "offload/offload_test_util.h"

namespace kvbm {
namespace pipeline_test {

using namespace std::chrono_literals;
using test::chain;
using test::eventually;
using test::FakeEngine;
using test::seq;
using test::SlowPolicy;
using test::Tiers;
using ::testing::HasSubstr;
using Pipeline = OffloadPipeline<G1, G2>;

/// A policy that blocks until opened; counts its calls.
class GatePolicy final : public OffloadPolicy {
 public:
  std::string_view name() const noexcept override { return "gate"; }
  void evaluate(std::span<const SequenceHash>, std::vector<bool>&) override {
    std::unique_lock lock(mu_);
    ++calls_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait_calls(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return calls_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int calls_ = 0;
};

PipelineConfig cfg(std::size_t min, std::size_t max, std::size_t concurrent = 1,
                   std::chrono::nanoseconds flush = 1h) {
  PipelineConfig c;
  c.batch_config.min_batch_size = min;
  c.batch_config.max_batch_size = max;
  c.batch_config.flush_interval = flush;
  c.max_concurrent_transfers = concurrent;
  c.sweep_interval = 1h;
  return c;
}

struct PipelineFixture : ::testing::Test {
  Tiers t{64, 32};
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  std::shared_ptr<FakeEngine> engine = std::make_shared<FakeEngine>();
  std::shared_ptr<FakeEngine> gated = std::make_shared<FakeEngine>(true);
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();

  std::unique_ptr<Pipeline> build(const PipelineConfig& c,
                                  std::shared_ptr<TransferEngine> e = nullptr,
                                  std::vector<std::shared_ptr<OffloadPolicy>> policies = {}) {
    auto b = Pipeline::builder();
    b.source(t.g1)
        .destination(t.g2)
        .engine(e ? e : engine)
        .config(c)
        .clock(clock)
        .metrics_registry(registry);
    for (auto& p : policies) b.policy(p);
    return b.build();
  }
  double metric(std::string_view name, std::string_view label = {}, std::string_view value = {}) {
    return test::offload_metric(*registry, name, "G1_to_G2", label, value).value_or(-1);
  }
};

TEST_F(PipelineFixture, BuildRejectsMissingOrInvalidOptions) {
  auto expect_error = [](auto&& make, const char* what) {
    try {
      make();
      ADD_FAILURE() << "accepted: " << what;
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  expect_error([&] { (void)Pipeline::builder().destination(t.g2).engine(engine).build(); },
               "source");
  expect_error([&] { (void)Pipeline::builder().source(t.g1).engine(engine).build(); },
               "destination");
  expect_error([&] { (void)Pipeline::builder().source(t.g1).destination(t.g2).build(); }, "engine");
  PipelineConfig bad;
  bad.max_concurrent_transfers = 0;
  expect_error([&] { (void)build(bad); }, "max_concurrent_transfers");
  PipelineConfig negative;
  negative.space_wait = -1ms;
  expect_error([&] { (void)build(negative); }, "space_wait");
  auto other = BlockManager<G2>::builder().block_count(4).block_size(8).build();
  expect_error(
      [&] { (void)Pipeline::builder().source(t.g1).destination(other).engine(engine).build(); },
      "block size");
  auto p = build({});
  expect_error([&] { (void)build({}); }, "G1_to_G2");  // the metrics name is taken
  EXPECT_EQ(p->config().batch_config.max_batch_size, 64u);
  EXPECT_EQ(p->name(), "G1_to_G2");
}

TEST_F(PipelineFixture, OffloadsAndReportsMetrics) {
  auto p = build(cfg(4, 64), nullptr, {std::make_shared<PresencePolicy<G2>>(t.g2.registry())});
  auto blocks = test::make_registered(t.g1, chain(5));
  auto present = test::register_one(t.g2, seq(4));
  auto h = p->enqueue(blocks);
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.report().count(BlockOutcome::kTransferred), 4u);
  EXPECT_EQ(h.report().hashes(BlockOutcome::kFiltered), std::vector<SequenceHash>{seq(4)});
  EXPECT_EQ(test::present(t.g2, chain(5)), std::vector<bool>(5, true));
  EXPECT_EQ(metric("kvbm_offload_enqueued_blocks_total"), 5);
  EXPECT_EQ(metric("kvbm_offload_blocks_total", "outcome", "transferred"), 4);
  EXPECT_EQ(metric("kvbm_offload_blocks_total", "outcome", "filtered"), 1);
  EXPECT_EQ(metric("kvbm_offload_policy_passed_blocks_total", "policy", "presence"), 4);
  EXPECT_EQ(metric("kvbm_offload_policy_filtered_blocks_total", "policy", "presence"), 1);
  EXPECT_EQ(metric("kvbm_offload_batches_total"), 1);
  EXPECT_EQ(p->enqueue(std::vector<ImmutableBlock<G1>>{}).status(), TransferStatus::kDone);
  p.reset();
  blocks.clear();
  present = test::register_one(t.g2, seq(9));
  present = ImmutableBlock<G2>(std::move(present));
}

// Records the thread each evaluation runs on; cheap or not as asked.
class ThreadRecordingPolicy final : public OffloadPolicy {
 public:
  explicit ThreadRecordingPolicy(bool cheap) : cheap_(cheap) {}
  std::string_view name() const noexcept override { return "thread_recording"; }
  bool cheap() const noexcept override { return cheap_; }
  void evaluate(std::span<const SequenceHash>, std::vector<bool>&) override {
    std::lock_guard lock(mu_);
    threads_.push_back(std::this_thread::get_id());
  }
  std::vector<std::thread::id> threads() const {
    std::lock_guard lock(mu_);
    return threads_;
  }

 private:
  const bool cheap_;
  mutable std::mutex mu_;
  std::vector<std::thread::id> threads_;
};

TEST_F(PipelineFixture, CheapPoliciesRunOnTheEnqueuingThreadOthersOnThePolicyThread) {
  EXPECT_TRUE(PassAllPolicy().cheap());
  EXPECT_TRUE(PresencePolicy<G2>(t.g2.registry()).cheap());
  EXPECT_TRUE(FrequencyPolicy(t.tracker, 2).cheap());
  auto cheap = std::make_shared<ThreadRecordingPolicy>(true);
  auto slow = std::make_shared<ThreadRecordingPolicy>(false);
  EXPECT_TRUE(AllOfPolicy({cheap, std::make_shared<PassAllPolicy>()}).cheap());
  EXPECT_FALSE(AllOfPolicy({cheap, slow}).cheap());
  for (const bool all_cheap : {true, false}) {
    SCOPED_TRACE(all_cheap ? "all cheap" : "one not cheap");
    std::vector<std::shared_ptr<OffloadPolicy>> policies{cheap};
    if (!all_cheap) policies.push_back(slow);
    auto p = build(cfg(1, 64), nullptr, policies);
    auto blocks = test::make_registered(t.g1, chain(3));
    auto h = p->enqueue(blocks);
    EXPECT_EQ(h.wait(), TransferStatus::kDone);
    EXPECT_EQ(h.report().count(BlockOutcome::kTransferred), 3u);
    ASSERT_FALSE(cheap->threads().empty());
    EXPECT_EQ(cheap->threads().back() == std::this_thread::get_id(), all_cheap);
    p.reset();
    blocks.clear();
    t.g2.reset_inactive_pool();
    registry = std::make_shared<prometheus::Registry>();
    test::expect_clean(t);
  }
  ASSERT_EQ(slow->threads().size(), 1u);
  EXPECT_NE(slow->threads().front(), std::this_thread::get_id());
}

TEST_F(PipelineFixture, InlinePoliciesStillFilterAndCancelAfterShutdown) {
  auto p = build(cfg(1, 64), nullptr, {std::make_shared<PresencePolicy<G2>>(t.g2.registry())});
  auto blocks = test::make_registered(t.g1, chain(2));
  auto present = test::register_one(t.g2, seq(1));
  auto h = p->enqueue({blocks[1]});  // filtered on this thread: done at once
  EXPECT_EQ(h.status(), TransferStatus::kDone);
  EXPECT_EQ(h.report().count(BlockOutcome::kFiltered), 1u);
  p->shutdown();
  auto late = p->enqueue({blocks[0]});
  EXPECT_EQ(late.status(), TransferStatus::kCancelled);
  p.reset();
  blocks.clear();
  { auto drop = std::move(present); }
  test::expect_clean(t);
}

// ---- every option reaches the code that uses it

TEST_F(PipelineFixture, MaxBatchSizeBoundsBatchesAndSubmits) {
  auto p = build(cfg(4, 4));
  auto blocks = test::make_registered(t.g1, chain(22));
  std::vector<TransferHandle> hs;
  for (std::size_t i = 0; i < 12; ++i) hs.push_back(p->enqueue({blocks[i]}));
  // One container larger than max_batch_size: never split, submitted in pieces.
  hs.push_back(p->enqueue(std::vector<ImmutableBlock<G1>>(blocks.begin() + 12, blocks.end())));
  // Every batch fills up: all goes out without a waiter (a wait would flush
  // the pending batch early and change the batches this test looks at).
  ASSERT_TRUE(eventually([&] { return engine->pairs_submitted() == 22; }));
  for (auto& h : hs) EXPECT_EQ(h.wait(), TransferStatus::kDone);
  const auto submits = engine->submits();
  ASSERT_EQ(submits.size(), 6u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(submits[i].size(), 4u);
  EXPECT_EQ(submits[3].size(), 4u);
  EXPECT_EQ(submits[4].size(), 4u);
  EXPECT_EQ(submits[5].size(), 2u);
  EXPECT_EQ(metric("kvbm_offload_batches_total"), 4);
}

TEST_F(PipelineFixture, MinBatchSizeHoldsSmallerBatches) {
  auto p = build(cfg(4, 64));
  auto blocks = test::make_registered(t.g1, chain(4));
  std::vector<TransferHandle> hs;
  for (std::size_t i = 0; i < 3; ++i) hs.push_back(p->enqueue({blocks[i]}));
  ASSERT_TRUE(eventually([&] { return p->stats().batcher_blocks == 3; }));
  EXPECT_EQ(engine->submit_count(), 0u);  // 3 < min_batch_size, no time passed
  for (auto& h : hs) EXPECT_EQ(h.status(), TransferStatus::kBatched);
  hs.push_back(p->enqueue({blocks[3]}));
  for (auto& h : hs) EXPECT_EQ(h.wait(), TransferStatus::kDone);
  ASSERT_EQ(engine->submit_count(), 1u);
  EXPECT_EQ(engine->submits()[0].size(), 4u);
}

TEST_F(PipelineFixture, FlushIntervalFlushesASmallBatch) {
  auto p = build(cfg(8, 64, 1, 10ms));
  auto blocks = test::make_registered(t.g1, chain(1));
  auto h = p->enqueue(blocks);
  ASSERT_TRUE(eventually([&] { return p->stats().batcher_blocks == 1; }));
  clock->advance(9ms);
  EXPECT_FALSE(h.wait_for(0ns));
  clock->advance(1ms);
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(engine->pairs_submitted(), 1u);
}

TEST_F(PipelineFixture, PolicyTimeoutIsApplied) {
  auto slow = std::make_shared<SlowPolicy>(clock, 60ms);
  auto blocks = test::make_registered(t.g1, chain(2));
  {
    auto c = cfg(1, 64);
    c.policy_timeout = 50ms;
    auto p = build(c, nullptr, {slow});
    auto h = p->enqueue(blocks);
    EXPECT_EQ(h.wait(), TransferStatus::kDone);
    EXPECT_EQ(h.report().count(BlockOutcome::kFiltered), 2u);
    EXPECT_EQ(metric("kvbm_offload_policy_timeouts_total", "policy", "slow"), 1);
  }
  auto p = build(cfg(1, 64), nullptr, {slow});  // the default 100 ms
  auto h = p->enqueue(blocks);
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.report().count(BlockOutcome::kTransferred), 2u);
}

TEST_F(PipelineFixture, WaitingFlushesTheBatchWithoutTheInterval) {
  auto p = build(cfg(8, 64, 1, 1h));
  auto blocks = test::make_registered(t.g1, chain(3));
  auto first = p->enqueue({blocks[0]});
  ASSERT_TRUE(eventually([&] { return p->stats().batcher_blocks == 1; }));
  EXPECT_FALSE(first.wait_for(0ns));  // a zero timeout only polls: still batched
  EXPECT_EQ(first.status(), TransferStatus::kBatched);
  EXPECT_TRUE(first.wait_for(10s));  // no clock advance, 1 < min_batch_size
  EXPECT_EQ(engine->submit_count(), 1u);
  // A waiter that comes before the container reaches the batcher counts too.
  auto event = std::make_shared<HostEvent>();
  auto second = p->enqueue({blocks[1], blocks[2]}, event);
  std::thread waiter([&] { EXPECT_EQ(second.wait(), TransferStatus::kDone); });
  ASSERT_TRUE(eventually([&] { return p->stats().waiting == 1; }));
  event->signal();
  waiter.join();
  EXPECT_EQ(engine->submit_count(), 2u);
  EXPECT_EQ(engine->submits()[1].size(), 2u);
}

TEST_F(PipelineFixture, SweepIntervalSweepsCancelledContainers) {
  auto c = cfg(8, 64);
  c.sweep_interval = 5ms;
  auto p = build(c);
  auto blocks = test::make_registered(t.g1, chain(1));
  auto h = p->enqueue(blocks);
  ASSERT_TRUE(eventually([&] { return p->stats().batcher_containers == 1; }));
  EXPECT_TRUE(h.cancel());
  EXPECT_EQ(p->stats().batcher_containers, 1u);  // still there: not swept yet
  EXPECT_EQ(p->sweeper().passes(), 0u);
  clock->advance(5ms);
  ASSERT_TRUE(p->sweeper().wait_passes(1, 10s));
  EXPECT_EQ(p->stats().batcher_containers, 0u);
  EXPECT_EQ(p->sweeper().swept(), 1u);
  EXPECT_EQ(p->sweeper().interval(), 5ms);
}

TEST_F(PipelineFixture, MaxConcurrentTransfersIsApplied) {
  for (std::size_t limit : {1u, 2u}) {
    auto engine_ = std::make_shared<FakeEngine>(true);
    auto p = build(cfg(1, 1, limit), engine_);
    auto blocks = test::make_registered(t.g1, chain(3, static_cast<std::uint32_t>(limit)));
    std::vector<TransferHandle> hs;
    for (auto& b : blocks) hs.push_back(p->enqueue({b}));
    ASSERT_TRUE(engine_->wait_submits(limit));
    ASSERT_TRUE(eventually([&] {
      const auto s = p->stats();
      return s.in_flight == limit && s.ready_batches == 3 - limit;
    }));
    EXPECT_EQ(engine_->submit_count(), limit);
    engine_->release_one();
    ASSERT_TRUE(engine_->wait_submits(limit + 1));
    engine_->release_all();
    for (auto& h : hs) {
      while (!h.wait_for(1ms)) engine_->release_all();
      EXPECT_EQ(h.status(), TransferStatus::kDone);
    }
    EXPECT_EQ(p->peak_in_flight(), limit);
    p.reset();
    registry = std::make_shared<prometheus::Registry>();
  }
}

// ---- cancellation at every stage

TEST_F(PipelineFixture, CancelBeforeThePolicy) {
  auto gate = std::make_shared<GatePolicy>();
  auto p = build(cfg(1, 64), nullptr, {gate});
  auto blocks = test::make_registered(t.g1, chain(2));
  auto first = p->enqueue({blocks[0]});
  ASSERT_TRUE(gate->wait_calls(1));  // the policy stage is busy with `first`
  auto second = p->enqueue({blocks[1]});
  EXPECT_EQ(second.status(), TransferStatus::kQueued);
  EXPECT_TRUE(second.cancel());
  gate->open();
  EXPECT_EQ(first.wait(), TransferStatus::kDone);
  EXPECT_EQ(second.status(), TransferStatus::kCancelled);
  EXPECT_EQ(engine->pairs_submitted(), 1u);
  p.reset();
  blocks.clear();
  test::expect_clean(t);
  EXPECT_EQ(test::present(t.g2, chain(2)), (std::vector<bool>{true, false}));
}

TEST_F(PipelineFixture, CancelWhileWaitingForThePrecondition) {
  auto p = build(cfg(1, 64));
  auto blocks = test::make_registered(t.g1, chain(2));
  auto event = std::make_shared<HostEvent>();
  auto h = p->enqueue(blocks, event);
  ASSERT_TRUE(eventually([&] { return p->stats().waiting == 1; }));
  EXPECT_EQ(h.status(), TransferStatus::kWaiting);
  EXPECT_TRUE(h.cancel());
  EXPECT_EQ(p->stats().waiting, 0u);
  event->signal();
  auto after = p->enqueue(test::make_registered(t.g1, {seq(0, 7)}));
  EXPECT_EQ(after.wait(), TransferStatus::kDone);
  EXPECT_EQ(engine->pairs_submitted(), 1u);  // only `after`
  p.reset();
  blocks.clear();
  test::expect_clean(t);
}

TEST_F(PipelineFixture, APreconditionHoldsTheCopyBack) {
  auto p = build(cfg(1, 64));
  auto blocks = test::make_registered(t.g1, chain(2));
  auto event = std::make_shared<HostEvent>();
  auto h = p->enqueue(blocks, event);
  ASSERT_TRUE(eventually([&] { return h.status() == TransferStatus::kWaiting; }));
  EXPECT_EQ(engine->submit_count(), 0u);
  event->signal();
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(engine->pairs_submitted(), 2u);
}

TEST_F(PipelineFixture, CancelInTheBatcher) {
  auto p = build(cfg(4, 64));
  auto blocks = test::make_registered(t.g1, chain(6));
  auto h = p->enqueue({blocks[0], blocks[1]});
  ASSERT_TRUE(eventually([&] { return h.status() == TransferStatus::kBatched; }));
  EXPECT_TRUE(h.cancel());
  auto rest = p->enqueue(std::vector<ImmutableBlock<G1>>(blocks.begin() + 2, blocks.end()));
  EXPECT_EQ(rest.wait(), TransferStatus::kDone);
  EXPECT_EQ(engine->pairs_submitted(), 4u);
  EXPECT_EQ(h.status(), TransferStatus::kCancelled);
  p.reset();
  blocks.clear();
  test::expect_clean(t);
  EXPECT_EQ(test::present(t.g2, chain(2)), std::vector<bool>(2, false));
}

TEST_F(PipelineFixture, CancelJustBeforeTheUpgrade) {
  auto p = build(cfg(2, 2), gated);
  auto blocks = test::make_registered(t.g1, chain(4));
  auto a = p->enqueue({blocks[0], blocks[1]});
  ASSERT_TRUE(gated->wait_submits(1));
  auto b = p->enqueue({blocks[2], blocks[3]});
  ASSERT_TRUE(eventually([&] { return p->stats().ready_batches == 1; }));
  EXPECT_EQ(b.status(), TransferStatus::kBatched);
  EXPECT_TRUE(b.cancel());
  EXPECT_FALSE(b.token().is_sealed());
  gated->release_all();
  EXPECT_EQ(a.wait(), TransferStatus::kDone);
  ASSERT_TRUE(eventually([&] { return p->stats().ready_batches == 0; }));
  p.reset();
  EXPECT_EQ(gated->submit_count(), 1u);
  blocks.clear();
  test::expect_clean(t);
}

TEST_F(PipelineFixture, CancelAfterTheUpgradeCompletes) {
  auto p = build(cfg(2, 2), gated);
  auto blocks = test::make_registered(t.g1, chain(2));
  auto h = p->enqueue(blocks);
  ASSERT_TRUE(gated->wait_submits(1));
  EXPECT_EQ(h.status(), TransferStatus::kTransferring);
  blocks.clear();
  EXPECT_EQ(t.g1.pool_counts().in_use, 2u);  // pinned by the transfer
  std::atomic<bool> returned{false};
  bool cancelled = true;
  std::thread canceller([&, h = h] {
    cancelled = h.cancel();
    returned = true;
  });
  ASSERT_TRUE(eventually([&] { return h.token().cancel_requested(); }));
  EXPECT_FALSE(returned);
  gated->release_all();
  canceller.join();
  EXPECT_FALSE(cancelled);
  EXPECT_EQ(h.status(), TransferStatus::kDone);
  EXPECT_EQ(test::present(t.g2, chain(2)), std::vector<bool>(2, true));
  test::expect_clean(t);  // cancel() returned: nothing pinned any more
}

// ---- blocks and the destination

TEST_F(PipelineFixture, BlocksEvictedWhileQueuedAreDiscarded) {
  auto p = build(cfg(1, 64));
  auto blocks = test::make_registered(t.g1, chain(4));
  auto event = std::make_shared<HostEvent>();
  auto h = p->enqueue(blocks, event);
  ASSERT_TRUE(eventually([&] { return h.status() == TransferStatus::kWaiting; }));
  blocks.erase(blocks.begin() + 1, blocks.end());  // seq(1..3) inactive: queued blocks don't pin
  EXPECT_EQ(t.g1.pool_counts().in_use, 1u);
  { auto all = t.g1.allocate_blocks(t.g1.available_blocks()); }  // evicts them
  event->signal();
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.report().count(BlockOutcome::kEvicted), 3u);
  EXPECT_EQ(engine->pairs_submitted(), 1u);
  EXPECT_EQ(metric("kvbm_offload_blocks_total", "outcome", "evicted"), 3);
  p.reset();
  blocks.clear();
  test::expect_clean(t);
}

TEST_F(PipelineFixture, HeldQueuedBlocksCannotBeEvictedAndAreAllCopied) {
  auto c = cfg(1, 64);
  c.hold_queued_blocks = true;
  auto p = build(c);
  auto blocks = test::make_registered(t.g1, chain(4));
  auto event = std::make_shared<HostEvent>();
  auto h = p->enqueue(blocks, event);
  ASSERT_TRUE(eventually([&] { return h.status() == TransferStatus::kWaiting; }));
  blocks.clear();  // the caller is done with them; the pipeline still holds all four
  EXPECT_EQ(t.g1.pool_counts().in_use, 4u);
  EXPECT_EQ(t.g1.pool_counts().inactive, 0u);
  EXPECT_FALSE(t.g1.allocate_blocks(t.g1.total_blocks()).has_value());  // pushes back
  { auto all = t.g1.allocate_blocks(t.g1.available_blocks()); }         // evicts none of them
  event->signal();
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.report().count(BlockOutcome::kTransferred), 4u);
  EXPECT_EQ(h.report().count(BlockOutcome::kEvicted), 0u);
  EXPECT_EQ(test::present(t.g2, chain(4)), std::vector<bool>(4, true));
  // Released once copied: back in G1's inactive pool, still matchable there.
  EXPECT_EQ(t.g1.pool_counts().in_use, 0u);
  EXPECT_EQ(test::present(t.g1, chain(4)), std::vector<bool>(4, true));
  p.reset();
  test::expect_clean(t);
}

TEST_F(PipelineFixture, CancellingReleasesHeldBlocksBeforeItReturns) {
  auto c = cfg(1, 64);
  c.hold_queued_blocks = true;
  auto p = build(c, nullptr, {std::make_shared<PresencePolicy<G2>>(t.g2.registry())});
  auto event = std::make_shared<HostEvent>();
  auto waiting = p->enqueue(test::make_registered(t.g1, chain(2)), event);
  ASSERT_TRUE(eventually([&] { return p->stats().waiting == 1; }));
  EXPECT_EQ(t.g1.pool_counts().in_use, 2u);
  EXPECT_TRUE(waiting.cancel());
  EXPECT_EQ(t.g1.pool_counts().in_use, 0u);  // nothing pinned once cancel() returns
  // Every block filtered away: released before the handle ends.
  { auto in_g2 = test::register_one(t.g2, seq(0, 3)); }
  auto filtered = p->enqueue(test::make_registered(t.g1, {seq(0, 3)}));
  EXPECT_EQ(filtered.wait(), TransferStatus::kDone);
  EXPECT_EQ(filtered.report().count(BlockOutcome::kFiltered), 1u);
  EXPECT_EQ(t.g1.pool_counts().in_use, 0u);
  p.reset();
  test::expect_clean(t);
}

// A pipeline with `space_wait` whose copy of two blocks is sealed and waits
// for room in a G2 that `full` holds entirely.
struct WaitingForRoom {
  std::optional<std::vector<MutableBlock<G2>>> full;
  std::vector<ImmutableBlock<G1>> blocks;
  std::unique_ptr<Pipeline> p;
  TransferHandle h;
};

WaitingForRoom start_waiting_for_room(PipelineFixture& f, std::chrono::nanoseconds space_wait) {
  auto c = cfg(1, 64);
  c.space_wait = space_wait;
  WaitingForRoom w;
  w.full = f.t.g2.allocate_blocks(f.t.g2.total_blocks());  // no room at all
  w.blocks = test::make_registered(f.t.g1, chain(2));
  w.p = f.build(c);
  w.h = w.p->enqueue(w.blocks);
  EXPECT_TRUE(eventually([&] { return w.h.status() == TransferStatus::kTransferring; }));
  return w;
}

TEST_F(PipelineFixture, SpaceWaitLetsACopyWaitForRoomInTheDestination) {
  auto [full, blocks, p, h] = start_waiting_for_room(*this, 10s);
  ASSERT_EQ(h.status(), TransferStatus::kTransferring);
  EXPECT_EQ(engine->submit_count(), 0u);  // waiting for room, not failed
  full.reset();
  EXPECT_EQ(h.wait(), TransferStatus::kDone);
  EXPECT_EQ(h.report().count(BlockOutcome::kTransferred), 2u);
  EXPECT_EQ(h.report().count(BlockOutcome::kNoSpace), 0u);
  p.reset();
  blocks.clear();
  test::expect_clean(t);
}

TEST_F(PipelineFixture, AWaitForRoomEndsWhenSpaceWaitPassesOnTheClock) {
  auto [full, blocks, p, h] = start_waiting_for_room(*this, 10s);
  ASSERT_EQ(h.status(), TransferStatus::kTransferring);
  // The executor takes its deadline when it starts to wait, which the test
  // cannot see: each step moves the clock past any deadline taken before it.
  bool ended = false;
  for (int step = 0; step < 100 && !ended; ++step) {
    clock->advance(10s);  // no real time needs to pass
    ended = h.wait_for(100ms);
  }
  ASSERT_TRUE(ended);
  EXPECT_EQ(h.status(), TransferStatus::kFailed);
  EXPECT_EQ(h.report().count(BlockOutcome::kNoSpace), 2u);
  EXPECT_EQ(engine->submit_count(), 0u);
  p.reset();
  full.reset();
  blocks.clear();
  test::expect_clean(t);
}

TEST_F(PipelineFixture, ShutdownEndsAWaitForRoom) {
  auto [full, blocks, p, h] = start_waiting_for_room(*this, 1h);
  ASSERT_EQ(h.status(), TransferStatus::kTransferring);
  p->shutdown();  // returns although the hour is not over
  EXPECT_EQ(h.status(), TransferStatus::kFailed);
  EXPECT_EQ(h.report().count(BlockOutcome::kNoSpace), 2u);
  p.reset();
  full.reset();
  blocks.clear();
  test::expect_clean(t);
}

TEST_F(PipelineFixture, AFullDestinationMovesWhatFits) {
  auto held = t.g2.allocate_blocks(29);  // 3 of 32 left
  auto p = build(cfg(1, 64));
  auto blocks = test::make_registered(t.g1, chain(5));
  auto h = p->enqueue(blocks);
  EXPECT_EQ(h.wait(), TransferStatus::kFailed);
  EXPECT_EQ(h.report().count(BlockOutcome::kTransferred), 3u);
  EXPECT_EQ(h.report().count(BlockOutcome::kNoSpace), 2u);
  EXPECT_EQ(h.failed_blocks().size(), 2u);
  held.reset();
  p.reset();
  blocks.clear();
  test::expect_clean(t);
}

TEST_F(PipelineFixture, AFailedCopyRegistersNothing) {
  auto p = build(cfg(1, 64));
  auto blocks = test::make_registered(t.g1, chain(3));
  engine->fail_src(blocks[0].block_id());
  engine->fail_src(blocks[2].block_id());
  auto h = p->enqueue(blocks);
  EXPECT_EQ(h.wait(), TransferStatus::kFailed);
  const auto failed = h.failed_blocks();
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_EQ(failed[0], (BlockResult{seq(0), BlockOutcome::kCopyFailed}));
  EXPECT_EQ(failed[1], (BlockResult{seq(2), BlockOutcome::kCopyFailed}));
  EXPECT_EQ(test::present(t.g2, chain(3)), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(metric("kvbm_offload_blocks_total", "outcome", "copy_failed"), 2);
  p.reset();
  blocks.clear();
  test::expect_clean(t);
}

// ---- shutdown

TEST_F(PipelineFixture, ShutdownWithWorkInFlight) {
  auto gate = std::make_shared<GatePolicy>();
  auto p = build(cfg(2, 2), gated);
  auto blocks = test::make_registered(t.g1, chain(7));
  auto event = std::make_shared<HostEvent>();
  auto flying = p->enqueue({blocks[0], blocks[1]});
  ASSERT_TRUE(gated->wait_submits(1));
  auto ready = p->enqueue({blocks[2], blocks[3]});  // waits for a transfer slot
  ASSERT_TRUE(eventually([&] { return p->stats().ready_batches == 1; }));
  auto batched = p->enqueue({blocks[4]});  // below min_batch_size
  auto waiting = p->enqueue({blocks[5]}, event);
  ASSERT_TRUE(eventually([&] {
    const auto s = p->stats();
    return s.batcher_containers == 1 && s.waiting == 1;
  }));
  blocks.clear();
  std::thread stopper([&] { p->shutdown(); });
  // Everything not committed is cancelled at once; the flying batch completes.
  EXPECT_EQ(ready.wait(), TransferStatus::kCancelled);
  EXPECT_EQ(batched.wait(), TransferStatus::kCancelled);
  EXPECT_EQ(waiting.wait(), TransferStatus::kCancelled);
  EXPECT_EQ(flying.status(), TransferStatus::kTransferring);
  gated->release_all();
  stopper.join();
  EXPECT_EQ(flying.status(), TransferStatus::kDone);
  EXPECT_EQ(p->enqueue(test::make_registered(t.g1, {seq(0, 9)})).status(),
            TransferStatus::kCancelled);
  p.reset();
  event->signal();  // after the pipeline is gone: harmless
  test::expect_clean(t);
  EXPECT_EQ(gated->submit_count(), 1u);
}

TEST_F(PipelineFixture, DestructorCancelsQueuedWork) {
  auto gate = std::make_shared<GatePolicy>();
  auto p = build(cfg(1, 64), nullptr, {gate});
  auto blocks = test::make_registered(t.g1, chain(3));
  auto first = p->enqueue({blocks[0]});
  ASSERT_TRUE(gate->wait_calls(1));
  auto queued = p->enqueue({blocks[1], blocks[2]});
  std::thread opener([&] {
    ASSERT_TRUE(eventually([&] { return queued.status() == TransferStatus::kCancelled; }));
    gate->open();
  });
  p.reset();  // cancels `queued`, waits for the policy call in progress
  opener.join();
  EXPECT_TRUE(is_terminal(first.status()));  // done or cancelled: the race with shutdown decides
  blocks.clear();
  test::expect_clean(t);
}

}  // namespace pipeline_test
}  // namespace kvbm
