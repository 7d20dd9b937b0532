// kvbm/storage/storage.h: the memory that holds a pool's blocks.
//
// A Storage is one allocation in one tier: device memory (G1), pinned host
// memory (G2) or plain host memory. It owns its memory and frees it when
// destroyed (RAII; the destructor never throws). A Layout over
// [base(), base() + size()) says where each block's bytes are; transfer
// engines copy between layouts and never own the storage, so a Storage must
// outlive every engine and layout that refers to it.
//
// CUDA is optional. Built without CUDA, or run where no CUDA device is usable,
// make_device_storage() returns host memory that stands in for the device tier
// (emulated() is true) and logs one warning line through kvbm::logger();
// everything else works the same, with host copies in place of D2H/H2D.
//
// New storage is not zero-filled: its contents are unspecified (as with
// malloc and cudaMalloc). Allocation failure throws std::bad_alloc; a CUDA
// error other than out-of-memory throws kvbm::RuntimeError (kind kDevice)
// naming the call; bad arguments throw UsageError.
//
// Thread-safety: the factories may be called from any thread; a Storage's
// accessors are const and may be called concurrently.

#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace kvbm {

/// The kind of memory a Storage holds.
enum class MemoryKind : std::uint8_t {
  kDevice,      ///< GPU memory (cudaMalloc), or host memory emulating it
  kPinnedHost,  ///< page-locked host memory (cudaHostAlloc, or mmap + mlock)
  kHost,        ///< plain pageable host memory
};

/// Returns "device", "pinned_host" or "host".
std::string_view to_string(MemoryKind kind) noexcept;

/// One owned allocation of a tier's memory.
class Storage {
 public:
  virtual ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  Storage(Storage&&) = delete;
  Storage& operator=(Storage&&) = delete;

  /// Returns the kind of memory (kDevice also when emulated()).
  [[nodiscard]] MemoryKind kind() const noexcept { return kind_; }
  /// Returns the address of the first byte.
  [[nodiscard]] std::uintptr_t base() const noexcept { return base_; }
  /// Returns the number of usable bytes (as requested).
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Returns true when the device tier is stood in for by host memory (no
  /// usable CUDA device). The bytes are then host-addressable.
  [[nodiscard]] bool emulated() const noexcept { return emulated_; }
  /// Returns the NUMA node the memory was bound to, or -1 when it was not
  /// bound (none requested, device memory, or binding was not possible).
  [[nodiscard]] int numa_node() const noexcept { return numa_node_; }
  /// Returns the CUDA device ordinal of device storage (also when emulated),
  /// or -1 for host kinds.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// Returns true when the bytes can be read and written by the CPU: every
  /// kind but real (non-emulated) device memory.
  [[nodiscard]] bool host_accessible() const noexcept {
    return kind_ != MemoryKind::kDevice || emulated_;
  }

 protected:
  Storage(MemoryKind kind, std::uintptr_t base, std::size_t size, bool emulated, int numa_node,
          int device) noexcept
      : kind_(kind),
        base_(base),
        size_(size),
        emulated_(emulated),
        numa_node_(numa_node),
        device_(device) {}

 private:
  MemoryKind kind_;
  std::uintptr_t base_;
  std::size_t size_;
  bool emulated_;
  int numa_node_;
  int device_;
};

/// Allocates `bytes` of pageable host memory aligned to `alignment`.
/// Preconditions: bytes > 0; alignment is a power of two.
[[nodiscard]] std::unique_ptr<Storage> make_host_storage(std::size_t bytes,
                                                         std::size_t alignment = 4096);

/// Allocates `bytes` of page-locked host memory, page aligned. With a usable
/// CUDA device: cudaHostAlloc (portable), or, when `numa_node` >= 0, mmap +
/// mbind + cudaHostRegister. Without one: mmap + mlock. NUMA binding
/// (MPOL_PREFERRED through the raw mbind syscall; no libnuma needed) and
/// locking are best-effort: when either is refused (RLIMIT_MEMLOCK, a
/// container's seccomp policy, a node that does not exist) a warning is
/// logged and the memory stays usable; numa_node() then returns -1.
/// Preconditions: bytes > 0; -1 <= numa_node < 1024.
[[nodiscard]] std::unique_ptr<Storage> make_pinned_storage(std::size_t bytes, int numa_node = -1);

/// Allocates `bytes` of memory on CUDA device `device` (cudaMalloc). Without a
/// usable CUDA device, returns page-aligned host memory with emulated() true
/// and logs one warning line saying the device tier is emulated in host
/// memory. Preconditions: bytes > 0; device >= 0 and, with CUDA, less than the
/// device count.
[[nodiscard]] std::unique_ptr<Storage> make_device_storage(std::size_t bytes, int device = 0);

/// Returns true when kvbm was built with CUDA and at least one CUDA device is
/// usable at run time. Probed once per process.
[[nodiscard]] bool cuda_device_available() noexcept;

}  // namespace kvbm
