// kvbm/disk/disk_options.h: the choices a disk pool and its engine are made with.
//
// Plain enums (docs/disk_tier.md), in a header of their own so that a config
// naming them (KvBlockManagerConfig, DiskTierOptions) need not include the
// disk pool's or the engine's implementation (disk_storage.h, disk_engine.h).

#pragma once

#include <cstdint>
#include <string_view>

namespace kvbm {

/// Whether the disk pool uses O_DIRECT.
enum class DirectIo : std::uint8_t {
  kPreferred,  ///< O_DIRECT where the file system allows it, else buffered I/O (logged)
  kRequired,   ///< O_DIRECT or create() fails with EINVAL
  kOff,        ///< buffered I/O through the page cache
};

/// What issues a disk engine's I/O. docs/disk_tier.md ("Choosing the I/O
/// engine") has the measurements behind kAuto.
enum class DiskIoEngine : std::uint8_t {
  /// The engine that measured faster: today the thread pool (on the 2-core
  /// virtio reference machine io_uring did not win at the default queue
  /// depth; docs/disk_tier.md has the figures).
  kAuto,
  kThreadPool,  ///< worker threads making blocking pread/pwrite(v) calls
  /// One ring (liburing): queue_depth I/Os in flight from one thread. Where
  /// kvbm was built without liburing or the kernel refuses a ring (EPERM,
  /// ENOSYS in some containers), the engine uses the thread pool and logs
  /// one warning saying why.
  kIoUring,
};

/// Returns "auto", "thread_pool" or "io_uring".
[[nodiscard]] std::string_view to_string(DiskIoEngine engine) noexcept;

}  // namespace kvbm
