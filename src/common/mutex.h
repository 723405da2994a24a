// A mutex the thread-safety analysis understands (std::mutex in libstdc++
// carries no annotations), and its scoped lock. MutexLock can be released
// and taken again inside its scope and waits on condition variables, so it
// replaces both std::lock_guard and std::unique_lock.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/clock.h"
#include "common/thread_annotations.h"

namespace ckptfs {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis the caller holds it (where it cannot see that, e.g.
  // in a callback documented to run under the lock). Checks nothing at run
  // time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : lock_(mu->mu_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Lets go of the mutex for work that must not hold it (I/O), and takes it
  // back.
  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }

  // Waits for a notification (or a spurious wakeup), releasing the mutex
  // meanwhile; callers re-check their condition in a loop.
  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  // Waits until done() or nanos of clock have passed (Clock::WaitFor);
  // returns done().
  bool WaitFor(const Clock& clock, std::condition_variable& cv, int64_t nanos,
               const std::function<bool()>& done) {
    return clock.WaitFor(cv, lock_, nanos, done);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace ckptfs
