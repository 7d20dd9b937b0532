// src/facade/remote_tier.cpp: the remote tier G4 in the facade (facade/remote_tier.h).

#include "facade/remote_tier.h"

#include <string>
#include <utility>

#include "kvbm/offload/remote_presence_policy.h"

namespace kvbm::facade {
namespace {

// On-eviction: what the tier above evicts is staged for G4 before the
// allocation that evicted it takes the blocks (a memcpy; the write happens
// on the writer).
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

// The tier's store options, with the three that are the facade's.
RemoteStoreOptions store_options(const KvBlockManagerConfig& c, const RemoteTierConfig& r) {
  RemoteStoreOptions o = r;
  o.name_space = {r.model, r.dtype, c.layout, r.user_namespace};
  o.metrics_registry = c.metrics_registry;
  o.pool_name = "G4";
  if (!o.env) o.env = c.env;  // the facade's runtime, unless the tier names its own
  return o;
}

}  // namespace

RemoteTier::RemoteTier(const TierSpec& spec, const KvBlockManagerConfig& c, const Layout& above,
                       std::shared_ptr<FrequencyTracker> tracker, std::shared_ptr<Costs> costs)
    : Tier(spec),
      store_(RemoteStore::create(store_options(c, *spec.remote))),
      costs_(std::move(costs)) {
  std::vector<std::shared_ptr<OffloadPolicy>> policies;
  if (spec.policy->min_frequency > 0) {
    policies.push_back(
        std::make_shared<FrequencyPolicy>(std::move(tracker), spec.policy->min_frequency));
  }
  if (spec.policy->skip_present) {
    policies.push_back(std::make_shared<RemotePresencePolicy>(store_));
  }
  const bool on_eviction = spec.mode == OffloadMode::kOnEviction;
  writer_ = std::make_shared<RemoteWriter>(
      store_, above,
      RemoteWriter::Options{
          spec.remote->staging_blocks, spec.remote->max_batch_blocks,
          copy_path_name(spec.above, spec.id) + (on_eviction ? "_on_eviction" : ""),
          *spec.listeners,
          [costs = costs_, from = spec.above, to = spec.id](std::size_t n, Clock::duration took) {
            costs->record(from, to, n, took);
          },
          c.clock},
      std::move(policies), c.metrics_registry);
  if (on_eviction) listener_ = std::make_shared<RemoteEvictionListener>(writer_);
}

RemoteTier::~RemoteTier() { writer_->shutdown(); }

std::vector<bool> RemoteTier::presence(std::span<const SequenceHash> hashes) const {
  std::vector<std::uint64_t> keys;
  keys.reserve(hashes.size());
  for (const auto& h : hashes) keys.push_back(h.value());
  return store_->exists(keys);
}

// The steps of the file comment's "up".
Taken RemoteTier::take(std::span<const SequenceHash> run, Tier* landing,
                       std::optional<Error>* error) {
  Room room = landing->reserve(run.size());
  const std::size_t n = room.ids.size();
  if (n < run.size() && error != nullptr && !*error) {
    *error =
        Error{ErrorKind::kNoSpace, 0,
              "G4: " + std::to_string(run.size() - n) + " block(s) found in G4 had no free " +
                  std::string(to_string(landing->id())) + " block to land in; they stay in G4"};
  }
  if (n == 0) return {};  // no room: a miss (the blocks stay in G4)

  // One GET per block, pipelined; each lands in its block only if verified.
  std::vector<RemoteGet> gets(n);
  for (std::size_t i = 0; i < n; ++i) gets[i] = {run[i].value(), 0, room.bytes[i]};
  const Clock::time_point start = costs_->clock().now();
  const std::vector<RemoteStatus> status = store_->get(gets);
  costs_->record(id(), landing->id(), n, costs_->clock().now() - start);
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
  return landing->land(std::move(room), run.first(n), verified);
}

void RemoteTier::collect(KvBlockManagerStats& out) const {
  out.tiers.push_back({.tier = id(), .blocks = {}, .counters = {}, .store = store_->stats()});
}

}  // namespace kvbm::facade
