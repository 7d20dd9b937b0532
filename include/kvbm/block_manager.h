// kvbm/block_manager.h: the blocks of one tier.
//
// A BlockManager<T> owns a fixed number of blocks of tier T, all of
// `block_size` tokens, and hands them out as type-state handles:
//
//     allocate_blocks(n)         -> std::vector<MutableBlock<T>>  (all or nothing)
//     allocate_block()           -> one MutableBlock<T>, no vector
//     std::move(m).stage(h, bs)  -> CompleteBlock<T>
//     register_block(std::move(c)) -> ImmutableBlock<T>   (now matchable)
//     match_blocks(hashes)       -> leading run of ImmutableBlock<T>
//
// Dropping a MutableBlock or CompleteBlock returns it to the reset pool;
// dropping the last ImmutableBlock moves it to the inactive pool, where it
// stays matchable until an allocation evicts it (in the order of the eviction
// backend). At every moment reset + inactive + in use == total
// (pool_counts().balanced()).
//
// Registration hook: Builder::on_register() names a function that sees every
// block registered through register_block() / register_blocks(), after the
// pool's lock is released, on the registering thread (the facade enqueues
// them for write-through there). register_copy() / register_copies()
// register without it: for copies that arrive from another tier, whose path
// hands them on itself, and for the hook's owner, which does the same.
//
// Thread-safety: every member may be called from several threads at once;
// handles may be dropped on any thread and may outlive the manager.
// Errors: misuse throws UsageError; an allocation the pool cannot satisfy
// returns nullopt and changes nothing.
//
// Moving: a moved-from BlockManager is empty. valid() says so; destroying or
// assigning to it is fine, any other member throws UsageError naming the call.
// Blocks it handed out stay valid (they belong to the manager moved into).

#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <typeindex>
#include <vector>

#include "kvbm/block_registry.h"
#include "kvbm/blocks/complete_block.h"
#include "kvbm/blocks/immutable_block.h"
#include "kvbm/blocks/mutable_block.h"
#include "kvbm/blocks/weak_block.h"
#include "kvbm/error.h"
#include "kvbm/eviction/backend.h"
#include "kvbm/metrics.h"
#include "kvbm/pool_core/block_store.h"
#include "kvbm/pool_listener.h"
#include "kvbm/tier.h"

namespace kvbm {

namespace detail {
/// Builds a store from a validated configuration (out of line: it creates
/// the eviction backend, the metrics series and logs the pool's creation).
std::shared_ptr<BlockStore> make_block_store(std::uint32_t block_count, std::uint32_t block_size,
                                             DuplicatePolicy duplicate_policy,
                                             EvictionPolicy eviction,
                                             const std::shared_ptr<BlockRegistry>& registry,
                                             std::shared_ptr<prometheus::Registry> metrics,
                                             std::string name,
                                             std::vector<std::shared_ptr<PoolListener>> listeners);
}  // namespace detail

/// Largest block size (tokens per block) a pool accepts.
inline constexpr std::uint32_t kMaxBlockSize = 1u << 16;
/// Largest number of blocks in one pool.
inline constexpr std::uint32_t kMaxBlockCount = (1u << 31);

/// The blocks of one tier T: allocation, registration, matching.
template <TierMarker T>
class BlockManager {
 public:
  /// Sees the blocks each register_block() / register_blocks() call
  /// registered; see the file comment. May throw (the caller of the
  /// registration sees it; the blocks stay registered).
  using RegisterHook = std::function<void(const std::vector<ImmutableBlock<T>>&)>;

  /// Builds a BlockManager<T>; every option is checked by build().
  class Builder {
   public:
    /// Number of blocks in the pool (required, 1 .. kMaxBlockCount).
    Builder& block_count(std::size_t n) {
      block_count_ = n;
      return *this;
    }
    /// Tokens per block (required, 1 .. kMaxBlockSize).
    Builder& block_size(std::size_t n) {
      block_size_ = n;
      return *this;
    }
    /// Registry to share with other tiers (default: a private one without
    /// frequency tracking).
    Builder& registry(std::shared_ptr<BlockRegistry> r) {
      registry_ = std::move(r);
      return *this;
    }
    /// Eviction backend of the inactive pool (default LRU).
    Builder& eviction(EvictionPolicy p) {
      eviction_ = p;
      return *this;
    }
    Builder& with_lru_backend() { return eviction(EvictionPolicy::kLru); }
    Builder& with_multi_level_lru_backend() { return eviction(EvictionPolicy::kMultiLevelLru); }
    Builder& with_lineage_backend() { return eviction(EvictionPolicy::kLineage); }
    /// What registration does with a hash the tier already holds (default Allow).
    Builder& duplicate_policy(DuplicatePolicy p) {
      duplicate_policy_ = p;
      return *this;
    }
    /// Prometheus registry the pool's series go into (default: a new one,
    /// reachable through metrics_registry()).
    Builder& metrics_registry(std::shared_ptr<prometheus::Registry> r) {
      metrics_ = std::move(r);
      return *this;
    }
    /// Value of the `pool` label and name in logs (default: tier_name<T>()).
    Builder& pool_name(std::string name) {
      name_ = std::move(name);
      return *this;
    }

    /// Adds a listener that sees the pool's stored, removed and evicted
    /// blocks (kvbm/pool_listener.h); may be called several times.
    Builder& listener(std::shared_ptr<PoolListener> l) {
      KVBM_CHECK(l != nullptr, "BlockManager: listener(nullptr); pass a PoolListener");
      listeners_.push_back(std::move(l));
      return *this;
    }
    /// Sets the registration hook (see the file comment); empty: none.
    Builder& on_register(RegisterHook hook) {
      on_register_ = std::move(hook);
      return *this;
    }

    /// Returns the manager. Throws UsageError naming the first invalid option.
    [[nodiscard]] BlockManager build() {
      KVBM_CHECK(block_count_ > 0, "BlockManager: block_count must be set to at least 1");
      KVBM_CHECK(block_count_ <= kMaxBlockCount, "BlockManager: block_count ", block_count_,
                 " exceeds the maximum of ", kMaxBlockCount);
      KVBM_CHECK(block_size_ > 0, "BlockManager: block_size must be set to at least 1 token");
      KVBM_CHECK(block_size_ <= kMaxBlockSize, "BlockManager: block_size ", block_size_,
                 " exceeds the maximum of ", kMaxBlockSize, " tokens");
      if (!registry_) registry_ = BlockRegistry::builder().build();
      auto store = detail::make_block_store(
          static_cast<std::uint32_t>(block_count_), static_cast<std::uint32_t>(block_size_),
          duplicate_policy_, eviction_, registry_, std::move(metrics_),
          name_.empty() ? std::string(tier_name<T>()) : std::move(name_), std::move(listeners_));
      registry_->attach(typeid(T), store);
      return BlockManager(std::move(store), std::move(registry_), std::move(on_register_));
    }

   private:
    std::size_t block_count_ = 0;
    std::size_t block_size_ = 0;
    std::shared_ptr<BlockRegistry> registry_;
    EvictionPolicy eviction_ = EvictionPolicy::kLru;
    DuplicatePolicy duplicate_policy_ = DuplicatePolicy::kAllow;
    std::shared_ptr<prometheus::Registry> metrics_;
    std::string name_;
    std::vector<std::shared_ptr<PoolListener>> listeners_;
    RegisterHook on_register_;
  };

  /// Returns a builder.
  static Builder builder() { return {}; }

  BlockManager(BlockManager&&) noexcept = default;
  BlockManager& operator=(BlockManager&& other) noexcept {
    if (this != &other) {
      if (store_) store_->orphan();
      store_ = std::move(other.store_);
      registry_ = std::move(other.registry_);
      on_register_ = std::move(other.on_register_);
    }
    return *this;
  }
  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;
  ~BlockManager() {
    if (store_) store_->orphan();
  }

  /// Returns false for a moved-from manager (every other member then throws).
  [[nodiscard]] bool valid() const noexcept { return store_ != nullptr; }

  /// Takes `count` blocks: first from the reset pool, then by evicting
  /// inactive blocks. Returns nullopt, changing nothing, when fewer than
  /// `count` blocks are available. allocate_blocks(0) returns an empty
  /// vector (not nullopt) and touches nothing, so a request whose every block
  /// was a prefix hit needs no special case. Throws UsageError for a count
  /// larger than the pool.
  [[nodiscard]] std::optional<std::vector<MutableBlock<T>>> allocate_blocks(std::size_t count) {
    check("allocate_blocks");
    if (count == 0) return std::vector<MutableBlock<T>>{};  // nothing asked, nothing taken
    KVBM_CHECK(count <= store_->total_blocks(), "allocate_blocks(", count, "): pool ",
               store_->name(), " has only ", store_->total_blocks(),
               " blocks; ask for at most that many");
    // The ids go through a buffer on the stack for the usual small counts.
    constexpr std::size_t kInline = 64;
    std::array<BlockId, kInline> inline_ids;
    std::vector<BlockId> heap_ids;
    BlockId* ids = inline_ids.data();
    if (count > kInline) {
      heap_ids.resize(count);
      ids = heap_ids.data();
    }
    if (!store_->allocate(static_cast<std::uint32_t>(count), ids)) return std::nullopt;
    std::vector<MutableBlock<T>> blocks;
    blocks.reserve(count);
    for (std::size_t i = 0; i < count; ++i) blocks.push_back(MutableBlock<T>(store_.get(), ids[i]));
    return blocks;
  }

  /// Takes one block, as allocate_blocks(1) does, without building a vector.
  /// Returns nullopt when no block is available.
  [[nodiscard]] std::optional<MutableBlock<T>> allocate_block() {
    check("allocate_block");
    BlockId id = 0;
    if (!store_->allocate(1, &id)) return std::nullopt;
    return MutableBlock<T>(store_.get(), id);
  }

  /// Takes exactly the free blocks `ids`, for restoring blocks whose bytes
  /// already sit in those slots (a persistent tier recovering its file): stage
  /// and register each under the hash its bytes belong to. Returns nullopt,
  /// taking nothing, when an id is out of range, repeated or not free
  /// (the reset pool); never evicts.
  [[nodiscard]] std::optional<std::vector<MutableBlock<T>>> allocate_ids(
      std::span<const BlockId> ids) {
    check("allocate_ids");
    if (!store_->allocate_ids(ids)) return std::nullopt;
    std::vector<MutableBlock<T>> out;
    out.reserve(ids.size());
    for (const BlockId id : ids) out.push_back(MutableBlock<T>(store_.get(), id));
    return out;
  }

  /// Takes as many blocks as it can, up to `count` (0 or more): all of them
  /// when allocate_blocks(count) would succeed, else as many as
  /// available_blocks() says fit, fewer still when a backend protects some
  /// (lineage). Returns them (possibly none) in allocate_blocks' order.
  [[nodiscard]] std::vector<MutableBlock<T>> allocate_at_most(std::size_t count) {
    check("allocate_at_most");
    std::size_t want = std::min(count, store_->total_blocks());
    while (want > 0) {
      if (auto blocks = allocate_blocks(want)) return std::move(*blocks);
      const std::size_t avail = available_blocks();
      want = avail < want ? avail : want - 1;
    }
    return {};
  }

  /// Registers a staged block, making it matchable. Under DuplicatePolicy::kReject
  /// a block whose hash is already registered is freed and the existing block
  /// returned. Throws UsageError (leaving `block` with the caller) when the
  /// block is empty or belongs to another manager. Runs the on_register hook.
  ImmutableBlock<T> register_block(CompleteBlock<T>&& block) {
    ImmutableBlock<T> out = register_copy(std::move(block));
    if (on_register_) on_register_(std::vector<ImmutableBlock<T>>{out});
    return out;
  }

  /// As register_block(block), and hands the block's tokens to the pool's
  /// listeners (PoolListener::on_stored_with_tokens) when it is stored under
  /// a new hash, so that a KV event publisher can publish them (routers that
  /// index by tokens need them). The tokens are not kept. Throws UsageError
  /// (nothing registered) unless tokens.size() == block_size().
  ImmutableBlock<T> register_block(CompleteBlock<T>&& block, std::span<const Token> tokens) {
    check("register_block");
    KVBM_CHECK(tokens.size() == store_->block_size(), "register_block: ", tokens.size(),
               " tokens given for a block of ", store_->block_size());
    ImmutableBlock<T> out = register_one(std::move(block), tokens);
    if (on_register_) on_register_(std::vector<ImmutableBlock<T>>{out});
    return out;
  }

  /// As register_blocks(blocks), with tokens[i] the tokens of blocks[i]; see
  /// register_block(block, tokens). Throws UsageError (nothing registered)
  /// unless there is one span of block_size() tokens per block.
  std::vector<ImmutableBlock<T>> register_blocks(std::vector<CompleteBlock<T>>&& blocks,
                                                 std::span<const std::span<const Token>> tokens) {
    std::vector<ImmutableBlock<T>> out = register_copies(std::move(blocks), tokens);
    if (on_register_ && !out.empty()) on_register_(out);
    return out;
  }

  /// As register_blocks(blocks, tokens), without the on_register hook.
  std::vector<ImmutableBlock<T>> register_copies(std::vector<CompleteBlock<T>>&& blocks,
                                                 std::span<const std::span<const Token>> tokens) {
    check("register_blocks");
    KVBM_CHECK(tokens.size() == blocks.size(), "register_blocks: ", tokens.size(),
               " token spans given for ", blocks.size(), " blocks");
    for (const auto& t : tokens) {
      KVBM_CHECK(t.size() == store_->block_size(), "register_blocks: ", t.size(),
                 " tokens given for a block of ", store_->block_size());
    }
    return register_many(std::move(blocks), tokens);
  }

  /// Registers every block; see register_block. All blocks are checked first,
  /// so on a UsageError none is registered and all stay with the caller.
  /// Runs the on_register hook once, with every block.
  std::vector<ImmutableBlock<T>> register_blocks(std::vector<CompleteBlock<T>>&& blocks) {
    std::vector<ImmutableBlock<T>> out = register_copies(std::move(blocks));
    if (on_register_ && !out.empty()) on_register_(out);
    return out;
  }

  /// As register_block(), without the on_register hook (see the file comment).
  ImmutableBlock<T> register_copy(CompleteBlock<T>&& block) {
    check("register_block");
    return register_one(std::move(block), {});
  }

  /// As register_blocks(), without the on_register hook (see the file comment).
  std::vector<ImmutableBlock<T>> register_copies(std::vector<CompleteBlock<T>>&& blocks) {
    check("register_blocks");
    return register_many(std::move(blocks), {});
  }

  /// Prefix match: strong handles to the leading blocks whose hashes are
  /// registered, stopping at the first miss. Inactive blocks are taken back
  /// out of the inactive pool.
  [[nodiscard]] std::vector<ImmutableBlock<T>> match_blocks(std::span<const SequenceHash> hashes) {
    check("match_blocks");
    std::vector<BlockId> ids;
    store_->match(hashes, ids);
    return wrap(ids);
  }

  /// Every registered block among `hashes`, in request order, skipping misses.
  [[nodiscard]] std::vector<ImmutableBlock<T>> scan_matches(std::span<const SequenceHash> hashes) {
    check("scan_matches");
    std::vector<BlockId> ids;
    store_->scan(hashes, ids);
    return wrap(ids);
  }

  /// Refreshes the registered blocks among `hashes`: each is taken and
  /// released again, in order, so the inactive ones end at the most-recent
  /// end of the eviction order (the last hash most recent). Returns, per
  /// hash, whether the pool holds it (compared by value).
  std::vector<bool> refresh(std::span<const SequenceHash> hashes) {
    std::vector<ImmutableBlock<T>> held = scan_matches(hashes);
    std::vector<bool> present(hashes.size(), false);
    std::size_t next = 0;
    for (std::size_t i = 0; i < hashes.size() && next < held.size(); ++i) {
      if (held[next].sequence_hash().value() == hashes[i].value()) {
        present[i] = true;
        ++next;
      }
    }
    for (auto& b : held) ImmutableBlock<T> release = std::move(b);  // in order: most recent last
    return present;
  }

  /// Evicts every inactive block (for a model reload); blocks in use are not
  /// touched. Returns the number evicted.
  std::size_t reset_inactive_pool() {
    check("reset_inactive_pool");
    return store_->evict_all_inactive();
  }

  /// Returns reset + evictable inactive blocks: what allocate_blocks can take
  /// at least. Under the lineage backend, evicting a leaf can make its parent
  /// evictable, so an allocation may succeed beyond this figure; it never
  /// takes a block that an in-use block descends from.
  [[nodiscard]] std::size_t available_blocks() const {
    check("available_blocks");
    const auto c = store_->counts();
    return c.reset + c.evictable;
  }
  /// Returns a count that grows each time a block of this pool leaves use
  /// (back to the reset or inactive pool): read it before an allocation that
  /// may fall short, then wait_for_release() with it.
  [[nodiscard]] std::uint64_t releases() const {
    check("releases");
    return store_->releases();
  }
  /// Waits until a block leaves use after releases() returned `seen`, or until
  /// `deadline`; returns true when one did. Lets a caller wait for room
  /// without polling.
  bool wait_for_release(std::uint64_t seen, std::chrono::steady_clock::time_point deadline) const {
    check("wait_for_release");
    return store_->wait_for_release(seen, deadline);
  }
  /// Returns the number of blocks in the pool.
  [[nodiscard]] std::size_t total_blocks() const {
    check("total_blocks");
    return store_->total_blocks();
  }
  /// Returns the tokens per block.
  [[nodiscard]] std::uint32_t block_size() const {
    check("block_size");
    return store_->block_size();
  }
  /// Returns a consistent snapshot of the pool's accounting.
  [[nodiscard]] PoolCounts pool_counts() const {
    check("pool_counts");
    return store_->counts();
  }
  /// Recounts every block's state; returns "" when consistent, else what is wrong.
  [[nodiscard]] std::string audit() const {
    check("audit");
    return store_->audit();
  }
  /// Returns the pool's name (the `pool` label).
  [[nodiscard]] const std::string& pool_name() const {
    check("pool_name");
    return store_->name();
  }
  /// Returns true when `block` is a valid handle on a block of this manager
  /// (false for a moved-from handle or a block of another manager).
  [[nodiscard]] bool owns(const ImmutableBlock<T>& block) const {
    check("owns");
    return block.store_ == store_.get();
  }
  /// Returns true when `block` is a valid handle on a block of this manager.
  [[nodiscard]] bool owns(const CompleteBlock<T>& block) const {
    check("owns");
    return block.store_ == store_.get();
  }
  /// Returns true when `block` is a valid handle on a block of this manager.
  [[nodiscard]] bool owns(const MutableBlock<T>& block) const {
    check("owns");
    return block.store_ == store_.get();
  }
  /// Returns the registry shared with other tiers.
  [[nodiscard]] const std::shared_ptr<BlockRegistry>& registry() const {
    check("registry");
    return registry_;
  }
  /// Returns the pool's counters since it was built (kvbm_allocations_total,
  /// kvbm_evictions_total, ...: the series' values, read).
  [[nodiscard]] PoolCounterDelta counter_totals() const {
    check("counter_totals");
    return store_->metrics().counts();
  }
  /// Returns the prometheus registry the pool's series live in.
  [[nodiscard]] const std::shared_ptr<prometheus::Registry>& metrics_registry() const {
    check("metrics_registry");
    return store_->metrics().registry();
  }
  /// Returns the eviction policy of the inactive pool.
  [[nodiscard]] EvictionPolicy eviction_policy() const {
    check("eviction_policy");
    return store_->eviction_policy();
  }
  /// Returns the duplicate policy.
  [[nodiscard]] DuplicatePolicy duplicate_policy() const {
    check("duplicate_policy");
    return store_->duplicate_policy();
  }

 private:
  BlockManager(std::shared_ptr<detail::BlockStore> store, std::shared_ptr<BlockRegistry> registry,
               RegisterHook on_register)
      : store_(std::move(store)),
        registry_(std::move(registry)),
        on_register_(std::move(on_register)) {}

  // A moved-from manager has no store: one null test, then the message.
  void check(const char* call) const {
    KVBM_CHECK(store_ != nullptr, "BlockManager::", call,
               ": this BlockManager was moved from; use the manager it was moved into");
  }

  // One block, with its tokens for the listeners (empty: none). check() done.
  ImmutableBlock<T> register_one(CompleteBlock<T>&& block, std::span<const Token> tokens) {
    KVBM_CHECK(block.valid(), "register_block: the CompleteBlock was moved from");
    KVBM_CHECK(block.store_ == store_.get(), "register_block: block ", block.id_,
               " belongs to another manager (pool ", block.store_->name(),
               "); register it with the manager that allocated it");
    const BlockId id = block.id_;
    const SequenceHash hash = block.hash_;
    const auto outcome = store_->register_block(id, hash, tokens);
    block.release_to_registry();
    return ImmutableBlock<T>(store_.get(), outcome.id);
  }

  // A batch under one lock; tokens empty, or one span per block. check() done.
  std::vector<ImmutableBlock<T>> register_many(std::vector<CompleteBlock<T>>&& blocks,
                                               std::span<const std::span<const Token>> tokens) {
    for (const auto& b : blocks) {
      KVBM_CHECK(b.valid(), "register_blocks: a CompleteBlock was moved from");
      KVBM_CHECK(b.store_ == store_.get(), "register_blocks: block ", b.id_,
                 " belongs to another manager (pool ", b.store_->name(), ")");
    }
    std::vector<ImmutableBlock<T>> out;
    if (blocks.size() == 1) {
      out.push_back(register_one(std::move(blocks.front()),
                                 tokens.empty() ? std::span<const Token>{} : tokens.front()));
      blocks.clear();
      return out;
    }
    std::vector<detail::Registration> batch;
    batch.reserve(blocks.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      batch.push_back({blocks[i].id_, blocks[i].hash_, false,
                       tokens.empty() ? std::span<const Token>{} : tokens[i]});
    }
    store_->register_blocks(batch);  // the store now owns every block
    for (auto& b : blocks) b.release_to_registry();
    blocks.clear();
    out.reserve(batch.size());
    for (const auto& r : batch) out.push_back(ImmutableBlock<T>(store_.get(), r.id));
    return out;
  }

  std::vector<ImmutableBlock<T>> wrap(const std::vector<BlockId>& ids) {
    std::vector<ImmutableBlock<T>> out;
    out.reserve(ids.size());
    for (const BlockId id : ids) out.push_back(ImmutableBlock<T>(store_.get(), id));
    return out;
  }

  std::shared_ptr<detail::BlockStore> store_;
  std::shared_ptr<BlockRegistry> registry_;
  RegisterHook on_register_;
};

}  // namespace kvbm
