// kvbm/offload/policy_evaluator.h: the first pipeline stage.
//
// The PolicyEvaluator filters each container's blocks through its policies
// (kvbm/offload/policy.h), in order; every policy sees only the blocks the
// previous ones passed. AllOfPolicy members are flattened into the list. A
// policy call that takes longer than `policy_timeout` on the clock, or
// throws, filters every block it was asked about. Filtered blocks are
// recorded in the container's report (BlockOutcome::kFiltered) and removed
// from it. With no policy at all, everything passes.
//
// Metrics: for each policy name, blocks passed and filtered and calls timed
// out (OffloadMetrics).
//
// Thread-safety: evaluate() must not be called concurrently.

#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "kvbm/clock.h"
#include "kvbm/offload/container.h"
#include "kvbm/offload/offload_metrics.h"
#include "kvbm/offload/policy.h"

namespace kvbm {

namespace detail {

/// The untyped core of PolicyEvaluator: runs the policies over hashes.
class PolicyChain {
 public:
  PolicyChain(const std::vector<std::shared_ptr<OffloadPolicy>>& policies,
              std::chrono::nanoseconds timeout, std::shared_ptr<Clock> clock,
              std::shared_ptr<OffloadMetrics> metrics);
  /// Returns, for each hash, whether every policy passed it.
  [[nodiscard]] std::vector<bool> run(std::span<const SequenceHash> hashes);
  [[nodiscard]] const std::vector<std::shared_ptr<OffloadPolicy>>& policies() const noexcept {
    return policies_;
  }

 private:
  std::vector<std::shared_ptr<OffloadPolicy>> policies_;  // flattened
  std::vector<std::size_t> metric_ids_;
  std::chrono::nanoseconds timeout_;
  std::shared_ptr<Clock> clock_;
  std::shared_ptr<OffloadMetrics> metrics_;
};

}  // namespace detail

/// Filters containers through policies; see the file comment.
template <TierMarker Src>
class PolicyEvaluator {
 public:
  /// Throws UsageError when a policy or the clock is null or the timeout is
  /// not positive. `metrics` may be null.
  PolicyEvaluator(const std::vector<std::shared_ptr<OffloadPolicy>>& policies,
                  std::chrono::nanoseconds policy_timeout, std::shared_ptr<Clock> clock,
                  std::shared_ptr<OffloadMetrics> metrics = nullptr)
      : chain_(policies, policy_timeout, std::move(clock), std::move(metrics)) {}

  /// Removes the filtered blocks from `c`, recording them in its report;
  /// returns true when blocks remain.
  bool evaluate(OffloadContainer<Src>& c) {
    if (c.blocks.empty()) return false;
    std::vector<SequenceHash> hashes;
    hashes.reserve(c.blocks.size());
    for (const auto& b : c.blocks) hashes.push_back(b.sequence_hash());
    const std::vector<bool> pass = chain_.run(hashes);
    std::vector<WeakBlock<Src>> kept;
    kept.reserve(c.blocks.size());
    for (std::size_t i = 0; i < c.blocks.size(); ++i) {
      if (pass[i]) {
        kept.push_back(std::move(c.blocks[i]));
      } else {
        c.state->add_result(hashes[i], BlockOutcome::kFiltered);
      }
    }
    c.blocks = std::move(kept);
    return !c.blocks.empty();
  }

  /// Returns the policies, AllOf members flattened.
  [[nodiscard]] const std::vector<std::shared_ptr<OffloadPolicy>>& policies() const noexcept {
    return chain_.policies();
  }

 private:
  detail::PolicyChain chain_;
};

}  // namespace kvbm
