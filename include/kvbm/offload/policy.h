// kvbm/offload/policy.h: which blocks are worth offloading.
//
// The PolicyEvaluator (kvbm/offload/policy_evaluator.h) asks its policies, in
// order, about each container's blocks; a block is offloaded only if every
// policy passes it (a conjunction). A policy sees the sequence hashes of the
// blocks still passing and clears the entries it filters:
//
//   PassAllPolicy        passes everything ("pass_all")
//   PresencePolicy<Dst>  filters blocks whose hash tier Dst already holds,
//                        through a BlockRegistry ("presence")
//   FrequencyPolicy      passes blocks whose TinyLFU estimate is at least
//                        min_count ("frequency")
//   AllOfPolicy          a conjunction of policies ("all_of"); the evaluator
//                        flattens it so each member is timed and counted
//                        under its own name
//
// A policy call that takes longer than policy_timeout (on the pipeline's
// clock) or throws counts as filtering every block it was asked about.
//
// Thread-safety: evaluate() is called from one thread at a time per
// evaluator; a policy shared by several pipelines must be thread-safe (the
// ones here are).

#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvbm/block_registry.h"
#include "kvbm/error.h"
#include "kvbm/frequency_tracker.h"
#include "kvbm/sequence_hash.h"
#include "kvbm/tier.h"

namespace kvbm {

/// Decides which blocks to offload.
class OffloadPolicy {
 public:
  virtual ~OffloadPolicy() = default;
  /// Returns the policy's name: the `policy` label of its metrics.
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// `pass` has one entry per hash, all true on entry; set an entry to false
  /// to filter that block.
  virtual void evaluate(std::span<const SequenceHash> hashes, std::vector<bool>& pass) = 0;
  /// Returns true when evaluate() never blocks and takes microseconds (an
  /// in-memory lookup). A pipeline whose policies are all cheap runs them on
  /// the thread that enqueues, saving a thread hand-off per container; any
  /// other policy runs on the pipeline's policy thread. The timeout applies
  /// either way. Defaults to false.
  [[nodiscard]] virtual bool cheap() const noexcept { return false; }
};

/// Passes every block.
class PassAllPolicy final : public OffloadPolicy {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "pass_all"; }
  void evaluate(std::span<const SequenceHash> hashes, std::vector<bool>& pass) override;
  [[nodiscard]] bool cheap() const noexcept override { return true; }
};

/// Passes blocks seen at least `min_count` times lately by a TinyLFU tracker
/// (the registry's tracker counts registrations and matches).
class FrequencyPolicy final : public OffloadPolicy {
 public:
  /// Throws UsageError when `tracker` is null, or when min_count exceeds
  /// FrequencyTracker::kMaxCount (no block could ever pass).
  FrequencyPolicy(std::shared_ptr<FrequencyTracker> tracker, std::uint32_t min_count);
  [[nodiscard]] std::string_view name() const noexcept override { return "frequency"; }
  void evaluate(std::span<const SequenceHash> hashes, std::vector<bool>& pass) override;
  [[nodiscard]] bool cheap() const noexcept override { return true; }
  [[nodiscard]] std::uint32_t min_count() const noexcept { return min_count_; }

 private:
  std::shared_ptr<FrequencyTracker> tracker_;
  std::uint32_t min_count_;
};

/// Filters blocks whose hash is already registered in tier Dst.
template <TierMarker Dst>
class PresencePolicy final : public OffloadPolicy {
 public:
  /// Queries `registry` (the destination manager's). Throws UsageError when null.
  explicit PresencePolicy(std::shared_ptr<BlockRegistry> registry)
      : registry_(std::move(registry)) {
    KVBM_CHECK(registry_ != nullptr,
               "PresencePolicy needs the destination's registry (BlockManager::registry())");
  }
  [[nodiscard]] std::string_view name() const noexcept override { return "presence"; }
  [[nodiscard]] bool cheap() const noexcept override { return true; }
  void evaluate(std::span<const SequenceHash> hashes, std::vector<bool>& pass) override {
    const std::vector<bool> present = registry_->template presence<Dst>(hashes);
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      if (present[i]) pass[i] = false;
    }
  }

 private:
  std::shared_ptr<BlockRegistry> registry_;
};

/// The conjunction of its members, asked in order.
class AllOfPolicy final : public OffloadPolicy {
 public:
  /// Throws UsageError when a member is null.
  explicit AllOfPolicy(std::vector<std::shared_ptr<OffloadPolicy>> policies);
  [[nodiscard]] std::string_view name() const noexcept override { return "all_of"; }
  void evaluate(std::span<const SequenceHash> hashes, std::vector<bool>& pass) override;
  /// True when every member is cheap.
  [[nodiscard]] bool cheap() const noexcept override;
  /// Returns the members.
  [[nodiscard]] const std::vector<std::shared_ptr<OffloadPolicy>>& policies() const noexcept {
    return policies_;
  }

 private:
  std::vector<std::shared_ptr<OffloadPolicy>> policies_;
};

}  // namespace kvbm
