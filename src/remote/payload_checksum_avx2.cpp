// src/remote/payload_checksum_avx2.cpp: XXH3-64 built with -mavx2 (payload_checksum.h), called
// only on a CPU that has AVX2. It includes nothing but xxhash.h (static functions here) and
// uses plain pointers: an inline C++ function compiled here with AVX2 could be the copy the
// linker keeps for the whole program.

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvbm::remote {

unsigned long long payload_checksum_avx2(const void* data, unsigned long size) noexcept {
  return XXH3_64bits(data, size);
}

void payload_update_avx2(XXH3_state_t* state, const void* data, unsigned long size) noexcept {
  XXH3_64bits_update(state, data, size);
}

unsigned long long payload_digest_avx2(const XXH3_state_t* state) noexcept {
  return XXH3_64bits_digest(state);
}

}  // namespace kvbm::remote
