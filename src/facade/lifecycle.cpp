// src/facade/lifecycle.cpp: registration, explicit offload, drain, shutdown and
// audit of a KvBlockManager (facade/impl.h).

#include <spdlog/spdlog.h>

#include "facade/impl.h"
#include "kvbm/error.h"
#include "kvbm/logging.h"

namespace kvbm {

using facade::for_each_index;
using facade::kTierCount;

KvBlockManagerImpl::~KvBlockManagerImpl() {
  shutdown();
  if (onboarding_) onboarding_->wait_all();  // also those started after an explicit shutdown()
  // The boundaries go first, top-down, while everything they use exists.
  for_each_index<kTierCount - 1>([&](auto I) { std::get<I()>(boundaries_).reset(); });
  onboarding_.reset();  // takes its series out of the registry
}

// Every block must be a valid handle on a block of this manager's G1 pool;
// checked before anything is registered or enqueued.
template <class Block>
void KvBlockManagerImpl::check_own(const std::vector<Block>& blocks, const char* call) const {
  const auto& g1 = *std::get<0>(pools_);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    KVBM_CHECK(blocks[i].valid(), "KvBlockManager::", call, ": block ", i,
               " is a moved-from handle; pass the G1 blocks themselves");
    KVBM_CHECK(g1.owns(blocks[i]), "KvBlockManager::", call, ": block ", i, " (id ",
               blocks[i].block_id(),
               ") belongs to another manager's G1 pool, not this KvBlockManager's; pass "
               "blocks of this manager's device() pool (each manager moves only its own)");
  }
}

// As device().register_blocks (whose hook enqueues without a precondition),
// but the blocks go down with `pre`.
std::vector<ImmutableBlock<G1>> KvBlockManagerImpl::register_blocks(
    std::vector<CompleteBlock<G1>>&& blocks, std::shared_ptr<Precondition> pre,
    std::optional<std::span<const std::span<const Token>>> tokens) {
  check_own(blocks, "register_blocks");
  auto out = tokens ? std::get<0>(pools_)->register_copies(std::move(blocks), *tokens)
                    : std::get<0>(pools_)->register_copies(std::move(blocks));
  if (auto* boundary = std::get<0>(boundaries_).get()) boundary->take(out, std::move(pre));
  return out;
}

TransferHandle KvBlockManagerImpl::offload(const std::vector<ImmutableBlock<G1>>& blocks,
                                           std::shared_ptr<Precondition> pre) {
  check_own(blocks, "offload");
  auto* boundary = std::get<0>(boundaries_).get();
  if (boundary == nullptr) return {};
  return boundary->offload(blocks, std::move(pre));
}

void KvBlockManagerImpl::drain() {
  for_each_index<kTierCount - 1>([&](auto I) {
    if (auto& b = std::get<I()>(boundaries_)) b->drain();
  });
  if (remote_) remote_->drain();  // after G1 -> G2: its copies are handed on to G4
  if (onboarding_) onboarding_->wait_all();
  if (remote_) remote_->wait_fetches();  // also a cancelled onboarding's stage
}

// Pipelines top-down (the last copies of one may still enqueue into the
// next), then G4's writes (what is staged is written), then onboarding and
// G4's fetches, then the on-eviction copiers.
void KvBlockManagerImpl::shutdown() {
  {
    detail::LockGuard lock(shutdown_mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  for_each_index<kTierCount - 1>([&](auto I) {
    if (auto& b = std::get<I()>(boundaries_)) b->stop_pipelines();
  });
  if (remote_) remote_->stop_writes();
  if (onboarding_) onboarding_->wait_all();
  if (remote_) remote_->stop_fetches();
  for_each_index<kTierCount - 1>([&](auto I) {
    if (auto& b = std::get<I()>(boundaries_)) b->stop_copier();
  });
  logger()->debug("kvbm: shut down");
}

std::string KvBlockManagerImpl::audit() const {
  std::string out;
  for_each_index<kTierCount>([&](auto I) {
    const auto& pool = std::get<I()>(pools_);
    if (!pool) return;
    std::string a = pool->audit();
    if (!a.empty()) out += std::string(tier_name<facade::TierAt<I()>>()) + ": " + a + "\n";
  });
  return out;
}

}  // namespace kvbm
