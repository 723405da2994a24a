// Conversions between timespec and nanoseconds or seconds, one place for the
// arithmetic every layer needs (manifest records, commit objects, cluster
// records, fstat results).
#pragma once

#include <cstdint>
#include <ctime>

namespace ckptfs {

inline constexpr int64_t kNanosPerSecond = 1'000'000'000;

// Nanoseconds since the epoch; saturates at INT64_MIN / INT64_MAX when the
// time is beyond them (about the years 1677 and 2262).
int64_t TimespecToNanos(const timespec& ts);

// The timespec of ns nanoseconds since the epoch, valid also before it:
// tv_nsec is always in [0, 1e9), so -1 ns is {-1, 999999999}.
timespec NanosToTimespec(int64_t ns);

// The timespec of s seconds since the epoch, rounded to the nearest
// nanosecond; saturates like TimespecToNanos, and NaN is the epoch.
timespec SecondsToTimespec(double s);

// Seconds since the epoch as a double (microsecond precision for today's
// dates), as status.json and the event log write times.
double TimespecToSeconds(const timespec& ts);

}  // namespace ckptfs
