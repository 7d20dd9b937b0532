// kvbm/error.h: the library's one error model (docs/error_model.md).
//
// Misuse and bad configuration (a zero block count, a block of another
// manager, a moved-from handle) are programming errors: they throw
// `kvbm::UsageError` (a `std::logic_error`) whose message names the file, the
// line, what was wrong and what to do instead. Expected runtime outcomes (a pool
// that cannot satisfy an allocation, a hash that is not present) are returned
// as values (`std::optional`, `Result`) that the caller must look at; a
// failure of work that runs on its own (a copy, an offload, an onboarding, a
// G4 fetch) comes back as a `kvbm::Error` value (kind, code, message) in what
// reports its end: the same three fields a `RuntimeError` carries. A runtime failure where no value
// can be returned (building a tier on a full disk, CUDA refusing a stream) throws
// `kvbm::RuntimeError` (a `std::runtime_error`): the arguments were valid, the
// machine could not do it, and the message says what to free or change.
// Both carry an `ErrorKind`. Destructors and release paths never throw.

#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace kvbm {

/// Thrown on misuse of the API or invalid configuration.
class UsageError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// What kind of runtime failure (not misuse) happened.
enum class ErrorKind : std::uint8_t {
  kIo,           ///< a syscall failed; the code is its errno value
  kNoSpace,      ///< the file system is full or a file size limit was hit (ENOSPC, EDQUOT, EFBIG)
  kCorrupt,      ///< stored bytes failed verification (checksum, footer, identity; EBADMSG)
  kDevice,       ///< a CUDA call failed; the code is its cudaError_t value
  kNoMemory,     ///< host memory ran out while the work ran
  kRefused,      ///< an engine refused a batch at submit(); nothing of it was started
  kInternal,     ///< an unexpected exception inside an engine: a bug, and logged
  kUnavailable,  ///< a server (G4) could not be reached, or the connection broke
  kTimeout,      ///< a server (G4) did not answer within the call's deadline
};

/// Returns the kind's name: "io", "no_space", "corrupt", "device", "no_memory",
/// "refused", "internal", "unavailable" or "timeout".
[[nodiscard]] std::string_view to_string(ErrorKind kind) noexcept;

/// Returns the kind of a failed syscall's errno value: kNoSpace for ENOSPC,
/// EDQUOT and EFBIG, kCorrupt for EBADMSG, kNoMemory for ENOMEM, else kIo.
[[nodiscard]] ErrorKind error_kind_of_errno(int code) noexcept;

/// A runtime failure as a value: what asynchronous work reports (a copy's
/// TransferOutcome, an OffloadReport, an OnboardHandle, a G4 fetch).
struct Error {
  ErrorKind kind = ErrorKind::kInternal;
  int code = 0;         ///< errno or cudaError_t value; 0 when none applies
  std::string message;  ///< what failed, where, and why
  friend bool operator==(const Error&, const Error&) = default;
};

/// Writes "<kind>: <message>" (for logs and test failure messages).
std::ostream& operator<<(std::ostream& out, const Error& error);
/// Writes the error, or "no error".
std::ostream& operator<<(std::ostream& out, const std::optional<Error>& error);

/// Thrown where a runtime failure cannot be returned as a value (a
/// constructor, a build): the arguments were valid but the machine could not
/// do it (a full disk, a CUDA call that failed). Retrying after freeing the
/// resource may succeed; the message says what to free or change.
class RuntimeError : public std::runtime_error {
 public:
  /// `code` is the errno or cudaError_t value (0 when none applies).
  RuntimeError(ErrorKind kind, int code, const std::string& message)
      : std::runtime_error(message), kind_(kind), code_(code) {}
  /// Returns what kind of failure it was.
  [[nodiscard]] ErrorKind kind() const noexcept { return kind_; }
  /// Returns the errno or cudaError_t value; 0 when none applies.
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  ErrorKind kind_;
  int code_;
};

namespace detail {

/// Throws a UsageError whose message is "file:line: message".
[[noreturn]] void throw_usage_error(const char* file, int line, const std::string& message);

/// Concatenates streamable values; used only on cold error paths.
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace detail

/// Checks a precondition; on failure throws UsageError built from the
/// streamable message parts.
#define KVBM_CHECK(cond, ...)                                                                     \
  do {                                                                                            \
    if (!(cond)) [[unlikely]] {                                                                   \
      ::kvbm::detail::throw_usage_error(__FILE__, __LINE__, ::kvbm::detail::concat(__VA_ARGS__)); \
    }                                                                                             \
  } while (false)

/// The outcome of an operation that can fail in an expected way: either a value
/// or an error. A failed type-state transition carries the original block back
/// inside its error, so nothing is lost.
template <class T, class E>
class [[nodiscard]] Result {
 public:
  // Implicit on purpose: `return value;` and `return error;` build a Result.
  // NOLINTNEXTLINE(google-explicit-constructor)
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  // NOLINTNEXTLINE(google-explicit-constructor)
  Result(E error) : v_(std::in_place_index<1>, std::move(error)) {}

  /// Returns true when the operation succeeded.
  [[nodiscard]] bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  /// Returns the value. Precondition: ok().
  T& value() & {
    KVBM_CHECK(ok(), "Result::value() called on an error result; check ok() first");
    return std::get<0>(v_);
  }
  T&& value() && {
    KVBM_CHECK(ok(), "Result::value() called on an error result; check ok() first");
    return std::get<0>(std::move(v_));
  }
  /// Returns the error. Precondition: !ok().
  E& error() & {
    KVBM_CHECK(!ok(), "Result::error() called on a successful result");
    return std::get<1>(v_);
  }
  E&& error() && {
    KVBM_CHECK(!ok(), "Result::error() called on a successful result");
    return std::get<1>(std::move(v_));
  }

 private:
  std::variant<T, E> v_;
};

}  // namespace kvbm
