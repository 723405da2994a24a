// Clang's thread-safety annotations (-Wthread-safety), as Abseil and LevelDB
// spell them. Under GCC they expand to nothing; the suite's thread-safety
// test (tools/thread_safety_check.py) compiles the tree with clang so that
// reading a GUARDED_BY member without its mutex, or calling a REQUIRES
// function without it, fails the suite.
#pragma once

#if defined(__clang__)
#define CKPTFS_TSA(x) __attribute__((x))
#else
#define CKPTFS_TSA(x)
#endif

#define CAPABILITY(x) CKPTFS_TSA(capability(x))
#define SCOPED_CAPABILITY CKPTFS_TSA(scoped_lockable)
#define GUARDED_BY(x) CKPTFS_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) CKPTFS_TSA(pt_guarded_by(x))
#define REQUIRES(...) CKPTFS_TSA(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) CKPTFS_TSA(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) CKPTFS_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) CKPTFS_TSA(release_capability(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) CKPTFS_TSA(assert_capability(x))
#define RETURN_CAPABILITY(x) CKPTFS_TSA(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS CKPTFS_TSA(no_thread_safety_analysis)
