// The lazy namespace's other half: what a mount loads on first use it may
// also drop again. Past options_.max_cached_inodes, the settled steps used
// least recently are returned to the state a mount leaves them in (their
// subtree in the manifest only, Inode::entries_unloaded), once the kernel
// holds none of their inodes and nothing in them is open. The kernel only
// forgets inodes under memory pressure, so the daemon first asks it to
// drop the entries it holds in the step (FUSE's notify_inval_entry), and
// unloads at a later tick, after the FORGETs arrived. Inode numbers are the
// manifest's, so a step read again has the same ones (docs/architecture.md,
// "The lazy namespace").
#include <malloc.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "namespace/filesystem.h"
#include "views/full_view_cache.h"

namespace ckptfs {

void FileSystemCore::NoteStepUsedLocked(uint64_t step_ino) {
  auto it = loaded_steps_.find(step_ino);
  if (it != loaded_steps_.end()) {
    steps_by_use_.erase(it->second.use);
  } else {
    it = loaded_steps_.emplace(step_ino, LoadedStep{}).first;
  }
  it->second.use = ++use_seq_;
  it->second.invalidated = false;
  steps_by_use_.emplace(it->second.use, step_ino);
}

void FileSystemCore::NoteLookupInLocked(uint64_t dir_ino) {
  if (loaded_steps_.empty()) return;
  const uint64_t step = steps_.StepOf(inodes_, dir_ino);
  if (step != 0 && loaded_steps_.count(step)) NoteStepUsedLocked(step);
}

void FileSystemCore::NoteStepIdleLocked(uint64_t step_ino) {
  ForgetLoadedStepLocked(step_ino);
  const uint64_t first = steps_by_use_.empty() ? use_seq_ : steps_by_use_.begin()->first;
  LoadedStep& loaded = loaded_steps_[step_ino];
  loaded.use = first - 1;
  loaded.invalidated = false;
  steps_by_use_.emplace(loaded.use, step_ino);
}

void FileSystemCore::ForgetLoadedStepLocked(uint64_t step_ino) {
  auto it = loaded_steps_.find(step_ino);
  if (it == loaded_steps_.end()) return;
  steps_by_use_.erase(it->second.use);
  loaded_steps_.erase(it);
}

void FileSystemCore::AdoptSettledStepsLocked() {
  // Steps that were written (or not settled) at mount and committed since
  // are loaded but were never loaded lazily: they become candidates too,
  // oldest step first, after those whose use is known.
  for (const auto& [step_ino, rec] : steps_) {
    if (loaded_steps_.count(step_ino) || !SettledStep(rec)) continue;
    const Inode* dir = inodes_.Find(step_ino);
    if (dir && !dir->entries_unloaded) NoteStepUsedLocked(step_ino);
  }
}

std::optional<size_t> FileSystemCore::UnloadableSizeLocked(const Inode* step) {
  // Anything the kernel still references, anything open, and anything whose
  // in-memory state the manifest does not hold yet keeps the step. A file
  // linked from elsewhere too would be read back as a second inode, and a
  // step inside the step keeps its own record and state in memory. (A
  // backing file's unsynced directory entry, backing_unsynced, matters only
  // to an fsync of an open handle; the commit synced the data directory.)
  if (step->open_handles > 0 || full_views_->Contains(step->rec.ino)) return std::nullopt;
  // A remote mount's step goes once it is all in the bucket (the caller
  // checks it is persisted): nothing of it is queued for upload.
  size_t count = 0;
  bool busy = false;
  inodes_.WalkLoadedBelow(step, [&](Inode* inode, const std::string&) {
    mu_.AssertHeld();  // the walk runs on this thread, under the lock
    busy = busy || inode->lookups > 0 || inode->open_handles > 0 || inode->dirty ||
           inode->evicting || inode->backing_id >= 0 || inode->passthrough_opens > 0 ||
           ledger_.IsQueued(inode->rec.ino) || (!inode->is_dir() && inode->rec.nlink != 1) ||
           (inode->is_dir() &&
            (full_views_->Contains(inode->rec.ino) || steps_.find(inode->rec.ino) != steps_.end()));
    count++;
    return !busy;
  });
  if (busy) return std::nullopt;
  return count;
}

bool FileSystemCore::ReleaseTierStateLocked(const Inode* step, std::vector<uint64_t>* drop) {
  if (!tier_) return true;
  bool released = true;
  inodes_.WalkLoadedBelow(step, [&](Inode* inode, const std::string&) {
    mu_.AssertHeld();  // the walk runs on this thread, under the lock
    if (!inode->is_reg() || !inode->object) return true;
    bool drop_data = false;
    released = tier_->ReleaseForUnload(inode->rec.ino, &drop_data);
    if (drop_data) drop->push_back(inode->rec.ino);
    return released;
  });
  return released;
}

void FileSystemCore::UnloadStepLocked(Inode* step) {
  std::vector<uint64_t> inos;
  UnloadedCachedStep cached;
  inodes_.WalkLoadedBelow(step, [&](Inode* inode, const std::string&) {
    mu_.AssertHeld();  // the walk runs on this thread, under the lock
    inos.push_back(inode->rec.ino);
    if (!inode->is_reg()) return true;
    // What ResidentBytesLocked counted for it, and the newest read.
    if (!inode->object || inode->object->resident) cached.resident_bytes += inode->rec.size;
    cached.last_access_ns = std::max(cached.last_access_ns, inode->last_access_ns);
    if (inode->object) ledger_.ForgetObject(inode->object->key, inode->rec.ino);
    return true;
  });
  if (options_.remote && cached.resident_bytes > 0) unloaded_cached_[step->rec.ino] = cached;
  for (uint64_t ino : inos) inodes_.Erase(ino);
  step->children.clear();
  step->by_cookie.clear();
  step->entries_unloaded = true;
  ForgetLoadedStepLocked(step->rec.ino);
  metrics_.lazy_step_unloads++;
}

Result<size_t> FileSystem::UnloadIdleSteps() {
  std::vector<std::pair<uint64_t, std::string>> ask_kernel;
  InvalidateEntryFn invalidate;
  size_t unloaded = 0;
  {
    MutexLock lock(&mu_);
    const size_t budget = options_.max_cached_inodes;
    if (inodes_.size() <= budget) return size_t{0};
    AdoptSettledStepsLocked();
    // Down to seven eighths of the budget, so a scan that goes on loading
    // is not trimmed a step at a time.
    const size_t target = budget - budget / 8;
    size_t expected = inodes_.size();
    std::vector<uint64_t> in_use;
    std::vector<uint64_t> drop_data;
    for (auto it = steps_by_use_.begin(); it != steps_by_use_.end() && expected > target;) {
      const uint64_t step_ino = it->second;
      LoadedStep& loaded = loaded_steps_[step_ino];
      ++it;  // UnloadStepLocked and ForgetLoadedStepLocked erase the current one
      Inode* step = inodes_.Find(step_ino);
      auto rec = steps_.find(step_ino);
      // Removed, renamed away, deleting or reopened; or, on a remote mount,
      // not in the bucket yet (it joins again when the next pass adopts it).
      if (!step || step->entries_unloaded || rec == steps_.end() || !SettledStep(rec->second) ||
          (options_.remote && !rec->second.persisted)) {
        ForgetLoadedStepLocked(step_ino);
        continue;
      }
      std::optional<size_t> size = UnloadableSizeLocked(step);
      if (size && !ReleaseTierStateLocked(step, &drop_data)) {
        in_use.push_back(step_ino);  // a fetch completing: its turn comes again
      } else if (size) {
        UnloadStepLocked(step);
        expected -= std::min(expected, *size);
        unloaded++;
      } else if (!loaded.invalidated) {
        // The kernel forgets what it no longer uses once its entry is
        // dropped; the FORGETs arrive before the next tick. The entries in
        // the step, not the step's own: a shell whose working directory is
        // the step keeps a path (getcwd fails on a dropped entry).
        loaded.invalidated = true;
        for (const auto& [name, dent] : step->children) {
          const Inode* child = inodes_.Find(dent.ino);
          if (child && child->lookups > 0) ask_kernel.emplace_back(step_ino, name);
        }
        size_t below = 0;
        inodes_.WalkLoadedBelow(step, [&](Inode*, const std::string&) { return ++below, true; });
        expected -= std::min(expected, below);
      } else {
        in_use.push_back(step_ino);  // asked before, still held: open, or a cwd
      }
    }
    for (uint64_t step_ino : in_use) NoteStepUsedLocked(step_ino);  // tried again last
    // Partly fetched files forgotten by the tier: their chunks are no
    // longer known to be valid, so the data goes (under the lock: a reload
    // and a fetch must not start on the file before it is gone).
    for (uint64_t ino : drop_data) {
      Status st = data_->Remove(ino);
      if (!st.ok()) {
        events_->Append({{"event", "warning"},
                         {"kind", "unload"},
                         {"error", "cannot remove the partly fetched data of inode " +
                                       std::to_string(ino) + ": " + st.message()}});
      }
    }
    invalidate = invalidate_entry_;
  }
  if (invalidate) {
    for (const auto& [parent, name] : ask_kernel) invalidate(parent, name);
  }
  // The inodes freed are small allocations spread over the heap: give the
  // pages they leave empty back, or the daemon's RSS never comes down.
  if (unloaded > 0) malloc_trim(0);
  return unloaded;
}

}  // namespace ckptfs
