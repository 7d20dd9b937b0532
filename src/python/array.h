// src/python/array.h: hands a std::vector to Python as a NumPy array without a copy.

#pragma once

#include <cstddef>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <utility>
#include <vector>

namespace kvbm::python {

/// Returns a 1-D NumPy array that owns `values` (moved to the heap, freed with the array).
template <class T>
nanobind::ndarray<nanobind::numpy, T, nanobind::ndim<1>> to_numpy(std::vector<T>&& values) {
  auto* heap = new std::vector<T>(std::move(values));
  nanobind::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  const std::size_t shape[1] = {heap->size()};
  return nanobind::ndarray<nanobind::numpy, T, nanobind::ndim<1>>(heap->data(), 1, shape, owner);
}

}  // namespace kvbm::python
