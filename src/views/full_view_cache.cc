// Built `.full/` views (see full_view_cache.h).
#include "views/full_view_cache.h"

namespace ckptfs {

namespace {
// Distinct error reports remembered; past this, errors are reported again.
constexpr size_t kMaxReported = 4096;
}  // namespace

std::optional<FullViewCache::Outcome> FullViewCache::Get(uint64_t dir_ino) {
  MutexLock lock(&mu_);
  auto it = by_dir_.find(dir_ino);
  if (it == by_dir_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

bool FullViewCache::Contains(uint64_t dir_ino) {
  MutexLock lock(&mu_);
  return by_dir_.count(dir_ino) > 0;
}

void FullViewCache::Put(uint64_t dir_ino, Outcome outcome) {
  MutexLock lock(&mu_);
  auto it = by_dir_.find(dir_ino);
  if (it != by_dir_.end()) {
    it->second->second = std::move(outcome);
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.emplace_front(dir_ino, std::move(outcome));
  by_dir_[dir_ino] = lru_.begin();
  while (lru_.size() > capacity_) {
    by_dir_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

bool FullViewCache::FirstReport(uint64_t key) {
  MutexLock lock(&mu_);
  if (reported_.size() >= kMaxReported) reported_.clear();
  return reported_.insert(key).second;
}

}  // namespace ckptfs
