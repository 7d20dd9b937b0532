#include "replay/replay.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include "kvbm/blocks/release_order.h"
#include "kvbm/logging.h"
#include "kvbm/storage/host_access.h"
#include "replay/pattern.h"
#include "replay/remote_refusal.h"
#include "replay/result_paths.h"

namespace kvbm::replay {

namespace {

using Clock = std::chrono::steady_clock;

// The replay's own series, beside the library's, in the same registry. They
// are removed when the replay ends (the pools' series go with the manager).
class ReplaySeries {
 public:
  explicit ReplaySeries(const std::shared_ptr<prometheus::Registry>& r)
      : requests_family_(prometheus::BuildCounter()
                             .Name("kvbm_replay_requests_total")
                             .Help("Trace requests replayed")
                             .Register(*r)),
        blocks_family_(prometheus::BuildCounter()
                           .Name("kvbm_replay_blocks_total")
                           .Help("Prompt blocks the replayed requests asked for")
                           .Register(*r)),
        hits_family_(prometheus::BuildCounter()
                         .Name("kvbm_replay_hit_blocks_total")
                         .Help("Prefix blocks found, by the tier they were found in")
                         .Register(*r)),
        verify_family_(prometheus::BuildCounter()
                           .Name("kvbm_replay_verify_failures_total")
                           .Help("Onboarded blocks whose bytes did not match their sequence hash")
                           .Register(*r)),
        requests_(&requests_family_.Add({{"pool", "G1"}})),
        blocks_(&blocks_family_.Add({{"pool", "G1"}})),
        verify_(&verify_family_.Add({{"pool", "G1"}})) {
    for (const TierId t : kPoolTiers) {
      hits_[t] = &hits_family_.Add({{"pool", std::string(to_string(t))}});
    }
  }
  ~ReplaySeries() {
    requests_family_.Remove(requests_);
    blocks_family_.Remove(blocks_);
    verify_family_.Remove(verify_);
    for (const TierId t : kPoolTiers) hits_family_.Remove(hits_[t]);
  }
  ReplaySeries(const ReplaySeries&) = delete;
  ReplaySeries& operator=(const ReplaySeries&) = delete;

  void add(std::size_t blocks, const OnboardCounts& c, std::uint64_t verify_failures) {
    requests_->Increment();
    blocks_->Increment(static_cast<double>(blocks));
    for (const TierId t : kPoolTiers) hits_[t]->Increment(static_cast<double>(c.from(t)));
    if (verify_failures != 0) verify_->Increment(static_cast<double>(verify_failures));
  }

 private:
  prometheus::Family<prometheus::Counter>& requests_family_;
  prometheus::Family<prometheus::Counter>& blocks_family_;
  prometheus::Family<prometheus::Counter>& hits_family_;
  prometheus::Family<prometheus::Counter>& verify_family_;
  prometheus::Counter* requests_;
  prometheus::Counter* blocks_;
  prometheus::Counter* verify_;
  TierArray<prometheus::Counter*> hits_{};  // the pooled tiers' (kPoolTiers)
};

// Returns when the replay has been running `timestamp_ms / speed`: the start
// of a request under --realtime, capped at a century so that no timestamp or
// speed can overflow the clock.
Clock::duration due_offset(double timestamp_ms, double speed) {
  constexpr double kMaxMs = 100.0 * 365 * 24 * 3600 * 1000;
  double ms = timestamp_ms / speed;
  if (!(ms < kMaxMs)) ms = kMaxMs;  // NaN too
  if (!(ms > 0)) ms = 0;
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}

// Sleeps until `due` or until `stop` turns true; returns false when stopped.
// A signal handler can only set a flag, and nothing can wake a thread from a
// handler portably, so the sleep goes in slices of kStopPoll and looks at the
// flag between them: a stop ends the wait within one slice.
bool sleep_until_or_stopped(Clock::time_point due, const std::atomic<bool>* stop) {
  constexpr Clock::duration kStopPoll = std::chrono::milliseconds(10);
  for (;;) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) return false;
    const auto now = Clock::now();
    if (now >= due) return true;
    std::this_thread::sleep_for(std::min(due - now, kStopPoll));
  }
}

// Writes the pattern of `hash` into every region of G1 block `id`: in place when G1 is host
// memory, through a host buffer and host_write() when it is real device memory.
void write_block(const Layout& layout, BlockId id, std::uint64_t hash, bool on_device) {
  const auto& c = layout.config();
  thread_local std::vector<std::byte> staging;
  for (std::uint32_t l = 0; l < c.num_layers; ++l) {
    for (std::uint32_t o = 0; o < c.outer_dim; ++o) {
      const Region r = layout.region(id, l, o);
      const std::uint64_t index = std::uint64_t{l} * c.outer_dim + o;
      if (!on_device) {
        fill_pattern(reinterpret_cast<void*>(r.addr), r.size, hash, index);
        continue;
      }
      staging.resize(r.size);
      fill_pattern(staging.data(), r.size, hash, index);
      host_write(r.addr, staging.data(), r.size);
    }
  }
}

// Returns true when every region of G1 block `id` holds the pattern of `hash` (read through
// host_read() when G1 is real device memory).
bool verify_block(const Layout& layout, BlockId id, std::uint64_t hash, bool on_device) {
  const auto& c = layout.config();
  thread_local std::vector<std::byte> staging;
  for (std::uint32_t l = 0; l < c.num_layers; ++l) {
    for (std::uint32_t o = 0; o < c.outer_dim; ++o) {
      const Region r = layout.region(id, l, o);
      const void* bytes = reinterpret_cast<const void*>(r.addr);
      if (on_device) {
        staging.resize(r.size);
        host_read(staging.data(), r.addr, r.size);
        bytes = staging.data();
      }
      if (!check_pattern(bytes, r.size, hash, std::uint64_t{l} * c.outer_dim + o)) return false;
    }
  }
  return true;
}

}  // namespace

KvBlockManagerConfig manager_config(const ReplayConfig& config, std::uint32_t block_tokens) {
  KvBlockManagerConfig c;
  c.layout = config.layout;
  c.layout.page_size = block_tokens;
  c.device = config.device;
  c.host = config.host;
  c.disk = config.disk;
  c.disk_directory = config.disk_directory;
  c.disk_persistent = config.persist;
  c.disk_namespace = "kvbm-replay/" + (config.model.empty() ? std::string("layout") : config.model);
  c.device_to_host = config.device_to_host;
  c.host_to_disk = config.host_to_disk;
  c.device_to_host_policy.min_frequency = config.min_frequency;
  c.host_to_disk_policy.min_frequency = config.min_frequency;
  c.pipeline.hold_queued_blocks = config.hold_queued_blocks;
  // Settled write-through copies a request's blocks down as one batch per
  // boundary, as an engine does after its forward pass (the longest request
  // of the shipped trace has 247 blocks).
  if (!config.overlap_offload) c.pipeline.batch_config.max_batch_size = 4096;
  // Holding is lossless only if a copy may also wait for room below.
  if (config.hold_queued_blocks) c.pipeline.space_wait = std::chrono::seconds(1);
  c.duplicate_policy = DuplicatePolicy::kReject;
  c.move_bytes = config.move_bytes;
  if (!config.remote_urls.empty()) {
    c.remote.urls = config.remote_urls;
    c.remote.model = c.disk_namespace;
    c.remote.dtype = "dtype" + std::to_string(config.layout.dtype_bytes * 8);
    c.remote.user_namespace = config.remote_namespace;
    c.host_to_remote = OffloadMode::kWriteThrough;
  }
  c.metrics_registry =
      config.metrics_registry ? config.metrics_registry : std::make_shared<prometheus::Registry>();
  return c;
}

std::filesystem::path instance_disk_directory(const ReplayConfig& config, std::size_t index) {
  const bool has_disk = config.disk.blocks != 0 || config.disk.bytes != 0;
  if (!config.persist || config.instances <= 1 || !has_disk || config.disk_directory.empty()) {
    return config.disk_directory;
  }
  return config.disk_directory / ("instance-" + std::to_string(index));
}

namespace {

// One engine instance: its manager, its series and what it did.
struct Instance {
  std::unique_ptr<KvBlockManager> kvbm;
  std::unique_ptr<ReplaySeries> series;
  ReplayResult r;
  std::array<std::uint64_t, 2> onboarded{};  // from G2, from G3
  const Layout* g1_layout = nullptr;         // set when bytes are written and verified
  bool g1_on_device = false;                 // G1 is real device memory: copies through the host
};

// A fresh G4 namespace: this run sees no key of an earlier run.
std::string fresh_namespace() {
  std::random_device rd;
  const std::uint64_t v = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("replay-run-{:016x}", v);
}

// Builds instance `index` and fills its result's description of the run.
Instance build_instance(const Trace& trace, const ReplayConfig& config, std::size_t index,
                        Cluster* cluster) {
  Instance in;
  KvBlockManagerConfig mc = manager_config(config, trace.block_tokens);
  mc.disk_directory = instance_disk_directory(config, index);
  if (mc.disk_directory != config.disk_directory) {
    // A persistent G3 belongs to one manager (it locks its directory).
    std::error_code ec;
    std::filesystem::create_directory(mc.disk_directory, ec);
    KVBM_CHECK(!ec, "run_replay: cannot create instance ", index, "'s G3 directory ",
               mc.disk_directory, ": ", ec.message(),
               "; give a disk_directory (--disk-dir) that exists and is writable");
  }
  if (cluster != nullptr) cluster->attach(index, mc);
  // Each instance has its own series; instance 0 reports to the caller's registry.
  if (index > 0) mc.metrics_registry = std::make_shared<prometheus::Registry>();
  auto registry = mc.metrics_registry;
  in.kvbm = KvBlockManager::build(std::move(mc));
  in.series = std::make_unique<ReplaySeries>(registry);
  ReplayResult& r = in.r;
  auto& kvbm = in.kvbm;
  r.trace = trace.source;
  r.block_tokens = trace.block_tokens;
  r.block_bytes = kvbm->block_bytes();
  r.capacity[TierId::kG1] = kvbm->device().total_blocks();
  r.capacity[TierId::kG2] = kvbm->host() != nullptr ? kvbm->host()->total_blocks() : 0;
  r.capacity[TierId::kG3] = kvbm->disk() != nullptr ? kvbm->disk()->total_blocks() : 0;
  r.eviction = std::string(to_string(config.device.eviction));
  r.device_to_host = std::string(to_string(config.device_to_host));
  r.host_to_disk = std::string(to_string(config.host_to_disk));
  r.move_bytes = config.move_bytes;
  r.hold_queued_blocks = config.hold_queued_blocks;
  r.overlap_offload = config.overlap_offload;
  r.model = config.model;
  r.persist = config.persist;
  r.instances = config.instances;
  r.remote = !config.remote_urls.empty();
  if (const auto rec = kvbm->disk_recovery()) r.recovered_blocks = rec->recovered;
  r.savings_inputs = config.savings;
  r.savings_inputs.block_bytes = r.block_bytes;
  r.device_emulated = kvbm->device_emulated();
  r.bytes_checked = config.move_bytes;
  if (r.bytes_checked) in.g1_layout = &kvbm->device_layout();
  in.g1_on_device = !kvbm->device_emulated();
  return in;
}

// Adds what one instance did to the totals.
void add_instance(ReplayResult& total, const ReplayResult& r) {
  total.requests += r.requests;
  total.blocks += r.blocks;
  total.tokens += r.tokens;
  for (const TierId t : kTierIds) {
    total.hit_blocks[t] += r.hit_blocks[t];
    total.hit_tokens[t] += r.hit_tokens[t];
    total.evictions[t] += r.evictions[t];
  }
  add_remote_stats(total.remote_stats, r.remote_stats);
  total.computed_blocks += r.computed_blocks;
  total.uncached_blocks += r.uncached_blocks;
  total.onboard_failed += r.onboard_failed;
  total.onboard_no_space += r.onboard_no_space;
  total.verified_blocks += r.verified_blocks;
  total.verify_failures += r.verify_failures;
  for (std::size_t i = 0; i < 2; ++i) total.lost_to_lag[i] += r.lost_to_lag[i];
  for (std::size_t i = 0; i < r.paths.size() && i < total.paths.size(); ++i) {
    total.paths[i].blocks += r.paths[i].blocks;
    total.paths[i].bytes += r.paths[i].bytes;
    total.paths[i].failed_blocks += r.paths[i].failed_blocks;
  }
  for (const auto& [name, p] : r.engine_paths) {
    auto& q = total.engine_paths[name];
    q.name = name;
    q.blocks += p.blocks;
    q.bytes += p.bytes;
    q.failed_blocks += p.failed_blocks;
  }
  if (!r.audit.empty()) total.audit += r.audit;
  total.recovered_blocks += r.recovered_blocks;
  total.per_instance.push_back({r.requests, r.blocks, r.hit_blocks, r.recovered_blocks});
}

// Checks what run_replay cannot work with.
void check_config(const Trace& trace, const ReplayConfig& config) {
  KVBM_CHECK(trace.block_tokens > 0, "run_replay: the trace was read with block_tokens 0");
  KVBM_CHECK(!config.realtime || config.speed > 0, "run_replay: speed must be > 0, not ",
             config.speed);
  KVBM_CHECK(config.instances >= 1, "run_replay: instances must be at least 1");
  KVBM_CHECK(config.instances == 1 || config.soak_seconds <= 0,
             "run_replay: a soak run replays through one instance; leave instances at 1");
}

// The configuration as replayed: a fresh G4 namespace unless one is given.
ReplayConfig with_namespace(const ReplayConfig& config_in) {
  ReplayConfig config = config_in;
  if (!config.remote_urls.empty() && config.remote_namespace.empty()) {
    config.remote_namespace = fresh_namespace();
  }
  return config;
}

// The router and its indexer (ReplayConfig::router), or nullptr.
std::unique_ptr<Cluster> make_cluster(const Trace& trace, const ReplayConfig& config) {
  if (!config.router) return nullptr;
  ClusterConfig cc = *config.router;
  if (!cc.metrics_registry) cc.metrics_registry = config.metrics_registry;
  return std::make_unique<Cluster>(config.instances, trace.block_tokens, cc);
}

// Every instance, attached to the cluster when there is one.
std::vector<Instance> build_instances(const Trace& trace, const ReplayConfig& config,
                                      Cluster* cluster) {
  std::vector<Instance> instances;
  instances.reserve(config.instances);
  for (std::size_t k = 0; k < config.instances; ++k) {
    instances.push_back(build_instance(trace, config, k, cluster));
  }
  if (config.move_bytes && instances[0].g1_on_device) {
    logger()->info(
        "kvbm-replay: G1 is device memory: each block's bytes are written and verified through "
        "a synchronous copy from and to the host (host_write / host_read), which the timings "
        "include");
  }
  return instances;
}

// Seconds since `start`.
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The CPU time this process has used so far, every thread, in seconds.
double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Fills what an instance's manager counted: evictions, paths and the audit.
void collect_result(Instance& in, double wall, double cpu) {
  ReplayResult& r = in.r;
  r.wall_seconds = wall;
  r.cpu_seconds = cpu;
  r.audit = in.kvbm->audit();
  const KvBlockManagerStats stats = in.kvbm->stats();
  for (const TierId t : kPoolTiers) {
    const TierStats* tier = stats.tier(t);
    r.evictions[t] = tier != nullptr ? tier->counters.evictions : 0;
  }
  collect_paths(stats, r, in.onboarded);
  if (const RemoteStoreStats* g4 = stats.store(TierId::kG4)) r.remote_stats = *g4;
}

// Several instances: the totals, with each one's figures beside them.
ReplayResult sum_instances(const std::vector<Instance>& instances) {
  ReplayResult sum = instances[0].r;
  sum.requests = sum.blocks = sum.tokens = 0;
  sum.hit_blocks = sum.hit_tokens = sum.evictions = {};
  sum.remote_stats.reset();
  sum.computed_blocks = sum.uncached_blocks = sum.onboard_failed = 0;
  sum.onboard_no_space = sum.verified_blocks = sum.verify_failures = 0;
  sum.lost_to_lag = {};
  sum.recovered_blocks = 0;
  for (auto& p : sum.paths) p.blocks = p.bytes = p.failed_blocks = 0;
  sum.engine_paths.clear();
  sum.audit.clear();
  sum.per_instance.clear();
  for (const auto& in : instances) add_instance(sum, in.r);
  return sum;
}

// What onboarding found for one request.
struct Prefix {
  OnboardCounts counts;
  std::size_t length = 0;                                // the prefix's blocks, held first
  std::vector<TierId> sources;                           // the tier each prefix block came from
  std::vector<std::optional<ImmutableBlock<G1>>> in_g1;  // blocks after the prefix still in G1
};

// Fresh G1 blocks for `need` missing ones: all of them, after draining the
// pipelines if need be, else what fits; the rest count as uncached. Returns
// the blocks (none when G1 has none to give).
std::vector<MutableBlock<G1>> allocate_fresh(KvBlockManager& kvbm, std::size_t need,
                                             ReplayResult& r) {
  auto& g1 = kvbm.device();
  auto allocate = [&g1](std::size_t k) -> std::optional<std::vector<MutableBlock<G1>>> {
    if (k == 0 || k > g1.total_blocks()) return std::nullopt;
    return g1.allocate_blocks(k);
  };
  auto fresh = allocate(need);
  if (!fresh) {
    kvbm.drain();  // blocks in flight to G2 are held by the pipeline
    fresh = allocate(need);
  }
  if (!fresh) {
    std::size_t fit = std::min(need, g1.available_blocks());
    fresh = allocate(fit);
    if (!fresh) fit = 0;
    r.uncached_blocks += need - fit;
  }
  if (!fresh) return {};
  return std::move(*fresh);
}

// True when G1 holds a block of `hashes` that comes after one it does not
// hold: without one, every block G1 holds is in the prefix.
bool g1_holds_past_a_gap(KvBlockManager& kvbm, std::span<const SequenceHash> hashes) {
  const std::vector<bool> in = kvbm.device().registry()->presence<G1>(hashes);
  const auto gap = std::find(in.begin(), in.end(), false);
  return std::find(gap, in.end(), true) != in.end();
}

// Replays a trace through its instances, request by request, in trace order.
class Replay {
 public:
  Replay(const Trace& trace, const ReplayConfig& config)
      : trace_(trace),
        config_(config),
        bt_(trace.block_tokens),
        cluster_(make_cluster(trace, config)),
        instances_(build_instances(trace, config, cluster_.get())),
        assign_(config.assign_seed),
        // Write-through copies settle before a request's blocks are released.
        // G4's writes too: another instance's next request may look for them.
        settle_(!config.overlap_offload && (config.device_to_host == OffloadMode::kWriteThrough ||
                                            config.host_to_disk == OffloadMode::kWriteThrough ||
                                            !config.remote_urls.empty())) {}

  ReplayResult run() {
    start_ = Clock::now();
    const double cpu_start = process_cpu_seconds();
    run_passes();
    for (auto& in : instances_) in.kvbm->drain();
    const double wall = seconds_since(start_);
    const double cpu = process_cpu_seconds() - cpu_start;
    for (auto& in : instances_) collect_result(in, wall, cpu);
    if (config_.on_finished) config_.on_finished(*instances_[0].kvbm);
    for (auto& in : instances_) in.kvbm->shutdown();
    if (cluster_) instances_[0].r.cluster = cluster_->figures();
    if (instances_.size() == 1) return std::move(instances_[0].r);
    return sum_instances(instances_);
  }

 private:
  [[nodiscard]] bool stopped() const {
    return config_.stop != nullptr && config_.stop->load(std::memory_order_relaxed);
  }

  // One pass over the trace, or (soak) passes until soak_seconds have gone by.
  void run_passes() {
    for (std::size_t pass = 0;; ++pass) {
      run_pass();
      if (config_.soak_seconds <= 0) break;
      auto& kvbm = instances_[0].kvbm;
      kvbm->drain();
      if (config_.on_pass) config_.on_pass(pass, instances_[0].r, *kvbm);
      if (seconds_since(start_) >= config_.soak_seconds) break;
      if (stopped()) break;
    }
  }

  // Every request of the trace, until the end or a stop.
  void run_pass() {
    const std::size_t total = trace_.requests.size();
    for (std::size_t ri = 0; ri < total; ++ri) {
      if (stopped()) return;
      const TraceRequest& req = trace_.requests[ri];
      Instance& in = pick_instance(ri, req);
      if (config_.realtime &&
          !sleep_until_or_stopped(start_ + due_offset(req.timestamp_ms, config_.speed),
                                  config_.stop)) {
        return;
      }
      replay_request(in, req);
      if (config_.progress && ((ri + 1) % config_.progress_every == 0 || ri + 1 == total)) {
        config_.progress(ri + 1, total);
      }
    }
  }

  // The instance request `ri` goes to: the router's choice, a random one or the next in turn.
  Instance& pick_instance(std::size_t ri, const TraceRequest& req) {
    return instances_[cluster_                ? cluster_->route(req)
                      : config_.assign_random ? assign_() % instances_.size()
                                              : ri % instances_.size()];
  }

  void replay_request(Instance& in, const TraceRequest& req) {
    const std::size_t n = req.hashes.size();
    ReplayResult& r = in.r;
    ++r.requests;
    r.blocks += n;
    r.tokens += req.input_length;
    held_.clear();
    held_.resize(n);
    Prefix prefix = onboard_prefix(*in.kvbm, req.hashes);
    count_hits(in, req, prefix);
    const std::uint64_t failures = verify_prefix(in, req, prefix.length);
    compute_rest(in, req, prefix);
    // 4. The forward pass outlasts the copies: they land while the request
    //    still holds its blocks (unless --overlap-offload). Then release
    //    them last block first, so that eviction takes the chain's tail first.
    if (settle_) in.kvbm->drain();
    release_tail_first(held_);
    in.series->add(n, prefix.counts, failures);
    if (cluster_) report_prefill(req, prefix);
  }

  // 1. The prefix held anywhere, each block from the fastest tier holding
  //    it, brought into G1. A block after the prefix that G1 still holds
  //    (its parent was evicted everywhere) is taken first, as an engine
  //    recomputes into the cached block instead of allocating another.
  Prefix onboard_prefix(KvBlockManager& kvbm, const std::vector<SequenceHash>& hashes) {
    Prefix p;
    const std::size_t n = hashes.size();
    p.in_g1.resize(n);
    if (n == 0) return p;
    // G1 can hold a block after the prefix only if it holds one after a
    // block it does not hold; only then is the prefix (a walk over every
    // tier) asked for before the onboarding walks it.
    const std::size_t found = g1_holds_past_a_gap(kvbm, hashes) ? kvbm.probe(hashes).total() : n;
    if (found < n) {
      const auto rest = std::span<const SequenceHash>(hashes).subspan(found);
      auto cached = kvbm.device().scan_matches(rest);
      std::size_t next = 0;
      for (std::size_t i = 0; i < rest.size() && next < cached.size(); ++i) {
        if (cached[next].sequence_hash().value() == rest[i].value())
          p.in_g1[found + i] = std::move(cached[next++]);
      }
    }
    OnboardHandle h = kvbm.onboard(hashes);
    h.wait();
    p.counts = h.counts();
    p.sources = h.sources();
    auto blocks = h.take_blocks();
    p.length = blocks.size();
    for (std::size_t i = 0; i < p.length; ++i) held_[i] = std::move(blocks[i]);
    return p;
  }

  // The prefix's hits by tier. Token hits: each prefix block's own tokens (a
  // partial last block holds fewer), charged to the tier it came from.
  void count_hits(Instance& in, const TraceRequest& req, const Prefix& p) const {
    ReplayResult& r = in.r;
    const OnboardCounts& counts = p.counts;
    for (const TierId t : kTierIds) r.hit_blocks[t] += counts.from(t);
    in.onboarded[0] += counts.from(TierId::kG2);
    in.onboarded[1] += counts.from(TierId::kG3);
    r.onboard_failed += counts.failed;
    r.onboard_no_space += counts.no_space;
    for (std::size_t i = 0; i < p.length; ++i)
      r.hit_tokens[p.sources[i]] += req.tokens_in_block(i, bt_);
  }

  // Checks the prefix's bytes (when bytes move); returns the failures.
  std::uint64_t verify_prefix(Instance& in, const TraceRequest& req, std::size_t prefix) {
    if (in.g1_layout == nullptr) return 0;
    std::uint64_t failures = 0;
    for (std::size_t i = 0; i < prefix; ++i) {
      ++in.r.verified_blocks;
      if (!verify_block(*in.g1_layout, held_[i]->block_id(), req.hashes[i].value(),
                        in.g1_on_device)) {
        ++failures;
      }
    }
    in.r.verify_failures += failures;
    return failures;
  }

  // 2. The rest is computed: blocks G1 still holds are recomputed in place,
  //    the others need G1 blocks; take what fits when G1 is short.
  void compute_rest(Instance& in, const TraceRequest& req, Prefix& p) {
    const std::size_t n = req.hashes.size();
    std::size_t reused = 0;
    for (std::size_t i = p.length; i < n; ++i) {
      if (p.in_g1[i]) {
        held_[i] = std::move(p.in_g1[i]);
        ++reused;
      }
    }
    in.r.computed_blocks += reused;
    std::vector<std::size_t> missing;
    for (std::size_t i = p.length; i < n; ++i) {
      if (!held_[i]) missing.push_back(i);
    }
    if (missing.empty()) return;
    auto fresh = allocate_fresh(*in.kvbm, missing.size(), in.r);
    if (!fresh.empty()) compute_and_register(in, req, missing, std::move(fresh));
  }

  // 3. Compute, stage, register (offloads in write-through mode): the fresh
  //    blocks take the leading missing ones.
  void compute_and_register(Instance& in, const TraceRequest& req,
                            const std::vector<std::size_t>& missing,
                            std::vector<MutableBlock<G1>> fresh) {
    const std::size_t need = fresh.size();
    staged_.clear();
    staged_.reserve(need);
    for (std::size_t k = 0; k < need; ++k) {
      const SequenceHash& hash = req.hashes[missing[k]];
      if (in.g1_layout != nullptr) {
        write_block(*in.g1_layout, fresh[k].block_id(), hash.value(), in.g1_on_device);
      }
      auto s = std::move(fresh[k]).stage(hash, bt_);
      KVBM_CHECK(s.ok(), "kvbm-replay: staging failed: ", s.error().reason);
      staged_.push_back(std::move(s).value());
    }
    in.r.computed_blocks += need;
    auto registered = in.kvbm->register_blocks(std::move(staged_));
    for (std::size_t k = 0; k < registered.size(); ++k)
      held_[missing[k]] = std::move(registered[k]);
  }

  // The request's prefill in the simulation, then its events reach the index.
  void report_prefill(const TraceRequest& req, const Prefix& p) {
    TierArray<std::uint64_t> tier_tokens{};
    std::uint64_t hit_tokens = 0;
    for (std::size_t i = 0; i < p.length; ++i) {
      const std::uint64_t tokens = req.tokens_in_block(i, bt_);
      tier_tokens[p.sources[i]] += tokens;
      hit_tokens += tokens;
    }
    cluster_->completed(tier_tokens, p.length,
                        req.input_length > hit_tokens ? req.input_length - hit_tokens : 0);
  }

  const Trace& trace_;
  const ReplayConfig& config_;
  const std::uint32_t bt_;
  std::unique_ptr<Cluster> cluster_;
  std::vector<Instance> instances_;
  std::mt19937_64 assign_;
  const bool settle_;
  Clock::time_point start_;
  std::vector<std::optional<ImmutableBlock<G1>>> held_;  // the request's blocks
  std::vector<CompleteBlock<G1>> staged_;
};

}  // namespace

ReplayResult run_replay(const Trace& trace, const ReplayConfig& config_in) {
  check_config(trace, config_in);
  const ReplayConfig config = with_namespace(config_in);
  return Replay(trace, config).run();
}

}  // namespace kvbm::replay
