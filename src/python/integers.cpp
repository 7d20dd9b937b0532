// src/python/integers.cpp: see integers.h.

#include "python/integers.h"

#include <cstring>
#include <limits>
#include <nanobind/ndarray.h>
#include <string>
#include <type_traits>

#include "kvbm/error.h"

namespace kvbm::python {

namespace {

__extension__ using Wide = __int128;  // holds every int64 and every uint64 value

template <class T>
const char* type_label() {
  if constexpr (std::is_same_v<T, std::uint64_t>) return "an unsigned 64-bit integer";
  if constexpr (std::is_same_v<T, std::int64_t>) return "a signed 64-bit integer";
  return "an unsigned 32-bit integer";
}

std::string to_text(Wide v) {
  if (v < 0) return "-" + std::to_string(static_cast<std::uint64_t>(-v));
  return std::to_string(static_cast<std::uint64_t>(v));
}

template <class T>
T narrow(Wide v, std::size_t index, const char* what) {
  KVBM_CHECK(v >= static_cast<Wide>(std::numeric_limits<T>::min()) &&
                 v <= static_cast<Wide>(std::numeric_limits<T>::max()),
             what, ": value ", index, " is ", to_text(v), ", which is not ", type_label<T>(),
             "; kvbm never wraps a value, so pass values that fit");
  return static_cast<T>(v);
}

/// One Python int (or anything with __index__, not a bool or a float).
Wide wide_of(nb::handle item, std::size_t index, const char* what) {
  KVBM_CHECK(!PyBool_Check(item.ptr()) && !PyFloat_Check(item.ptr()), what, ": value ", index,
             " is a ", nb::type_name(item.type()).c_str(), ", not an integer; pass integers");
  nb::object number = nb::steal(PyNumber_Index(item.ptr()));
  if (!number.is_valid()) {
    PyErr_Clear();
    KVBM_CHECK(false, what, ": value ", index, " is a ", nb::type_name(item.type()).c_str(),
               ", not an integer; pass integers");
  }
  int overflow = 0;
  const long long s = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
  if (overflow == 0) return s;
  KVBM_CHECK(overflow > 0, what, ": value ", index, " is below -2^63; pass values that fit");
  const unsigned long long u = PyLong_AsUnsignedLongLong(number.ptr());
  if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred() != nullptr) {
    PyErr_Clear();
    KVBM_CHECK(false, what, ": value ", index, " is 2^64 or more; pass values that fit");
  }
  return static_cast<Wide>(u);
}

template <class S>
Wide element(const std::uint8_t* base, std::int64_t offset_bytes) {
  S v;
  std::memcpy(&v, base + offset_bytes, sizeof(S));
  return static_cast<Wide>(v);
}

std::string dtype_text(const nb::dlpack::dtype& dt) {
  using Code = nb::dlpack::dtype_code;
  std::string kind;
  switch (static_cast<Code>(dt.code)) {
    case Code::Int:
      kind = "int";
      break;
    case Code::UInt:
      kind = "uint";
      break;
    case Code::Float:
      kind = "float";
      break;
    case Code::Bfloat:
      kind = "bfloat";
      break;
    case Code::Complex:
      kind = "complex";
      break;
    case Code::Bool:
      return "bool";
    default:
      kind = "DLPack type code " + std::to_string(dt.code) + " of ";
  }
  return kind + std::to_string(dt.bits);
}

template <class T>
std::vector<T> from_array(const nb::ndarray<nb::ro>& a, const char* what) {
  const auto dt = a.dtype();
  const bool is_int = dt.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int);
  const bool is_uint = dt.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt);
  KVBM_CHECK((is_int || is_uint) && dt.lanes == 1 &&
                 (dt.bits == 8 || dt.bits == 16 || dt.bits == 32 || dt.bits == 64),
             what, ": the array's dtype is ", dtype_text(dt),
             ", not an integer type; pass an integer array (kvbm does not round, truncate or "
             "reinterpret values)");
  KVBM_CHECK(
      a.device_type() == nb::device::cpu::value || a.device_type() == nb::device::cuda_host::value,
      what, ": the array is not in host memory; pass a CPU array");
  KVBM_CHECK(a.ndim() == 1, what, ": the array has ", a.ndim(),
             " dimensions; pass a 1-D array (arr.reshape(-1))");
  const std::size_t n = a.shape(0);
  std::vector<T> out(n);
  if (n == 0) return out;
  const auto* base = static_cast<const std::uint8_t*>(a.data());
  const std::int64_t step = a.stride(0) * static_cast<std::int64_t>(dt.bits / 8);
  constexpr bool same_signedness = std::is_signed_v<T>;
  if (dt.bits == sizeof(T) * 8 && is_int == same_signedness && step == sizeof(T)) {
    std::memcpy(out.data(), base, n * sizeof(T));  // the type kvbm keeps: no check needed
    return out;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t off = static_cast<std::int64_t>(i) * step;
    Wide v = 0;
    switch (dt.bits) {
      case 8:
        v = is_int ? element<std::int8_t>(base, off) : element<std::uint8_t>(base, off);
        break;
      case 16:
        v = is_int ? element<std::int16_t>(base, off) : element<std::uint16_t>(base, off);
        break;
      case 32:
        v = is_int ? element<std::int32_t>(base, off) : element<std::uint32_t>(base, off);
        break;
      default:
        v = is_int ? element<std::int64_t>(base, off) : element<std::uint64_t>(base, off);
        break;
    }
    out[i] = narrow<T>(v, i, what);
  }
  return out;
}

}  // namespace

template <class T>
std::vector<T> integers_of(nb::handle obj, const char* what) {
  if (nb::isinstance<nb::list>(obj) || nb::isinstance<nb::tuple>(obj)) {
    nb::sequence seq = nb::borrow<nb::sequence>(obj);
    std::vector<T> out;
    out.reserve(nb::len(seq));
    std::size_t i = 0;
    for (nb::handle item : seq) {
      out.push_back(narrow<T>(wide_of(item, i, what), i, what));
      ++i;
    }
    return out;
  }
  nb::ndarray<nb::ro> array;
  KVBM_CHECK(nb::try_cast(obj, array, false), what, ": expected a list of ints or a 1-D integer ",
             "array, got ", nb::type_name(obj.type()).c_str());
  return from_array<T>(array, what);
}

template std::vector<std::uint64_t> integers_of<std::uint64_t>(nb::handle, const char*);
template std::vector<std::int64_t> integers_of<std::int64_t>(nb::handle, const char*);
template std::vector<std::uint32_t> integers_of<std::uint32_t>(nb::handle, const char*);

}  // namespace kvbm::python
