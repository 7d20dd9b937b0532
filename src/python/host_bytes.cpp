// src/python/host_bytes.cpp: see host_bytes.h.

#include "python/host_bytes.h"

#include <string>

#include "kvbm/error.h"

namespace kvbm::python {

namespace {

std::string python_type(nb::handle obj) { return nb::type_name(obj.type()).c_str(); }

std::string shape_and_strides(const nb::ndarray<nb::ro>& a) {
  std::string shape = "(";
  std::string strides = "(";
  for (std::size_t i = 0; i < a.ndim(); ++i) {
    if (i > 0) {
      shape += ", ";
      strides += ", ";
    }
    shape += std::to_string(a.shape(i));
    strides += std::to_string(a.stride(i) * static_cast<std::int64_t>(a.itemsize()));
  }
  if (a.ndim() == 1) {
    shape += ",";
    strides += ",";
  }
  return "shape " + shape + "), strides in bytes " + strides + ")";
}

/// Memory the CPU reads and writes directly: DLPack's CPU, CUDA host (pinned) and CUDA
/// managed memory.
bool host_memory(int device_type) {
  return device_type == nb::device::cpu::value || device_type == nb::device::cuda_host::value ||
         device_type == nb::device::cuda_managed::value;
}

std::string device_name(int device_type) {
  switch (device_type) {
    case nb::device::cuda::value:
      return "CUDA device";
    case nb::device::rocm::value:
      return "ROCm device";
    case nb::device::metal::value:
      return "Metal device";
    default:
      return "DLPack device type " + std::to_string(device_type);
  }
}

/// True when the elements lie in row-major order without gaps; dimensions of
/// one element may have any stride (NumPy and torch both give them odd ones).
bool c_contiguous(const nb::ndarray<nb::ro>& a) {
  if (a.size() == 0) return true;
  std::int64_t expected = 1;  // in elements, as DLPack counts strides
  for (std::size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) == 1) continue;
    if (a.stride(i) != expected) return false;
    expected *= static_cast<std::int64_t>(a.shape(i));
  }
  return true;
}

}  // namespace

HostBytes host_bytes(nb::handle obj, Access access, const char* what) {
  HostBytes out;
  // No conversion (convert = false): an unconstrained ndarray takes any array as it is.
  KVBM_CHECK(nb::try_cast(obj, out.array, false), what,
             ": expected an array (NumPy, a CPU torch tensor, or anything with DLPack or the "
             "buffer protocol), got ",
             python_type(obj));
  const nb::ndarray<nb::ro>& a = out.array;
  KVBM_CHECK(host_memory(a.device_type()), what, ": the array is in ", device_name(a.device_type()),
             " memory, not host memory; kvbm copies between host buffers and its tiers, so pass ",
             "a CPU array (for a destination, one whose memory you then use)");
  KVBM_CHECK(a.dtype().bits % 8 == 0 && a.dtype().lanes == 1, what, ": its dtype has elements of ",
             static_cast<int>(a.dtype().bits), " bits (", static_cast<int>(a.dtype().lanes),
             " lanes), not whole bytes; pass a view of the same memory as uint8 ",
             "(e.g. arr.view(np.uint8))");
  KVBM_CHECK(c_contiguous(a), what, ": the array is not C-contiguous (", shape_and_strides(a),
             ": a transposed view, a column slice or a Fortran-ordered array); kvbm ",
             access == Access::kWrite
                 ? "writes into the caller's memory in place, so pass a C-contiguous array and "
                   "copy out of it yourself (np.ascontiguousarray() would be a copy that kvbm "
                   "fills and you never see)"
                 : "reads the caller's memory in place, so pass a C-contiguous array "
                   "(np.ascontiguousarray(src) makes one)");
  if (access == Access::kWrite) {
    nb::ndarray<> writable;
    KVBM_CHECK(nb::try_cast(obj, writable, false), what,
               ": the array is read-only, and kvbm writes into it; pass a writable array "
               "(arr.flags.writeable, or a copy you then use)");
  }
  out.bytes = {static_cast<std::uint8_t*>(const_cast<void*>(a.data())), a.nbytes()};
  return out;
}

}  // namespace kvbm::python
