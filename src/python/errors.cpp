// src/python/errors.cpp: the library's error model in Python (docs/error_model.md).
//
//   kvbm::UsageError    -> kvbm.UsageError (a ValueError): misuse, bad configuration
//   kvbm::RuntimeError  -> kvbm.KvbmRuntimeError (a RuntimeError) with .kind ("io",
//                          "no_space", "corrupt", ...) and .code (errno or CUDA error)
//
// The message is the C++ message, unchanged (file, line and what to do).

#include <Python.h>

#include "kvbm/error.h"
#include "python/bindings.h"

namespace kvbm::python {

namespace {

PyObject* g_usage_error = nullptr;
PyObject* g_runtime_error = nullptr;

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const kvbm::UsageError& e) {
    PyErr_SetString(g_usage_error, e.what());
  } catch (const kvbm::RuntimeError& e) {
    nb::object cls = nb::borrow(g_runtime_error);
    nb::object exc = cls(nb::str(e.what()));
    nb::setattr(exc, "kind", nb::str(std::string(to_string(e.kind())).c_str()));
    nb::setattr(exc, "code", nb::int_(e.code()));
    PyErr_SetObject(g_runtime_error, exc.ptr());
  }
}

}  // namespace

void bind_errors(nb::module_& m) {
  g_usage_error = PyErr_NewExceptionWithDoc(
      "kvbm.UsageError", "Misuse of the API or an invalid configuration (kvbm::UsageError).",
      PyExc_ValueError, nullptr);
  g_runtime_error = PyErr_NewExceptionWithDoc(
      "kvbm.KvbmRuntimeError",
      "A valid request the machine could not carry out (kvbm::RuntimeError); .kind and .code "
      "say why.",
      PyExc_RuntimeError, nullptr);
  m.attr("UsageError") = nb::borrow(g_usage_error);
  m.attr("KvbmRuntimeError") = nb::borrow(g_runtime_error);
  nb::register_exception_translator(translate);
}

}  // namespace kvbm::python
