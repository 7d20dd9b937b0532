// src/python/host_bytes.h: a caller's buffer, checked for use in place.
//
// kvbm copies block bytes straight to and from the caller's memory, so a
// buffer must be usable as it is: host memory, C-contiguous, of a dtype made
// of whole bytes, and writable when kvbm writes into it. Nothing is converted:
// a converted copy would be what kvbm writes, and the caller would never see
// it. Whatever cannot be used in place is refused with a UsageError that says
// what to pass (docs/python.md, "Buffers").

#pragma once

#include <cstdint>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <span>

namespace kvbm::python {

namespace nb = nanobind;

/// Whether kvbm reads the buffer (a source) or writes into it (a destination).
enum class Access { kRead, kWrite };

/// The bytes of a caller's buffer; keeps the imported array alive.
struct HostBytes {
  nb::ndarray<nb::ro> array;
  std::span<std::uint8_t> bytes;
};

/// Returns the bytes of `obj` (an array: NumPy, a CPU torch tensor, anything
/// with DLPack or the buffer protocol) after checking that kvbm can `access`
/// them in place; `what` names the argument in errors ("load: dst").
/// Throws UsageError otherwise, saying what to pass.
[[nodiscard]] HostBytes host_bytes(nb::handle obj, Access access, const char* what);

}  // namespace kvbm::python
