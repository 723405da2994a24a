// The in-memory ManifestStore with crash simulation; see
// memory_manifest_store.h.
#include "manifest/memory_manifest_store.h"

#include <algorithm>

namespace ckptfs {

namespace {

bool ValidSpace(KeySpace space) {
  const int i = static_cast<int>(space);
  return i >= 0 && i < static_cast<int>(KeySpace::kCount);
}

Status BadSpace(KeySpace space) {
  return Status::Error(EINVAL, "no manifest key space " + std::to_string(static_cast<int>(space)));
}

}  // namespace

void MemoryManifestStore::Apply(const ManifestBatch& batch, State* state) {
  for (const ManifestBatch::Op& op : batch.ops()) {
    Space& space = (*state)[static_cast<size_t>(op.space)];
    if (op.value) {
      space.insert_or_assign(op.key, *op.value);
    } else {
      space.erase(op.key);
    }
  }
}

Status MemoryManifestStore::Write(const ManifestBatch& batch, bool sync) {
  // Validate first so that a bad batch applies nothing, like RocksDB.
  for (const ManifestBatch::Op& op : batch.ops()) {
    if (!ValidSpace(op.space)) return BadSpace(op.space);
  }
  MutexLock lock(&mu_);
  if (writes_before_failure_ == 0) {
    return Status::Error(fail_err_, "injected manifest write failure");
  }
  if (writes_before_failure_ > 0) writes_before_failure_--;

  Apply(batch, &visible_);
  if (!sync) {
    if (!batch.empty()) unsynced_.push_back(batch);
    return Status::Ok();
  }
  // Replaying the log rather than copying visible_ keeps a sync proportional
  // to what changed, not to the size of the manifest.
  for (const ManifestBatch& b : unsynced_) Apply(b, &durable_);
  Apply(batch, &durable_);
  unsynced_.clear();
  return Status::Ok();
}

Result<std::optional<std::string>> MemoryManifestStore::Get(KeySpace space,
                                                            std::string_view key) {
  if (!ValidSpace(space)) return BadSpace(space);
  MutexLock lock(&mu_);
  const Space& s = visible_[static_cast<size_t>(space)];
  auto it = s.find(key);
  if (it == s.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

Status MemoryManifestStore::Scan(KeySpace space, std::string_view prefix, const ScanFn& fn) {
  if (!ValidSpace(space)) return BadSpace(space);
  std::vector<std::pair<std::string, std::string>> matches;
  {
    MutexLock lock(&mu_);
    const Space& s = visible_[static_cast<size_t>(space)];
    for (auto it = s.lower_bound(prefix); it != s.end() && it->first.starts_with(prefix); ++it) {
      matches.emplace_back(it->first, it->second);
    }
  }
  for (const auto& [key, value] : matches) {
    if (!fn(key, value)) break;
  }
  return Status::Ok();
}

Status MemoryManifestStore::ScanRange(KeySpace space, std::string_view begin, std::string_view end,
                                      const ScanFn& fn) {
  if (!ValidSpace(space)) return BadSpace(space);
  std::vector<std::pair<std::string, std::string>> matches;
  {
    MutexLock lock(&mu_);
    const Space& s = visible_[static_cast<size_t>(space)];
    for (auto it = s.lower_bound(begin); it != s.end() && it->first < end; ++it) {
      matches.emplace_back(it->first, it->second);
    }
  }
  for (const auto& [key, value] : matches) {
    if (!fn(key, value)) break;
  }
  return Status::Ok();
}

void MemoryManifestStore::SimulateCrash(size_t keep_unsynced) {
  MutexLock lock(&mu_);
  keep_unsynced = std::min(keep_unsynced, unsynced_.size());
  for (size_t i = 0; i < keep_unsynced; i++) Apply(unsynced_[i], &durable_);
  visible_ = durable_;
  unsynced_.clear();
}

size_t MemoryManifestStore::unsynced_batches() const {
  MutexLock lock(&mu_);
  return unsynced_.size();
}

void MemoryManifestStore::FailWritesAfter(int n, int err) {
  MutexLock lock(&mu_);
  writes_before_failure_ = std::max(n, 0);
  fail_err_ = err == 0 ? EIO : err;
}

void MemoryManifestStore::ClearFailure() {
  MutexLock lock(&mu_);
  writes_before_failure_ = -1;
  fail_err_ = 0;
}

}  // namespace ckptfs
