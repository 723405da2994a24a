// Time as a seam: the daemon uses the real clock; tests drive a ManualClock so
// commit-idle and timestamps are deterministic.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <functional>
#include <mutex>
#include <set>

namespace ckptfs {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time (CLOCK_REALTIME), for file timestamps and committed_at.
  virtual timespec Now() const = 0;
  // Monotonic nanoseconds, for timeouts and idleness.
  virtual int64_t MonotonicNanos() const = 0;
  // Every timed wait goes through here, so a test's clock decides when it
  // ends: waits on cv (lock held by the caller, released meanwhile) until
  // done() is true or nanos of this clock have passed; returns done(). A
  // notification of cv wakes it early to check done().
  virtual bool WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                       int64_t nanos, const std::function<bool()>& done) const;
};

class SystemClock final : public Clock {
 public:
  timespec Now() const override;
  int64_t MonotonicNanos() const override;
};

// The process's real clock, for code whose caller passed none.
const Clock& SystemClockInstance();

// Starts at a fixed time; moves only when told to.
class ManualClock final : public Clock {
 public:
  timespec Now() const override;
  int64_t MonotonicNanos() const override { return mono_ns_.load(); }
  // Ends when Advance moves past the deadline (or done()); real time does
  // not count.
  bool WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, int64_t nanos,
               const std::function<bool()>& done) const override;
  // Wakes the waits so they see the new time.
  void Advance(int64_t nanos);

 private:
  // A std::mutex, not a Mutex (common/mutex.h includes this header), so the
  // GUARDED_BY below is a comment the analysis does not check.
  mutable std::mutex waiters_mu_;
  mutable std::multiset<std::condition_variable*> waiters_;  // GUARDED_BY(waiters_mu_)
  std::atomic<int64_t> wall_ns_{1'700'000'000LL * 1'000'000'000LL};
  std::atomic<int64_t> mono_ns_{1'000'000'000LL};
};

}  // namespace ckptfs
