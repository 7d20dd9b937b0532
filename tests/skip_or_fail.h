// tests/skip_or_fail.h: KVBM_SKIP_OR_FAIL(reason), the one way a test says it cannot run here.
//
// Outside CI it skips with `reason` (GTEST_SKIP). Under CI=true (the environment of .ci/run) it
// fails instead, so that a broken install step (redis-server, redis-cli, libhiredis-dev,
// liburing-dev, ...) turns the run red rather than switching a suite off, unless the reason is
// one the CI machine cannot meet (skip_allowed_in_ci, below). Every reason is "<class>: <details>":
// scripts/test.sh groups the skips of a stage by the class, the text before the first ": ".
//
//   if (!RedisServer::installed()) KVBM_SKIP_OR_FAIL(RedisServer::kSkipMessage);
//
// Like GTEST_SKIP it returns from the current function (a void one: the test body or SetUp).

#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace kvbm::test {

/// True when the environment variable CI is "true".
inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string_view(ci) == "true";
}

/// The reason classes that may skip under CI=true: the machine has no GPU (a CUDA test), has one
/// (a test of the emulated device), or has one whose runtime lacks a call, all facts of the
/// hardware. Everything else fails: a missing package above all; root (CI containers run as
/// root), which tests of permission bits meet with tests/permission_checks.h instead of skipping;
/// and the sanitizer stages, where a test runs a reduced check (KVBM_STRESS_SCALE < 1: a prefix
/// of the trace, fewer operations) or measures what the sanitizer leaves exact instead of
/// skipping. scripts/skip_report.py (through tests/python/skips.py) keeps the same list.
inline bool skip_allowed_in_ci(std::string_view reason) {
  for (std::string_view allowed : {"no GPU:", "GPU present:", "GPU runtime too old:"}) {
    if (reason.starts_with(allowed)) return true;
  }
  return false;
}

}  // namespace kvbm::test

// A statement (do/while): `if (x) KVBM_SKIP_OR_FAIL(r); else ...` binds as written, with no
// dangling-else warning.
#define KVBM_SKIP_OR_FAIL(reason)                                                             \
  do {                                                                                        \
    const std::string kvbm_skip_reason_(reason);                                              \
    if (::kvbm::test::in_ci() && !::kvbm::test::skip_allowed_in_ci(kvbm_skip_reason_))        \
      GTEST_FAIL() << "CI=true: a skip for this reason is a failure (tests/skip_or_fail.h): " \
                   << kvbm_skip_reason_;                                                      \
    else                                                                                      \
      GTEST_SKIP() << kvbm_skip_reason_;                                                      \
  } while (false)
