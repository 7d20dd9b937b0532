// src/transfer/stage_and_register.cpp: the log line of kvbm/transfer/stage_and_register.h.

#include "kvbm/transfer/stage_and_register.h"

#include <exception>

#include <spdlog/spdlog.h>

#include "kvbm/logging.h"

namespace kvbm::detail {

void log_unregistered_copies(std::string_view pool, std::size_t count,
                             std::string_view what) noexcept {
  try {
    logger()->error("{} copies into {} were not registered: {}", count, pool, what);
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch)
    // Logging itself failed (no memory): nothing left to tell with.
  }
}

}  // namespace kvbm::detail
