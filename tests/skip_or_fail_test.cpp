// KVBM_SKIP_OR_FAIL (tests/skip_or_fail.h): a skip outside CI, a failure under CI=true unless the
// reason is one the CI machine cannot meet.

#include "skip_or_fail.h"

#include <cstdlib>
#include <optional>
#include <string>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

namespace kvbm::test {
namespace skip_or_fail_test {

/// Sets CI for the scope, then puts back what was there.
class ScopedCi {
 public:
  explicit ScopedCi(const char* value) {
    if (const char* old = std::getenv("CI")) old_ = old;
    ::setenv("CI", value, 1);
  }
  ~ScopedCi() {
    if (old_) {
      ::setenv("CI", old_->c_str(), 1);
    } else {
      ::unsetenv("CI");
    }
  }
  ScopedCi(const ScopedCi&) = delete;
  ScopedCi& operator=(const ScopedCi&) = delete;

 private:
  std::optional<std::string> old_;
};

void skip_for_a_missing_server() { KVBM_SKIP_OR_FAIL("redis-server is not installed: install it"); }

TEST(SkipOrFail, OnlyTheHardwareReasonsMaySkipInCi) {
  EXPECT_TRUE(skip_allowed_in_ci("no GPU: no usable CUDA device"));
  EXPECT_TRUE(skip_allowed_in_ci("GPU present: writes G1 through host pointers"));
  EXPECT_TRUE(skip_allowed_in_ci("GPU runtime too old: no cudaMemcpyBatchAsync"));
  // The sanitizer stages run a reduced check instead of skipping.
  EXPECT_FALSE(skip_allowed_in_ci("KVBM_STRESS_SCALE < 1: full trace only"));
  EXPECT_FALSE(skip_allowed_in_ci("sanitizer build: its allocator holds freed memory"));
  EXPECT_FALSE(skip_allowed_in_ci("redis-server is not installed: install it"));
  EXPECT_FALSE(skip_allowed_in_ci("io_uring unavailable: io_uring_queue_init: EPERM"));
  EXPECT_FALSE(skip_allowed_in_ci("no GPU"));  // a class needs its ": "
  EXPECT_FALSE(skip_allowed_in_ci("the GPU is busy: no GPU: x"));
}

TEST(SkipOrFail, CiIsOnlyTheExactValueTrue) {
  {
    const ScopedCi ci("true");
    EXPECT_TRUE(in_ci());
  }
  {
    const ScopedCi ci("1");
    EXPECT_FALSE(in_ci());
  }
}

TEST(SkipOrFail, AMissingServerFailsUnderCi) {
  const ScopedCi ci("true");
  EXPECT_FATAL_FAILURE(skip_for_a_missing_server(),
                       "CI=true: a skip for this reason is a failure (tests/skip_or_fail.h): "
                       "redis-server is not installed: install it");
}

}  // namespace skip_or_fail_test
}  // namespace kvbm::test
