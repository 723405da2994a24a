// Refusing file data below the manifest's reserve; see metadata_reserve.h.
#include "data/metadata_reserve.h"

#include <algorithm>
#include <cerrno>
#include <string>

namespace ckptfs {

MetadataReserve::MetadataReserve(MetadataReserveSpec spec, DataStore* data, const Clock* clock)
    : spec_(spec), data_(data), clock_(clock) {}

void MetadataReserve::RefreshLocked(int64_t now) {
  looked_ns_ = now;
  admitted_since_ = 0;
  auto space = data_->Capacity();
  if (!space.ok()) {
    known_ = false;
    return;
  }
  known_ = true;
  avail_ = space->blocks_avail * space->block_size;
  const auto percent_bytes =
      static_cast<uint64_t>(static_cast<double>(space->blocks * space->block_size) * spec_.percent / 100.0);
  reserve_ = std::max(spec_.min_bytes, percent_bytes);
}

Status MetadataReserve::AdmitFresh() {
  if (!enabled()) return Status::Ok();
  {
    MutexLock lock(&mu_);
    known_ = false;  // the next Admit looks again
  }
  return Admit(0);
}

Status MetadataReserve::Admit(uint64_t n) {
  if (!enabled()) return Status::Ok();
  MutexLock lock(&mu_);
  const int64_t now = clock_->MonotonicNanos();
  const bool stale = !known_ || now - looked_ns_ >= kRecheckNs || admitted_since_ + n >= kRecheckBytes;
  if (stale) RefreshLocked(now);
  if (!known_) return Status::Ok();
  auto fits = [&]() REQUIRES(mu_) {
    const uint64_t used = admitted_since_ + n;
    return avail_ >= used && avail_ - used >= reserve_;
  };
  // The estimate only shrinks between looks; before refusing, look again
  // (space may have been freed since).
  if (!fits() && !stale) RefreshLocked(now);
  if (!known_) return Status::Ok();
  if (!fits()) {
    const std::string free_now =
        "the cache filesystem has " + std::to_string(avail_ >> 20) + " MiB free";
    const std::string kept =
        std::to_string(reserve_ >> 20) + " MiB kept for the manifest (--metadata-reserve)";
    // Say which is true: the disk is already within the reserve, or this
    // write is what would take it there.
    if (avail_ < admitted_since_ || avail_ - admitted_since_ < reserve_) {
      return Status::Error(ENOSPC, free_now + ", within the " + kept);
    }
    return Status::Error(ENOSPC, "writing " + std::to_string(n) +
                                     " bytes would leave less than the " + kept + " free (" +
                                     free_now + ")");
  }
  admitted_since_ += n;
  return Status::Ok();
}

uint64_t MetadataReserve::reserve_bytes() const {
  MutexLock lock(&mu_);
  return known_ ? reserve_ : 0;
}

}  // namespace ckptfs
