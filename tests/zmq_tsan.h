// tests/zmq_tsan.h: include once in a test binary that moves bytes through ZeroMQ.
//
// libzmq is not instrumented for ThreadSanitizer, and hands received bytes
// between its I/O thread and the caller through atomics TSan cannot see, so
// TSan reports races inside it that are not there. Under TSan this defines
// __tsan_default_suppressions to suppress reports from within libzmq; kvbm's
// own code stays checked. Outside TSan it defines nothing.

#pragma once

#if defined(__SANITIZE_THREAD__)
#define KVBM_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVBM_TEST_TSAN 1
#endif
#endif

#if defined(KVBM_TEST_TSAN)
extern "C" const char* __tsan_default_suppressions();
extern "C" const char* __tsan_default_suppressions() { return "called_from_lib:libzmq.so\n"; }
#endif
