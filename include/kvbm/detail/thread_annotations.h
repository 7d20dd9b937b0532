// kvbm/detail/thread_annotations.h: clang thread-safety annotations.
//
// Members a mutex guards say so in code, not in a comment:
//
//   detail::Mutex mu_;
//   std::size_t in_use_ KVBM_GUARDED_BY(mu_) = 0;
//   void evict_locked() KVBM_REQUIRES(mu_);
//
// clang's -Wthread-safety then checks every access (the build preset
// `threadsafety`, stage threadsafety of scripts/test.sh, makes it an error).
// On other compilers the macros expand to nothing. The analysis needs an
// annotated mutex: use detail::Mutex, detail::LockGuard and detail::UniqueLock
// (kvbm/detail/mutex.h); a plain std::mutex is invisible to it.
//
// A lambda that reads guarded members while its caller holds the lock (a
// condition variable's predicate) says so: [&]() KVBM_REQUIRES(mu_) { ... }.
//
// The macros follow clang's documentation ("Thread Safety Analysis") and
// Abseil's base/thread_annotations.h.

#pragma once

#if defined(__clang__)
#define KVBM_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define KVBM_THREAD_ANNOTATION_(x)
#endif

/// A class that is a capability (a mutex).
#define KVBM_CAPABILITY(name) KVBM_THREAD_ANNOTATION_(capability(name))
/// An RAII class that holds a capability for its lifetime (a lock guard).
#define KVBM_SCOPED_CAPABILITY KVBM_THREAD_ANNOTATION_(scoped_lockable)
/// A member that may be read or written only with `mu` held.
#define KVBM_GUARDED_BY(mu) KVBM_THREAD_ANNOTATION_(guarded_by(mu))
/// A pointer member whose pointee may be used only with `mu` held.
#define KVBM_PT_GUARDED_BY(mu) KVBM_THREAD_ANNOTATION_(pt_guarded_by(mu))
/// A function that must be called with the capabilities held.
#define KVBM_REQUIRES(...) KVBM_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
/// A function that must be called with the capabilities held at least shared (a reader).
#define KVBM_REQUIRES_SHARED(...) KVBM_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
/// A function that must be called without the capabilities held (it takes them).
#define KVBM_EXCLUDES(...) KVBM_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
/// A function that acquires the capabilities (or, in a scoped class, its own).
#define KVBM_ACQUIRE(...) KVBM_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
/// A function that acquires the capabilities shared (a reader lock).
#define KVBM_ACQUIRE_SHARED(...) KVBM_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
/// A function that releases the capabilities held shared.
#define KVBM_RELEASE_SHARED(...) KVBM_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))
/// A function that releases the capabilities (or, in a scoped class, its own).
#define KVBM_RELEASE(...) KVBM_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
/// A function that acquires the capabilities when it returns `result`.
#define KVBM_TRY_ACQUIRE(...) KVBM_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
/// A function that returns a reference to the capability `mu`.
#define KVBM_RETURN_CAPABILITY(mu) KVBM_THREAD_ANNOTATION_(lock_returned(mu))
/// A function that checks (at run time) that the capability is held.
#define KVBM_ASSERT_CAPABILITY(mu) KVBM_THREAD_ANNOTATION_(assert_capability(mu))
/// Turns the analysis off for one function; say why beside it.
#define KVBM_NO_THREAD_SAFETY_ANALYSIS KVBM_THREAD_ANNOTATION_(no_thread_safety_analysis)
