// tests/facade/build_errors_test.cpp: which failures of KvBlockManager::build
// are the configuration's (UsageError: fix the config) and which the
// machine's (RuntimeError: free the resource). A full disk under the G3 file
// is the machine's: injected (ENOSPC from fallocate) and real (a file size
// limit, RLIMIT_FSIZE, makes the kernel refuse the preallocation with EFBIG).

#include <signal.h>
#include <sys/resource.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "facade/facade_test_util.h"
#include "kvbm/error.h"
#include "kvbm/io/syscalls.h"
#include "kvbm/kv_block_manager.h"

namespace kvbm {
namespace build_errors_test {

using test::config;
using test::TempDir;

bool directory_is_empty(const std::filesystem::path& dir) {
  return std::filesystem::directory_iterator(dir) == std::filesystem::directory_iterator();
}

// Builds `c`, expecting a RuntimeError; returns it (default-built when none).
RuntimeError expect_runtime_error(const KvBlockManagerConfig& c) {
  try {
    (void)KvBlockManager::build(c);
    ADD_FAILURE() << "build() succeeded";
  } catch (const UsageError& e) {
    ADD_FAILURE() << "a full disk is no usage error, yet build() threw UsageError: " << e.what();
  } catch (const RuntimeError& e) {
    return e;
  }
  return RuntimeError(ErrorKind::kInternal, 0, "none");
}

int fallocate_enospc(int, int, std::int64_t, std::int64_t) {
  errno = ENOSPC;
  return -1;
}

TEST(BuildErrors, AFullDiskIsARuntimeErrorNotAUsageError) {
  TempDir dir;
  io::SyscallTable table = io::real_syscalls();
  table.fallocate = fallocate_enospc;
  const io::ScopedSyscallOverride full(table);
  const RuntimeError e = expect_runtime_error(config(4, 4, 64, dir.path()));
  EXPECT_EQ(e.kind(), ErrorKind::kNoSpace);
  EXPECT_EQ(e.code(), ENOSPC);
  const std::string what = e.what();
  EXPECT_NE(what.find(dir.path().string()), std::string::npos) << what;
  EXPECT_NE(what.find("free space"), std::string::npos) << what;
  EXPECT_NE(what.find("fewer blocks"), std::string::npos) << what;
  EXPECT_EQ(what.find("KvBlockManagerConfig.disk_directory:"), std::string::npos)
      << "not worded as a bad option: " << what;
  EXPECT_TRUE(directory_is_empty(dir.path())) << "the half-made file is removed";
}

// The real kernel path: a file size limit below the G3 file's size makes
// fallocate (or ftruncate) fail with EFBIG (SIGXFSZ ignored, as a server
// would); the limit and the signal's disposition are restored afterwards.
TEST(BuildErrors, AFileSizeLimitIsARuntimeError) {
  TempDir dir;
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct sigaction ignore {};
  struct sigaction old_action {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGXFSZ, &ignore, &old_action), 0);
  rlimit small = saved;
  small.rlim_cur = 64 * 1024;  // the file wants 64 blocks of 2 KiB and more
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  RuntimeError e = expect_runtime_error(config(4, 4, 64, dir.path()));
  EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  EXPECT_EQ(::sigaction(SIGXFSZ, &old_action, nullptr), 0);
  EXPECT_EQ(e.kind(), ErrorKind::kNoSpace) << e.what();
  EXPECT_EQ(e.code(), EFBIG) << e.what();
  EXPECT_NE(std::string(e.what()).find("ulimit -f"), std::string::npos) << e.what();
  EXPECT_TRUE(directory_is_empty(dir.path()));
}

int openat_eacces(int, const char*, int, unsigned) {
  errno = EACCES;
  return -1;
}

// A directory the process may not write is the configuration's to fix.
TEST(BuildErrors, APermissionProblemStaysAUsageError) {
  TempDir dir;
  io::SyscallTable table = io::real_syscalls();
  table.openat = openat_eacces;
  const io::ScopedSyscallOverride denied(table);
  try {
    (void)KvBlockManager::build(config(4, 4, 64, dir.path()));
    ADD_FAILURE() << "build() succeeded";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("KvBlockManagerConfig.disk_directory"), std::string::npos)
        << e.what();
  }
}

}  // namespace build_errors_test
}  // namespace kvbm
