// kvbm/error.h: the library's one error model.
//
// Misuse and bad configuration (a zero block count, a block of another
// manager, a moved-from handle) are programming errors: they throw
// `kvbm::UsageError` (a `std::logic_error`) whose message names the file, the
// line, what was wrong and what to do instead. Expected runtime outcomes (a pool
// that cannot satisfy an allocation, a hash that is not present) are returned
// as values (`std::optional`, `Result`) that the caller must look at.
// Destructors and release paths never throw.

#pragma once

#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace kvbm {

/// Thrown on misuse of the API or invalid configuration.
class UsageError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
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
#define KVBM_CHECK(cond, ...)                                                         \
  do {                                                                                \
    if (!(cond)) [[unlikely]] {                                                       \
      ::kvbm::detail::throw_usage_error(__FILE__, __LINE__, ::kvbm::detail::concat(__VA_ARGS__)); \
    }                                                                                 \
  } while (false)

/// The outcome of an operation that can fail in an expected way: either a value
/// or an error. A failed type-state transition carries the original block back
/// inside its error, so nothing is lost.
template <class T, class E>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(E error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT(google-explicit-constructor)

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
