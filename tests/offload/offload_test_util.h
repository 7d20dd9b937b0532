// tests/offload/offload_test_util.h: helpers shared by the offload tests.
//
//   SlowPolicy        a policy that advances a ManualClock per call
//   FakeEngine        a TransferEngine that copies nothing: completes at once
//                     or when released (gated), fails chosen source blocks,
//                     or refuses batches; records every submit
//   Tiers             a G1 and a G2 manager sharing a registry with a
//                     frequency tracker
//   expect_clean(t)   both pools balanced and nothing held

#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "kvbm/block_manager.h"
#include "kvbm/offload/offload.h"
#include "kvbm/transfer/transfer_engine.h"
#include "test_util.h"

namespace kvbm::test {

/// A TransferEngine that moves no bytes; see the file comment.
class FakeEngine final : public TransferEngine {
 public:
  /// When `gated`, completions wait for release(); else they complete inside submit().
  explicit FakeEngine(bool gated = false) : gated_(gated) {}
  ~FakeEngine() override { release_all(); }

  [[nodiscard]] std::string_view name() const noexcept override { return "fake"; }

  std::shared_ptr<TransferCompletion> submit(std::span<const TransferPair> pairs) override {
    auto completion = std::make_shared<TransferCompletion>();
    TransferOutcome outcome;
    {
      std::lock_guard lock(mu_);
      if (refuse_) throw UsageError("fake engine refuses");
      submits_.emplace_back(pairs.begin(), pairs.end());
      for (std::size_t i = 0; i < pairs.size(); ++i) {
        if (fail_src_.count(pairs[i].src) != 0) outcome.failed.push_back(i);
      }
      if (!outcome.failed.empty()) outcome.error = TransferError{ErrorKind::kIo, 0, "fake failure"};
      if (gated_) pending_.push_back({completion, outcome});
    }
    cv_.notify_all();
    if (!gated_) completion->complete(std::move(outcome));
    return completion;
  }

  /// Makes every pair whose source block is `src` fail.
  void fail_src(BlockId src) {
    std::lock_guard lock(mu_);
    fail_src_.insert(src);
  }
  /// Makes submit() throw.
  void refuse(bool r) {
    std::lock_guard lock(mu_);
    refuse_ = r;
  }
  /// Completes the oldest pending batch (gated mode); returns false if none.
  bool release_one() {
    Pending p;
    {
      std::lock_guard lock(mu_);
      if (pending_.empty()) return false;
      p = std::move(pending_.front());
      pending_.erase(pending_.begin());
    }
    p.completion->complete(std::move(p.outcome));
    return true;
  }
  /// Completes every pending batch.
  void release_all() {
    while (release_one()) {
    }
  }
  /// Waits (up to 10 s) until at least `n` submits happened.
  bool wait_submits(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return submits_.size() >= n; });
  }
  [[nodiscard]] std::size_t pending() const {
    std::lock_guard lock(mu_);
    return pending_.size();
  }
  [[nodiscard]] std::vector<std::vector<TransferPair>> submits() const {
    std::lock_guard lock(mu_);
    return submits_;
  }
  [[nodiscard]] std::size_t submit_count() const {
    std::lock_guard lock(mu_);
    return submits_.size();
  }
  [[nodiscard]] std::size_t pairs_submitted() const {
    std::lock_guard lock(mu_);
    std::size_t n = 0;
    for (const auto& s : submits_) n += s.size();
    return n;
  }

 private:
  struct Pending {
    std::shared_ptr<TransferCompletion> completion;
    TransferOutcome outcome;
  };
  const bool gated_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool refuse_ = false;
  std::set<BlockId> fail_src_;
  std::vector<Pending> pending_;
  std::vector<std::vector<TransferPair>> submits_;
};

/// A G1 and a G2 pool of the same block size sharing one registry.
struct Tiers {
  std::shared_ptr<FrequencyTracker> tracker = std::make_shared<FrequencyTracker>(1024);
  std::shared_ptr<BlockRegistry> registry =
      BlockRegistry::builder().frequency_tracker(tracker).build();
  BlockManager<G1> g1;
  BlockManager<G2> g2;

  explicit Tiers(std::size_t g1_blocks = 64, std::size_t g2_blocks = 64,
                 DuplicatePolicy dup = DuplicatePolicy::kReject)
      : g1(BlockManager<G1>::builder()
               .block_count(g1_blocks)
               .block_size(4)
               .registry(registry)
               .metrics_registry(std::make_shared<prometheus::Registry>())
               .build()),
        g2(BlockManager<G2>::builder()
               .block_count(g2_blocks)
               .block_size(4)
               .registry(registry)
               .duplicate_policy(dup)
               .metrics_registry(std::make_shared<prometheus::Registry>())
               .build()) {}
};

/// Waits for `pred` to hold, yielding; fails after 10 s.
/// A policy that advances the manual clock by `cost` per call and passes everything.
class SlowPolicy final : public OffloadPolicy {
 public:
  SlowPolicy(std::shared_ptr<ManualClock> clock, std::chrono::nanoseconds cost)
      : clock_(std::move(clock)), cost_(cost) {}
  std::string_view name() const noexcept override { return "slow"; }
  void evaluate(std::span<const SequenceHash>, std::vector<bool>&) override {
    clock_->advance(cost_);
  }

 private:
  std::shared_ptr<ManualClock> clock_;
  std::chrono::nanoseconds cost_;
};

/// Both pools balanced, and no block of either held by anyone.
inline void expect_clean(const Tiers& t) {
  expect_balanced(t.g1);
  expect_balanced(t.g2);
  EXPECT_EQ(t.g1.pool_counts().in_use, 0u) << "a G1 block is still held";
  EXPECT_EQ(t.g2.pool_counts().in_use, 0u) << "a G2 block is still held";
}

/// Returns the value of `name` with label pipeline=`pipeline` and, when
/// given, `label`=`value`; nullopt when absent.
inline std::optional<double> offload_metric(prometheus::Registry& registry, std::string_view name,
                                            std::string_view pipeline, std::string_view label = {},
                                            std::string_view value = {}) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric) {
      bool p = false;
      bool l = label.empty();
      for (const auto& lab : metric.label) {
        if (lab.name == "pipeline" && lab.value == pipeline) p = true;
        if (!label.empty() && lab.name == label && lab.value == value) l = true;
      }
      if (p && l) return metric.counter.value;
    }
  }
  return std::nullopt;
}

}  // namespace kvbm::test
