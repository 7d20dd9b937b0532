// src/facade/kv_block_manager.cpp: the public KvBlockManager, forwarding to its
// parts (facade/impl.h lists them).

#include "kvbm/kv_block_manager.h"

#include "facade/impl.h"
#include "facade/stats.h"
#include "kvbm/error.h"

namespace kvbm {

std::unique_ptr<KvBlockManager> KvBlockManager::build(KvBlockManagerConfig config) {
  auto impl = std::make_unique<KvBlockManagerImpl>(std::move(config));
  impl->build();
  return std::unique_ptr<KvBlockManager>(new KvBlockManager(std::move(impl)));
}

KvBlockManager::KvBlockManager(std::unique_ptr<KvBlockManagerImpl> impl) : impl_(std::move(impl)) {}
KvBlockManager::~KvBlockManager() {
  if (impl_) impl_->shutdown();
}

template <PooledTier T>
BlockManager<T>* KvBlockManager::pool() noexcept {
  return impl_->pool<T>();
}
template BlockManager<G1>* KvBlockManager::pool<G1>() noexcept;
template BlockManager<G2>* KvBlockManager::pool<G2>() noexcept;
template BlockManager<G3>* KvBlockManager::pool<G3>() noexcept;
const KvBlockManagerConfig& KvBlockManager::config() const noexcept { return impl_->config_; }
bool KvBlockManager::has_tier(TierId t) const noexcept { return impl_->rows_[t] != nullptr; }
std::uint32_t KvBlockManager::block_size() const noexcept {
  return impl_->config_.layout.page_size;
}
std::size_t KvBlockManager::block_bytes() const noexcept {
  return impl_->config_.layout.block_bytes();
}
bool KvBlockManager::device_emulated() const noexcept {
  return impl_->memory_[TierId::kG1].emulated;
}
const Layout& KvBlockManager::device_layout() const noexcept {
  return *impl_->memory_[TierId::kG1].layout;
}
const Layout& KvBlockManager::host_layout() const {
  KVBM_CHECK(impl_->pool<G2>() != nullptr, "host_layout: this KvBlockManager has no host tier");
  return *impl_->memory_[TierId::kG2].layout;
}
const std::shared_ptr<prometheus::Registry>& KvBlockManager::metrics_registry() const noexcept {
  return impl_->config_.metrics_registry;
}
std::vector<ImmutableBlock<G1>> KvBlockManager::register_blocks(
    std::vector<CompleteBlock<G1>>&& blocks, std::shared_ptr<Precondition> forward_pass_done) {
  return impl_->register_blocks(std::move(blocks), std::move(forward_pass_done));
}
std::vector<ImmutableBlock<G1>> KvBlockManager::register_blocks(
    std::vector<CompleteBlock<G1>>&& blocks, std::span<const std::span<const Token>> tokens,
    std::shared_ptr<Precondition> forward_pass_done) {
  return impl_->register_blocks(std::move(blocks), std::move(forward_pass_done), tokens);
}
TransferHandle KvBlockManager::offload(const std::vector<ImmutableBlock<G1>>& blocks,
                                       std::shared_ptr<Precondition> forward_pass_done) {
  return impl_->offload(blocks, std::move(forward_pass_done));
}
OnboardHandle KvBlockManager::onboard(std::span<const SequenceHash> hashes) {
  return impl_->onboarding_->onboard(hashes);
}
OnboardHandle KvBlockManager::onboard(std::span<const SequenceHash> hashes,
                                      const OnboardOptions& options) {
  const Clock::time_point asked = impl_->config_.clock->now();  // the deadline counts from here
  return impl_->onboarding_->onboard(hashes, impl_->onboarding_->plan(hashes, options), asked);
}
OnboardPlan KvBlockManager::plan_onboard(std::span<const SequenceHash> hashes,
                                         const OnboardOptions& options) const {
  return impl_->onboarding_->plan(hashes, options);
}
OnboardCounts KvBlockManager::probe(std::span<const SequenceHash> hashes) const {
  return impl_->onboarding_->probe(hashes);
}
std::vector<std::optional<TierId>> KvBlockManager::locate(
    std::span<const SequenceHash> hashes) const {
  return impl_->onboarding_->locate(hashes);
}
void KvBlockManager::drain() { impl_->drain(); }
void KvBlockManager::shutdown() { impl_->shutdown(); }
std::string KvBlockManager::audit() const { return impl_->audit(); }
KvBlockManagerStats KvBlockManager::stats() const { return facade::collect_stats(*impl_); }
TransferCosts KvBlockManager::transfer_costs() const { return impl_->costs_->snapshot(); }
void KvBlockManager::report_prefill(std::size_t tokens,
                                    std::chrono::nanoseconds duration) noexcept {
  impl_->costs_->report_prefill(tokens, duration);
}
std::optional<RecoverySummary> KvBlockManager::disk_recovery() const {
  return impl_->disk_recovery();
}

}  // namespace kvbm
