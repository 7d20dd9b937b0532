#include "io/bulk_xxh3.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvbm::io {

static_assert(sizeof(XXH3_state_t) == BulkXxh3::kStateBytes && alignof(XXH3_state_t) <= 64,
              "BulkXxh3::state_ must hold an XXH3_state_t");

namespace {
XXH3_state_t* state_of(unsigned char* s) noexcept { return reinterpret_cast<XXH3_state_t*>(s); }
const XXH3_state_t* state_of(const unsigned char* s) noexcept {
  return reinterpret_cast<const XXH3_state_t*>(s);
}
}  // namespace

#if KVBM_XXH3_AVX2
// bulk_xxh3_avx2.cpp
unsigned long long bulk_xxh3_avx2(const void* data, unsigned long size) noexcept;
void bulk_update_avx2(void* state, const void* data, unsigned long size) noexcept;
unsigned long long bulk_digest_avx2(const void* state) noexcept;

namespace {
bool have_avx2() noexcept {
  static const bool kAvx2 = __builtin_cpu_supports("avx2") != 0;
  return kAvx2;
}
}  // namespace
#endif

std::uint64_t bulk_xxh3(std::span<const std::byte> bytes) noexcept {
#if KVBM_XXH3_AVX2
  if (have_avx2()) return bulk_xxh3_avx2(bytes.data(), bytes.size());
#endif
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::uint64_t bulk_xxh3(std::span<const std::span<const std::byte>> regions) noexcept {
  if (regions.size() == 1) return bulk_xxh3(regions[0]);
  BulkXxh3 h;
  for (auto r : regions) h.update(r.data(), r.size());
  return h.digest();
}

BulkXxh3::BulkXxh3() noexcept { XXH3_64bits_reset(state_of(state_)); }

void BulkXxh3::update(const void* data, std::size_t size) noexcept {
#if KVBM_XXH3_AVX2
  if (have_avx2()) {
    bulk_update_avx2(state_, data, size);
    return;
  }
#endif
  XXH3_64bits_update(state_of(state_), data, size);
}

std::uint64_t BulkXxh3::digest() const noexcept {
#if KVBM_XXH3_AVX2
  if (have_avx2()) return bulk_digest_avx2(state_);
#endif
  return XXH3_64bits_digest(state_of(state_));
}

}  // namespace kvbm::io
