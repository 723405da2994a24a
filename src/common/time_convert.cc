#include "common/time_convert.h"

#include <cmath>
#include <limits>

namespace ckptfs {

int64_t TimespecToNanos(const timespec& ts) {
  int64_t ns;
  if (__builtin_mul_overflow(static_cast<int64_t>(ts.tv_sec), kNanosPerSecond, &ns) ||
      __builtin_add_overflow(ns, static_cast<int64_t>(ts.tv_nsec), &ns)) {
    return ts.tv_sec < 0 ? std::numeric_limits<int64_t>::min()
                         : std::numeric_limits<int64_t>::max();
  }
  return ns;
}

timespec NanosToTimespec(int64_t ns) {
  // Division truncates toward zero; floor it so tv_nsec is never negative.
  int64_t sec = ns / kNanosPerSecond;
  int64_t nsec = ns % kNanosPerSecond;
  if (nsec < 0) {
    sec -= 1;
    nsec += kNanosPerSecond;
  }
  return timespec{static_cast<time_t>(sec), static_cast<long>(nsec)};
}

timespec SecondsToTimespec(double s) {
  const double ns = std::round(s * 1e9);
  // 2^63 as a double: int64_t holds [-2^63, 2^63).
  constexpr double kLimit = 9223372036854775808.0;
  if (std::isnan(ns)) return timespec{};
  if (ns >= kLimit) return NanosToTimespec(std::numeric_limits<int64_t>::max());
  if (ns < -kLimit) return NanosToTimespec(std::numeric_limits<int64_t>::min());
  return NanosToTimespec(static_cast<int64_t>(ns));
}

double TimespecToSeconds(const timespec& ts) {
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace ckptfs
