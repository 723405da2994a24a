// TierLedger: the owner of the remote tier's bookkeeping in the namespace:
// the upload queue (mirrors the manifest's uploads key space), which remote
// keys hold a live file's object, the keys an upload in flight has claimed,
// the run-level files waiting for steps to persist, and which directories
// are run directories. Remote deletions are queued through it, so a live
// object is never queued. What a file's object is stays on its Inode.
//
// Changes go into the caller's manifest batch. Not thread-safe by itself:
// FileSystem holds it GUARDED_BY its one mutex, beside the InodeTable and
// StepBook; FileSystem's TierPort methods are its face to the remote tier.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "manifest/manifest_store.h"
#include "manifest/records.h"

namespace ckptfs {

// What a queued run-level file's version (size, mtime) waits for, taken in
// run directory `run`: the step inos that may be the one it names and are
// not persisted. A newer version, or the file in another run, waits anew.
struct RunFileWait {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t run = 0;
  std::vector<uint64_t> steps;
};

class TierLedger {
 public:
  // --- the upload queue, by inode (ordered: uploads go oldest ino first)
  const std::map<uint64_t, UploadRecord>& uploads() const { return uploads_; }
  bool IsQueued(uint64_t ino) const { return uploads_.count(ino) != 0; }
  UploadRecord* FindUpload(uint64_t ino);
  // Queues the upload of this version of ino (or updates the queued one).
  void QueueUpload(uint64_t ino, uint64_t size, int64_t mtime_ns, ManifestBatch* batch);
  // Records the queued upload's current state (a multipart upload started).
  void PutUpload(uint64_t ino, ManifestBatch* batch) const;
  // Takes ino off the queue, with its run-file wait; false if not queued.
  bool Dequeue(uint64_t ino, ManifestBatch* batch);
  // Loaded from the manifest at mount.
  void LoadUpload(uint64_t ino, UploadRecord rec) { uploads_[ino] = std::move(rec); }

  // --- live objects: remote key -> the inode whose object it is
  bool IsLiveObject(const std::string& key) const { return object_keys_.count(key) != 0; }
  void SetObjectOwner(const std::string& key, uint64_t ino) { object_keys_[key] = ino; }
  // key stops being ino's object (no-op when another inode's object has it).
  void ForgetObject(const std::string& key, uint64_t ino);
  void ForgetObjectKey(const std::string& key) { object_keys_.erase(key); }

  // --- key claims: an upload or commit object in flight keeps its key from
  // being deleted. Counted: two uploads may claim one key.
  void Claim(const std::string& key) { claimed_keys_[key]++; }
  void Release(const std::string& key);
  bool IsClaimed(const std::string& key) const { return claimed_keys_.count(key) != 0; }

  // --- remote deletions: queues key's deletion (commit objects first), not
  // of a data object a live file still uses.
  void QueueRemoteDelete(const std::string& key, bool commit_object, ManifestBatch* batch) const;

  // --- run-level files
  RunFileWait* FindRunFileWait(uint64_t ino);
  RunFileWait& SetRunFileWait(uint64_t ino, RunFileWait wait);
  void ForgetRunFileWait(uint64_t ino) { run_file_waits_.erase(ino); }
  bool AnyRunFileWaits() const { return !run_file_waits_.empty(); }
  // Run directories (parents of steps outside steps), as of the last
  // refresh (RepairUploadQueue): for checks on hot paths.
  const std::set<uint64_t>& run_dirs() const { return run_dirs_; }
  bool IsRunDir(uint64_t ino) const { return run_dirs_.count(ino) != 0; }
  void SetRunDirs(std::set<uint64_t> dirs) { run_dirs_ = std::move(dirs); }

 private:
  std::map<uint64_t, UploadRecord> uploads_;
  std::unordered_map<std::string, uint64_t> object_keys_;
  std::unordered_map<std::string, int> claimed_keys_;
  std::unordered_map<uint64_t, RunFileWait> run_file_waits_;
  std::set<uint64_t> run_dirs_;
};

}  // namespace ckptfs
