// Pacer: a costly job that may run often, but must leave the rest of the
// time to others. After a run that took d, the next is due `ratio` times d
// after that run began, so the job takes at most 1/ratio of the time; a
// cheap job (a small namespace) is due again at once. The remote tier paces
// its walks of the whole namespace under the namespace lock with it.
#pragma once

#include <cstdint>

namespace ckptfs {

class Pacer {
 public:
  explicit Pacer(int64_t ratio) : ratio_(ratio) {}

  bool Due(int64_t now_ns) const { return now_ns >= next_ns_; }
  // When the next run is due (monotonic nanoseconds; 0 before any run).
  int64_t next_ns() const { return next_ns_; }
  // A run that began at started_ns and ended at ended_ns.
  void Ran(int64_t started_ns, int64_t ended_ns) {
    next_ns_ = started_ns + ratio_ * (ended_ns - started_ns);
  }

 private:
  const int64_t ratio_;
  int64_t next_ns_ = 0;
};

}  // namespace ckptfs
