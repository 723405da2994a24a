// Time as a seam: the daemon uses the real clock; tests drive a ManualClock so
// commit-idle and timestamps are deterministic.
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>

namespace ckptfs {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time (CLOCK_REALTIME), for file timestamps and committed_at.
  virtual timespec Now() const = 0;
  // Monotonic nanoseconds, for timeouts and idleness.
  virtual int64_t MonotonicNanos() const = 0;
};

class SystemClock final : public Clock {
 public:
  timespec Now() const override;
  int64_t MonotonicNanos() const override;
};

// Starts at a fixed time; moves only when told to.
class ManualClock final : public Clock {
 public:
  timespec Now() const override;
  int64_t MonotonicNanos() const override { return mono_ns_.load(); }
  void Advance(int64_t nanos);

 private:
  std::atomic<int64_t> wall_ns_{1'700'000'000LL * 1'000'000'000LL};
  std::atomic<int64_t> mono_ns_{1'000'000'000LL};
};

}  // namespace ckptfs
