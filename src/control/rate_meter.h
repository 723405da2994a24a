// Throughput of a growing counter (bytes uploaded) over a sliding window,
// for status.json's upload rate and `ckptfs status`'s ETA. The counter may
// move in big steps (a whole file at a time): the rate is the growth since
// the oldest sample in the window divided by the time since then, so a
// stall shows as a falling rate rather than the last burst's speed.
//
// Not thread-safe: the owner's lock guards it.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>

namespace ckptfs {

class RateMeter {
 public:
  explicit RateMeter(int64_t window_ns = 30'000'000'000) : window_ns_(window_ns) {}

  // The counter's value total at now_ns (monotonic; never decreasing).
  void Record(int64_t now_ns, uint64_t total);
  // Units per second over the window ending at now_ns; 0 with no history.
  double PerSecond(int64_t now_ns) const;

 private:
  int64_t window_ns_;
  std::deque<std::pair<int64_t, uint64_t>> samples_;  // (time, total), oldest first
};

}  // namespace ckptfs
