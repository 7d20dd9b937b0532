// kvbm/storage/host_access.h: reading and writing a tier's bytes from the host, wherever they
// live.
//
// A Layout gives each block's regions as addresses. In host memory (pinned, pageable, or the
// device tier emulated in host memory) the CPU reads and writes them directly; in real device
// memory it cannot, and a plain memcpy faults. host_write() and host_read() copy between a host
// buffer and such an address either way: a CUDA copy when the address is CUDA device memory, a
// memcpy otherwise (managed memory is host-addressable). Either is complete when the call
// returns: the bytes are in place for any stream's next copy, which a plain cudaMemcpy from
// pageable memory does not promise. They are for what runs outside the transfer
// engines (an application filling G1 before registering a block, a tool checking what an
// onboarding brought back, tests), one region at a time; the engines move blocks in bulk.
//
// A CUDA error throws kvbm::RuntimeError (kind kDevice) naming the call. Thread-safe.

#pragma once

#include <cstddef>
#include <cstdint>

namespace kvbm {

/// Copies `n` bytes from host memory `src` to address `dst` (host or CUDA device memory).
void host_write(std::uintptr_t dst, const void* src, std::size_t n);

/// Copies `n` bytes from address `src` (host or CUDA device memory) to host memory `dst`.
void host_read(void* dst, std::uintptr_t src, std::size_t n);

/// Returns true when the CPU can read and write `addr` directly: always without CUDA or a
/// usable device; otherwise unless the address is CUDA device memory.
[[nodiscard]] bool host_addressable(std::uintptr_t addr) noexcept;

}  // namespace kvbm
