// src/python/config.cpp: KvBlockManagerConfig and its parts in Python.
//
// Every field of the C++ structs is an attribute of the same name (nested
// structs are edited in place: config.layout.num_layers = 4). Durations are
// whole milliseconds or seconds in attributes named for their unit
// (remote.connect_timeout_ms). host_to_disk_pipeline is optional: assign a
// whole PipelineConfig, or None for `pipeline`'s. Not bound: metrics_registry
// (each manager has its own; KvBlockManager.metrics_text() reads it) and the
// listener lists (KV events are switched on by KvBlockManager(config, events=...)).
// python/kvbm/__init__.py adds keyword constructors that reject unknown names.

#include <chrono>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <type_traits>

#include "kvbm/kv_block_manager.h"
#include "python/bindings.h"

namespace kvbm::python {

namespace {

using namespace nb::literals;

// A whole number of `Unit`s (default: the field's own unit). `field` may be a
// member of a base of Struct (RemoteTierConfig's store options).
template <class Unit = void, class Struct, class Owner, class Rep, class Period>
void def_duration(nb::class_<Struct>& cls, const char* name,
                  std::chrono::duration<Rep, Period> Owner::*field, const char* doc) {
  static_assert(std::is_base_of_v<Owner, Struct>);
  using D = std::chrono::duration<Rep, Period>;
  using U = std::conditional_t<std::is_void_v<Unit>, D, Unit>;
  cls.def_prop_rw(
      name,
      [field](const Struct& s) {
        return static_cast<std::int64_t>(std::chrono::duration_cast<U>(s.*field).count());
      },
      [field](Struct& s, std::int64_t v) { s.*field = std::chrono::duration_cast<D>(U(v)); }, doc);
}

/// The enums of the config: offload mode, eviction, layout kind, O_DIRECT, disk I/O engine,
/// duplicates.
void bind_policy_enums(nb::module_& m) {
  nb::enum_<OffloadMode>(m, "OffloadMode", "When blocks move down a tier boundary.")
      .value("NONE", OffloadMode::kNone)
      .value("WRITE_THROUGH", OffloadMode::kWriteThrough)
      .value("ON_EVICTION", OffloadMode::kOnEviction);
  nb::enum_<EvictionPolicy>(m, "EvictionPolicy", "Which inactive block a pool evicts first.")
      .value("LRU", EvictionPolicy::kLru)
      .value("MULTI_LEVEL_LRU", EvictionPolicy::kMultiLevelLru)
      .value("LINEAGE", EvictionPolicy::kLineage);
  nb::enum_<LayoutKind>(m, "LayoutKind", "How a pool arranges its blocks in memory.")
      .value("FULLY_CONTIGUOUS", LayoutKind::kFullyContiguous)
      .value("LAYER_SEPARATED", LayoutKind::kLayerSeparated);
  nb::enum_<DirectIo>(m, "DirectIo", "O_DIRECT for the G3 file.")
      .value("PREFERRED", DirectIo::kPreferred)
      .value("REQUIRED", DirectIo::kRequired)
      .value("OFF", DirectIo::kOff);
  nb::enum_<DiskIoEngine>(m, "DiskIoEngine", "What issues the G3 file's I/O.")
      .value("AUTO", DiskIoEngine::kAuto)
      .value("THREAD_POOL", DiskIoEngine::kThreadPool)
      .value("IO_URING", DiskIoEngine::kIoUring);
  nb::enum_<DuplicatePolicy>(m, "DuplicatePolicy", "Registering a hash a pool already holds.")
      .value("ALLOW", DuplicatePolicy::kAllow)
      .value("REJECT", DuplicatePolicy::kReject);
}

/// LayoutConfig, TierConfig and OffloadPolicyConfig.
void bind_part_configs(nb::module_& m) {
  nb::class_<LayoutConfig>(m, "LayoutConfig", "Dimensions of one block of KV cache.")
      .def(nb::init<>())
      .def_rw("num_layers", &LayoutConfig::num_layers)
      .def_rw("outer_dim", &LayoutConfig::outer_dim, "2 for separate K and V, 1 for MLA")
      .def_rw("page_size", &LayoutConfig::page_size, "tokens per block")
      .def_rw("inner_dim", &LayoutConfig::inner_dim, "elements per token per (layer, outer)")
      .def_rw("dtype_bytes", &LayoutConfig::dtype_bytes)
      .def_prop_ro("region_bytes", &LayoutConfig::region_bytes)
      .def_prop_ro("block_bytes", &LayoutConfig::block_bytes)
      .def("validate", &LayoutConfig::validate);

  nb::class_<TierConfig>(m, "TierConfig", "Size (blocks or bytes) and eviction of one tier.")
      .def(nb::init<>())
      .def_rw("blocks", &TierConfig::blocks)
      .def_rw("bytes", &TierConfig::bytes)
      .def_rw("eviction", &TierConfig::eviction);

  nb::class_<OffloadPolicyConfig>(m, "OffloadPolicyConfig", "Which blocks move down a boundary.")
      .def(nb::init<>())
      .def_rw("skip_present", &OffloadPolicyConfig::skip_present)
      .def_rw("min_frequency", &OffloadPolicyConfig::min_frequency);
}

/// BatchConfig and PipelineConfig (kvbm/offload/config.h; durations in milliseconds).
void bind_pipeline_config(nb::module_& m) {
  auto batch = nb::class_<BatchConfig>(m, "BatchConfig", "How an offload pipeline batches blocks.")
                   .def(nb::init<>())
                   .def_rw("max_batch_size", &BatchConfig::max_batch_size, "most blocks per batch")
                   .def_rw("min_batch_size", &BatchConfig::min_batch_size,
                           "a batch this large is flushed at once");
  def_duration<std::chrono::milliseconds>(
      batch, "flush_interval_ms", &BatchConfig::flush_interval,
      "a smaller batch is flushed this long after its first block arrived");
  auto pipeline =
      nb::class_<PipelineConfig>(m, "PipelineConfig",
                                 "The options of a write-through offload pipeline.")
          .def(nb::init<>())
          .def_rw("batch_config", &PipelineConfig::batch_config)
          .def_rw("max_concurrent_transfers", &PipelineConfig::max_concurrent_transfers)
          .def_rw("hold_queued_blocks", &PipelineConfig::hold_queued_blocks,
                  "True: a queued block cannot be evicted before its copy (nothing is "
                  "dropped; the upper tier's allocations fail while it is full of them). "
                  "False (default): one evicted first is dropped");
  def_duration<std::chrono::milliseconds>(
      pipeline, "policy_timeout_ms", &PipelineConfig::policy_timeout,
      "a policy call taking longer filters every block it was asked about");
  def_duration<std::chrono::milliseconds>(pipeline, "sweep_interval_ms",
                                          &PipelineConfig::sweep_interval,
                                          "how often cancelled containers leave the queues");
  def_duration<std::chrono::milliseconds>(
      pipeline, "space_wait_ms", &PipelineConfig::space_wait,
      "longest the copy waits for room below (0: it does not wait)");
}

/// RemoteTierConfig (durations in their unit: connect_timeout_ms, ttl_s).
void bind_remote_config(nb::module_& m) {
  auto remote =
      nb::class_<RemoteTierConfig>(m, "RemoteTierConfig",
                                   "The remote tier G4 on Redis (docs/remote.md).")
          .def(nb::init<>())
          .def_rw("urls", &RemoteTierConfig::urls,
                  "redis://host:port[/db] or unix:///path.sock; assign a whole list")
          .def_rw("model", &RemoteTierConfig::model)
          .def_rw("dtype", &RemoteTierConfig::dtype)
          .def_rw("user_namespace", &RemoteTierConfig::user_namespace)
          .def_rw("key_prefix", &RemoteTierConfig::key_prefix)
          .def_rw("username", &RemoteTierConfig::username, "ACL user for URLs that name none")
          .def_rw("password_file", &RemoteTierConfig::password_file,
                  "a file holding the password, for URLs that carry none")
          .def_rw("password_env", &RemoteTierConfig::password_env,
                  "an environment variable holding the password")
          .def_rw("replica_reads", &RemoteTierConfig::replica_reads,
                  "Redis Cluster: reads from replicas (off by default)")
          .def_rw("connections_per_server", &RemoteTierConfig::connections_per_server)
          .def_rw("staging_blocks", &RemoteTierConfig::staging_blocks)
          .def_rw("max_batch_blocks", &RemoteTierConfig::max_batch_blocks);
  def_duration(remote, "connect_timeout_ms", &RemoteTierConfig::connect_timeout, "milliseconds");
  def_duration(remote, "command_timeout_ms", &RemoteTierConfig::command_timeout, "milliseconds");
  def_duration(remote, "ttl_s", &RemoteTierConfig::ttl, "seconds; 0: keys never expire");
}

/// KvBlockManagerConfig itself.
void bind_manager_config(nb::module_& m) {
  using C = KvBlockManagerConfig;
  nb::class_<C>(m, "KvBlockManagerConfig",
                "Everything KvBlockManager needs (kvbm/kv_block_manager.h).")
      .def(nb::init<>())
      .def_rw("layout", &C::layout)
      .def_rw("device_layout", &C::device_layout)
      .def_rw("device", &C::device, "G1 (required)")
      .def_rw("host", &C::host, "G2")
      .def_rw("disk", &C::disk, "G3 (needs G2 and disk_directory)")
      .def_rw("disk_directory", &C::disk_directory)
      .def_rw("disk_direct_io", &C::disk_direct_io)
      .def_rw("disk_persistent", &C::disk_persistent, "keep G3 across restarts (docs/disk_tier.md)")
      .def_rw("disk_namespace", &C::disk_namespace)
      .def_rw("device_to_host", &C::device_to_host)
      .def_rw("host_to_disk", &C::host_to_disk)
      .def_rw("device_to_host_policy", &C::device_to_host_policy)
      .def_rw("host_to_disk_policy", &C::host_to_disk_policy)
      .def_rw("remote", &C::remote, "G4 (needs G2, move_bytes and remote.model)")
      .def_rw("host_to_remote", &C::host_to_remote)
      .def_rw("host_to_remote_policy", &C::host_to_remote_policy)
      .def_rw("pipeline", &C::pipeline, "the write-through pipelines")
      .def_rw("host_to_disk_pipeline", &C::host_to_disk_pipeline,
              "G2 -> G3's own PipelineConfig (assign a whole one); None: `pipeline`")
      .def_rw("duplicate_policy", &C::duplicate_policy)
      .def_rw("move_bytes", &C::move_bytes, "False: metadata only")
      .def_rw("bounce_blocks", &C::bounce_blocks)
      .def_rw("copy_threads", &C::copy_threads)
      .def_rw("disk_workers", &C::disk_workers)
      .def_rw("disk_queue_depth", &C::disk_queue_depth)
      .def_rw("disk_io_engine", &C::disk_io_engine, "AUTO: the measured faster (the thread pool)")
      .def_rw("cuda_device", &C::cuda_device)
      .def_rw("prefill_tokens_per_second", &C::prefill_tokens_per_second,
              "the engine's prefill speed (0: unknown until report_prefill)");
}
}  // namespace

void bind_config(nb::module_& m) {
  bind_policy_enums(m);
  bind_part_configs(m);
  bind_pipeline_config(m);
  bind_remote_config(m);
  bind_manager_config(m);
}

}  // namespace kvbm::python
