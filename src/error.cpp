#include "kvbm/error.h"

#include <cerrno>
#include <ostream>
#include <string>

namespace kvbm {

std::string_view to_string(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::kIo:
      return "io";
    case ErrorKind::kNoSpace:
      return "no_space";
    case ErrorKind::kCorrupt:
      return "corrupt";
    case ErrorKind::kDevice:
      return "device";
    case ErrorKind::kNoMemory:
      return "no_memory";
    case ErrorKind::kRefused:
      return "refused";
    case ErrorKind::kInternal:
      return "internal";
    case ErrorKind::kUnavailable:
      return "unavailable";
    case ErrorKind::kTimeout:
      return "timeout";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& out, const Error& error) {
  return out << to_string(error.kind) << ": " << error.message;
}

std::ostream& operator<<(std::ostream& out, const std::optional<Error>& error) {
  return error ? out << *error : out << "no error";
}

ErrorKind error_kind_of_errno(int code) noexcept {
  switch (code) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return ErrorKind::kNoSpace;
    case EBADMSG:
      return ErrorKind::kCorrupt;
    case ENOMEM:
      return ErrorKind::kNoMemory;
    default:
      return ErrorKind::kIo;
  }
}

}  // namespace kvbm

namespace kvbm::detail {

void throw_usage_error(const char* file, int line, const std::string& message) {
  std::string where(file);
  if (const auto slash = where.rfind("include/"); slash != std::string::npos) where.erase(0, slash);
  throw UsageError(where + ":" + std::to_string(line) + ": " + message);
}

}  // namespace kvbm::detail
