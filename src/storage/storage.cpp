#include "kvbm/storage/storage.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#if defined(__linux__)
#include <linux/mempolicy.h>
#endif

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#if KVBM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "kvbm/error.h"
#include "kvbm/logging.h"

namespace kvbm {
namespace {

constexpr int kMaxNumaNodes = 1024;

/// Logs a warning; never throws (used on release and fallback paths).
template <class... Args>
void warn(spdlog::format_string_t<Args...> fmt, Args&&... args) noexcept {
  try {
    logger()->warn(fmt, std::forward<Args>(args)...);
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch)
    // A failed log line (no memory) must not fail the caller.
  }
}

std::string errno_text(int err) { return std::string(std::strerror(err)); }

/// What the one-time CUDA probe found.
struct CudaProbe {
  bool available = false;
  int device_count = 0;
  std::string reason;  ///< why no device is usable; empty when one is
};

const CudaProbe& cuda_probe() noexcept {
  static const CudaProbe kProbe = [] {
    CudaProbe p;
#if KVBM_HAVE_CUDA
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      p.reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(err);
      (void)cudaGetLastError();  // clear it, so later CUDA calls do not report it
    } else if (n <= 0) {
      p.reason = "no CUDA device found";
    } else {
      p.available = true;
      p.device_count = n;
    }
#else
    p.reason = "kvbm was built without CUDA";
#endif
    return p;
  }();
  return kProbe;
}

/// posix_memalign'ed host memory (plain host, or host emulating the device).
class AlignedHostStorage final : public Storage {
 public:
  AlignedHostStorage(MemoryKind kind, void* p, std::size_t bytes, bool emulated,
                     int device) noexcept
      : Storage(kind, reinterpret_cast<std::uintptr_t>(p), bytes, emulated, -1, device), p_(p) {}
  ~AlignedHostStorage() override { std::free(p_); }

 private:
  void* p_;
};

/// Allocates `bytes` aligned to `alignment` (a power of two) with posix_memalign.
void* aligned_host_alloc(std::size_t bytes, std::size_t alignment) {
  void* p = nullptr;
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  if (posix_memalign(&p, alignment, bytes) != 0) throw std::bad_alloc();
  return p;
}

/// Anonymous mmap'ed memory, locked (mlock or cudaHostRegister) when possible.
class MappedStorage final : public Storage {
 public:
  MappedStorage(void* p, std::size_t bytes, std::size_t mapped, int numa_node,
                bool registered) noexcept
      : Storage(MemoryKind::kPinnedHost, reinterpret_cast<std::uintptr_t>(p), bytes, false,
                numa_node, -1),
        p_(p),
        mapped_(mapped),
        registered_(registered) {}
  ~MappedStorage() override {
#if KVBM_HAVE_CUDA
    if (registered_) (void)cudaHostUnregister(p_);
#endif
    if (munmap(p_, mapped_) != 0) {  // also drops an mlock
      warn("pinned host memory: munmap of {} bytes failed: {}", mapped_, errno_text(errno));
    }
  }

 private:
  void* p_;
  std::size_t mapped_;
  bool registered_;
};

/// Binds [p, p + len) to NUMA node `node` (MPOL_PREFERRED). Returns 0 or an errno.
int bind_to_node(void* p, std::size_t len, int node) noexcept {
#if defined(__linux__) && defined(SYS_mbind)
  constexpr std::size_t kBitsPerWord = 8 * sizeof(unsigned long);
  unsigned long mask[kMaxNumaNodes / kBitsPerWord] = {};
  mask[static_cast<std::size_t>(node) / kBitsPerWord] |=
      1UL << (static_cast<std::size_t>(node) % kBitsPerWord);
  // maxnode is one more than the number of bits, as the kernel drops the last one.
  if (syscall(SYS_mbind, p, len, MPOL_PREFERRED, mask, kMaxNumaNodes + 1, 0) == 0) return 0;
  return errno;
#else
  (void)p;
  (void)len;
  (void)node;
  return ENOSYS;
#endif
}

std::unique_ptr<Storage> make_mapped_pinned(std::size_t bytes, int numa_node) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (bytes > SIZE_MAX - page) throw std::bad_alloc();
  const std::size_t mapped = (bytes + page - 1) / page * page;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  struct Unmap {  // releases the mapping if anything below throws
    void* p;
    std::size_t len;
    ~Unmap() {
      if (p != nullptr) munmap(p, len);
    }
  } guard{p, mapped};

  int bound = -1;
  if (numa_node >= 0) {
    // Bind before the first touch, so the pages are placed by the policy.
    if (const int err = bind_to_node(p, mapped, numa_node); err == 0) {
      bound = numa_node;
    } else {
      warn(
          "pinned host memory: binding {} bytes to NUMA node {} failed ({}); the pages go "
          "wherever the kernel places them",
          bytes, numa_node, errno_text(err));
    }
  }

  bool registered = false;
#if KVBM_HAVE_CUDA
  if (cuda_device_available()) {
    const cudaError_t err = cudaHostRegister(p, mapped, cudaHostRegisterPortable);
    registered = err == cudaSuccess;
    if (!registered) {
      (void)cudaGetLastError();
      warn("pinned host memory: cudaHostRegister of {} bytes failed ({}); falling back to mlock",
           bytes, cudaGetErrorString(err));
    }
  }
#endif
  if (!registered && mlock(p, mapped) != 0) {
    warn(
        "pinned host memory: mlock of {} bytes failed ({}); the memory stays pageable (raise "
        "RLIMIT_MEMLOCK, `ulimit -l`, to lock it)",
        bytes, errno_text(errno));
  }
  auto storage = std::make_unique<MappedStorage>(p, bytes, mapped, bound, registered);
  guard.p = nullptr;
  return storage;
}

#if KVBM_HAVE_CUDA
/// Restores the calling thread's current CUDA device on scope exit.
class DeviceScope {
 public:
  explicit DeviceScope(int device) noexcept {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    if (prev_ != device) (void)cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (prev_ >= 0) (void)cudaSetDevice(prev_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = -1;
};

[[noreturn]] void throw_cuda(cudaError_t err, const char* call, std::size_t bytes) {
  (void)cudaGetLastError();
  if (err == cudaErrorMemoryAllocation) throw std::bad_alloc();
  throw RuntimeError(ErrorKind::kDevice, static_cast<int>(err),
                     std::string(call) + "(" + std::to_string(bytes) +
                         " bytes) failed: " + cudaGetErrorString(err));
}

class CudaPinnedStorage final : public Storage {
 public:
  CudaPinnedStorage(void* p, std::size_t bytes) noexcept
      : Storage(MemoryKind::kPinnedHost, reinterpret_cast<std::uintptr_t>(p), bytes, false, -1, -1),
        p_(p) {}
  ~CudaPinnedStorage() override {
    if (const cudaError_t err = cudaFreeHost(p_); err != cudaSuccess) {
      warn("cudaFreeHost failed: {}", cudaGetErrorString(err));
    }
  }

 private:
  void* p_;
};

class CudaDeviceStorage final : public Storage {
 public:
  CudaDeviceStorage(void* p, std::size_t bytes, int device) noexcept
      : Storage(MemoryKind::kDevice, reinterpret_cast<std::uintptr_t>(p), bytes, false, -1, device),
        p_(p) {}
  ~CudaDeviceStorage() override {
    DeviceScope scope(device());
    if (const cudaError_t err = cudaFree(p_); err != cudaSuccess) {
      warn("cudaFree on device {} failed: {}", device(), cudaGetErrorString(err));
    }
  }

 private:
  void* p_;
};
#endif  // KVBM_HAVE_CUDA

}  // namespace

std::string_view to_string(MemoryKind kind) noexcept {
  switch (kind) {
    case MemoryKind::kDevice:
      return "device";
    case MemoryKind::kPinnedHost:
      return "pinned_host";
    case MemoryKind::kHost:
      return "host";
  }
  return "unknown";
}

Storage::~Storage() = default;

bool cuda_device_available() noexcept { return cuda_probe().available; }

std::unique_ptr<Storage> make_host_storage(std::size_t bytes, std::size_t alignment) {
  KVBM_CHECK(bytes > 0, "make_host_storage: bytes must be > 0");
  KVBM_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
             "make_host_storage: alignment must be a power of two, got ", alignment);
  void* p = aligned_host_alloc(bytes, alignment);
  try {
    return std::make_unique<AlignedHostStorage>(MemoryKind::kHost, p, bytes, false, -1);
  } catch (...) {  // release, then rethrow: nothing is swallowed
    std::free(p);
    throw;
  }
}

std::unique_ptr<Storage> make_pinned_storage(std::size_t bytes, int numa_node) {
  KVBM_CHECK(bytes > 0, "make_pinned_storage: bytes must be > 0");
  KVBM_CHECK(numa_node >= -1 && numa_node < kMaxNumaNodes,
             "make_pinned_storage: numa_node must be -1 (any) or in [0, ", kMaxNumaNodes, "), got ",
             numa_node);
#if KVBM_HAVE_CUDA
  if (cuda_device_available() && numa_node < 0) {
    void* p = nullptr;
    if (const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
        err != cudaSuccess) {
      throw_cuda(err, "cudaHostAlloc", bytes);
    }
    try {
      return std::make_unique<CudaPinnedStorage>(p, bytes);
    } catch (...) {  // release, then rethrow: nothing is swallowed
      (void)cudaFreeHost(p);
      throw;
    }
  }
#endif
  return make_mapped_pinned(bytes, numa_node);
}

std::unique_ptr<Storage> make_device_storage(std::size_t bytes, int device) {
  KVBM_CHECK(bytes > 0, "make_device_storage: bytes must be > 0");
  KVBM_CHECK(device >= 0, "make_device_storage: device must be >= 0, got ", device);
  const CudaProbe& probe = cuda_probe();
#if KVBM_HAVE_CUDA
  if (probe.available) {
    KVBM_CHECK(device < probe.device_count, "make_device_storage: device ", device,
               " does not exist (", probe.device_count, " CUDA devices)");
    void* p = nullptr;
    {
      DeviceScope scope(device);
      if (const cudaError_t err = cudaMalloc(&p, bytes); err != cudaSuccess) {
        throw_cuda(err, "cudaMalloc", bytes);
      }
    }
    try {
      return std::make_unique<CudaDeviceStorage>(p, bytes, device);
    } catch (...) {  // release, then rethrow: nothing is swallowed
      DeviceScope scope(device);
      (void)cudaFree(p);
      throw;
    }
  }
#endif
  void* p = aligned_host_alloc(bytes, static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
  std::unique_ptr<Storage> storage;
  try {
    storage = std::make_unique<AlignedHostStorage>(MemoryKind::kDevice, p, bytes, true, device);
  } catch (...) {  // release, then rethrow: nothing is swallowed
    std::free(p);
    throw;
  }
  warn(
      "device tier emulated in host memory ({}): the {} bytes asked of CUDA device {} are plain "
      "host memory, and device copies run as host copies",
      probe.reason, bytes, device);
  return storage;
}

}  // namespace kvbm
