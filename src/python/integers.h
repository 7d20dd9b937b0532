// src/python/integers.h: the integers a call takes (sequence hashes, token ids, rows).
//
// A caller may pass a list or tuple of Python ints, or a 1-D array of any
// integer dtype, order and stride (NumPy, torch, anything with DLPack or the
// buffer protocol). The values are read as they are and each must fit the
// type kvbm keeps them in: a value that does not (a negative hash, a token id
// of 2^32, a float) is refused with a UsageError, never wrapped or truncated.

#pragma once

#include <cstdint>
#include <nanobind/nanobind.h>
#include <vector>

namespace kvbm::python {

namespace nb = nanobind;

/// Returns the values of `obj` (see the file comment) as T, one of std::uint64_t,
/// std::int64_t or std::uint32_t. `what` names the argument in errors ("probe: hashes").
template <class T>
[[nodiscard]] std::vector<T> integers_of(nb::handle obj, const char* what);

extern template std::vector<std::uint64_t> integers_of<std::uint64_t>(nb::handle, const char*);
extern template std::vector<std::int64_t> integers_of<std::int64_t>(nb::handle, const char*);
extern template std::vector<std::uint32_t> integers_of<std::uint32_t>(nb::handle, const char*);

}  // namespace kvbm::python
