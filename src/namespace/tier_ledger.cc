#include "namespace/tier_ledger.h"

namespace ckptfs {

UploadRecord* TierLedger::FindUpload(uint64_t ino) {
  auto it = uploads_.find(ino);
  return it == uploads_.end() ? nullptr : &it->second;
}

void TierLedger::QueueUpload(uint64_t ino, uint64_t size, int64_t mtime_ns, ManifestBatch* batch) {
  UploadRecord& rec = uploads_[ino];
  rec.size = size;
  rec.mtime_ns = mtime_ns;
  PutUpload(ino, batch);
}

void TierLedger::PutUpload(uint64_t ino, ManifestBatch* batch) const {
  auto it = uploads_.find(ino);
  if (it != uploads_.end()) batch->Put(KeySpace::kUploads, InoKey(ino), EncodeUpload(it->second));
}

bool TierLedger::Dequeue(uint64_t ino, ManifestBatch* batch) {
  run_file_waits_.erase(ino);
  if (!uploads_.erase(ino)) return false;
  batch->Delete(KeySpace::kUploads, InoKey(ino));
  return true;
}

void TierLedger::ForgetObject(const std::string& key, uint64_t ino) {
  auto it = object_keys_.find(key);
  if (it != object_keys_.end() && it->second == ino) object_keys_.erase(it);
}

void TierLedger::Release(const std::string& key) {
  auto it = claimed_keys_.find(key);
  if (it != claimed_keys_.end() && --it->second <= 0) claimed_keys_.erase(it);
}

void TierLedger::QueueRemoteDelete(const std::string& key, bool commit_object,
                                   ManifestBatch* batch) const {
  if (!commit_object && IsLiveObject(key)) return;
  batch->Put(KeySpace::kRemoteGc, RemoteGcKey(key, commit_object), "");
}

RunFileWait* TierLedger::FindRunFileWait(uint64_t ino) {
  auto it = run_file_waits_.find(ino);
  return it == run_file_waits_.end() ? nullptr : &it->second;
}

RunFileWait& TierLedger::SetRunFileWait(uint64_t ino, RunFileWait wait) {
  return run_file_waits_[ino] = std::move(wait);
}

}  // namespace ckptfs
