// tests/permission_checks.h: PermissionChecksOn, which makes the calling thread subject to file
// permission bits even when the process runs as root (CI containers do).
//
// Root passes permission checks through two capabilities, CAP_DAC_OVERRIDE and
// CAP_DAC_READ_SEARCH. While a PermissionChecksOn lives, both are out of the calling thread's
// effective set (capset(2) acts on the calling thread only); they stay in its permitted set and
// are put back when it is destroyed. So a test of "unreadable directory" or "mode-000 file" runs
// as root too, on the thread that makes the call. Outside root it changes nothing.
//
//   {
//     test::PermissionChecksOn checks;
//     ASSERT_TRUE(checks.active()) << checks.why_not();
//     ... open what the test made unreadable ...
//   }

#pragma once

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kvbm::test {

class PermissionChecksOn {
 public:
  PermissionChecksOn() {
    header_.version = _LINUX_CAPABILITY_VERSION_3;
    header_.pid = 0;  // the calling thread
    if (::syscall(SYS_capget, &header_, saved_) != 0) {
      why_not_ = std::string("capget: ") + std::strerror(errno);
      return;
    }
    __user_cap_data_struct lowered[2] = {saved_[0], saved_[1]};
    constexpr unsigned kBits = (1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH);
    if ((saved_[0].effective & kBits) == 0) {
      active_ = true;  // not privileged: permission bits apply already
      return;
    }
    lowered[0].effective &= ~kBits;
    if (::syscall(SYS_capset, &header_, lowered) != 0) {
      why_not_ = std::string("capset: ") + std::strerror(errno);
      return;
    }
    active_ = restore_ = true;
  }
  ~PermissionChecksOn() {
    if (restore_) (void)::syscall(SYS_capset, &header_, saved_);
  }
  PermissionChecksOn(const PermissionChecksOn&) = delete;
  PermissionChecksOn& operator=(const PermissionChecksOn&) = delete;

  /// True when permission bits apply to the calling thread now.
  [[nodiscard]] bool active() const { return active_; }
  /// Why they could not be made to apply ("" when active()).
  [[nodiscard]] const std::string& why_not() const { return why_not_; }

 private:
  __user_cap_header_struct header_{};
  __user_cap_data_struct saved_[2]{};
  bool active_ = false;
  bool restore_ = false;
  std::string why_not_;
};

}  // namespace kvbm::test
