// The lazy namespace on a remote mount: what the tier must know at mount
// is read whole (the upload queue, what remains to do), the rest with the
// steps it belongs to. A persisted step stays in the manifest until
// something looks inside it, as on a local mount; its object records come
// back with it (LoadObjectsLocked), and until the background pass has read
// them, the cache counts it at its full size (docs/architecture.md, "The
// lazy namespace").
#include <algorithm>

#include "manifest/schema.h"
#include "namespace/filesystem.h"

namespace ckptfs {
namespace {

// Numbers this close are read with one range scan rather than a lookup
// each: a step's files were mostly made one after another.
constexpr uint64_t kScanGap = 64;

// Parent links followed looking for the step a queued file lies in; deeper
// trees than this are not made by any trainer (the file stays unqueued and
// RepairUploadQueue drops it, as for a file the manifest lost).
constexpr int kMaxDepth = 256;

}  // namespace

Status FileSystemCore::LoadTierStateLazilyLocked() {
  // Everything queued for upload is in memory before the uploader starts:
  // it and RepairUploadQueue find the files there. A persisted step holds
  // none (its files were uploaded), so this loads a step only where a
  // record outlived what it queued.
  auto queued = LoadUploadQueueLocked();
  if (!queued.ok()) return queued.status();
  for (uint64_t ino : *queued) {
    if (!inodes_.Find(ino)) CKPTFS_RETURN_IF_ERROR(LoadStepHoldingLocked(ino));
  }

  // The object records of the loaded files: run-level files, and the steps
  // not yet all in the bucket.
  std::vector<uint64_t> files;
  for (const auto& [ino, node] : inodes_) {
    if (node.is_reg()) files.push_back(ino);
  }
  std::sort(files.begin(), files.end());
  CKPTFS_RETURN_IF_ERROR(LoadObjectRecordsLocked(files));

  // What each unloaded step holds locally is known once its object records
  // are read (the background pass, CheckUnloadedSteps). Until then it
  // counts at its full size: a cache limit may evict early, never late.
  for (uint64_t step_ino : unchecked_steps_) {
    auto step = steps_.find(step_ino);
    if (step != steps_.end() && step->second.bytes > 0)
      unloaded_cached_[step_ino] = UnloadedCachedStep{step->second.bytes, 0};
  }
  return Status::Ok();
}

Status FileSystemCore::LoadStepHoldingLocked(uint64_t ino) {
  uint64_t at = ino;
  for (int depth = 0; depth < kMaxDepth; depth++) {
    auto value = manifest_->Get(KeySpace::kInodes, InoKey(at));
    if (!value.ok()) return value.status();
    if (!value->has_value()) return Status::Ok();  // gone: nothing to load
    auto rec = DecodeInode(**value);
    if (!rec.ok()) return rec.status();
    Inode* parent = inodes_.Find(rec->parent);
    if (!parent) {
      if (rec->parent == 0 || rec->parent == at) return Status::Ok();
      at = rec->parent;
      continue;
    }
    // Only a step directory is in memory with its entries not.
    if (!parent->entries_unloaded) return Status::Ok();
    std::vector<Inode*> loaded;
    Status st = LoadEntriesBelowLocked(parent, &loaded);
    if (!st.ok()) return st;
    // Loaded at mount: recovery checks its files with the others, and it
    // may unload again once its uploads are done.
    unchecked_steps_.erase(parent->rec.ino);
    return Status::Ok();
  }
  return Status::Ok();
}

Result<std::map<uint64_t, ObjectRecord>> FileSystemCore::ReadObjectsLocked(
    const std::vector<uint64_t>& inos) {
  std::map<uint64_t, ObjectRecord> out;
  Status decode_error;
  auto take = [&](uint64_t ino, std::string_view v) {
    auto rec = DecodeObject(v);
    if (!rec.ok()) {
      decode_error = rec.status();
      return false;
    }
    out.emplace(ino, std::move(rec).value());
    return true;
  };
  for (size_t begin = 0; begin < inos.size();) {
    size_t end = begin + 1;
    while (end < inos.size() && inos[end] - inos[end - 1] <= kScanGap) end++;
    if (end - begin == 1) {
      auto value = manifest_->Get(KeySpace::kObjects, InoKey(inos[begin]));
      if (!value.ok()) return value.status();
      if (value->has_value() && !take(inos[begin], **value)) return decode_error;
    } else {
      const auto first = inos.begin() + static_cast<ptrdiff_t>(begin);
      const auto last = inos.begin() + static_cast<ptrdiff_t>(end);
      CKPTFS_RETURN_IF_ERROR(
          manifest_->ScanRange(KeySpace::kObjects, InoKey(*first), InoKey(*(last - 1) + 1),
                               [&](std::string_view k, std::string_view v) {
                                 auto ino = DecodeInoKey(k);
                                 if (!ino.ok()) {
                                   decode_error = ino.status();
                                   return false;
                                 }
                                 return !std::binary_search(first, last, *ino) || take(*ino, v);
                               }));
      CKPTFS_RETURN_IF_ERROR(decode_error);
    }
    begin = end;
  }
  return out;
}

Status FileSystemCore::LoadObjectsLocked(uint64_t step_ino, const std::vector<Inode*>& files) {
  // The access time the step had as it unloaded: eviction's order holds.
  int64_t last_access_ns = 0;
  if (auto it = unloaded_cached_.find(step_ino); it != unloaded_cached_.end()) {
    last_access_ns = it->second.last_access_ns;
    unloaded_cached_.erase(it);
  }
  std::vector<uint64_t> inos;
  for (const Inode* f : files) inos.push_back(f->rec.ino);
  std::sort(inos.begin(), inos.end());
  inos.erase(std::unique(inos.begin(), inos.end()), inos.end());
  CKPTFS_RETURN_IF_ERROR(LoadObjectRecordsLocked(inos));
  for (Inode* f : files) f->last_access_ns = last_access_ns;
  return Status::Ok();
}

Status FileSystemCore::LoadObjectRecordsLocked(const std::vector<uint64_t>& inos) {
  auto objects = ReadObjectsLocked(inos);
  if (!objects.ok()) return objects.status();
  for (auto& [ino, rec] : *objects) {
    Inode* f = inodes_.Find(ino);
    ledger_.SetObjectOwner(rec.key, ino);
    f->object = std::move(rec);
  }
  return Status::Ok();
}

Status FileSystemCore::AttachObjectsLocked(std::vector<CommittedSize>* files) {
  std::vector<uint64_t> inos;
  for (const CommittedSize& f : *files) inos.push_back(f.ino);
  std::sort(inos.begin(), inos.end());
  inos.erase(std::unique(inos.begin(), inos.end()), inos.end());
  auto objects = ReadObjectsLocked(inos);
  if (!objects.ok()) return objects.status();
  for (CommittedSize& f : *files) {
    auto it = objects->find(f.ino);
    if (it != objects->end()) f.object = it->second;
  }
  return Status::Ok();
}

void FileSystemCore::SetUnloadedResidentBytesLocked(uint64_t step_ino, uint64_t bytes) {
  if (bytes == 0) {
    unloaded_cached_.erase(step_ino);
    return;
  }
  unloaded_cached_[step_ino].resident_bytes = bytes;  // its access time kept
}

}  // namespace ckptfs
