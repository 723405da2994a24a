#include "common/clock.h"

namespace ckptfs {

timespec SystemClock::Now() const {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

int64_t SystemClock::MonotonicNanos() const {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

timespec ManualClock::Now() const {
  const int64_t ns = wall_ns_.load();
  return timespec{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
}

void ManualClock::Advance(int64_t nanos) {
  wall_ns_ += nanos;
  mono_ns_ += nanos;
}

}  // namespace ckptfs
