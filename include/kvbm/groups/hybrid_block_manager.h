// kvbm/groups/hybrid_block_manager.h: the blocks of one tier for a hybrid model's groups.
//
// A HybridBlockManager<T> is built from a model's KV cache groups
// (kvbm/groups/kv_cache_group_spec.h) and owns one BlockManager<T> per group,
// each with its own pool (sized per group), registry and name
// ("<pool name>/group:<id>:<kind>:<tpb>"). Blocks are registered under keys
// derived from their group (kvbm/groups/group_key.h), so no block of one group
// is ever served for another. A request's life:
//
//     auto hit = m.find_prefix(hashes, prompt_tokens - 1);  // per group: only what the cut reads
//     HybridRequest<T> r = m.start_request(std::move(hit));
//     while (running) {
//       if (!m.allocate(r, r.computed_tokens() + step)) wait_or_preempt();  // all groups or none
//       ... the engine writes `step` tokens ...
//       m.commit(r, hashes, r.computed_tokens() + step);      // registers the full blocks
//       m.release_out_of_reach(r, r.computed_tokens());       // windows and chunks move on
//     }
//     m.finish(r, hashes);                                    // end snapshot; releases all
//
// `hashes` are the sequence's chained hashes at hash_block_size() tokens per
// block (kvbm/hashing.h), from its first block. Hits follow
// kvbm/groups/hit_rules.h: find_prefix() returns, per group, the blocks the
// cut reads (a window's tail, one snapshot, a chunk's head), not the whole
// prefix. allocate() first releases what is out of reach, then takes the
// blocks every group needs or none (a group that is short leaves every pool as
// it was). release_out_of_reach() drops, per group, the blocks below the
// group's reach (registered ones go to the inactive pool, still matchable), so
// a sliding-window group holds O(W / b) blocks however long the request runs.
// Recurrent-state blocks are registered per the SnapshotPolicy
// (kvbm/groups/snapshot_policy.h).
//
// Every pool keeps its own accounting: audit() checks reset + inactive + in
// use == total and the store's own recount for each group.
//
// Pools it does not own: Builder::group(spec, pool) runs a group over a pool
// the caller built and keeps alive longer than the manager (the hybrid facade,
// kvbm/hybrid/hybrid_kv_block_manager.h, passes each group's KvBlockManager
// G1 pool, whose registration hook offloads to the lower tiers). Registration
// goes through the pool's register_blocks(), so such a hook sees every block
// commit() registers.
//
// Thread-safety: the manager may be used from several threads at once (each
// pool is thread-safe); one request is used by one thread at a time.
// Errors: misuse throws UsageError; a pool that cannot satisfy an allocation
// is reported by allocate() returning false.

#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kvbm/block_manager.h"
#include "kvbm/error.h"
#include "kvbm/groups/group_key.h"
#include "kvbm/groups/hit_rules.h"
#include "kvbm/groups/hybrid_request.h"
#include "kvbm/groups/kv_cache_group_spec.h"
#include "kvbm/groups/snapshot_policy.h"
#include "kvbm/tier.h"

namespace kvbm {

/// What find_prefix() found: the cut and, per group, the blocks it reads.
template <TierMarker T>
struct PrefixHit {
  std::size_t tokens = 0;                              ///< the cut (tokens not to compute)
  std::vector<BlockRange> ranges;                      ///< per group, the block indices read
  std::vector<std::vector<ImmutableBlock<T>>> blocks;  ///< per group, those blocks in order
  std::size_t rounds = 0;                              ///< fixed-point rounds of the last try

  /// Returns the number of blocks held over all groups.
  [[nodiscard]] std::size_t held_blocks() const noexcept {
    std::size_t n = 0;
    for (const auto& b : blocks) n += b.size();
    return n;
  }
};

/// One BlockManager<T> per KV cache group, with the hybrid rules; see the file comment.
template <TierMarker T>
class HybridBlockManager {
 public:
  /// Builds a HybridBlockManager<T>; build() checks every option.
  class Builder {
   public:
    /// Adds the next group (its id must equal its position) with a pool of `block_count`.
    Builder& group(KvCacheGroupSpec spec, std::size_t block_count) {
      specs_.push_back(std::move(spec));
      counts_.push_back(block_count);
      adopted_.push_back(nullptr);
      return *this;
    }
    /// Adds the next group over `pool`, which the caller owns and keeps alive longer
    /// than the manager (its size, eviction, name and metrics are its own; the
    /// options below do not apply to it). Its block size must be the group's.
    Builder& group(KvCacheGroupSpec spec, BlockManager<T>& pool) {
      specs_.push_back(std::move(spec));
      counts_.push_back(0);
      adopted_.push_back(&pool);
      return *this;
    }
    /// Which recurrent-state snapshots are registered (default every block).
    Builder& snapshot_policy(SnapshotPolicy p) {
      policy_ = p;
      return *this;
    }
    /// Eviction policy of every group's inactive pool (default LRU).
    Builder& eviction(EvictionPolicy p) {
      eviction_ = p;
      return *this;
    }
    /// Prefix of the pools' names and `pool` labels (default tier_name<T>()).
    Builder& pool_name(std::string prefix) {
      prefix_ = std::move(prefix);
      return *this;
    }
    /// Prometheus registry every group's series go into (default: one per pool).
    Builder& metrics_registry(std::shared_ptr<prometheus::Registry> r) {
      metrics_ = std::move(r);
      return *this;
    }
    /// Returns the manager. Throws UsageError naming the first invalid option.
    [[nodiscard]] HybridBlockManager build() {
      validate_groups(specs_);
      HybridBlockManager m;
      m.policy_ = policy_;
      m.hash_block_ = kvbm::hash_block_size(specs_);
      m.alignment_ = kvbm::alignment_tokens(specs_);
      const std::string prefix = prefix_.empty() ? std::string(tier_name<T>()) : prefix_;
      for (std::size_t g = 0; g < specs_.size(); ++g) {
        BlockManager<T>* pool = adopted_[g] != nullptr ? adopt(g) : &m.own(build_pool(g, prefix));
        KVBM_CHECK(std::find(m.pools_.begin(), m.pools_.end(), pool) == m.pools_.end(),
                   "HybridBlockManager::Builder: group ", g, "'s pool is another group's too; ",
                   "give each group a pool of its own");
        m.pools_.push_back(pool);
        m.rules_.push_back(GroupRule::of(specs_[g]));
        m.seeds_.push_back(group_seed(specs_[g]));
        m.per_block_.push_back(specs_[g].tokens_per_block / m.hash_block_);
      }
      m.specs_ = std::move(specs_);
      return m;
    }

   private:
    BlockManager<T> build_pool(std::size_t g, const std::string& prefix) const {
      auto builder = BlockManager<T>::builder()
                         .block_count(counts_[g])
                         .block_size(specs_[g].tokens_per_block)
                         .eviction(eviction_)
                         .pool_name(specs_[g].namespace_for(prefix));
      if (metrics_) builder.metrics_registry(metrics_);
      return builder.build();
    }
    BlockManager<T>* adopt(std::size_t g) const {
      KVBM_CHECK(adopted_[g]->valid(), "HybridBlockManager::Builder: group ", g,
                 "'s pool is a moved-from BlockManager");
      KVBM_CHECK(adopted_[g]->block_size() == specs_[g].tokens_per_block,
                 "HybridBlockManager::Builder: group ", g, "'s pool has blocks of ",
                 adopted_[g]->block_size(), " tokens, the group ", specs_[g].tokens_per_block,
                 "; build the pool with the group's tokens per block");
      return adopted_[g];
    }

    std::vector<KvCacheGroupSpec> specs_;
    std::vector<std::size_t> counts_;
    std::vector<BlockManager<T>*> adopted_;  // per group: the caller's pool, or null
    SnapshotPolicy policy_;
    EvictionPolicy eviction_ = EvictionPolicy::kLru;
    std::string prefix_;
    std::shared_ptr<prometheus::Registry> metrics_;
  };

  /// Returns a builder.
  static Builder builder() { return {}; }

  /// Returns the number of groups.
  [[nodiscard]] std::size_t group_count() const noexcept { return specs_.size(); }
  /// Returns group `g`'s spec.
  [[nodiscard]] const KvCacheGroupSpec& group(std::size_t g) const { return specs_.at(g); }
  /// Returns group `g`'s pool.
  [[nodiscard]] BlockManager<T>& pool(std::size_t g) { return *pools_.at(g); }
  [[nodiscard]] const BlockManager<T>& pool(std::size_t g) const { return *pools_.at(g); }
  /// Returns the tokens per block the sequence's hashes are taken at (gcd of block sizes).
  [[nodiscard]] std::uint32_t hash_block_size() const noexcept { return hash_block_; }
  /// Returns the alignment of every cut (lcm of block sizes).
  [[nodiscard]] std::uint32_t alignment_tokens() const noexcept { return alignment_; }
  /// Returns the snapshot policy of recurrent-state groups.
  [[nodiscard]] const SnapshotPolicy& snapshot_policy() const noexcept { return policy_; }

  /// Returns group `g`'s keys of its blocks [first, last) (clamped to the full
  /// blocks `hashes` covers).
  [[nodiscard]] std::vector<SequenceHash> group_hashes(std::size_t g,
                                                       std::span<const SequenceHash> hashes,
                                                       std::size_t first = 0,
                                                       std::size_t last = SIZE_MAX) const {
    check_group(g, "group_hashes");
    return kvbm::group_hashes(hashes, per_block_[g], seeds_[g], first, last);
  }

  /// The longest cut at or below `max_tokens` (and the tokens `hashes` cover) that
  /// every group can serve, holding the blocks each group reads there. Retries
  /// when another thread evicts a block between the presence check and the take.
  [[nodiscard]] PrefixHit<T> find_prefix(std::span<const SequenceHash> hashes,
                                         std::size_t max_tokens = SIZE_MAX) {
    max_tokens = std::min(max_tokens, hashes.size() * hash_block_);
    constexpr int kAttempts = 4;
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      if (auto hit = try_find(hashes, max_tokens)) return std::move(*hit);
    }
    return empty_hit();
  }

  /// Starts a request from a prefix hit (its blocks move into the request).
  [[nodiscard]] HybridRequest<T> start_request(PrefixHit<T>&& hit) {
    KVBM_CHECK(hit.blocks.size() == specs_.size() && hit.ranges.size() == specs_.size(),
               "start_request: the PrefixHit has ", hit.blocks.size(), " groups, the manager ",
               specs_.size(), "; pass a hit from this manager's find_prefix()");
    HybridRequest<T> r(specs_.size());
    for (std::size_t g = 0; g < specs_.size(); ++g) {
      auto& s = r.groups_[g];
      s.first = hit.ranges[g].first;
      s.committed = hit.ranges[g].last;
      for (auto& b : hit.blocks[g]) {
        KVBM_CHECK(pools_[g]->owns(b), "start_request: a block of group ", g,
                   " belongs to another pool; pass a hit from this manager's find_prefix()");
        s.slots.emplace_back(std::move(b));
      }
    }
    r.computed_ = hit.tokens;
    hit.blocks.clear();
    return r;
  }
  /// Starts a request with no prefix hit.
  [[nodiscard]] HybridRequest<T> start_request() { return start_request(empty_hit()); }

  /// Makes room for `total_tokens` tokens in every group: first releases what is
  /// out of reach at the request's computed tokens, then takes the blocks each
  /// group lacks, in every group or in none. Returns false, changing no pool's
  /// blocks, when a group's pool cannot provide them.
  [[nodiscard]] bool allocate(HybridRequest<T>& r, std::size_t total_tokens) {
    check_request(r, "allocate");
    release_out_of_reach(r, r.computed_);
    std::vector<std::size_t> need(specs_.size());
    for (std::size_t g = 0; g < specs_.size(); ++g) {
      const auto& s = r.groups_[g];
      const std::size_t b = specs_[g].tokens_per_block;
      const std::size_t target = (total_tokens + b - 1) / b;
      const std::size_t end = s.first + s.slots.size();
      need[g] = target > end ? target - end : 0;
      if (need[g] > 1 && steps_over(g)) need[g] = 1;  // only the step's end block
      KVBM_CHECK(need[g] <= pools_[g]->total_blocks(), "allocate: group ", g, " needs ", need[g],
                 " blocks but its pool has ", pools_[g]->total_blocks(), "; build a larger pool");
      if (pools_[g]->available_blocks() < need[g]) return false;  // nothing taken yet
    }
    std::vector<std::vector<MutableBlock<T>>> taken(specs_.size());
    for (std::size_t g = 0; g < specs_.size(); ++g) {
      auto got = pools_[g]->allocate_blocks(need[g]);
      if (!got) return false;  // raced with another thread: `taken` returns to the reset pools
      taken[g] = std::move(*got);
    }
    for (std::size_t g = 0; g < specs_.size(); ++g) {
      auto& s = r.groups_[g];
      if (steps_over(g)) {  // holes for the blocks the step passes over
        const std::size_t b = specs_[g].tokens_per_block;
        const std::size_t target = (total_tokens + b - 1) / b;
        while (s.first + s.slots.size() + taken[g].size() < target) {
          s.slots.emplace_back(std::monostate{});
        }
      }
      for (auto& b : taken[g]) s.slots.emplace_back(std::move(b));
    }
    return true;
  }

  /// Records that the request has computed `computed_tokens` (no fewer than
  /// before) and registers, in every group, the blocks that became full
  /// (recurrent state: those the snapshot policy keeps). `hashes` covers at least
  /// computed_tokens / hash_block_size() blocks. Throws UsageError when a group
  /// holds no block for a token it claims computed.
  void commit(HybridRequest<T>& r, std::span<const SequenceHash> hashes,
              std::size_t computed_tokens) {
    check_request(r, "commit");
    KVBM_CHECK(computed_tokens >= r.computed_, "commit: ", computed_tokens,
               " computed tokens is fewer than the ", r.computed_, " committed before");
    for (std::size_t g = 0; g < specs_.size(); ++g) commit_group(r, g, hashes, computed_tokens);
    r.computed_ = computed_tokens;
  }

  /// Releases, in every group, the blocks out of reach once `computed_tokens`
  /// are computed (kvbm/groups/hit_rules.h: first_block_in_reach): registered
  /// ones go to the inactive pool, the rest to the reset pool. Full-attention
  /// groups keep everything. Raises the request's computed tokens when larger.
  void release_out_of_reach(HybridRequest<T>& r, std::size_t computed_tokens) {
    check_request(r, "release_out_of_reach");
    r.computed_ = std::max(r.computed_, computed_tokens);
    for (std::size_t g = 0; g < specs_.size(); ++g) {
      auto& s = r.groups_[g];
      std::size_t reach = first_block_in_reach(rules_[g], r.computed_);
      if (specs_[g].kind == AttentionKind::kRecurrentState && policy_.keeps_last_completed()) {
        const std::size_t full = r.computed_ / specs_[g].tokens_per_block;
        reach = std::min(reach, full > 0 ? full - 1 : 0);
      }
      while (s.first < reach && !s.slots.empty()) {
        s.slots.pop_front();
        ++s.first;
      }
      if (s.slots.empty()) s.first = std::max(s.first, reach);
    }
  }

  /// Ends the request: registers the end snapshot of recurrent-state groups under
  /// SnapshotPolicy::request_end() (from `hashes`), then releases every block,
  /// the last blocks first. The request is empty afterwards.
  void finish(HybridRequest<T>& r, std::span<const SequenceHash> hashes) {
    check_request(r, "finish");
    if (policy_.kind == SnapshotPolicy::Kind::kRequestEnd) {
      for (std::size_t g = 0; g < specs_.size(); ++g) register_end_snapshot(r, g, hashes);
    }
    finish(r);
  }
  /// Ends the request without registering anything more; releases every block.
  void finish(HybridRequest<T>& r) {
    for (auto& s : r.groups_) {
      while (!s.slots.empty()) s.slots.pop_back();
    }
    r.groups_.clear();
  }

  /// Recounts every group's pool; returns "" when each is consistent and balanced
  /// (reset + inactive + in use == total), else what is wrong, per group.
  [[nodiscard]] std::string audit() const {
    std::string out;
    for (std::size_t g = 0; g < specs_.size(); ++g) {
      std::string a = pools_[g]->audit();
      const PoolCounts c = pools_[g]->pool_counts();
      if (!c.balanced()) {
        a += detail::concat(a.empty() ? "" : "; ", "reset ", c.reset, " + inactive ", c.inactive,
                            " + in use ", c.in_use, " != total ", c.total);
      }
      if (!a.empty()) {
        out += detail::concat(out.empty() ? "" : "; ", "group ", g, " (", specs_[g].display_name(),
                              "): ", a);
      }
    }
    return out;
  }

 private:
  HybridBlockManager() = default;

  // Keeps a pool the manager built; returns it (its address is stable).
  BlockManager<T>& own(BlockManager<T>&& pool) {
    owned_.push_back(std::make_unique<BlockManager<T>>(std::move(pool)));
    return *owned_.back();
  }

  void check_group(std::size_t g, const char* call) const {
    KVBM_CHECK(g < specs_.size(), "HybridBlockManager::", call, ": group ", g, " of ",
               specs_.size());
  }
  void check_request(const HybridRequest<T>& r, const char* call) const {
    KVBM_CHECK(r.groups_.size() == specs_.size(), "HybridBlockManager::", call, ": the request ",
               "has ", r.groups_.size(), " groups, the manager ", specs_.size(),
               r.groups_.empty() ? " (it was finished or moved from)" : "");
  }

  // True when group g takes only each step's end block (SnapshotPolicy::step_end()).
  [[nodiscard]] bool steps_over(std::size_t g) const noexcept {
    return specs_[g].kind == AttentionKind::kRecurrentState && policy_.takes_step_end_only();
  }

  // Whether commit() registers group g's block i, now complete, at `computed_tokens`.
  [[nodiscard]] bool registers(std::size_t g, std::size_t i, std::size_t computed_tokens) const {
    if (specs_[g].kind != AttentionKind::kRecurrentState) return true;
    if (!policy_.takes_step_end_only()) return policy_.registers_on_completion(i);
    const std::size_t b = specs_[g].tokens_per_block;  // the state at the step's end only
    return computed_tokens % b == 0 && i + 1 == computed_tokens / b;
  }

  PrefixHit<T> empty_hit() const {
    PrefixHit<T> h;
    h.ranges.assign(specs_.size(), BlockRange{});
    h.blocks.resize(specs_.size());
    return h;
  }

  // One try: presence per group, the fixed point, then the take. nullopt when a
  // block the hit reads was evicted in between (the blocks taken are dropped).
  std::optional<PrefixHit<T>> try_find(std::span<const SequenceHash> hashes,
                                       std::size_t max_tokens) {
    const std::size_t groups = specs_.size();
    std::vector<std::vector<SequenceHash>> keys(groups);
    std::vector<std::vector<bool>> present(groups);
    for (std::size_t g = 0; g < groups; ++g) {
      const std::size_t n0 = max_tokens / alignment_ * alignment_ / specs_[g].tokens_per_block;
      keys[g] = kvbm::group_hashes(hashes, per_block_[g], seeds_[g], 0, n0);
      present[g] = pools_[g]->registry()->template presence<T>(keys[g]);
    }
    const HybridHit hit = longest_common_hit(std::span<const GroupRule>(rules_), max_tokens,
                                             [&present](std::size_t g, std::size_t i) {
                                               return i < present[g].size() && present[g][i];
                                             });
    PrefixHit<T> out;
    out.tokens = hit.tokens;
    out.ranges = hit.blocks;
    out.rounds = hit.rounds;
    for (std::size_t g = 0; g < groups; ++g) {
      const BlockRange range = hit.blocks[g];
      const std::span<const SequenceHash> wanted(keys[g].data() + range.first, range.size());
      out.blocks.push_back(pools_[g]->scan_matches(wanted));
      if (out.blocks.back().size() != range.size()) return std::nullopt;
    }
    return out;
  }

  // Offers group g's blocks that became full for registration, in one batch.
  void commit_group(HybridRequest<T>& r, std::size_t g, std::span<const SequenceHash> hashes,
                    std::size_t computed_tokens) {
    auto& s = r.groups_[g];
    const std::size_t b = specs_[g].tokens_per_block;
    const std::size_t full = computed_tokens / b;
    KVBM_CHECK(full <= s.first + s.slots.size() || full <= s.committed, "commit: group ", g,
               " holds blocks up to ", s.first + s.slots.size(), " but ", computed_tokens,
               " computed tokens fill ", full, "; allocate() before computing");
    const std::size_t lo = std::max(s.committed, s.first);
    if (full <= lo) {
      s.committed = std::max(s.committed, full);
      return;
    }
    const auto keys = kvbm::group_hashes(hashes, per_block_[g], seeds_[g], lo, full);
    KVBM_CHECK(keys.size() == full - lo, "commit: the hashes cover ", lo + keys.size(),
               " blocks of group ", g, ", not ", full, "; pass the sequence's hashes");
    std::vector<CompleteBlock<T>> staged;
    std::vector<std::size_t> where;
    for (std::size_t i = lo; i < full; ++i) {
      auto& slot = s.slots[i - s.first];
      if (slot.index() != 0 || !registers(g, i, computed_tokens)) continue;
      auto done = std::move(std::get<0>(slot)).stage(keys[i - lo], static_cast<std::uint32_t>(b));
      staged.push_back(std::move(done).value());  // the size is the pool's: staging cannot fail
      where.push_back(i);
    }
    s.committed = full;
    if (staged.empty()) return;
    auto registered = pools_[g]->register_blocks(std::move(staged));
    for (std::size_t j = 0; j < where.size(); ++j) {
      s.slots[where[j] - s.first] = std::move(registered[j]);
    }
  }

  // SnapshotPolicy::request_end(): registers group g's last completed block.
  void register_end_snapshot(HybridRequest<T>& r, std::size_t g,
                             std::span<const SequenceHash> hashes) {
    if (specs_[g].kind != AttentionKind::kRecurrentState) return;
    auto& s = r.groups_[g];
    const std::size_t full = r.computed_ / specs_[g].tokens_per_block;
    if (full == 0 || full - 1 < s.first || full - 1 >= s.first + s.slots.size()) return;
    auto& slot = s.slots[full - 1 - s.first];
    if (slot.index() != 0) return;  // already registered (a hit's snapshot)
    const auto keys = kvbm::group_hashes(hashes, per_block_[g], seeds_[g], full - 1, full);
    KVBM_CHECK(keys.size() == 1, "finish: the hashes do not cover block ", full - 1, " of group ",
               g, "; pass the sequence's hashes");
    auto staged = std::move(std::get<0>(slot)).stage(keys[0], specs_[g].tokens_per_block);
    slot = pools_[g]->register_block(std::move(staged).value());
  }

  std::vector<KvCacheGroupSpec> specs_;
  std::vector<std::unique_ptr<BlockManager<T>>> owned_;  // the pools it built
  std::vector<BlockManager<T>*> pools_;                  // per group: owned or the caller's
  std::vector<GroupRule> rules_;
  std::vector<std::uint64_t> seeds_;
  std::vector<std::uint32_t> per_block_;  // hash blocks per group block
  SnapshotPolicy policy_;
  std::uint32_t hash_block_ = 1;
  std::uint32_t alignment_ = 1;
};

}  // namespace kvbm
