// KvBlockManager: builds and wires the tiers, engines, pipelines and onboarding.

#include "kvbm/kv_block_manager.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>

#include "kvbm/disk/disk_engine.h"
#include "kvbm/error.h"
#include "kvbm/frequency_tracker.h"
#include "kvbm/logging.h"
#include "kvbm/offload/offload_metrics.h"
#include "kvbm/offload/pipeline.h"
#include "kvbm/offload/policy.h"
#include "kvbm/storage/storage.h"
#include "kvbm/transfer/bounce_engine.h"
#include "kvbm/transfer/cuda_engine.h"
#include "kvbm/transfer/host_engine.h"
#include "kv_block_manager_config.h"

namespace kvbm {

std::string_view to_string(OffloadMode m) noexcept {
  switch (m) {
    case OffloadMode::kNone: return "none";
    case OffloadMode::kWriteThrough: return "write_through";
    case OffloadMode::kOnEviction: return "on_eviction";
  }
  return "unknown";
}

OffloadMode parse_offload_mode(std::string_view name) {
  for (const auto m : {OffloadMode::kNone, OffloadMode::kWriteThrough, OffloadMode::kOnEviction}) {
    if (to_string(m) == name) return m;
  }
  KVBM_CHECK(false, "unknown offload mode '", name, "'; use none, write_through or on_eviction");
  return OffloadMode::kNone;
}

namespace {

// Completes every batch at once without touching memory (metadata only).
class NullEngine final : public TransferEngine {
 public:
  NullEngine(std::string name, std::size_t src_blocks, std::size_t dst_blocks)
      : name_(std::move(name)), src_blocks_(src_blocks), dst_blocks_(dst_blocks) {}
  [[nodiscard]] std::string_view name() const noexcept override { return name_; }
  [[nodiscard]] std::shared_ptr<TransferCompletion> submit(
      std::span<const TransferPair> pairs) override {
    KVBM_CHECK(!pairs.empty(), name_, ": an empty batch");
    for (const auto& p : pairs) {
      KVBM_CHECK(p.src < src_blocks_ && p.dst < dst_blocks_, name_, ": block id out of range");
    }
    auto c = std::make_shared<TransferCompletion>();
    c->complete({});
    return c;
  }

 private:
  std::string name_;
  std::size_t src_blocks_, dst_blocks_;
};

// The per-(layer, outer) bases of a layer-separated layout over one allocation.
Layout make_layout(const LayoutConfig& lc, LayoutKind kind, std::size_t blocks,
                   std::uintptr_t base) {
  if (kind == LayoutKind::kFullyContiguous) return Layout::fully_contiguous(lc, blocks, base);
  std::vector<std::uintptr_t> bases(lc.regions_per_block());
  const std::size_t per_base = blocks * lc.region_bytes();
  for (std::size_t i = 0; i < bases.size(); ++i) bases[i] = base + i * per_base;
  return Layout::layer_separated(lc, blocks, std::move(bases));
}

}  // namespace

// Copies the blocks an upper pool evicts into the pool below, synchronously
// (the on-eviction mode). Disabled at shutdown.
template <TierMarker Src, TierMarker Dst>
class EvictionOffloader final : public PoolListener {
 public:
  using Registered = std::function<void(std::vector<ImmutableBlock<Dst>>&&)>;
  void bind(BlockManager<Dst>* dst, std::shared_ptr<TransferEngine> engine,
            std::shared_ptr<OffloadMetrics> metrics, std::vector<std::shared_ptr<OffloadPolicy>> policies,
            Registered on_registered = {}) {
    dst_ = dst;
    engine_ = std::move(engine);
    metrics_ = std::move(metrics);
    policies_ = std::move(policies);
    on_registered_ = std::move(on_registered);
    enabled_.store(true, std::memory_order_release);
  }
  void disable() noexcept {
    std::lock_guard lock(mu_);  // waits for a copy in progress
    enabled_.store(false, std::memory_order_release);
    engine_.reset();
    on_registered_ = nullptr;
    dst_ = nullptr;
    metrics_.reset();  // its series leave the registry now, not with the pool's last block
  }

  void on_evicting(std::span<const EvictedBlock> blocks) noexcept override {
    if (!enabled_.load(std::memory_order_acquire)) return;
    std::lock_guard lock(mu_);
    if (!enabled_.load(std::memory_order_relaxed)) return;
    try {
      copy(blocks);
    } catch (const std::exception& e) {
      logger()->error("on-eviction offload {}_to_{} failed: {}", tier_name<Src>(),
                      tier_name<Dst>(), e.what());
      metrics_->add_blocks(BlockOutcome::kCopyFailed, blocks.size());
    }
  }

 private:
  // One batch per eviction, in eviction order: the blocks the tier below
  // already holds are not copied, but their copies there are refreshed (moved
  // to the most-recent end, in eviction order: they were in use above until
  // now); then room is allocated below for the others at once (which may
  // evict there, and copy on down), the batch is copied, and the new copies
  // are registered in eviction order, more recent than the refreshed ones.
  void copy(std::span<const EvictedBlock> blocks) {
    metrics_->add_enqueued(blocks.size());
    std::vector<SequenceHash> hashes;
    hashes.reserve(blocks.size());
    for (const auto& b : blocks) hashes.push_back(b.hash);
    std::vector<std::size_t> todo;
    {
      std::vector<ImmutableBlock<Dst>> held = dst_->scan_matches(hashes);
      std::size_t next = 0;
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        if (next < held.size() && held[next].sequence_hash().value() == blocks[i].hash.value()) {
          ++next;
        } else {
          todo.push_back(i);
        }
      }
      for (auto& b : held) ImmutableBlock<Dst> release = std::move(b);  // in order: most recent last
    }
    metrics_->add_blocks(BlockOutcome::kAlreadyPresent, blocks.size() - todo.size());
    filter(blocks, todo);
    if (todo.empty()) return;
    auto dst = dst_->allocate_at_most(todo.size());
    const std::size_t got = dst.size();
    metrics_->add_blocks(BlockOutcome::kNoSpace, todo.size() - got);
    if (got == 0) return;
    std::vector<TransferPair> pairs(got);
    for (std::size_t i = 0; i < got; ++i) {
      pairs[i] = {blocks[todo[i]].id, dst[i].block_id(), blocks[todo[i]].hash.value()};
    }
    metrics_->add_batch();
    const TransferOutcome outcome = engine_->submit(pairs)->wait();
    std::vector<bool> failed(got, false);
    for (const auto k : outcome.failed) failed[k] = true;
    std::size_t copied = 0;
    std::vector<ImmutableBlock<Dst>> registered;
    for (std::size_t i = 0; i < got; ++i) {
      if (failed[i]) continue;
      auto staged = std::move(dst[i]).stage(blocks[todo[i]].hash, dst_->block_size());
      if (!staged.ok()) continue;
      auto r = dst_->register_block(std::move(staged).value());
      if (on_registered_) registered.push_back(std::move(r));
      ++copied;
    }
    if (on_registered_ && !registered.empty()) on_registered_(std::move(registered));
    metrics_->add_blocks(BlockOutcome::kTransferred, copied);
    metrics_->add_blocks(BlockOutcome::kCopyFailed, got - copied);
    if (!outcome.ok()) {
      logger()->warn("on-eviction offload {}_to_{}: {} of {} copies failed: {}", tier_name<Src>(),
                     tier_name<Dst>(), got - copied, got, outcome.error);
    }
  }

  // Applies the boundary's policies (e.g. a minimum frequency) to the blocks
  // still to copy; the others are counted as filtered and dropped.
  void filter(std::span<const EvictedBlock> blocks, std::vector<std::size_t>& todo) {
    if (policies_.empty() || todo.empty()) return;
    std::vector<SequenceHash> hashes;
    hashes.reserve(todo.size());
    for (const auto i : todo) hashes.push_back(blocks[i].hash);
    std::vector<bool> pass(todo.size(), true);
    for (const auto& p : policies_) p->evaluate(hashes, pass);
    std::size_t kept = 0;
    for (std::size_t k = 0; k < todo.size(); ++k) {
      if (pass[k]) todo[kept++] = todo[k];
    }
    metrics_->add_blocks(BlockOutcome::kFiltered, todo.size() - kept);
    todo.resize(kept);
  }

  std::mutex mu_;  // one on-eviction copy at a time per boundary
  std::atomic<bool> enabled_{false};
  BlockManager<Dst>* dst_ = nullptr;
  std::shared_ptr<TransferEngine> engine_;
  std::shared_ptr<OffloadMetrics> metrics_;
  std::vector<std::shared_ptr<OffloadPolicy>> policies_;
  Registered on_registered_;  // e.g. the next tier's write-through pipeline
};

namespace detail {

// One onboarding: the G1 hits, the sources below G1 and their G1 targets.
class OnboardState {
 public:
  struct Counters {
    prometheus::Counter* from_device = nullptr;
    prometheus::Counter* from_host = nullptr;
    prometheus::Counter* from_disk = nullptr;
    prometheus::Counter* failed = nullptr;
    prometheus::Counter* cancelled = nullptr;
  };

  std::vector<std::uint8_t> walk;                // per prefix position: the tier it comes from (1, 2 or 3)
  std::vector<ImmutableBlock<G1>> hits;          // the G1 positions' blocks, in order
  std::vector<SequenceHash> below_hashes;        // the G2 and G3 positions' hashes, in order
  std::vector<std::uint8_t> below_tier;          // 2 or 3, per below position
  std::vector<ImmutableBlock<G2>> host_src;      // in order of their positions
  std::vector<ImmutableBlock<G3>> disk_src;
  std::vector<MutableBlock<G1>> targets;         // per below position
  BlockManager<G1>* g1 = nullptr;
  Counters counters;

  void start_pending(std::size_t n) { pending_ = n; }

  // Records one engine batch's outcome; `positions` maps batch index to below position.
  void on_batch(const TransferOutcome& o, const std::vector<std::size_t>& positions) noexcept {
    bool last = false;
    {
      std::lock_guard lock(mu_);
      if (failed_.size() < below_hashes.size()) failed_.resize(below_hashes.size(), false);
      for (const auto k : o.failed) {
        if (k < positions.size()) failed_[positions[k]] = true;
      }
      if (!o.ok() && error_.empty()) error_ = o.error.empty() ? "copy failed" : o.error;
      last = --pending_ == 0;
    }
    if (last) finish();
  }

  // Ends the onboarding (when every copy is back, or at once when none ran).
  void finish() noexcept {
    std::unique_lock lock(mu_);
    failed_.resize(below_hashes.size(), false);
    if (cancel_requested_) {
      lock.unlock();
      release_all();
      lock.lock();
      status_ = TransferStatus::kCancelled;
      if (counters.cancelled) counters.cancelled->Increment();
      cv_.notify_all();
      return;
    }
    const bool any_failed = std::find(failed_.begin(), failed_.end(), true) != failed_.end();
    lock.unlock();
    // Every copy that arrived is registered (it is a valid G1 block); the
    // prefix handed back ends before the first copy that did not.
    std::vector<std::optional<ImmutableBlock<G1>>> arrived(targets.size());
    OnboardCounts c;
    c.no_space = no_space_;
    for (std::size_t i = 0; i < targets.size(); ++i) {
      if (failed_[i]) {
        ++c.failed;
        continue;  // the target goes back to the reset pool
      }
      try {
        auto staged = std::move(targets[i]).stage(below_hashes[i], g1->block_size());
        if (!staged.ok()) {
          ++c.failed;
          continue;
        }
        arrived[i] = g1->register_block(std::move(staged).value());
      } catch (...) {
        ++c.failed;
      }
    }
    std::vector<ImmutableBlock<G1>> out;
    std::vector<TierId> sources;
    out.reserve(walk.size());
    sources.reserve(walk.size());
    std::size_t next_hit = 0, next_below = 0;
    for (const std::uint8_t tier : walk) {
      if (tier == 1) {
        out.push_back(std::move(hits[next_hit++]));
        sources.push_back(TierId::kG1);
        ++c.device;
        continue;
      }
      auto& copy = arrived[next_below++];
      if (!copy) break;
      out.push_back(std::move(*copy));
      sources.push_back(tier == 2 ? TierId::kG2 : TierId::kG3);
      (tier == 2 ? c.host : c.disk)++;
    }
    hits.clear();
    arrived.clear();
    targets.clear();
    host_src.clear();
    disk_src.clear();
    if (counters.from_device) {
      counters.from_device->Increment(static_cast<double>(c.device));
      counters.from_host->Increment(static_cast<double>(c.host));
      counters.from_disk->Increment(static_cast<double>(c.disk));
      counters.failed->Increment(static_cast<double>(c.failed));
    }
    lock.lock();
    if (cancel_requested_) {  // cancelled while the copies were registered
      lock.unlock();
      out.clear();
      lock.lock();
      status_ = TransferStatus::kCancelled;
      if (counters.cancelled) counters.cancelled->Increment();
      cv_.notify_all();
      return;
    }
    counts_ = c;
    sources_ = std::move(sources);
    blocks_ = std::move(out);
    status_ = any_failed ? TransferStatus::kFailed : TransferStatus::kDone;
    cv_.notify_all();
  }

  void set_no_space(std::size_t n) { no_space_ = n; }

  TransferStatus status() const {
    std::lock_guard lock(mu_);
    return status_;
  }
  TransferStatus wait() const {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return is_terminal(status_); });
    return status_;
  }
  bool wait_for(std::chrono::nanoseconds t) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, t, [&] { return is_terminal(status_); });
  }
  bool cancel() {
    {
      std::lock_guard lock(mu_);
      if (is_terminal(status_)) return status_ == TransferStatus::kCancelled;
      cancel_requested_ = true;
    }
    return wait() == TransferStatus::kCancelled;
  }
  // The last handle is gone: release the result now, or when the copies end.
  void abandon() noexcept {
    std::vector<ImmutableBlock<G1>> drop;
    {
      std::lock_guard lock(mu_);
      if (!is_terminal(status_)) {
        cancel_requested_ = true;
        return;
      }
      drop = std::move(blocks_);
      blocks_.clear();
    }
  }
  std::vector<ImmutableBlock<G1>> take_blocks() {
    wait();
    std::lock_guard lock(mu_);
    return std::move(blocks_);
  }
  OnboardCounts counts() const {
    wait();
    std::lock_guard lock(mu_);
    return counts_;
  }
  std::vector<TierId> sources() const {
    wait();
    std::lock_guard lock(mu_);
    return sources_;
  }
  std::string error() const {
    wait();
    std::lock_guard lock(mu_);
    return error_;
  }

 private:
  void release_all() noexcept {
    hits.clear();
    targets.clear();
    host_src.clear();
    disk_src.clear();
  }

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  TransferStatus status_ = TransferStatus::kTransferring;  // guarded by mu_
  bool cancel_requested_ = false;                         // guarded by mu_
  std::size_t pending_ = 0;                               // guarded by mu_
  std::vector<bool> failed_;                              // guarded by mu_ until finish
  std::string error_;                                     // guarded by mu_
  std::size_t no_space_ = 0;
  OnboardCounts counts_;                                  // guarded by mu_
  std::vector<TierId> sources_;                             // guarded by mu_
  std::vector<ImmutableBlock<G1>> blocks_;                // guarded by mu_
};

}  // namespace detail

void OnboardHandle::abandon() noexcept {
  if (s_) std::exchange(s_, nullptr)->abandon();
}
TransferStatus OnboardHandle::status() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::status on an empty handle");
  return s_->status();
}
TransferStatus OnboardHandle::wait() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::wait on an empty handle");
  return s_->wait();
}
bool OnboardHandle::wait_for(std::chrono::nanoseconds timeout) const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::wait_for on an empty handle");
  return s_->wait_for(timeout);
}
bool OnboardHandle::cancel() {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::cancel on an empty handle");
  return s_->cancel();
}
std::vector<ImmutableBlock<G1>> OnboardHandle::take_blocks() {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::take_blocks on an empty handle");
  return s_->take_blocks();
}
OnboardCounts OnboardHandle::counts() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::counts on an empty handle");
  return s_->counts();
}
std::vector<TierId> OnboardHandle::sources() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::sources on an empty handle");
  return s_->sources();
}
std::string OnboardHandle::error() const {
  KVBM_CHECK(s_ != nullptr, "OnboardHandle::error on an empty handle");
  return s_->error();
}

class KvBlockManagerImpl {
 public:
  explicit KvBlockManagerImpl(KvBlockManagerConfig c) : config_(std::move(c)) {}
  ~KvBlockManagerImpl() {
    shutdown();
    wait_onboards();  // also those started after an explicit shutdown()
    remove_onboard_metrics();
  }

  void build() {
    auto& c = config_;
    const detail::TierBlocks n = detail::check_config(c);
    g1_blocks_ = n.device;
    g2_blocks_ = n.host;
    g3_blocks_ = n.disk;
    const std::size_t bb = c.layout.block_bytes();

    tracker_ = std::make_shared<FrequencyTracker>(
        std::max<std::size_t>(1024, g1_blocks_ + g2_blocks_ + g3_blocks_));
    registry_ = BlockRegistry::builder().frequency_tracker(tracker_).build();

    build_storage();
    build_managers();
    recover_disk();
    build_engines();
    build_offload();
    build_onboard_metrics();
    logger()->info(
        "kvbm: G1 {} blocks{}, G2 {} blocks, G3 {} blocks of {} tokens ({} bytes each); "
        "G1->G2 {}, G2->G3 {}{}",
        g1_blocks_, device_emulated_ ? " (emulated in host memory)" : "", g2_blocks_, g3_blocks_,
        c.layout.page_size, bb, to_string(c.device_to_host), to_string(c.host_to_disk),
        c.move_bytes ? "" : " (metadata only)");
  }

  // A persistent G3: every intact block of the file goes into G3 at its own
  // slot, as a cached block (registered, then released: inactive), before any
  // engine can write. Its hash is the one recorded with its bytes; the file
  // keeps no parent or position, so the block enters as a first block (the
  // pools match by value; a lineage backend sees it as a root).
  void recover_disk() {
    if (!g3_storage_ || !config_.disk_persistent) return;
    Recovery r = g3_storage_->recover();
    std::vector<BlockId> ids;
    ids.reserve(r.slots.size());
    for (const auto& s : r.slots) ids.push_back(s.slot);
    auto blocks = g3_->allocate_ids(ids);
    KVBM_CHECK(blocks.has_value(), "KvBlockManager: recovered disk slots are not free in a new G3 pool");
    for (std::size_t i = 0; i < ids.size(); ++i) {
      auto staged = std::move((*blocks)[i]).stage(SequenceHash(r.slots[i].hash, std::nullopt, 0), g3_->block_size());
      KVBM_CHECK(staged.ok(), "KvBlockManager: a recovered disk block could not be staged");
      ImmutableBlock<G3> release = g3_->register_block(std::move(staged).value());
    }
    disk_recovery_ = r.summary;
  }

  void build_storage() {
    auto& c = config_;
    if (!c.move_bytes) {
      device_emulated_ = !cuda_device_available();
      g1_layout_.emplace(make_layout(c.layout, c.device_layout, g1_blocks_, 0x1000));
      if (g2_blocks_) {
        g2_layout_.emplace(make_layout(c.layout, LayoutKind::kFullyContiguous, g2_blocks_, 0x1000));
      }
      return;
    }
    // check_config() bounded every product below; what the machine cannot
    // allocate is named by its option too.
    const std::size_t bb = c.layout.block_bytes();
    auto allocate = [&](const std::string& option, std::size_t blocks, auto make) {
      try {
        return make(blocks * bb);
      } catch (const std::bad_alloc&) {
        detail::config_error(option, "cannot allocate " + std::to_string(blocks * bb) +
                                         " bytes (" + std::to_string(blocks) + " blocks of " +
                                         std::to_string(bb) + " bytes); use fewer blocks");
      }
    };
    g1_storage_ = allocate(detail::tier_size_option(c.device, "device"), g1_blocks_,
                           [&](std::size_t bytes) {
                             try {
                               return make_device_storage(bytes, c.cuda_device);
                             } catch (const UsageError& e) {  // no such device
                               detail::config_error("cuda_device", e.what());
                             }
                           });
    device_emulated_ = g1_storage_->emulated();
    g1_layout_.emplace(make_layout(c.layout, c.device_layout, g1_blocks_, g1_storage_->base()));
    if (g2_blocks_) {
      g2_storage_ = allocate(detail::tier_size_option(c.host, "host"), g2_blocks_,
                             [](std::size_t bytes) { return make_pinned_storage(bytes); });
      g2_layout_.emplace(
          make_layout(c.layout, LayoutKind::kFullyContiguous, g2_blocks_, g2_storage_->base()));
    }
    if (g3_blocks_) {
      DiskStorageOptions o;
      o.directory = c.disk_directory;
      o.config = c.layout;
      o.num_blocks = g3_blocks_;
      o.direct_io = c.disk_direct_io;
      o.persistent = c.disk_persistent;
      o.namespace_id = c.disk_namespace;
      auto r = [&] {
        try {
          return DiskStorage::create(o);
        } catch (const UsageError& e) {
          detail::config_error("disk_directory", e.what());
        }
      }();
      if (!r.ok()) {
        detail::config_error("disk_directory", "cannot create the disk pool in '" +
                                           c.disk_directory.string() + "': " + r.error().message);
      }
      g3_storage_ = std::move(r).value();
      bounce_storage_ = allocate("bounce_blocks", c.bounce_blocks,
                                 [](std::size_t bytes) { return make_pinned_storage(bytes); });
      bounce_layout_.emplace(
          Layout::fully_contiguous(c.layout, c.bounce_blocks, bounce_storage_->base()));
    }
  }

  void build_managers() {
    auto& c = config_;
    {
      auto b = BlockManager<G1>::builder();
      b.block_count(g1_blocks_).block_size(c.layout.page_size).registry(registry_)
          .eviction(c.device.eviction).duplicate_policy(c.duplicate_policy)
          .metrics_registry(c.metrics_registry);
      for (const auto& l : c.device_listeners) b.listener(l);
      if (c.device_to_host == OffloadMode::kOnEviction) {
        g1_evict_ = std::make_shared<EvictionOffloader<G1, G2>>();
        b.listener(g1_evict_);
      }
      g1_.emplace(b.build());
    }
    if (g2_blocks_) {
      auto b = BlockManager<G2>::builder();
      b.block_count(g2_blocks_).block_size(c.layout.page_size).registry(registry_)
          .eviction(c.host.eviction).duplicate_policy(c.duplicate_policy)
          .metrics_registry(c.metrics_registry);
      for (const auto& l : c.host_listeners) b.listener(l);
      if (c.host_to_disk == OffloadMode::kOnEviction) {
        g2_evict_ = std::make_shared<EvictionOffloader<G2, G3>>();
        b.listener(g2_evict_);
      }
      g2_.emplace(b.build());
    }
    if (g3_blocks_) {
      auto b = BlockManager<G3>::builder();
      b.block_count(g3_blocks_).block_size(c.layout.page_size).registry(registry_)
          .eviction(c.disk.eviction).duplicate_policy(c.duplicate_policy)
          .metrics_registry(c.metrics_registry);
      for (const auto& l : c.disk_listeners) b.listener(l);
      g3_.emplace(b.build());
    }
  }

  std::shared_ptr<TransferEngine> device_host_engine(const Layout& src, const Layout& dst,
                                                     CudaDirection dir, const std::string& name) {
    if (!device_emulated_) {
      CudaEngineOptions o;
      o.device = config_.cuda_device;
      o.name = name;
      o.registry = config_.metrics_registry;
      return std::make_shared<CudaTransferEngine>(src, dst, dir, o);
    }
    HostEngineOptions o;
    o.threads = config_.copy_threads;
    o.name = name;
    o.registry = config_.metrics_registry;
    return std::make_shared<HostTransferEngine>(src, dst, o);
  }

  void build_engines() {
    auto& c = config_;
    if (!c.move_bytes) {
      if (g2_blocks_) {
        e12_ = std::make_shared<NullEngine>("G1_to_G2", g1_blocks_, g2_blocks_);
        e21_ = std::make_shared<NullEngine>("G2_to_G1", g2_blocks_, g1_blocks_);
      }
      if (g3_blocks_) {
        e23_ = std::make_shared<NullEngine>("G2_to_G3", g2_blocks_, g3_blocks_);
        e31_ = std::make_shared<NullEngine>("G3_to_G1", g3_blocks_, g1_blocks_);
      }
      return;
    }
    if (g2_blocks_) {
      e12_ = device_host_engine(*g1_layout_, *g2_layout_, CudaDirection::kDeviceToHost, "G1_to_G2");
      e21_ = device_host_engine(*g2_layout_, *g1_layout_, CudaDirection::kHostToDevice, "G2_to_G1");
    }
    if (g3_blocks_) {
      DiskEngineOptions w;
      if (c.disk_queue_depth) w.queue_depth = c.disk_queue_depth;
      w.workers = c.disk_workers;
      w.name = "G2_to_G3";
      w.registry = c.metrics_registry;
      e23_ = std::make_shared<DiskWriteEngine>(*g2_layout_, *g3_storage_, w);
      DiskEngineOptions r = w;
      r.name = "G3_to_G1";
      e3b_ = std::make_unique<DiskReadEngine>(*g3_storage_, *bounce_layout_, r);
      if (!device_emulated_) {
        CudaEngineOptions o;
        o.device = c.cuda_device;
        o.name = "bounce_to_G1";
        eb1_ = std::make_unique<CudaTransferEngine>(*bounce_layout_, *g1_layout_,
                                                    CudaDirection::kHostToDevice, o);
      } else {
        HostEngineOptions o;
        o.threads = 1;
        o.name = "bounce_to_G1";
        eb1_ = std::make_unique<HostTransferEngine>(*bounce_layout_, *g1_layout_, o);
      }
      BounceEngineOptions bo;
      bo.bounce_blocks = c.bounce_blocks;
      bo.src_blocks = g3_blocks_;
      bo.dst_blocks = g1_blocks_;
      bo.name = "G3_to_G1";
      e31_ = std::make_shared<BounceTransferEngine>(*e3b_, *eb1_, bo);
    }
  }

  std::vector<std::shared_ptr<OffloadPolicy>> policies(const OffloadPolicyConfig& p) {
    std::vector<std::shared_ptr<OffloadPolicy>> out;
    if (p.min_frequency > 0) out.push_back(std::make_shared<FrequencyPolicy>(tracker_, p.min_frequency));
    return out;
  }

  // A G1 -> G2 pipeline's common options: the tiers, the engine, the
  // pipeline config and the presence policy when asked for.
  OffloadPipeline<G1, G2>::Builder g1_to_g2_builder() {
    auto b = OffloadPipeline<G1, G2>::builder();
    b.source(*g1_).destination(*g2_).engine(e12_).config(config_.pipeline)
        .metrics_registry(config_.metrics_registry);
    if (config_.device_to_host_policy.skip_present) {
      b.policy(std::make_shared<PresencePolicy<G2>>(registry_));
    }
    return b;
  }

  // What takes the blocks a G1 -> G2 copy (write-through, on-eviction or
  // explicit) registered in G2: the G2 -> G3 pipeline when that boundary is
  // write-through, else nothing (on-eviction copies them when G2 evicts them).
  EvictionOffloader<G1, G2>::Registered g2_to_g3_handoff() {
    if (!p23_) return {};
    return [this](std::vector<ImmutableBlock<G2>>&& blocks) {
      if (config_.host_to_disk_policy.skip_present) refresh_present(*g3_, blocks);
      track(p23_->enqueue(blocks), handles23_);
    };
  }

  void build_offload() {
    auto& c = config_;
    // Build bottom-up: G1->G2 hands its copies to G2->G3.
    if (c.host_to_disk == OffloadMode::kWriteThrough) {
      auto b = OffloadPipeline<G2, G3>::builder();
      b.source(*g2_).destination(*g3_).engine(e23_)
          .config(c.host_to_disk_pipeline.value_or(c.pipeline))
          .metrics_registry(c.metrics_registry);
      if (c.host_to_disk_policy.skip_present) b.policy(std::make_shared<PresencePolicy<G3>>(registry_));
      for (auto& p : policies(c.host_to_disk_policy)) b.policy(std::move(p));
      p23_ = b.build();
    } else if (c.host_to_disk == OffloadMode::kOnEviction) {
      g2_evict_->bind(&*g3_, e23_,
                      std::make_shared<OffloadMetrics>(c.metrics_registry, "G2_to_G3_on_eviction"),
                      policies(c.host_to_disk_policy));
    }
    EvictionOffloader<G1, G2>::Registered to_disk = g2_to_g3_handoff();
    if (c.device_to_host == OffloadMode::kWriteThrough) {
      auto b = g1_to_g2_builder();
      for (auto& p : policies(c.device_to_host_policy)) b.policy(std::move(p));
      if (to_disk) b.on_registered(std::move(to_disk));
      p12_ = b.build();
    } else if (c.device_to_host == OffloadMode::kOnEviction) {
      g1_evict_->bind(&*g2_, e12_,
                      std::make_shared<OffloadMetrics>(c.metrics_registry, "G1_to_G2_on_eviction"),
                      policies(c.device_to_host_policy), std::move(to_disk));
    }
  }

  void build_onboard_metrics() {
    auto& fam = prometheus::BuildCounter()
                    .Name("kvbm_onboard_blocks_total")
                    .Help("Blocks handed back by onboarding, by the tier they came from "
                          "(outcome=failed: copies that failed)")
                    .Register(*config_.metrics_registry);
    onboard_blocks_family_ = &fam;
    counters_.from_device = &fam.Add({{"tier", "G1"}, {"outcome", "hit"}});
    counters_.from_host = &fam.Add({{"tier", "G2"}, {"outcome", "onboarded"}});
    counters_.from_disk = &fam.Add({{"tier", "G3"}, {"outcome", "onboarded"}});
    counters_.failed = &fam.Add({{"tier", "below_G1"}, {"outcome", "failed"}});
    auto& req = prometheus::BuildCounter()
                    .Name("kvbm_onboard_cancelled_total")
                    .Help("Onboardings cancelled by their caller")
                    .Register(*config_.metrics_registry);
    onboard_cancelled_family_ = &req;
    counters_.cancelled = &req.Add({});
  }

  // Takes this manager's onboarding series out of the (possibly shared)
  // registry. Every onboarding has ended: none touches a counter again.
  void remove_onboard_metrics() noexcept {
    auto& c = counters_;
    for (auto* counter : {c.from_device, c.from_host, c.from_disk, c.failed}) {
      if (counter != nullptr) onboard_blocks_family_->Remove(counter);
    }
    if (c.cancelled != nullptr) onboard_cancelled_family_->Remove(c.cancelled);
    c = {};
  }

  void track(const TransferHandle& h, std::vector<TransferHandle>& v) {
    if (!h.valid()) return;
    std::lock_guard lock(handles_mu_);
    if (v.size() >= 256) {
      std::erase_if(v, [](const TransferHandle& x) { return is_terminal(x.status()); });
    }
    v.push_back(h);
  }

  // A block written through to a tier that already holds it is not copied
  // again (the presence policy filters it), but that copy is refreshed: it is
  // in use above right now, so it is the tier's most recently used block.
  // The same rule as an on-eviction copy that finds its block below.
  template <TierMarker Below, TierMarker Above>
  static void refresh_present(BlockManager<Below>& below, const std::vector<ImmutableBlock<Above>>& blocks) {
    std::vector<SequenceHash> hashes;
    hashes.reserve(blocks.size());
    for (const auto& b : blocks) hashes.push_back(b.sequence_hash());
    std::vector<ImmutableBlock<Below>> held = below.scan_matches(hashes);
    for (auto& b : held) ImmutableBlock<Below> release = std::move(b);  // in order: most recent last
  }

  // Every block must be a valid handle on a block of this manager's G1 pool;
  // checked before anything is registered or enqueued.
  template <class Block>
  void check_own(const std::vector<Block>& blocks, const char* call) const {
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      KVBM_CHECK(blocks[i].valid(), "KvBlockManager::", call, ": block ", i,
                 " is a moved-from handle; pass the G1 blocks themselves");
      KVBM_CHECK(g1_->owns(blocks[i]), "KvBlockManager::", call, ": block ", i, " (id ",
                 blocks[i].block_id(),
                 ") belongs to another manager's G1 pool, not this KvBlockManager's; pass "
                 "blocks of this manager's device() pool (each manager moves only its own)");
    }
  }

  std::vector<ImmutableBlock<G1>> register_blocks(std::vector<CompleteBlock<G1>>&& blocks,
                                                  std::shared_ptr<Precondition> pre) {
    check_own(blocks, "register_blocks");
    auto out = g1_->register_blocks(std::move(blocks));
    if (p12_ && !out.empty()) {
      if (config_.device_to_host_policy.skip_present) refresh_present(*g2_, out);
      track(p12_->enqueue(out, std::move(pre)), handles12_);
    }
    return out;
  }

  TransferHandle offload(const std::vector<ImmutableBlock<G1>>& blocks,
                         std::shared_ptr<Precondition> pre) {
    check_own(blocks, "offload");
    if (!g2_) return {};
    OffloadPipeline<G1, G2>* pipeline = p12_.get();
    if (pipeline == nullptr) {
      // Not write-through: build a pipeline on first use.
      std::lock_guard lock(explicit_mu_);
      if (!explicit12_) {
        auto b = g1_to_g2_builder();
        b.name("G1_to_G2_explicit");
        if (auto to_disk = g2_to_g3_handoff()) b.on_registered(std::move(to_disk));
        explicit12_ = b.build();
      }
      pipeline = explicit12_.get();
    }
    auto h = pipeline->enqueue(blocks, std::move(pre));
    track(h, handles12_);
    return h;
  }

  OnboardHandle onboard(std::span<const SequenceHash> hashes) {
    auto s = std::make_shared<detail::OnboardState>();
    s->g1 = &*g1_;
    s->counters = counters_;
    walk_prefix(hashes, *s);
    const std::size_t below = s->below_hashes.size();
    if (below == 0) {
      s->finish();
      return OnboardHandle(std::move(s));
    }
    // G1 targets: all, else as many as fit (the prefix is cut there).
    s->targets = g1_->allocate_at_most(below);
    const std::size_t got = s->targets.size();
    if (got < below) {
      s->set_no_space(below - got);
      cut_walk(*s, got);
      std::size_t keep2 = 0, keep3 = 0;
      for (std::size_t k = 0; k < got; ++k) (s->below_tier[k] == 2 ? keep2 : keep3)++;
      s->host_src.erase(s->host_src.begin() + static_cast<std::ptrdiff_t>(keep2), s->host_src.end());
      s->disk_src.erase(s->disk_src.begin() + static_cast<std::ptrdiff_t>(keep3), s->disk_src.end());
      s->below_hashes.resize(got);
      s->below_tier.resize(got);
    }
    if (got == 0) {
      s->finish();
      return OnboardHandle(std::move(s));
    }
    // One batch per source tier.
    std::vector<TransferPair> p2, p3;
    auto pos2 = std::make_shared<std::vector<std::size_t>>();
    auto pos3 = std::make_shared<std::vector<std::size_t>>();
    std::size_t k2 = 0, k3 = 0;
    for (std::size_t k = 0; k < got; ++k) {
      // Each copy carries the hash asked for: the source was matched by it, and
      // a disk slot is read only if its footer records that hash.
      const std::uint64_t asked = s->below_hashes[k].value();
      if (s->below_tier[k] == 2) {
        assert(s->host_src[k2].sequence_hash().value() == s->below_hashes[k].value());
        p2.push_back({s->host_src[k2++].block_id(), s->targets[k].block_id(), asked});
        pos2->push_back(k);
      } else {
        assert(s->disk_src[k3].sequence_hash().value() == s->below_hashes[k].value());
        p3.push_back({s->disk_src[k3++].block_id(), s->targets[k].block_id(), asked});
        pos3->push_back(k);
      }
    }
    s->start_pending((p2.empty() ? 0 : 1) + (p3.empty() ? 0 : 1));
    auto run = [&](TransferEngine& e, const std::vector<TransferPair>& pairs,
                   std::shared_ptr<std::vector<std::size_t>> pos) {
      std::shared_ptr<TransferCompletion> comp;
      try {
        comp = e.submit(pairs);
      } catch (const std::exception& ex) {
        TransferOutcome o;
        for (std::size_t k = 0; k < pairs.size(); ++k) o.failed.push_back(k);
        o.error = std::string("transfer engine refused the batch: ") + ex.what();
        s->on_batch(o, *pos);
        return;
      }
      comp->on_complete([s, pos](const TransferOutcome& o) { s->on_batch(o, *pos); });
    };
    // start_pending() counted both batches before either may complete.
    if (!p2.empty()) run(*e21_, p2, pos2);
    if (!p3.empty()) run(*e31_, p3, pos3);
    {
      std::lock_guard lock(inflight_mu_);
      onboard_states_.push_back(s);
      std::erase_if(onboard_states_, [](const std::weak_ptr<detail::OnboardState>& w) {
        auto p = w.lock();
        return !p || is_terminal(p->status());
      });
    }
    return OnboardHandle(std::move(s));
  }

  // The tier each block of the prefix comes from: the fastest that holds it
  // (G1, then G2, then G3), up to the first block no tier holds.
  std::vector<std::uint8_t> fastest_tiers(std::span<const SequenceHash> hashes) const {
    const auto in1 = registry_->presence<G1>(hashes);
    const auto in2 = g2_ ? registry_->presence<G2>(hashes) : std::vector<bool>(hashes.size(), false);
    const auto in3 = g3_ ? registry_->presence<G3>(hashes) : std::vector<bool>(hashes.size(), false);
    std::vector<std::uint8_t> tiers;
    tiers.reserve(hashes.size());
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      if (in1[i]) {
        tiers.push_back(1);
      } else if (in2[i]) {
        tiers.push_back(2);
      } else if (in3[i]) {
        tiers.push_back(3);
      } else {
        break;
      }
    }
    return tiers;
  }

  // Takes the prefix's blocks, each from the fastest tier holding it, one
  // match per run of positions from the same tier. A block evicted since the
  // presence check ends the prefix there.
  void walk_prefix(std::span<const SequenceHash> hashes, detail::OnboardState& s) {
    const std::vector<std::uint8_t> tiers = fastest_tiers(hashes);
    std::size_t i = 0;
    while (i < tiers.size()) {
      std::size_t end = i;
      while (end < tiers.size() && tiers[end] == tiers[i]) ++end;
      const auto run = hashes.subspan(i, end - i);
      std::size_t got = 0;
      if (tiers[i] == 1) {
        auto m = g1_->match_blocks(run);
        got = m.size();
        for (auto& b : m) s.hits.push_back(std::move(b));
      } else if (tiers[i] == 2) {
        auto m = g2_->match_blocks(run);
        got = m.size();
        for (auto& b : m) s.host_src.push_back(std::move(b));
      } else {
        auto m = g3_->match_blocks(run);
        got = m.size();
        for (auto& b : m) s.disk_src.push_back(std::move(b));
      }
      for (std::size_t k = 0; k < got; ++k) {
        s.walk.push_back(tiers[i]);
        if (tiers[i] != 1) {
          s.below_hashes.push_back(hashes[i + k]);
          s.below_tier.push_back(tiers[i]);
        }
      }
      if (got < run.size()) break;
      i = end;
    }
  }

  // Cuts the prefix before its `below`-th position below G1 (no G1 room for it).
  static void cut_walk(detail::OnboardState& s, std::size_t below) {
    std::size_t seen_below = 0, seen_hits = 0, pos = 0;
    for (; pos < s.walk.size(); ++pos) {
      if (s.walk[pos] == 1) {
        ++seen_hits;
      } else if (seen_below++ == below) {
        break;
      }
    }
    s.walk.resize(pos);
    s.hits.erase(s.hits.begin() + static_cast<std::ptrdiff_t>(seen_hits), s.hits.end());
  }

  OnboardCounts probe(std::span<const SequenceHash> hashes) const {
    OnboardCounts c;
    for (const std::uint8_t tier : fastest_tiers(hashes)) {
      (tier == 1 ? c.device : tier == 2 ? c.host : c.disk)++;
    }
    return c;
  }

  void wait_onboards() {
    std::vector<std::weak_ptr<detail::OnboardState>> states;
    {
      std::lock_guard lock(inflight_mu_);
      states = onboard_states_;
    }
    for (auto& w : states) {
      if (auto p = w.lock()) p->wait();
    }
  }

  void drain() {
    for (auto* v : {&handles12_, &handles23_}) {
      for (;;) {
        std::vector<TransferHandle> hs;
        {
          std::lock_guard lock(handles_mu_);
          hs.swap(*v);
        }
        if (hs.empty()) break;
        for (auto& h : hs) h.wait();
      }
    }
    wait_onboards();
  }

  void shutdown() {
    {
      std::lock_guard lock(shutdown_mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    {
      std::lock_guard lock(explicit_mu_);  // offload() may be building it
      if (explicit12_) explicit12_->shutdown();
    }
    if (p12_) p12_->shutdown();  // its last copies may still enqueue into p23_
    if (p23_) p23_->shutdown();
    wait_onboards();
    if (g1_evict_) g1_evict_->disable();
    if (g2_evict_) g2_evict_->disable();
    logger()->debug("kvbm: shut down");
  }

  std::optional<RecoverySummary> disk_recovery() const { return disk_recovery_; }

  std::string audit() const {
    std::string out;
    auto add = [&](std::string_view tier, std::string a) {
      if (!a.empty()) out += std::string(tier) + ": " + a + "\n";
    };
    add("G1", g1_->audit());
    if (g2_) add("G2", g2_->audit());
    if (g3_) add("G3", g3_->audit());
    return out;
  }

  KvBlockManagerConfig config_;
  std::size_t g1_blocks_ = 0, g2_blocks_ = 0, g3_blocks_ = 0;
  bool device_emulated_ = false;
  std::shared_ptr<FrequencyTracker> tracker_;
  std::shared_ptr<BlockRegistry> registry_;
  // Memory first: everything below refers to it and is destroyed before it.
  std::unique_ptr<Storage> g1_storage_, g2_storage_, bounce_storage_;
  std::unique_ptr<DiskStorage> g3_storage_;
  std::optional<Layout> g1_layout_, g2_layout_, bounce_layout_;
  std::optional<BlockManager<G1>> g1_;
  std::optional<BlockManager<G2>> g2_;
  std::optional<BlockManager<G3>> g3_;
  std::optional<RecoverySummary> disk_recovery_;
  std::shared_ptr<EvictionOffloader<G1, G2>> g1_evict_;
  std::shared_ptr<EvictionOffloader<G2, G3>> g2_evict_;
  std::shared_ptr<TransferEngine> e12_, e21_, e23_;
  std::unique_ptr<TransferEngine> e3b_, eb1_;
  std::shared_ptr<TransferEngine> e31_;  // uses e3b_ and eb1_: destroyed before them
  detail::OnboardState::Counters counters_;
  prometheus::Family<prometheus::Counter>* onboard_blocks_family_ = nullptr;
  prometheus::Family<prometheus::Counter>* onboard_cancelled_family_ = nullptr;
  std::mutex handles_mu_;
  std::vector<TransferHandle> handles12_, handles23_;  // guarded by handles_mu_
  std::mutex inflight_mu_;
  std::vector<std::weak_ptr<detail::OnboardState>> onboard_states_;  // guarded by inflight_mu_
  std::mutex explicit_mu_;
  std::mutex shutdown_mu_;
  bool stopped_ = false;
  // Pipelines last: destroyed first, while the managers and engines exist.
  std::unique_ptr<OffloadPipeline<G2, G3>> p23_;
  std::unique_ptr<OffloadPipeline<G1, G2>> p12_;
  std::unique_ptr<OffloadPipeline<G1, G2>> explicit12_;
};

std::unique_ptr<KvBlockManager> KvBlockManager::build(KvBlockManagerConfig config) {
  auto impl = std::make_unique<KvBlockManagerImpl>(std::move(config));
  impl->build();
  return std::unique_ptr<KvBlockManager>(new KvBlockManager(std::move(impl)));
}

KvBlockManager::KvBlockManager(std::unique_ptr<KvBlockManagerImpl> impl) : impl_(std::move(impl)) {}
KvBlockManager::~KvBlockManager() {
  if (impl_) impl_->shutdown();
}

BlockManager<G1>& KvBlockManager::device() noexcept { return *impl_->g1_; }
BlockManager<G2>* KvBlockManager::host() noexcept { return impl_->g2_ ? &*impl_->g2_ : nullptr; }
BlockManager<G3>* KvBlockManager::disk() noexcept { return impl_->g3_ ? &*impl_->g3_ : nullptr; }
const KvBlockManagerConfig& KvBlockManager::config() const noexcept { return impl_->config_; }
std::uint32_t KvBlockManager::block_size() const noexcept { return impl_->config_.layout.page_size; }
std::size_t KvBlockManager::block_bytes() const noexcept {
  return impl_->config_.layout.block_bytes();
}
bool KvBlockManager::device_emulated() const noexcept { return impl_->device_emulated_; }
const Layout& KvBlockManager::device_layout() const noexcept { return *impl_->g1_layout_; }
const Layout& KvBlockManager::host_layout() const {
  KVBM_CHECK(impl_->g2_.has_value(), "host_layout: this KvBlockManager has no host tier");
  return *impl_->g2_layout_;
}
const std::shared_ptr<prometheus::Registry>& KvBlockManager::metrics_registry() const noexcept {
  return impl_->config_.metrics_registry;
}
std::vector<ImmutableBlock<G1>> KvBlockManager::register_blocks(
    std::vector<CompleteBlock<G1>>&& blocks, std::shared_ptr<Precondition> forward_pass_done) {
  return impl_->register_blocks(std::move(blocks), std::move(forward_pass_done));
}
TransferHandle KvBlockManager::offload(const std::vector<ImmutableBlock<G1>>& blocks,
                                       std::shared_ptr<Precondition> forward_pass_done) {
  return impl_->offload(blocks, std::move(forward_pass_done));
}
OnboardHandle KvBlockManager::onboard(std::span<const SequenceHash> hashes) {
  return impl_->onboard(hashes);
}
OnboardCounts KvBlockManager::probe(std::span<const SequenceHash> hashes) const {
  return impl_->probe(hashes);
}
void KvBlockManager::drain() { impl_->drain(); }
void KvBlockManager::shutdown() { impl_->shutdown(); }
std::string KvBlockManager::audit() const { return impl_->audit(); }
std::optional<RecoverySummary> KvBlockManager::disk_recovery() const { return impl_->disk_recovery(); }

}  // namespace kvbm
