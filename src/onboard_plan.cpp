// src/onboard_plan.cpp: the names of the onboarding modes (kvbm/onboard_plan.h).

#include "kvbm/onboard_plan.h"

#include "kvbm/error.h"

namespace kvbm {

std::string_view to_string(OnboardMode m) noexcept {
  switch (m) {
    case OnboardMode::kAuto:
      return "auto";
    case OnboardMode::kLoadAll:
      return "load_all";
    case OnboardMode::kRecomputeAll:
      return "recompute_all";
  }
  return "unknown";
}

OnboardMode parse_onboard_mode(std::string_view name) {
  for (const auto m : {OnboardMode::kAuto, OnboardMode::kLoadAll, OnboardMode::kRecomputeAll}) {
    if (to_string(m) == name) return m;
  }
  KVBM_CHECK(false, "unknown onboarding mode '", name, "'; use auto, load_all or recompute_all");
  return OnboardMode::kAuto;
}

}  // namespace kvbm
