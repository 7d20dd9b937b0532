// kvbm/logging.h: the library's logger.
//
// kvbm logs through one spdlog logger named "kvbm". The host application may
// replace it (to route kvbm's lines into its own sinks, or to silence them)
// with set_logger(). Nothing is logged per block on a hot path, and nothing is
// logged while a pool lock is held.
//
// Thread-safety: logger() and set_logger() may be called from any thread.

#pragma once

#include <memory>

namespace spdlog {
class logger;
}

namespace kvbm {

/// Returns the logger kvbm writes to; creates a stderr logger named "kvbm" on
/// first use.
std::shared_ptr<spdlog::logger> logger();

/// Replaces the logger kvbm writes to. A null pointer restores the default.
void set_logger(std::shared_ptr<spdlog::logger> replacement);

}  // namespace kvbm
