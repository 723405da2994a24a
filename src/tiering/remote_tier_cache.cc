// The cache limit (--cache-size, SPEC section 4): what the cache holds is
// recounted on every control pass (resident files plus fetched chunks);
// writes add their bytes in between. Over the limit, persisted files go,
// least recently used first, down to 90% of the limit. Data not yet
// persisted is never evicted: when only that is left, writers wait up to
// cache_full_wait for uploads to make some of it evictable, then get ENOSPC
// (the write fails; nothing written before is touched).
#include <algorithm>

#include "tiering/remote_tier.h"

namespace ckptfs {

void RemoteTier::RecomputeCacheUse() {
  uint64_t fetched = 0;
  {
    MutexLock lock(&fetch_mu_);
    for (const auto& [ino, p] : presence_) {
      if (!p.complete_reported) fetched += p.present_bytes;
    }
  }
  cache_used_ = ns_->ResidentBytes() + fetched;
  space_cv_.notify_all();
}

Status RemoteTier::EvictIfNeeded() {
  if (options_.cache_size == 0) return Status::Ok();
  uint64_t wanted;
  {
    MutexLock lock(&mu_);
    wanted = space_wanted_;
  }
  if (cache_used_ + wanted <= options_.cache_size) return Status::Ok();
  // Down to 90%, with room for the writers waiting.
  const uint64_t target = options_.cache_size / 10 * 9;
  for (const auto& c : ns_->EvictionCandidates()) {
    if (cache_used_ + wanted <= target) break;
    uint64_t partial = 0;
    {
      MutexLock lock(&fetch_mu_);
      if (auto it = presence_.find(c.ino); it != presence_.end() && !it->second.complete_reported) {
        partial = it->second.present_bytes;
      }
    }
    if (c.bytes == 0 && partial == 0) continue;  // nothing local to drop
    Status st = ns_->Evict(c.ino);
    if (!st.ok()) continue;  // opened meanwhile
    cache_used_ -= std::min<uint64_t>(cache_used_.load(), c.bytes);
    MutexLock lock(&mu_);
    evictions_++;
  }
  space_cv_.notify_all();
  return Status::Ok();
}

Status RemoteTier::WaitForCacheSpace(uint64_t n) {
  if (options_.cache_size == 0) return Status::Ok();
  auto fits = [&] { return cache_used_ + n <= options_.cache_size; };
  if (fits()) {
    cache_used_ += n;
    return Status::Ok();
  }
  MutexLock lock(&mu_);
  space_waiters_++;
  space_wanted_ += n;
  work_cv_.notify_all();  // the control thread evicts on its next pass
  // Short waits: cache use is recounted without mu_, so a wake-up can be missed.
  const int64_t deadline = clock_->MonotonicNanos() + options_.cache_full_wait_ns;
  bool ok = false;
  while (!ok && clock_->MonotonicNanos() < deadline) {
    ok = lock.WaitFor(*clock_, space_cv_, 100'000'000, [&] {
      mu_.AssertHeld();  // WaitFor calls it with the lock held
      return stopping_ || fits();
    });
  }
  space_waiters_--;
  space_wanted_ -= n;
  if (ok && !stopping_) {
    cache_used_ += n;
    return Status::Ok();
  }
  const std::string why = "cache full: " + std::to_string(cache_used_.load()) + " of " +
                          std::to_string(options_.cache_size) +
                          " bytes (--cache-size) hold data not yet uploaded; the write waited and failed";
  events_->Append({{"event", "error"}, {"error", why}});
  return Status::Error(ENOSPC, why);
}

}  // namespace ckptfs
