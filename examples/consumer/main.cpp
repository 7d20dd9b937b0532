// Packaging check: a program outside the kvbm tree that includes kvbm's public headers and
// links kvbm::kvbm. Built by scripts/package_test.sh against the installed package and via
// add_subdirectory(). Prints one line and exits 0.

#include <kvbm/error.h>
#include <kvbm/tier.h>

#include <cstdio>
#include <exception>
#include <string_view>

int main() {
  constexpr std::string_view kTier = kvbm::tier_name<kvbm::G2>();
  static_assert(kTier == "G2");
  // KVBM_CHECK throws through detail::throw_usage_error, which lives in the compiled library,
  // so this also proves that the library itself links.
  try {
    KVBM_CHECK(kTier.empty(), "expected failure from the consumer");
    std::fprintf(stderr, "kvbm_consumer: KVBM_CHECK did not throw\n");
    return 1;
  } catch (const kvbm::UsageError& e) {
    std::printf("kvbm_consumer: OK (tier %.*s; UsageError: %s)\n", static_cast<int>(kTier.size()),
                kTier.data(), e.what());
  }
  return 0;
}
