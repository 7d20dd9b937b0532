#include "kvbm/error.h"

#include <string>

namespace kvbm::detail {

void throw_usage_error(const char* file, int line, const std::string& message) {
  std::string where(file);
  if (const auto slash = where.rfind("include/"); slash != std::string::npos) where.erase(0, slash);
  throw UsageError(where + ":" + std::to_string(line) + ": " + message);
}

}  // namespace kvbm::detail
