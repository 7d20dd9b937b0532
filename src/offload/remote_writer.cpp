// src/offload/remote_writer.cpp: kvbm/offload/remote_writer.h.

#include "kvbm/offload/remote_writer.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include <spdlog/spdlog.h>

#include "kvbm/error.h"
#include "kvbm/logging.h"
#include "kvbm/offload/remote_presence_policy.h"

namespace kvbm {
namespace {

// The clock write batches are timed on.
const Clock* clock_of(const RemoteWriter::Options& o) {
  static const std::shared_ptr<Clock> kSteady = Clock::steady();
  return o.clock ? o.clock.get() : kSteady.get();
}

}  // namespace

RemoteWriter::RemoteWriter(std::shared_ptr<RemoteStore> store, const Layout& source,
                           Options options, std::vector<std::shared_ptr<OffloadPolicy>> policies,
                           std::shared_ptr<prometheus::Registry> metrics)
    : store_(std::move(store)),
      source_(source),
      options_(std::move(options)),
      block_bytes_(source.config().block_bytes()),
      policies_(std::move(policies)) {
  KVBM_CHECK(store_ != nullptr, "RemoteWriter needs a remote store");
  KVBM_CHECK(options_.staging_blocks > 0, "RemoteWriter: staging_blocks must be at least 1");
  KVBM_CHECK(options_.max_batch_blocks > 0, "RemoteWriter: max_batch_blocks must be at least 1");
  KVBM_CHECK(store_->block_bytes() == block_bytes_, "RemoteWriter: the source's blocks are ",
             block_bytes_, " bytes, the store's ", store_->block_bytes(),
             "; build both from the same LayoutConfig");
  for (const auto& p : policies_) KVBM_CHECK(p != nullptr, "RemoteWriter: a policy is null");
  metrics_ = std::make_shared<OffloadMetrics>(std::move(metrics), options_.name);
  for (const auto& p : policies_) {
    policy_index_.push_back(metrics_->register_policy(p->name()));
    is_presence_.push_back(dynamic_cast<const RemotePresencePolicy*>(p.get()) != nullptr);
  }
  staging_.reset(new std::byte[options_.staging_blocks * block_bytes_]);
  {
    detail::LockGuard lock(mu_);
    free_slots_.reserve(options_.staging_blocks);
    for (std::size_t i = options_.staging_blocks; i-- > 0;) free_slots_.push_back(i);
  }
}

RemoteWriter::~RemoteWriter() { shutdown(); }

std::size_t RemoteWriter::stage(std::span<const Source> blocks) noexcept {
  if (blocks.empty()) return 0;
  metrics_->add_enqueued(blocks.size());
  std::size_t staged = 0, duplicate = 0, no_room = 0;
  std::vector<Region> regions;
  {
    detail::LockGuard lock(mu_);
    for (const auto& b : blocks) {
      if (stop_ || free_slots_.empty()) {
        ++no_room;
        continue;
      }
      if (!waiting_.insert(b.hash.value()).second) {
        ++duplicate;
        continue;
      }
      const std::size_t slot = free_slots_.back();
      free_slots_.pop_back();
      // The copy is made under the lock: the slot is not queued before it is
      // full, and the caller's block is free once stage() returns.
      regions.clear();
      source_.append_regions(b.id, regions);
      std::byte* out = slot_bytes(slot).data();
      for (const auto& r : regions) {
        std::memcpy(out, reinterpret_cast<const void*>(r.addr), r.size);
        out += r.size;
      }
      queue_.push_back({slot, b.hash});
      ++staged;
    }
    // Posted under the lock, so that drain() (which waits for the jobs posted
    // before it) sees every block staged before it. Refused after shutdown,
    // whose own job writes what is left.
    if (staged > 0 && !posted_) {
      try {
        posted_ = worker_.post([this] { write_staged(); });
      } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): bad_alloc; the
      }                                  // next stage() or shutdown() posts
    }
  }
  metrics_->add_blocks(BlockOutcome::kAlreadyPresent, duplicate);
  metrics_->add_blocks(BlockOutcome::kNoSpace, no_room);
  return staged;
}

void RemoteWriter::drain() { worker_.wait_idle(); }

void RemoteWriter::shutdown() {
  {
    detail::LockGuard lock(mu_);
    stop_ = true;
  }
  worker_.post([this] { write_staged(); });  // what is staged without a job; refused when stopped
  worker_.stop();
}

// The worker's job: writes batches until nothing is staged.
void RemoteWriter::write_staged() {
  std::vector<Item> batch;
  for (;;) {
    {
      detail::LockGuard lock(mu_);
      if (queue_.empty()) {
        posted_ = false;
        return;
      }
      const std::size_t n = std::min(queue_.size(), options_.max_batch_blocks);
      batch.assign(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
      queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
    }
    try {
      write(batch);
    } catch (const std::exception& e) {  // bad_alloc: the batch is lost, its slots are not
      logger()->warn("offload {}: a batch of {} blocks was dropped: {}", options_.name,
                     batch.size(), e.what());
    }
    detail::LockGuard lock(mu_);
    for (const auto& item : batch) {
      waiting_.erase(item.hash.value());
      free_slots_.push_back(item.slot);
    }
  }
}

// Steps 1 to 3 of the file comment, for one batch.
void RemoteWriter::write(std::vector<Item>& batch) {
  std::vector<SequenceHash> hashes;
  hashes.reserve(batch.size());
  for (const auto& item : batch) hashes.push_back(item.hash);
  std::vector<bool> pass(batch.size(), true);
  // Blocks now in the store, for the listeners: those the presence policy
  // found there, then those written.
  std::vector<bool> present(batch.size(), false);
  for (std::size_t p = 0; p < policies_.size(); ++p) {
    const std::vector<bool> passed = pass;
    const auto before = static_cast<std::size_t>(std::count(pass.begin(), pass.end(), true));
    bool failed = false;
    try {
      policies_[p]->evaluate(hashes, pass);
    } catch (const std::exception& e) {
      // As the offload pipeline: a policy that throws filters what it was asked about.
      logger()->warn("offload {}: policy {} failed: {}", options_.name, policies_[p]->name(),
                     e.what());
      std::fill(pass.begin(), pass.end(), false);
      failed = true;
    }
    if (is_presence_[p] && !failed) {
      for (std::size_t i = 0; i < pass.size(); ++i)
        present[i] = present[i] || (passed[i] && !pass[i]);
    }
    const auto after = static_cast<std::size_t>(std::count(pass.begin(), pass.end(), true));
    metrics_->add_policy(policy_index_[p], after, before - after, failed);
    metrics_->add_blocks(is_presence_[p] ? BlockOutcome::kAlreadyPresent : BlockOutcome::kFiltered,
                         before - after);
  }
  std::vector<std::span<const std::byte>> regions;
  std::vector<RemotePut> puts;
  std::vector<std::size_t> put_index;  // into batch
  regions.reserve(batch.size());
  puts.reserve(batch.size());
  put_index.reserve(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (!pass[i]) continue;
    regions.emplace_back(slot_bytes(batch[i].slot));
    puts.push_back({batch[i].hash.value(), 0, {}});
    put_index.push_back(i);
  }
  for (std::size_t k = 0; k < puts.size(); ++k) puts[k].regions = {&regions[k], 1};
  if (!puts.empty()) {
    metrics_->add_batch();
    const Clock* clock = options_.on_put ? clock_of(options_) : nullptr;
    const Clock::time_point start = clock != nullptr ? clock->now() : Clock::time_point{};
    const std::vector<RemoteStatus> status = store_->put(puts);
    if (clock != nullptr) options_.on_put(puts.size(), clock->now() - start);
    std::size_t ok = 0;
    for (std::size_t k = 0; k < status.size(); ++k) {
      if (status[k] != RemoteStatus::kOk) continue;
      ++ok;
      present[put_index[k]] = true;
    }
    metrics_->add_blocks(BlockOutcome::kTransferred, ok);
    metrics_->add_blocks(BlockOutcome::kCopyFailed, puts.size() - ok);
  }
  if (options_.listeners.empty()) return;
  std::vector<SequenceHash> stored;
  stored.reserve(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (present[i]) stored.push_back(batch[i].hash);
  }
  if (stored.empty()) return;
  for (const auto& l : options_.listeners) l->on_stored(stored);
}

}  // namespace kvbm
