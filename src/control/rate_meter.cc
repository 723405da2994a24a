#include "control/rate_meter.h"

namespace ckptfs {

void RateMeter::Record(int64_t now_ns, uint64_t total) {
  samples_.emplace_back(now_ns, total);
  // Keep one sample at or before the window's start as the base.
  while (samples_.size() > 2 && samples_[1].first <= now_ns - window_ns_) samples_.pop_front();
}

double RateMeter::PerSecond(int64_t now_ns) const {
  if (samples_.size() < 2) return 0;
  // The base: the newest sample at or before the window's start, else the oldest.
  auto base = samples_.front();
  for (const auto& s : samples_) {
    if (s.first > now_ns - window_ns_) break;
    base = s;
  }
  const auto& last = samples_.back();
  const int64_t dt = now_ns - base.first;
  if (dt <= 0 || last.second <= base.second) return 0;
  return static_cast<double>(last.second - base.second) * 1e9 / static_cast<double>(dt);
}

}  // namespace ckptfs
