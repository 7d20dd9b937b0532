// fuzz/fuzz_check.h: the one assertion of the fuzz targets.
//
// KVBM_FUZZ_CHECK(cond, message) prints the message and aborts when `cond` is
// false, so libFuzzer records the input as a crash. It stays on in every build
// type (unlike assert) because an invariant is what a fuzz target is for.

#pragma once

#include <cstdio>
#include <cstdlib>

#define KVBM_FUZZ_CHECK(cond, message)                                                       \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n  %s\n", __FILE__, __LINE__, #cond, \
                   message);                                                                 \
      std::abort();                                                                          \
    }                                                                                        \
  } while (false)
