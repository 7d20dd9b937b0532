// src/python/module.cpp: the module kvbm._kvbm; python/kvbm/__init__.py re-exports it.

#include "python/bindings.h"

NB_MODULE(_kvbm, m) {
  m.doc() = "kvbm: block-based KV cache management across memory tiers (C++ core)";
  kvbm::python::bind_errors(m);
  kvbm::python::bind_hashing(m);
  kvbm::python::bind_config(m);
  kvbm::python::bind_blocks(m);
  kvbm::python::bind_events(m);
  kvbm::python::bind_manager(m);
}
