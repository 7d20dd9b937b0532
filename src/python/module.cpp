// src/python/module.cpp: the module kvbm._kvbm; python/kvbm/__init__.py re-exports it.

#include <nanobind/stl/string.h>
#include <string>

#include <spdlog/spdlog.h>

#include "kvbm/config.h"
#include "kvbm/logging.h"
#include "python/bindings.h"
#include "python/groups.h"

NB_MODULE(_kvbm, m) {
  m.doc() = "kvbm: block-based KV cache management across memory tiers (C++ core)";
  m.attr("__version__") = KVBM_VERSION;
  kvbm::python::bind_errors(m);
  kvbm::python::bind_hashing(m);
  kvbm::python::bind_config(m);
  kvbm::python::bind_blocks(m);
  kvbm::python::bind_onboard_plan(m);
  kvbm::python::bind_events(m);
  kvbm::python::bind_router(m);
  kvbm::python::bind_manager(m);
  kvbm::python::bind_disk_pool_reader(m);
  kvbm::python::bind_groups(m);
  kvbm::python::bind_hybrid_kv_block_manager(m);
  m.def(
      "set_log_level",
      [](const std::string& level) {
        const auto l = spdlog::level::from_str(level);
        KVBM_CHECK(l != spdlog::level::off || level == "off", "set_log_level: '", level,
                   "' is not one of trace, debug, info, warning, error, critical, off");
        kvbm::logger()->set_level(l);
      },
      nanobind::arg("level"),
      "Sets the level of kvbm's logger (named 'kvbm', on stderr): 'trace' ... 'critical', 'off'.");
}
