#include "kvbm/logging.h"

#include <atomic>
#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace kvbm {
namespace {

std::shared_ptr<spdlog::logger> make_default_logger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto log = std::make_shared<spdlog::logger>("kvbm", std::move(sink));
  log->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %v");
  return log;
}

std::mutex& logger_mutex() {
  static std::mutex m;
  return m;
}

std::shared_ptr<spdlog::logger>& logger_slot() {
  static std::shared_ptr<spdlog::logger> slot;
  return slot;
}

}  // namespace

std::shared_ptr<spdlog::logger> logger() {
  std::lock_guard lock(logger_mutex());
  auto& slot = logger_slot();
  if (!slot) slot = make_default_logger();
  return slot;
}

void set_logger(std::shared_ptr<spdlog::logger> replacement) {
  std::lock_guard lock(logger_mutex());
  logger_slot() = replacement ? std::move(replacement) : make_default_logger();
}

}  // namespace kvbm
