#include "kvbm/offload/policy.h"

#include <algorithm>
#include <exception>
#include <utility>

#include <spdlog/spdlog.h>

#include "kvbm/logging.h"
#include "kvbm/offload/policy_evaluator.h"

namespace kvbm {

namespace {
// The hashes still passing, and their indices in `hashes`: what the next
// policy of a chain is asked about.
void gather_passing(std::span<const SequenceHash> hashes, const std::vector<bool>& pass,
                    std::vector<SequenceHash>& left, std::vector<std::size_t>& index) {
  left.clear();
  index.clear();
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (pass[i]) {
      left.push_back(hashes[i]);
      index.push_back(i);
    }
  }
}
}  // namespace

void PassAllPolicy::evaluate(std::span<const SequenceHash> hashes, std::vector<bool>& pass) {
  (void)hashes;
  (void)pass;
}

FrequencyPolicy::FrequencyPolicy(std::shared_ptr<FrequencyTracker> tracker, std::uint32_t min_count)
    : tracker_(std::move(tracker)), min_count_(min_count) {
  KVBM_CHECK(tracker_ != nullptr,
             "FrequencyPolicy needs a frequency tracker (BlockRegistry::frequency_tracker() is "
             "null: build the registry with .frequency_tracker(...))");
  KVBM_CHECK(min_count_ <= FrequencyTracker::kMaxCount, "FrequencyPolicy: min_count ", min_count_,
             " exceeds the tracker's largest count (", FrequencyTracker::kMaxCount,
             "), so no block could ever pass");
}

void FrequencyPolicy::evaluate(std::span<const SequenceHash> hashes, std::vector<bool>& pass) {
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (tracker_->estimate(hashes[i].value()) < min_count_) pass[i] = false;
  }
}

AllOfPolicy::AllOfPolicy(std::vector<std::shared_ptr<OffloadPolicy>> policies)
    : policies_(std::move(policies)) {
  for (const auto& p : policies_) KVBM_CHECK(p != nullptr, "AllOfPolicy: a member policy is null");
}

bool AllOfPolicy::cheap() const noexcept {
  return std::all_of(policies_.begin(), policies_.end(), [](const auto& p) { return p->cheap(); });
}

void AllOfPolicy::evaluate(std::span<const SequenceHash> hashes, std::vector<bool>& pass) {
  std::vector<SequenceHash> left;
  std::vector<std::size_t> index;
  for (const auto& p : policies_) {
    gather_passing(hashes, pass, left, index);
    if (left.empty()) return;
    std::vector<bool> sub(left.size(), true);
    p->evaluate(left, sub);
    for (std::size_t j = 0; j < left.size(); ++j) {
      if (!sub[j]) pass[index[j]] = false;
    }
  }
}

namespace detail {
namespace {

void flatten(const std::shared_ptr<OffloadPolicy>& p,
             std::vector<std::shared_ptr<OffloadPolicy>>& out) {
  KVBM_CHECK(p != nullptr, "PolicyEvaluator: a policy is null");
  if (const auto* all = dynamic_cast<const AllOfPolicy*>(p.get())) {
    for (const auto& m : all->policies()) flatten(m, out);
  } else {
    out.push_back(p);
  }
}

}  // namespace

PolicyChain::PolicyChain(const std::vector<std::shared_ptr<OffloadPolicy>>& policies,
                         std::chrono::nanoseconds timeout, std::shared_ptr<Clock> clock,
                         std::shared_ptr<OffloadMetrics> metrics)
    : timeout_(timeout), clock_(std::move(clock)), metrics_(std::move(metrics)) {
  KVBM_CHECK(timeout_.count() > 0, "PolicyEvaluator: policy_timeout must be positive (got ",
             timeout_.count(), " ns)");
  KVBM_CHECK(clock_ != nullptr, "PolicyEvaluator: the clock is null");
  for (const auto& p : policies) flatten(p, policies_);
  if (metrics_) {
    for (const auto& p : policies_) metric_ids_.push_back(metrics_->register_policy(p->name()));
  }
}

std::vector<bool> PolicyChain::run(std::span<const SequenceHash> hashes) {
  std::vector<bool> pass(hashes.size(), true);
  std::vector<SequenceHash> left;
  std::vector<std::size_t> index;
  for (std::size_t k = 0; k < policies_.size(); ++k) {
    gather_passing(hashes, pass, left, index);
    if (left.empty()) break;
    std::vector<bool> sub(left.size(), true);
    bool ok = true;
    const Clock::time_point start = clock_->now();
    try {
      policies_[k]->evaluate(left, sub);
    } catch (const std::exception& e) {
      ok = false;
      logger()->warn("offload policy {} threw ({}); its {} blocks count as filtered",
                     policies_[k]->name(), e.what(), left.size());
    }
    const bool timed_out = clock_->now() - start > timeout_;
    if (timed_out || !ok || sub.size() != left.size()) std::fill(sub.begin(), sub.end(), false);
    std::size_t passed = 0;
    for (std::size_t j = 0; j < left.size(); ++j) {
      if (sub[j]) {
        ++passed;
      } else {
        pass[index[j]] = false;
      }
    }
    if (metrics_) metrics_->add_policy(metric_ids_[k], passed, left.size() - passed, timed_out);
  }
  return pass;
}

}  // namespace detail
}  // namespace kvbm
