// src/io/bulk_xxh3_avx2.cpp: XXH3-64 built with -mavx2 (bulk_xxh3.h), called only on a CPU
// that has AVX2. It includes nothing but xxhash.h (static functions here) and uses plain
// pointers: an inline C++ function compiled here with AVX2 could be the copy the linker keeps
// for the whole program.

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvbm::io {

unsigned long long bulk_xxh3_avx2(const void* data, unsigned long size) noexcept {
  return XXH3_64bits(data, size);
}

// `state` is a BulkXxh3's XXH3_state_t (bulk_xxh3.cpp).
void bulk_update_avx2(void* state, const void* data, unsigned long size) noexcept {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, size);
}

unsigned long long bulk_digest_avx2(const void* state) noexcept {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state));
}

}  // namespace kvbm::io
