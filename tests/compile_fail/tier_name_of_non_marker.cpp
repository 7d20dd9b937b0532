// Must not compile: `int` is not a TierMarker (an empty, trivially copyable class type), so
// kvbm::tier_name<int>() is rejected by the concept. Registered in tests/CMakeLists.txt with
// kvbm_add_compile_fail_test(); the control build (-DKVBM_COMPILE_FAIL_CONTROL) must compile.

#include <kvbm/tier.h>

#include <string_view>

int main() {
  [[maybe_unused]] constexpr std::string_view kOk = kvbm::tier_name<kvbm::G2>();
#ifndef KVBM_COMPILE_FAIL_CONTROL
  [[maybe_unused]] constexpr std::string_view kBad = kvbm::tier_name<int>();
#endif
  return 0;
}
