#include "kvbm/offload/offload_metrics.h"

#include <array>
#include <deque>
#include <mutex>
#include <utility>

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include "kvbm/detail/series_set.h"

namespace kvbm {
namespace {

constexpr std::array kOutcomes = {BlockOutcome::kTransferred, BlockOutcome::kAlreadyPresent,
                                  BlockOutcome::kFiltered,    BlockOutcome::kEvicted,
                                  BlockOutcome::kNoSpace,     BlockOutcome::kCopyFailed};

}  // namespace

struct OffloadMetrics::Series {
  Series(std::shared_ptr<prometheus::Registry> r, std::string p)
      : pipeline(std::move(p)),
        set(std::move(r), {{"pipeline", pipeline}}, "OffloadMetrics",
            "give each pipeline that shares a registry its own name") {}

  std::string pipeline;
  detail::SeriesSet set;  // guarded by mu once constructed (register_policy adds to it)

  prometheus::Counter* enqueued = nullptr;
  std::array<prometheus::Counter*, kOutcomes.size()> blocks{};
  prometheus::Counter* cancelled = nullptr;
  prometheus::Counter* batches = nullptr;

  struct Policy {
    std::string name;
    prometheus::Counter* passed;
    prometheus::Counter* filtered;
    prometheus::Counter* timeouts;
  };
  std::mutex mu;                // guards policies' growth and set
  std::deque<Policy> policies;  // stable addresses; guarded by mu for insertion
};

OffloadMetrics::OffloadMetrics(std::shared_ptr<prometheus::Registry> registry,
                               std::string_view pipeline)
    : s_(std::make_unique<Series>(std::move(registry), std::string(pipeline))) {
  auto& s = *s_;
  s.enqueued =
      s.set.counter("kvbm_offload_enqueued_blocks_total", "Blocks handed to the offload pipeline");
  for (std::size_t i = 0; i < kOutcomes.size(); ++i) {
    s.blocks[i] = s.set.counter("kvbm_offload_blocks_total",
                                "Blocks that left the offload pipeline, by outcome",
                                {{"outcome", std::string(to_string(kOutcomes[i]))}});
  }
  s.cancelled = s.set.counter("kvbm_offload_cancelled_containers_total",
                              "Offload containers cancelled before the commitment point");
  s.batches =
      s.set.counter("kvbm_offload_batches_total", "Offload batches handed to the transfer engine");
}

OffloadCounts OffloadMetrics::counts() const noexcept {
  const auto& s = *s_;
  auto value = [](const prometheus::Counter* c) { return static_cast<std::uint64_t>(c->Value()); };
  auto outcome = [&](BlockOutcome o) {
    for (std::size_t i = 0; i < kOutcomes.size(); ++i) {
      if (kOutcomes[i] == o) return value(s.blocks[i]);
    }
    return std::uint64_t{0};
  };
  OffloadCounts c;
  c.enqueued = value(s.enqueued);
  c.transferred = outcome(BlockOutcome::kTransferred);
  c.already_present = outcome(BlockOutcome::kAlreadyPresent);
  c.filtered = outcome(BlockOutcome::kFiltered);
  c.evicted = outcome(BlockOutcome::kEvicted);
  c.no_space = outcome(BlockOutcome::kNoSpace);
  c.copy_failed = outcome(BlockOutcome::kCopyFailed);
  c.cancelled_containers = value(s.cancelled);
  c.batches = value(s.batches);
  return c;
}

OffloadMetrics::~OffloadMetrics() = default;

std::size_t OffloadMetrics::register_policy(std::string_view policy) {
  auto& s = *s_;
  std::lock_guard lock(s.mu);
  for (std::size_t i = 0; i < s.policies.size(); ++i) {
    if (s.policies[i].name == policy) return i;
  }
  const detail::SeriesSet::Labels labels{{"policy", std::string(policy)}};
  s.policies.push_back(
      Series::Policy{std::string(policy),
                     s.set.counter("kvbm_offload_policy_passed_blocks_total",
                                   "Blocks an offload policy let through", labels),
                     s.set.counter("kvbm_offload_policy_filtered_blocks_total",
                                   "Blocks an offload policy filtered (timeouts included)", labels),
                     s.set.counter("kvbm_offload_policy_timeouts_total",
                                   "Offload policy calls that exceeded policy_timeout", labels)});
  return s.policies.size() - 1;
}

void OffloadMetrics::add_policy(std::size_t index, std::uint64_t passed, std::uint64_t filtered,
                                bool timed_out) noexcept {
  Series::Policy* p = nullptr;
  {
    std::lock_guard lock(s_->mu);
    if (index >= s_->policies.size()) return;
    p = &s_->policies[index];
  }
  if (passed != 0) p->passed->Increment(static_cast<double>(passed));
  if (filtered != 0) p->filtered->Increment(static_cast<double>(filtered));
  if (timed_out) p->timeouts->Increment();
}

void OffloadMetrics::add_blocks(BlockOutcome o, std::uint64_t n) noexcept {
  const auto i = static_cast<std::size_t>(o);
  if (n != 0 && i < s_->blocks.size()) s_->blocks[i]->Increment(static_cast<double>(n));
}

void OffloadMetrics::add_enqueued(std::uint64_t blocks) noexcept {
  if (blocks != 0) s_->enqueued->Increment(static_cast<double>(blocks));
}
void OffloadMetrics::add_cancelled() noexcept { s_->cancelled->Increment(); }
void OffloadMetrics::add_batch() noexcept { s_->batches->Increment(); }

const std::shared_ptr<prometheus::Registry>& OffloadMetrics::registry() const noexcept {
  return s_->set.registry();
}
const std::string& OffloadMetrics::pipeline() const noexcept { return s_->pipeline; }

}  // namespace kvbm
