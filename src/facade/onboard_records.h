// src/facade/onboard_records.h (internal): what an onboarding took, one record per position.
//
// Taking a plan's runs (facade/onboard_plan.h) leaves one OnboardRecord per
// position of the prefix, whatever the tier: a G1 hit holds its block; a
// position below G1 names its source block (held by one of the records'
// Holds, until the copies end) and, once G1 has room for it, its target. A
// block fetched from a remote tier is a record like any other: found in G4
// (`from`), its source block in the landing tier (`at`, G2), where it was
// registered when it arrived; it is copied up with that tier's engine.
//
// Releasing is last position first (kvbm/blocks/release_order.h): the G1
// blocks, then the targets, then the Holds.
//
// Thread-safety: none (OnboardState, onboard_state.h, says who touches them when).

#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "facade/tier.h"
#include "kvbm/block_manager.h"
#include "kvbm/sequence_hash.h"

namespace kvbm::facade {

/// One position of an onboarding's prefix.
struct OnboardRecord {
  SequenceHash hash;
  TierId from = TierId::kG1;                ///< the tier it was found in (G4: fetched into `at`)
  TierId at = TierId::kG1;                  ///< the tier its source block is in (G1: a hit)
  BlockId source = 0;                       ///< that block (below G1)
  std::size_t hold = 0;                     ///< the Hold keeping it (below G1)
  std::optional<MutableBlock<G1>> target;   ///< below G1: the G1 block it is copied into
  std::optional<ImmutableBlock<G1>> block;  ///< its G1 block: a hit, or its copy once registered
  bool failed = false;                      ///< its copy failed
  bool arrived = false;                     ///< its copy came back intact

  [[nodiscard]] bool below() const noexcept { return at != TierId::kG1; }
};

/// Consecutive records from a prefix's first taken position, and their
/// Holds; see the file comment.
class OnboardRecords {
 public:
  OnboardRecords() = default;
  ~OnboardRecords() { release(); }
  OnboardRecords(OnboardRecords&&) noexcept = default;
  OnboardRecords& operator=(OnboardRecords&& other) noexcept;
  OnboardRecords(const OnboardRecords&) = delete;
  OnboardRecords& operator=(const OnboardRecords&) = delete;

  [[nodiscard]] std::size_t size() const noexcept { return records_.size(); }
  /// Makes room for `n` records in all.
  void reserve(std::size_t n) { records_.reserve(n); }
  [[nodiscard]] OnboardRecord& operator[](std::size_t i) { return records_[i]; }
  [[nodiscard]] const OnboardRecord& operator[](std::size_t i) const { return records_[i]; }

  /// Appends G1 hits: `blocks` for the first of `hashes`.
  void add_hits(std::span<const SequenceHash> hashes, std::vector<ImmutableBlock<G1>>&& blocks);
  /// Appends what a tier handed over for the first of `hashes`, found in `from`.
  void add_taken(std::span<const SequenceHash> hashes, TierId from, Taken&& taken);
  /// Appends `more` after the last record (their Holds too).
  void append(OnboardRecords&& more);

  /// The records below G1 (each needs a G1 target).
  [[nodiscard]] std::size_t below() const noexcept;
  /// Gives the records below G1 their targets, in order; the records from
  /// the first that gets none are let go (the prefix ends there).
  void give_targets(std::vector<MutableBlock<G1>>&& targets);
  /// Keeps the first `n` records; lets go of the rest and their source blocks.
  void keep_first(std::size_t n) noexcept;
  /// Lets go of everything, last position first.
  void release() noexcept;

 private:
  std::vector<OnboardRecord> records_;
  std::vector<std::unique_ptr<Hold>> holds_;
};

}  // namespace kvbm::facade
