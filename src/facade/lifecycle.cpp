// src/facade/lifecycle.cpp: registration, explicit offload, drain, shutdown and
// audit of a KvBlockManager (facade/impl.h).

#include <spdlog/spdlog.h>

#include "facade/impl.h"
#include "kvbm/error.h"
#include "kvbm/logging.h"

namespace kvbm {

KvBlockManagerImpl::~KvBlockManagerImpl() {
  shutdown();
  if (onboarding_) onboarding_->wait_all();  // also those started after an explicit shutdown()
  // The boundaries go first, top-down, while everything they use exists.
  for (const TierId t : kTierIds) {
    if (auto& row = rows_[t]) row->drop_boundaries();
  }
  onboarding_.reset();  // takes its series out of the registry
}

// Every block must be a valid handle on a block of this manager's G1 pool;
// checked before anything is registered or enqueued.
template <class Block>
void KvBlockManagerImpl::check_own(const std::vector<Block>& blocks, const char* call) const {
  const auto& g1 = *pool<G1>();
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
  auto& row = g1();
  auto out = tokens ? row.pool().register_copies(std::move(blocks), *tokens)
                    : row.pool().register_copies(std::move(blocks));
  row.pass_down(out, std::move(pre));
  return out;
}

TransferHandle KvBlockManagerImpl::offload(const std::vector<ImmutableBlock<G1>>& blocks,
                                           std::shared_ptr<Precondition> pre) {
  check_own(blocks, "offload");
  return g1().offload(blocks, std::move(pre));
}

// Top-down: the copies of one boundary may be handed on to the next.
void KvBlockManagerImpl::drain() {
  for (const TierId t : kTierIds) {
    if (auto& row = rows_[t]) row->drain();
  }
  if (onboarding_) onboarding_->wait_all();
}

// Pipelines top-down (the last copies of one may still enqueue into the
// next; a remote tier's writer writes what is staged), then onboarding and
// its remote stage, then the on-eviction copiers.
void KvBlockManagerImpl::shutdown() {
  {
    detail::LockGuard lock(shutdown_mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  for (const TierId t : kTierIds) {
    if (auto& row = rows_[t]) row->stop_pipelines();
  }
  if (onboarding_) {
    onboarding_->wait_all();
    onboarding_->stop();
  }
  for (const TierId t : kTierIds) {
    if (auto& row = rows_[t]) row->stop_copiers();
  }
  logger()->debug("kvbm: shut down");
}

std::string KvBlockManagerImpl::audit() const {
  std::string out;
  for (const TierId t : kTierIds) {
    if (const auto& row = rows_[t]) out += row->audit();
  }
  return out;
}

}  // namespace kvbm
