// kvbm/detail/huge_page_allocator.h: an allocator for large, fixed tables.
//
// Not part of the public API. A pool's slot array, its hash index and its
// eviction links are each allocated once, sized by the block count, and then
// read at random for the pool's whole life. With 4 KiB pages every such read
// of a large table is likely to miss the TLB too, and under a hypervisor a
// TLB miss walks two page tables. This allocator asks the kernel to back
// allocations of 2 MiB and more with transparent huge pages
// (madvise(MADV_HUGEPAGE)), so that one TLB entry covers 512 times as much.
// Smaller allocations, and platforms without madvise, use operator new.
//
// The advice is only a hint: where THP is disabled ("never"), memory stays
// in 4 KiB pages and everything works the same, only slower.

#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace kvbm::detail {

/// Size and alignment of a transparent huge page on x86-64 and most arm64.
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

template <class T>
class HugePageAllocator {
 public:
  using value_type = T;

  HugePageAllocator() noexcept = default;
  // Implicit, as the allocator requirements want for rebinding.
  template <class U>
  // NOLINTNEXTLINE(google-explicit-constructor)
  HugePageAllocator(const HugePageAllocator<U>& /*other*/) noexcept {}

  [[nodiscard]] T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t bytes = n * sizeof(T);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= kHugePageBytes) {
      const std::size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
      void* p = std::aligned_alloc(kHugePageBytes, rounded);
      if (p == nullptr) throw std::bad_alloc();
      (void)::madvise(p, rounded, MADV_HUGEPAGE);  // a hint; failure is harmless
      return static_cast<T*>(p);
    }
#endif
    return static_cast<T*>(::operator new (bytes, std::align_val_t{alignof(T)}));
  }

  void deallocate(T* p, std::size_t n) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (n * sizeof(T) >= kHugePageBytes) {
      std::free(p);
      return;
    }
#endif
    ::operator delete (p, std::align_val_t{alignof(T)});
  }

  template <class U>
  bool operator==(const HugePageAllocator<U>& /*other*/) const noexcept {
    return true;
  }
};

}  // namespace kvbm::detail
