// src/facade/remote_tier.cpp: the remote tier G4 in the facade (facade/remote_tier.h).

#include "facade/remote_tier.h"

#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "kvbm/logging.h"
#include "kvbm/offload/remote_presence_policy.h"
#include "kvbm/transfer/stage_and_register.h"

namespace kvbm::facade {
namespace {

// On-eviction: what G2 evicts is staged for G4 before the allocation that
// evicted it takes the blocks (a memcpy; the write happens on the writer).
class RemoteEvictionListener final : public PoolListener {
 public:
  explicit RemoteEvictionListener(std::shared_ptr<RemoteWriter> writer)
      : writer_(std::move(writer)) {}
  void on_evicting(std::span<const EvictedBlock> blocks) noexcept override {
    std::vector<RemoteWriter::Source> sources;
    sources.reserve(blocks.size());
    for (const auto& b : blocks) sources.push_back({b.id, b.hash});
    (void)writer_->stage(sources);
  }

 private:
  std::shared_ptr<RemoteWriter> writer_;  // shared: the pool may outlive the tier
};

RemoteStoreOptions store_options(const KvBlockManagerConfig& c) {
  const RemoteTierConfig& r = c.remote;
  RemoteStoreOptions o;
  o.urls = r.urls;
  o.name_space = {r.model, r.dtype, c.layout, r.user_namespace};
  o.key_prefix = r.key_prefix;
  o.connections_per_server = r.connections_per_server;
  o.connect_timeout = r.connect_timeout;
  o.command_timeout = r.command_timeout;
  o.ttl = r.ttl;
  o.metrics_registry = c.metrics_registry;
  o.pool_name = "G4";
  return o;
}

}  // namespace

RemoteTier::RemoteTier(const KvBlockManagerConfig& c, Layout host,
                       std::shared_ptr<FrequencyTracker> tracker)
    : mode_(c.host_to_remote),
      host_(std::move(host)),
      store_(RemoteStore::create(store_options(c))) {
  std::vector<std::shared_ptr<OffloadPolicy>> policies;
  if (c.host_to_remote_policy.min_frequency > 0) {
    policies.push_back(std::make_shared<FrequencyPolicy>(std::move(tracker),
                                                         c.host_to_remote_policy.min_frequency));
  }
  if (c.host_to_remote_policy.skip_present) {
    policies.push_back(std::make_shared<RemotePresencePolicy>(store_));
  }
  writer_ = std::make_shared<RemoteWriter>(
      store_, host_,
      RemoteWriter::Options{c.remote.staging_blocks, c.remote.max_batch_blocks,
                            mode_ == OffloadMode::kOnEviction ? "G2_to_G4_on_eviction" : "G2_to_G4",
                            c.remote_listeners},
      std::move(policies), c.metrics_registry);
  if (mode_ == OffloadMode::kOnEviction) {
    listener_ = std::make_shared<RemoteEvictionListener>(writer_);
  }
}

RemoteTier::~RemoteTier() {
  stop_writes();
  stop_fetches();
}

void RemoteTier::bind(BlockManager<G2>& g2) {
  g2_ = &g2;
  worker_ = std::make_unique<detail::Worker>("G4 fetch worker");
}

void RemoteTier::take(const std::vector<ImmutableBlock<G2>>& blocks) noexcept {
  if (mode_ != OffloadMode::kWriteThrough || blocks.empty()) return;
  std::vector<RemoteWriter::Source> sources;
  sources.reserve(blocks.size());
  for (const auto& b : blocks) sources.push_back({b.block_id(), b.sequence_hash()});
  (void)writer_->stage(sources);
}

void RemoteTier::drain() { writer_->drain(); }

void RemoteTier::stop_writes() { writer_->shutdown(); }

std::size_t RemoteTier::present_prefix(std::span<const SequenceHash> hashes) const {
  std::vector<std::uint64_t> keys;
  keys.reserve(hashes.size());
  for (const auto& h : hashes) keys.push_back(h.value());
  const std::vector<bool> present = store_->exists(keys);
  std::size_t n = 0;
  while (n < present.size() && present[n]) ++n;
  return n;
}

bool RemoteTier::post(std::function<void()> job) {
  return worker_ != nullptr && worker_->post(std::move(job));
}

void RemoteTier::stop_fetches() {
  if (worker_ != nullptr) worker_->stop();
}

void RemoteTier::wait_fetches() {
  if (worker_ != nullptr) worker_->wait_idle();
}

// The steps of the file comment's "up".
std::vector<ImmutableBlock<G2>> RemoteTier::fetch_into_g2(std::span<const SequenceHash> hashes,
                                                          std::optional<Error>* error) {
  std::vector<ImmutableBlock<G2>> out;
  std::vector<MutableBlock<G2>> staging = g2_->allocate_at_most(hashes.size());
  const std::size_t n = staging.size();
  if (n < hashes.size() && error != nullptr && !*error) {
    *error = Error{ErrorKind::kNoSpace, 0,
                   "G4: " + std::to_string(hashes.size() - n) +
                       " block(s) found in G4 had no free G2 block to land in; they stay in G4"};
  }
  if (n == 0) return out;  // G2 has no room: a miss (the blocks stay in G4)

  // One GET per block, pipelined; each lands in its G2 block only if verified.
  std::vector<std::vector<Region>> regions(n);
  std::vector<std::vector<std::span<std::byte>>> spans(n);
  std::vector<RemoteGet> gets(n);
  for (std::size_t i = 0; i < n; ++i) {
    host_.append_regions(staging[i].block_id(), regions[i]);
    for (const auto& r : regions[i]) {
      spans[i].emplace_back(reinterpret_cast<std::byte*>(r.addr), r.size);
    }
    gets[i] = {hashes[i].value(), 0, spans[i]};
  }
  const std::vector<RemoteStatus> status = store_->get(gets);
  std::size_t verified = 0;
  while (verified < n && status[verified] == RemoteStatus::kOk) ++verified;
  if (verified < n && error != nullptr) {
    if (const auto kind = error_kind_of(status[verified])) {
      *error =
          Error{*kind, 0,
                "G4: block " + std::to_string(verified) + " of a fetch of " + std::to_string(n) +
                    ": " + std::string(to_string(status[verified])) + " (a miss from there on)"};
    }
  }
  // The rest go back to G2's reset pool.
  staging.erase(staging.begin() + static_cast<std::ptrdiff_t>(verified), staging.end());

  // A block that cannot be registered in G2 ends the prefix there.
  bool whole = true;
  out.reserve(verified);
  stage_and_register_copies(
      *g2_, staging, {}, [&](std::size_t i) { return hashes[i]; },
      [&](std::size_t, std::optional<ImmutableBlock<G2>>&& r) {
        if (!r) whole = false;
        if (r && whole) out.push_back(std::move(*r));
      });
  return out;
}

}  // namespace kvbm::facade
