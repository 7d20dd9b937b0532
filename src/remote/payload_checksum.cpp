#include "payload_checksum.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvbm::remote {

#if KVBM_XXH3_AVX2
// payload_checksum_avx2.cpp
unsigned long long payload_checksum_avx2(const void* data, unsigned long size) noexcept;
void payload_update_avx2(XXH3_state_t* state, const void* data, unsigned long size) noexcept;
unsigned long long payload_digest_avx2(const XXH3_state_t* state) noexcept;

namespace {
bool have_avx2() noexcept {
  static const bool kAvx2 = __builtin_cpu_supports("avx2") != 0;
  return kAvx2;
}
}  // namespace
#endif

std::uint64_t payload_checksum(std::span<const std::byte> bytes) noexcept {
#if KVBM_XXH3_AVX2
  if (have_avx2()) return payload_checksum_avx2(bytes.data(), bytes.size());
#endif
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::uint64_t payload_checksum(std::span<const std::span<const std::byte>> regions) noexcept {
  if (regions.size() == 1) return payload_checksum(regions[0]);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
#if KVBM_XXH3_AVX2
  if (have_avx2()) {
    for (auto r : regions) payload_update_avx2(&state, r.data(), r.size());
    return payload_digest_avx2(&state);
  }
#endif
  for (auto r : regions) XXH3_64bits_update(&state, r.data(), r.size());
  return XXH3_64bits_digest(&state);
}

}  // namespace kvbm::remote
