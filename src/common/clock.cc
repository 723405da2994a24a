#include "common/clock.h"

#include <chrono>

#include "common/time_convert.h"

namespace ckptfs {

timespec SystemClock::Now() const {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

int64_t SystemClock::MonotonicNanos() const {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return TimespecToNanos(ts);
}

bool Clock::WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, int64_t nanos,
                    const std::function<bool()>& done) const {
  const int64_t deadline = MonotonicNanos() + nanos;
  while (!done()) {
    const int64_t left = deadline - MonotonicNanos();
    if (left <= 0) return false;
    cv.wait_for(lock, std::chrono::nanoseconds(left));
  }
  return true;
}

const Clock& SystemClockInstance() {
  static const SystemClock clock;
  return clock;
}

timespec ManualClock::Now() const { return NanosToTimespec(wall_ns_.load()); }

bool ManualClock::WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                          int64_t nanos, const std::function<bool()>& done) const {
  const int64_t deadline = MonotonicNanos() + nanos;
  {
    std::lock_guard<std::mutex> w(waiters_mu_);
    waiters_.insert(&cv);
  }
  bool ok;
  while (!(ok = done()) && MonotonicNanos() < deadline) {
    // Advance notifies cv, but may do so between the check above and this
    // wait; the short real-time bound makes such a missed wake-up cost a
    // few milliseconds, never a hang.
    cv.wait_for(lock, std::chrono::milliseconds(10));
  }
  {
    std::lock_guard<std::mutex> w(waiters_mu_);
    waiters_.erase(waiters_.find(&cv));
  }
  return ok;
}

void ManualClock::Advance(int64_t nanos) {
  wall_ns_ += nanos;
  mono_ns_ += nanos;
  std::lock_guard<std::mutex> w(waiters_mu_);
  for (std::condition_variable* cv : waiters_) cv->notify_all();
}

}  // namespace ckptfs
