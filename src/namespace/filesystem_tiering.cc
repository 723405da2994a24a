// The namespace's side of the remote tier (SPEC section 4): which files must
// be uploaded, which objects hold which files, when a step is persisted,
// which remote objects are garbage, what may be evicted, and cold-mount
// imports. RemoteTier (src/tiering) does the I/O on its own threads and
// calls these methods; every decision is made here, under mu_, against the
// in-memory image, and recorded in the manifest (docs/manifest.md).
//
// Run-level files (a run directory's regular files beside its steps, such
// as DeepSpeed's `latest`) are mutable: each closed version goes up to its
// natural key, but only once every step that was unfinished in its run
// when it was closed is persisted or gone, so the remote copy of an index
// never names a step the remote does not hold (docs/operations.md).
#include <fcntl.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <string>

#include "namespace/filesystem.h"

namespace ckptfs {

namespace {

int64_t VersionMtime(const Inode& inode) { return TimespecToNanos(inode.rec.mtime); }

bool SameVersion(const Inode& inode, uint64_t size, int64_t mtime_ns) {
  return inode.rec.size == size && VersionMtime(inode) == mtime_ns;
}

// Names ckptfs keeps for itself in the remote and in the namespace (the
// control directory, commit objects, the file:// store's work directories):
// never uploaded or imported as run-level files.
bool IsCkptfsName(const std::string& name) { return name.rfind(".ckptfs", 0) == 0; }

// "run1/latest" -> "run1"; "latest" -> "" (the root).
std::string ParentPath(const std::string& key) {
  const size_t slash = key.rfind('/');
  return slash == std::string::npos ? std::string() : key.substr(0, slash);
}

std::string ChildKey(const std::string& dir_path, const std::string& name) {
  return dir_path.empty() ? name : dir_path + "/" + name;
}

// Neither persisted nor going to be: a new version of a run-level file
// waits while such a step of its run may be the one it names.
bool NotPersisted(const StepRecord& rec) { return rec.state != StepState::kCommitted || !rec.persisted; }

// Still being saved or uploaded (or removed): a file closed now may name it.
bool InProgress(const StepRecord& rec) {
  return rec.state == StepState::kWriting || rec.state == StepState::kDeleting ||
         (rec.state == StepState::kCommitted && !rec.persisted);
}

}  // namespace

Status FileSystemCore::CheckNotReservedLocked(uint64_t parent, const std::string& name) const {
  // The commit object's key is <step>/.ckptfs-commit.json: a file of that
  // name directly in a step would be overwritten by it in the remote, and
  // one directly in a run directory (uploaded as a run-level file) would
  // look like the commit object of a step named like the run.
  if (cluster_ && IsCkptfsName(name) && (parent == kRootIno || steps_.count(parent))) {
    // Cluster mode keeps its records in the bucket under these names
    // (.ckptfs-parts/, .ckptfs-step.json, .ckptfs-index/, ...).
    return Status::Error(EPERM, name + ": names starting with .ckptfs are reserved for ckptfs's cluster records "
                                       "in steps and at the top of the mount");
  }
  if (!options_.remote || name != kCommitObjectName) return Status::Ok();
  Inode* dir = inodes_.Find(parent);
  if (steps_.count(parent) || (dir && HoldsStepLocked(*dir))) {
    return Status::Error(EPERM, std::string(kCommitObjectName) +
                                    " is reserved in steps and run directories for ckptfs's commit object in the remote");
  }
  return Status::Ok();
}

bool FileSystemCore::HoldsStepLocked(const Inode& dir) const {
  if (!dir.is_dir()) return false;
  for (const auto& [name, dent] : dir.children) {
    if (steps_.count(dent.ino)) return true;
  }
  return false;
}

bool FileSystemCore::IsRunFileLocked(const Inode& inode) const {
  // Hard-linked files have more than one path, so no natural key.
  return inode.is_reg() && inode.rec.nlink == 1 && ledger_.IsRunDir(inode.rec.parent) &&
         !IsCkptfsName(inode.name);
}

RunFileWait FileSystemCore::RunFileWaitLocked(const Inode& file) {
  RunFileWait wait{file.rec.size, VersionMtime(file), file.rec.parent, {}};
  // Changed before this daemon started (queued before a restart, or its
  // queue entry lost with a power cut): it waits for every step not
  // persisted, because a step being saved when it was closed is incomplete
  // now and may be the one it names. Changed since: a step that was already
  // incomplete or broken then is not what the trainer just saved.
  const bool before_start = wait.mtime_ns <= TimespecToNanos(start_time_);
  if (Inode* run = inodes_.Find(file.rec.parent)) {
    for (const auto& [name, dent] : run->children) {
      auto it = steps_.find(dent.ino);
      if (it == steps_.end()) continue;
      if (before_start ? NotPersisted(it->second) : InProgress(it->second)) wait.steps.push_back(dent.ino);
    }
  }
  return wait;
}

bool FileSystemCore::RunFileReadyLocked(Inode* inode) {
  if (inode->open_writers > 0) return false;
  RunFileWait* wait = ledger_.FindRunFileWait(inode->rec.ino);
  if (!wait) {
    wait = &ledger_.SetRunFileWait(inode->rec.ino, RunFileWaitLocked(*inode));  // loaded at start
  } else if (!SameVersion(*inode, wait->size, wait->mtime_ns) || wait->run != inode->rec.parent) {
    // Changed since the wait was taken without a close that queued it
    // (truncated, touched), or moved to another run: it waits anew.
    *wait = RunFileWaitLocked(*inode);
  }
  // A step it waits for is done once persisted or no longer in the run (a
  // step that turned incomplete or broken keeps it waiting until it goes).
  std::vector<uint64_t>& steps = wait->steps;
  steps.erase(std::remove_if(steps.begin(), steps.end(),
                             [&](uint64_t step) {
                               mu_.AssertHeld();  // runs inside this call, under the lock
                               auto rec = steps_.find(step);
                               Inode* dir = inodes_.Find(step);
                               return rec == steps_.end() || !dir || dir->rec.parent != inode->rec.parent ||
                                      !NotPersisted(rec->second);
                             }),
              steps.end());
  return steps.empty();
}

std::set<std::string> FileSystemCore::RunsWithReadyRunFilesLocked() {
  std::set<std::string> out;
  for (const auto& [ino, rec] : ledger_.uploads()) {
    Inode* inode = inodes_.Find(ino);
    if (!inode || !IsRunFileLocked(*inode)) continue;
    if (RunFileReadyLocked(inode)) out.insert(inodes_.PathOf(inode->rec.parent));
  }
  return out;
}

bool FileSystemCore::RunFileWillReplaceLocked(const std::string& key) {
  const uint64_t ino = ResolveRelativeLocked(kRootIno, key);
  Inode* inode = ino ? inodes_.Find(ino) : nullptr;
  // Closed or not: a run-level file that is not up to date at its path is
  // queued at its close or by the next RepairUploadQueue.
  return inode && IsRunFileLocked(*inode) && !ObjectIsCurrent(*inode, key);
}

void FileSystem::SetTierHooks(TierHooks* hooks) {
  MutexLock lock(&mu_);
  tier_ = hooks;
}

void FileSystemCore::LoadTierStateLocked(Status* decode_error) {
  Status st = manifest_->Scan(KeySpace::kObjects, "", [&](std::string_view k, std::string_view v) {
    mu_.AssertHeld();  // runs inside this call, under the lock
    auto ino = DecodeInoKey(k);
    auto rec = DecodeObject(v);
    if (!ino.ok() || !rec.ok()) {
      *decode_error = ino.ok() ? rec.status() : ino.status();
      return false;
    }
    if (Inode* inode = inodes_.Find(*ino)) {
      ledger_.SetObjectOwner(rec->key, *ino);
      inode->object = std::move(rec).value();
    }
    return true;
  });
  if (!st.ok()) *decode_error = st;
  if (!decode_error->ok()) return;
  auto queued = LoadUploadQueueLocked();
  if (!queued.ok()) *decode_error = queued.status();
}

Result<std::vector<uint64_t>> FileSystemCore::LoadUploadQueueLocked() {
  std::vector<uint64_t> queued;
  Status decode_error;
  CKPTFS_RETURN_IF_ERROR(
      manifest_->Scan(KeySpace::kUploads, "", [&](std::string_view k, std::string_view v) {
        mu_.AssertHeld();  // runs inside this call, under the lock
        auto ino = DecodeInoKey(k);
        auto rec = DecodeUpload(v);
        if (!ino.ok() || !rec.ok()) {
          decode_error = ino.ok() ? rec.status() : ino.status();
          return false;
        }
        ledger_.LoadUpload(*ino, std::move(rec).value());
        queued.push_back(*ino);
        return true;
      }));
  CKPTFS_RETURN_IF_ERROR(decode_error);
  return queued;
}

bool FileSystemCore::ObjectIsCurrent(const Inode& inode, const std::string& path) const {
  return inode.object && inode.object->key == path &&
         SameVersion(inode, inode.object->size, inode.object->mtime_ns);
}

void FileSystemCore::QueueUploadLocked(Inode* inode, ManifestBatch* batch) {
  if (!options_.remote || !inode->is_reg() || inode->rec.nlink == 0) return;
  if (steps_.StepOf(inodes_, inode->rec.parent) == 0) {
    // Outside steps only run-level files go to the remote. This version may
    // name any step not finished now: it waits for them (RunFileReadyLocked).
    if (!IsRunFileLocked(*inode)) return;
    ledger_.SetRunFileWait(inode->rec.ino, RunFileWaitLocked(*inode));
  }
  ledger_.QueueUpload(inode->rec.ino, inode->rec.size, VersionMtime(*inode), batch);
  if (tier_) tier_->UploadsQueued();
}

void FileSystemCore::QueueRemoteDeleteLocked(const std::string& key, bool commit_object,
                                             ManifestBatch* batch) {
  ledger_.QueueRemoteDelete(key, commit_object, batch);
}

void FileSystemCore::ForgetObjectLocked(Inode* inode, ManifestBatch* batch) {
  if (!inode->is_reg()) return;
  ForgetChecksumLocked(inode, batch);
  const uint64_t ino = inode->rec.ino;
  ledger_.Dequeue(ino, batch);
  if (tier_) tier_->Forget(ino);
  if (!inode->object) return;
  ledger_.ForgetObject(inode->object->key, ino);
  batch->Delete(KeySpace::kObjects, InoKey(ino));
  // Another node's file (cluster mode): its object is that node's part, not
  // this node's to delete (docs/cluster.md: removal is local for now).
  if (inode->object->owner_node.empty()) QueueRemoteDeleteLocked(inode->object->key, false, batch);
  inode->object.reset();
}

void FileSystemCore::UnpersistStepLocked(uint64_t step_ino, const std::string& old_path,
                                         ManifestBatch* batch) {
  if (!options_.remote) return;
  auto it = steps_.find(step_ino);
  // A cluster step's commit object is its committer's.
  const bool others = it != steps_.end() && cluster_ && !it->second.committer.empty() &&
                      it->second.committer != cluster_->node();
  // Any committed step may have a commit object (or one being written),
  // even one that just stopped being a step (renamed to another name).
  if (!others) QueueRemoteDeleteLocked(CommitObjectKey(old_path), true, batch);
  if (it == steps_.end()) return;
  steps_.SetPersisted(step_ino, false, batch);
}

std::vector<std::pair<uint64_t, std::string>> FileSystemCore::CommittedStepsUnderLocked(
    Inode* dir) {
  std::vector<std::pair<uint64_t, std::string>> out;
  if (!options_.remote || !dir->is_dir()) return out;
  // dir itself, then the directories below it; no steps inside steps.
  auto visit = [&](Inode* d) REQUIRES(mu_) {
    if (!d->is_dir()) return false;
    auto it = steps_.find(d->rec.ino);
    if (it == steps_.end()) return true;
    if (it->second.state == StepState::kCommitted)
      out.emplace_back(d->rec.ino, inodes_.PathOf(d->rec.ino));
    return false;
  };
  if (visit(dir)) {
    inodes_.WalkBelow(dir, [&](Inode* d, const std::string&) REQUIRES(mu_) { return visit(d); });
  }
  return out;
}

void FileSystemCore::NoteStepsMovedLocked(
    const std::vector<std::pair<uint64_t, std::string>>& moved, ManifestBatch* batch) {
  for (const auto& [step_ino, old_path] : moved) {
    if (inodes_.PathOf(step_ino) == old_path) continue;
    UnpersistStepLocked(step_ino, old_path, batch);
    // Objects sit at natural keys: the files go up again under the new
    // path; their old objects are deleted once the new ones exist.
    std::vector<std::pair<std::string, uint64_t>> files;
    if (Inode* dir = inodes_.Find(step_ino)) CollectFilesLocked(dir, &files);
    for (const auto& [rel, ino] : files) QueueUploadLocked(inodes_.Find(ino), batch);
  }
}

std::vector<FileSystem::UploadJob> FileSystem::NextUploads(size_t max, const std::set<uint64_t>& busy) {
  MutexLock lock(&mu_);
  std::vector<UploadJob> out;
  for (auto it = ledger_.uploads().begin(); it != ledger_.uploads().end() && out.size() < max; ++it) {
    const uint64_t ino = it->first;
    Inode* inode = inodes_.Find(ino);
    // Nothing to upload (RepairUploadQueue drops the entry).
    if (!HasUploadLocked(inode)) continue;
    const bool run_file = IsRunFileLocked(*inode);
    if (busy.count(ino) || inode->open_writers > 0 || (run_file && !RunFileReadyLocked(inode))) {
      continue;
    }
    if (!run_file && !cluster_removed_paths_.empty()) {
      // A save of a removed cluster step's name: not before its commit.
      const uint64_t step = steps_.StepOf(inodes_, inode->rec.parent);
      auto rec = steps_.find(step);
      if (rec != steps_.end() && rec->second.state == StepState::kWriting &&
          cluster_removed_paths_.count(inodes_.PathOf(step))) {
        continue;
      }
    }
    UploadJob job;
    job.ino = ino;
    job.key = inodes_.PathOf(ino);
    job.size = inode->rec.size;
    job.mtime_ns = VersionMtime(*inode);
    job.resident = !inode->object || inode->object->resident;
    if (!job.resident) job.source_key = inode->object->key;
    job.stale_upload_id = it->second.upload_id;
    job.stale_upload_key = it->second.upload_key;
    if (inode->checksum && inode->checksum->size == job.size && inode->checksum->mtime_ns == job.mtime_ns) {
      job.expected_crc32c = inode->checksum->crc32c;
    } else if (inode->object && inode->object->size == job.size && inode->object->mtime_ns == job.mtime_ns) {
      job.expected_crc32c = inode->object->crc32c;
    }
    out.push_back(std::move(job));
  }
  return out;
}

bool FileSystemCore::HasUploadLocked(Inode* inode) {
  if (!inode || inode->rec.nlink == 0 || !inode->is_reg()) return false;
  return steps_.StepOf(inodes_, inode->rec.parent) != 0 || IsRunFileLocked(*inode);
}

Status FileSystem::NoteMultipartStarted(const UploadJob& job, const std::string& upload_id) {
  MutexLock lock(&mu_);
  UploadRecord* rec = ledger_.FindUpload(job.ino);
  if (!rec) return Status::Ok();
  rec->upload_id = upload_id;
  rec->upload_key = job.key;
  Transaction txn = BeginLocked();
  ledger_.PutUpload(job.ino, txn.batch());
  return txn.Write();
}

void FileSystem::ClaimKey(const std::string& key) {
  MutexLock lock(&mu_);
  ledger_.Claim(key);
  Transaction txn = BeginLocked();
  txn.batch()->Delete(KeySpace::kRemoteGc, RemoteGcKey(key, false));
  txn.batch()->Delete(KeySpace::kRemoteGc, RemoteGcKey(key, true));
  (void)txn.Write();
}

void FileSystem::ReleaseKey(const std::string& key) {
  MutexLock lock(&mu_);
  ledger_.Release(key);
}

Status FileSystem::NoteUploaded(const UploadJob& job, uint32_t crc32c, uint64_t chunk_size,
                                std::vector<uint32_t> chunk_crcs) {
  MutexLock lock(&mu_);
  ledger_.Release(job.key);
  Transaction txn = BeginLocked();
  Inode* inode = inodes_.Find(job.ino);
  if (!inode || inode->rec.nlink == 0 || !inode->is_reg()) {
    // Deleted while it was uploading: the object is garbage already.
    QueueRemoteDeleteLocked(job.key, false, txn.batch());
    return txn.Write();
  }
  const std::string path = inodes_.PathOf(job.ino);
  if (path != job.key || !SameVersion(*inode, job.size, job.mtime_ns)) {
    // Written or moved meanwhile: the file stays queued; an object left at
    // an old path is nobody's.
    if (path != job.key) QueueRemoteDeleteLocked(job.key, false, txn.batch());
    if (!ledger_.IsQueued(job.ino)) QueueUploadLocked(inode, txn.batch());
    return txn.Write();
  }
  if (inode->checksum && inode->checksum->size == job.size && inode->checksum->mtime_ns == job.mtime_ns &&
      inode->checksum->crc32c != crc32c) {
    // The writer library reported another CRC32C for this very version: the
    // bytes changed behind ckptfs's back (a descriptor kept after close, a
    // disk error). Such data must not become the persisted copy.
    char msg[160];
    std::snprintf(msg, sizeof msg, "contents changed since the writer closed it: CRC32C %08x, the writer reported %08x",
                  crc32c, inode->checksum->crc32c);
    events_->Append({{"event", "error"}, {"kind", "checksum_mismatch"}, {"path", path}, {"error", msg}});
    return Status::Error(EIO, path + ": " + msg);
  }
  ObjectRecord rec;
  rec.key = job.key;
  rec.size = job.size;
  rec.mtime_ns = job.mtime_ns;
  rec.crc32c = crc32c;
  if (!chunk_crcs.empty()) {
    rec.chunk_size = chunk_size;
    rec.chunk_crcs = std::move(chunk_crcs);
  }
  rec.resident = !inode->object || inode->object->resident;
  if (inode->object && inode->object->key != job.key) {
    const std::string old_key = inode->object->key;
    ledger_.ForgetObjectKey(old_key);
    QueueRemoteDeleteLocked(old_key, false, txn.batch());
  }
  inode->object = rec;
  ledger_.SetObjectOwner(rec.key, job.ino);
  txn.batch()->Put(KeySpace::kObjects, InoKey(job.ino), EncodeObject(rec));
  ledger_.Dequeue(job.ino, txn.batch());
  // Cluster mode: the part record tells the committing node and readers on
  // other nodes that this file is in the bucket, with its CRCs.
  if (cluster_) {
    if (const uint64_t step = steps_.StepOf(inodes_, job.ino)) {
      cluster_->PartUploadsChanged(inodes_.PathOf(step));
    } else if (IsRunFileLocked(*inode)) {
      // A run-level file: its record in the step index shows this version
      // on every node (SPEC section 9).
      cluster_->RunFileUploaded(RunFileRecord{.path = path,
                                              .node = cluster_->node(),
                                              .size = job.size,
                                              .mtime_ns = job.mtime_ns,
                                              .crc32c = crc32c});
    }
  }
  return txn.Write();
}

void FileSystemCore::CollectTreeLocked(Inode* dir, CommitObject* obj, bool* complete) {
  inodes_.WalkBelow(dir, [&](Inode* child, const std::string& rel) REQUIRES(mu_) {
    if (child->is_dir()) {
      obj->dirs.push_back(rel);
    } else if (child->is_symlink()) {
      obj->symlinks.push_back({rel, child->rec.symlink_target});
    } else if (child->is_reg()) {
      const std::string key = obj->step_path + "/" + rel;
      if (child->object && !child->object->owner_node.empty()) {
        // Another node's file: complete once its part record said it is
        // uploaded (NoteRemoteUploads); that node uploads it, never this one.
        if (!child->object->crc_known || child->object->key != key) {
          *complete = false;
          return true;
        }
      } else if (!ObjectIsCurrent(*child, key)) {
        // Not uploaded where it is now: queued by the commit, by the
        // upload that found it moved, or by RepairUploadQueue.
        *complete = false;
        return true;
      }
      if (ledger_.IsQueued(child->rec.ino)) *complete = false;
      CommitObject::File file{rel, child->rec.size, child->object->crc32c, child->rec.mode & 07777,
                              VersionMtime(*child), {}};
      // One chunk size per commit object: a file recorded with another one
      // (uploaded under other settings) keeps whole-file verification only.
      const ObjectRecord& object = *child->object;
      if (!object.chunk_crcs.empty()) {
        if (obj->chunk_size == 0) obj->chunk_size = object.chunk_size;
        if (object.chunk_size == obj->chunk_size) file.chunk_crcs = object.chunk_crcs;
      }
      obj->files.push_back(std::move(file));
      obj->bytes += child->rec.size;
    }
    return true;
  });
}

bool FileSystemCore::MayBeAllUploadedLocked(const Inode* dir) {
  if (dir->entries_unloaded) return true;  // CollectTreeLocked loads and decides
  for (const auto& [name, dent] : dir->children) {
    const Inode* child = inodes_.Find(dent.ino);
    if (!child) continue;
    if (child->is_dir() && !MayBeAllUploadedLocked(child)) return false;
    if (!child->is_reg()) continue;
    if (ledger_.IsQueued(dent.ino) || !child->object) return false;
    if (!child->object->owner_node.empty() && !child->object->crc_known) return false;
  }
  return true;
}

std::vector<FileSystem::PersistJob> FileSystem::StepsToPersist() {
  MutexLock lock(&mu_);
  std::vector<PersistJob> out;
  if (!options_.remote) return out;
  for (const auto& [ino, rec] : steps_) {
    if (rec.state != StepState::kCommitted || rec.persisted) continue;
    // A cluster step's commit object is written by the node that committed it.
    if (!rec.committer.empty() && (!cluster_ || rec.committer != cluster_->node())) continue;
    Inode* dir = inodes_.Find(ino);
    // Asked after every finished upload, with every step not yet persisted
    // waiting: a step still uploading is passed over at its first file
    // queued, before its commit object is built.
    if (!dir || !MayBeAllUploadedLocked(dir)) continue;
    CommitObject obj;
    obj.step_path = inodes_.PathOf(ino);
    obj.step = rec.step;
    obj.committed_at = rec.committed_at;
    obj.dir_mtime_ns = TimespecToNanos(dir->rec.mtime);
    obj.ephemeral = rec.ephemeral;
    bool complete = true;
    CollectTreeLocked(dir, &obj, &complete);
    if (!complete) continue;
    out.push_back(PersistJob{ino, CommitObjectKey(obj.step_path), EncodeCommitObject(obj)});
  }
  return out;
}

Status FileSystem::MarkPersisted(const PersistJob& job) {
  // Retention runs below for the cluster (only the committer of a cluster
  // step gets here): on a view read now.
  RefreshClusterForRetention(job.step_ino);
  MutexLock lock(&mu_);
  ledger_.Release(job.key);
  Transaction txn = BeginLocked();
  auto it = steps_.find(job.step_ino);
  if (it == steps_.end() || it->second.state != StepState::kCommitted ||
      CommitObjectKey(inodes_.PathOf(job.step_ino)) != job.key) {
    // Removed, renamed or being deleted while the object was written: it
    // must not make a step look complete.
    QueueRemoteDeleteLocked(job.key, true, txn.batch());
    return txn.Write();
  }
  steps_.SetPersisted(job.step_ino, true, txn.batch());
  const StepRecord rec = it->second;
  EmitStepEventLocked("persisted", job.step_ino, rec);
  // Cluster mode: the other nodes learn it from the bucket's step index.
  if (cluster_ && !rec.committer.empty()) cluster_->StepPersisted(inodes_.PathOf(job.step_ino));
  // Run-level files waiting for this step may go now.
  if (tier_ && ledger_.AnyRunFileWaits()) tier_->UploadsQueued();
  // The newest persisted step may have been all that kept an older one
  // (SPEC section 5's safety rule): retention looks again, in this transaction.
  if (Inode* dir = inodes_.Find(job.step_ino)) {
    // Only the committer of a cluster step gets here (StepsToPersist).
    retention_by_committer_ = true;
    ApplyRetentionLocked(dir->rec.parent, txn.batch());
    retention_by_committer_ = false;
  }
  return txn.Write();
}

Result<std::set<std::string>> FileSystem::KeysOfStepsSavedAgain(
    const std::vector<std::string>& keys) {
  std::set<std::string> out;
  if (!cluster_) return out;
  // The step a key is under: the first component of its path the step
  // pattern matches (steps never nest). Keys outside steps (run-level
  // files) have none.
  std::map<std::string, std::vector<std::string>> by_step;
  for (const auto& key : keys) {
    size_t begin = 0;
    while (begin < key.size()) {
      const size_t end = std::min(key.find('/', begin), key.size());
      if (end == key.size()) break;  // the last component is the object's name
      if (pattern_.Match(key.substr(begin, end - begin))) {
        by_step[key.substr(0, end)].push_back(key);
        break;
      }
      begin = end + 1;
    }
  }
  for (const auto& [step, step_keys] : by_step) {
    auto again = cluster_->StepSavedAgain(step);
    if (!again.ok()) return again.status();
    if (*again) out.insert(step_keys.begin(), step_keys.end());
  }
  return out;
}

Result<FileSystem::RemoteGcBatch> FileSystem::NextRemoteDeletions(size_t max) {
  MutexLock lock(&mu_);
  RemoteGcBatch out;
  Transaction drop_txn = BeginLocked();
  // A run whose index is about to go up keeps its steps' commit objects
  // until it is up: when retention removes the step the old `latest` names
  // as the new one's step is persisted, the old index never outlives it.
  // Looked at only when a commit object is to go: it walks every queued
  // upload, a million while a big namespace uploads, under the lock.
  std::optional<std::set<std::string>> runs_uploading;
  auto run_uploading = [&](const std::string& run_path) {
    mu_.AssertHeld();  // called inside the scan below, under the lock
    if (!runs_uploading) runs_uploading = RunsWithReadyRunFilesLocked();
    return runs_uploading->count(run_path) > 0;
  };
  for (bool commit : {true, false}) {
    bool claimed_commit = false;
    const std::string prefix(1, commit ? kRemoteGcCommitPrefix : kRemoteGcDataPrefix);
    CKPTFS_RETURN_IF_ERROR(manifest_->Scan(KeySpace::kRemoteGc, prefix,
                                           [&](std::string_view k, std::string_view) {
      mu_.AssertHeld();  // the scan runs inside this call, under the lock
      const std::string key(RemoteGcObjectKey(k));
      std::string step_path;
      if (ledger_.IsClaimed(key) ||
          (commit && IsCommitObjectKey(key, &step_path) && run_uploading(ParentPath(step_path)))) {
        claimed_commit |= commit;
        return true;  // an upload or commit object in flight: later
      }
      if (!commit && ledger_.IsLiveObject(key)) {
        drop_txn.batch()->Delete(KeySpace::kRemoteGc, std::string(k));  // a live file's object now
        return true;
      }
      if (!commit && RunFileWillReplaceLocked(key)) return true;  // replaced by its upload instead
      out.keys.push_back(key);
      return out.keys.size() < max;
    }));
    if (!out.keys.empty() || claimed_commit) {
      // Data objects wait while any commit object is still to go.
      out.commit_objects = commit;
      break;
    }
  }
  if (out.keys.empty()) {
    CKPTFS_RETURN_IF_ERROR(drop_txn.Write());
    return out;
  }
  // Deleting an object cannot be undone, but the batch that queued it (an
  // rm, a retention prune) may not be durable yet: a power loss would bring
  // the step back here without its objects. One synced write makes it so.
  drop_txn.batch()->Put(KeySpace::kMeta, "fsyncdir_seq", std::to_string(++fsyncdir_seq_));
  CKPTFS_RETURN_IF_ERROR(drop_txn.WriteSynced());
  return out;
}

Status FileSystem::RemoteDeletionsDone(const RemoteGcBatch& done) {
  MutexLock lock(&mu_);
  Transaction txn = BeginLocked();
  for (const auto& key : done.keys)
    txn.batch()->Delete(KeySpace::kRemoteGc, RemoteGcKey(key, done.commit_objects));
  return txn.Write();
}

size_t FileSystem::RemoteDeletionsQueued() {
  MutexLock lock(&mu_);
  size_t n = 0;
  (void)manifest_->Scan(KeySpace::kRemoteGc, "", [&](std::string_view, std::string_view) {
    n++;
    return true;
  });
  return n;
}

std::vector<FileSystem::EvictionCandidate> FileSystem::EvictionCandidates() {
  MutexLock lock(&mu_);
  return EvictionCandidatesLocked();
}

std::vector<TierPort::EvictionCandidate> FileSystemCore::EvictionCandidatesLocked() {
  std::vector<TierPort::EvictionCandidate> out;
  for (const auto& [ino, rec] : steps_) {
    if (rec.state != StepState::kCommitted || !rec.persisted) continue;
    Inode* dir = inodes_.Find(ino);
    if (dir && dir->entries_unloaded) {
      // Unloaded (a remote mount's idle step): one candidate for the whole
      // step, as it was last read; evicting it loads it.
      auto cached = unloaded_cached_.find(ino);
      if (cached != unloaded_cached_.end())
        out.push_back({ino, cached->second.last_access_ns, cached->second.resident_bytes});
      continue;
    }
    std::vector<std::pair<std::string, uint64_t>> files;
    if (dir) CollectFilesLocked(dir, &files);
    for (const auto& [rel, file_ino] : files) {
      Inode* f = inodes_.Find(file_ino);
      if (!f || f->open_handles > 0 || f->evicting || !f->object || f->rec.nlink != 1) continue;
      if (!SameVersion(*f, f->object->size, f->object->mtime_ns)) continue;
      out.push_back({file_ino, f->last_access_ns, f->object->resident ? f->rec.size : 0});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const TierPort::EvictionCandidate& a, const TierPort::EvictionCandidate& b) {
              return a.last_access_ns < b.last_access_ns;
            });
  return out;
}

Status FileSystem::Evict(uint64_t ino) {
  std::vector<uint64_t> evicting;
  {
    MutexLock lock(&mu_);
    Inode* inode = inodes_.Find(ino);
    if (!inode) return Status::Error(EBUSY, "no longer evictable");
    std::vector<uint64_t> files{ino};
    const bool whole_step = inode->is_dir();
    if (whole_step) {
      // An unloaded step's candidate (EvictionCandidatesLocked): loaded to
      // evict what of it may go.
      const bool was_unloaded = inode->entries_unloaded;
      std::vector<std::pair<std::string, uint64_t>> below;
      CollectFilesLocked(inode, &below);
      files.clear();
      for (const auto& [rel, file_ino] : below) files.push_back(file_ino);
      // Read for eviction, not by anyone: it is the first to unload again.
      if (was_unloaded) NoteStepIdleLocked(ino);
    }
    auto begun = BeginEvictionLocked(files, /*strict=*/!whole_step);
    if (!begun.ok()) return begun.status();
    evicting = std::move(begun).value();
  }
  Status st;
  for (uint64_t file_ino : evicting) {
    Status removed = data_->Remove(file_ino);
    if (st.ok()) st = removed;
  }
  MutexLock lock(&mu_);
  for (uint64_t file_ino : evicting) {
    if (Inode* f = inodes_.Find(file_ino)) f->evicting = false;
  }
  step_cv_.notify_all();
  return st;
}

Result<std::vector<uint64_t>> FileSystemCore::BeginEvictionLocked(const std::vector<uint64_t>& inos,
                                                                  bool strict) {
  std::vector<uint64_t> out;
  Transaction txn = BeginLocked();
  for (uint64_t ino : inos) {
    Inode* f = inodes_.Find(ino);
    if (!f || f->open_handles > 0 || f->evicting || !f->object || f->rec.nlink != 1) {
      if (strict) return Status::Error(EBUSY, "no longer evictable");
      continue;
    }
    auto it = steps_.find(steps_.StepOf(inodes_, ino));
    if (it == steps_.end() || !it->second.persisted) {
      if (strict) return Status::Error(EBUSY, "step not persisted");
      continue;
    }
    // A whole step's files with nothing local are left as they are (a step
    // that was unloaded holds no partly fetched data).
    if (!strict && !f->object->resident) continue;
    ObjectRecord rec = *f->object;
    rec.resident = false;
    txn.batch()->Put(KeySpace::kObjects, InoKey(ino), EncodeObject(rec));
    out.push_back(ino);
  }
  if (out.empty()) return out;
  // The manifest says "not resident" before the data goes (synced): a
  // crash in between leaves a file that is fetched again, never one whose
  // missing bytes read as zeros.
  CKPTFS_RETURN_IF_ERROR(txn.WriteSynced());
  for (uint64_t ino : out) {
    Inode* f = inodes_.Find(ino);
    f->object->resident = false;
    f->evicting = true;
    if (tier_) tier_->Forget(ino);
  }
  return out;
}

Status FileSystem::MarkResident(uint64_t ino, BackingFile* file) {
  CKPTFS_RETURN_IF_ERROR(file->Sync());
  MutexLock lock(&mu_);
  Inode* f = inodes_.Find(ino);
  if (!f || !f->object || f->object->resident || f->evicting) return Status::Ok();
  ObjectRecord rec = *f->object;
  rec.resident = true;
  Transaction txn = BeginLocked();
  txn.batch()->Put(KeySpace::kObjects, InoKey(ino), EncodeObject(rec));
  CKPTFS_RETURN_IF_ERROR(txn.Write());
  f->object = rec;
  return Status::Ok();
}

std::optional<ObjectRecord> FileSystem::ObjectRecordFor(uint64_t ino, const std::string& key) {
  MutexLock lock(&mu_);
  Inode* f = inodes_.Find(ino);
  if (!f || !f->object || f->object->key != key) return std::nullopt;
  return *f->object;
}

uint64_t FileSystem::ResidentBytes() {
  MutexLock lock(&mu_);
  return ResidentBytesLocked();
}

uint64_t FileSystemCore::ResidentBytesLocked() {
  uint64_t total = UnloadedStepBytesLocked();
  for (const auto& [ino, node] : inodes_) {
    const Inode* inode = &node;
    if (inode->is_reg() && (!inode->object || inode->object->resident)) total += inode->rec.size;
  }
  return total;
}

uint64_t FileSystemCore::UnloadedStepBytesLocked() {
  // Without a remote every byte of a committed step is resident, and its
  // record counts them. A remote mount's unloaded step counts what it held
  // as it unloaded (whatever eviction took before is not local).
  if (options_.remote) {
    uint64_t total = 0;
    for (const auto& [step_ino, cached] : unloaded_cached_) total += cached.resident_bytes;
    return total;
  }
  uint64_t total = 0;
  for (const auto& [step_ino, rec] : steps_) {
    const Inode* dir = inodes_.Find(step_ino);
    if (dir && dir->entries_unloaded) total += rec.bytes;
  }
  return total;
}

bool FileSystem::HasEntry(const std::string& path) {
  MutexLock lock(&mu_);
  return ResolveRelativeLocked(kRootIno, path) != 0;
}

std::set<std::string> FileSystem::StepPathsBeingDeleted() {
  MutexLock lock(&mu_);
  std::set<std::string> out;
  const std::string prefix(1, kRemoteGcCommitPrefix);
  (void)manifest_->Scan(KeySpace::kRemoteGc, prefix, [&](std::string_view k, std::string_view) {
    std::string step_path;
    if (IsCommitObjectKey(std::string(RemoteGcObjectKey(k)), &step_path)) out.insert(step_path);
    return true;
  });
  return out;
}

Status FileSystem::ImportStep(const CommitObject& obj) {
  MutexLock lock(&mu_);
  CKPTFS_RETURN_IF_ERROR(CheckHealthyLocked());
  Inode* root = inodes_.Find(kRootIno);
  const Caller owner{.uid = root->rec.uid, .gid = root->rec.gid};
  auto split = SplitStepPath(obj.step_path);
  if (!split.ok()) return split.status();
  const std::vector<std::string>& parts = *split;
  // A path may not be a file and a directory at once. Checked before the
  // in-memory image changes, so a bad object changes nothing.
  std::set<std::string> implied_dirs(obj.dirs.begin(), obj.dirs.end());
  auto add_parents = [&](const std::string& rel) {
    for (size_t slash = rel.find('/'); slash != std::string::npos; slash = rel.find('/', slash + 1)) {
      implied_dirs.insert(rel.substr(0, slash));
    }
  };
  for (const auto& d : obj.dirs) add_parents(d);
  for (const auto& f : obj.files) add_parents(f.path);
  for (const auto& l : obj.symlinks) add_parents(l.path);
  for (const auto& f : obj.files) {
    if (implied_dirs.count(f.path)) return Status::Error(EIO, obj.step_path + ": " + f.path + " is a file and a directory");
  }
  for (const auto& l : obj.symlinks) {
    if (implied_dirs.count(l.path)) return Status::Error(EIO, obj.step_path + ": " + l.path + " is a link and a directory");
  }
  if (!pattern_.Match(parts.back())) {
    return Status::Error(EINVAL, parts.back() + " does not match the step pattern of this mount");
  }
  Transaction txn = BeginLocked();
  Inode* dir = root;
  for (size_t i = 0; i + 1 < parts.size(); i++) {
    auto it = dir->children.find(parts[i]);
    if (it != dir->children.end()) {
      Inode* child = inodes_.Find(it->second.ino);
      if (!child || !child->is_dir()) return Status::Error(EEXIST, parts[i] + " is not a directory here");
      if (steps_.count(child->rec.ino)) return Status::Error(EINVAL, "inside a step here");
      dir = child;
      continue;
    }
    auto made = NewInodeLocked(owner, dir->rec.ino, parts[i], S_IFDIR | 0755, txn.batch());
    if (!made.ok()) return made.status();
    inodes_.AddChild(dir, parts[i], *made, clock_->Now(), txn.batch());
    InodeTable::Put(*dir, txn.batch());
    dir = *made;
  }
  const std::string& name = parts.back();
  if (dir->children.count(name)) return Status::Error(EEXIST, obj.step_path + " exists");
  auto step_dir = NewInodeLocked(owner, dir->rec.ino, name, S_IFDIR | 0755, txn.batch());
  if (!step_dir.ok()) return step_dir.status();
  inodes_.AddChild(dir, name, *step_dir, clock_->Now(), txn.batch());
  InodeTable::Put(*dir, txn.batch());
  const uint64_t step_ino = (*step_dir)->rec.ino;
  // Directories first (parents before children), then files and symlinks.
  Inode* step = *step_dir;
  std::vector<std::string> dirs = obj.dirs;
  std::sort(dirs.begin(), dirs.end());
  for (const auto& rel : dirs)
    CKPTFS_RETURN_IF_ERROR(EnsureDirPathLocked(step, rel, txn.batch()).status());
  const timespec committed = obj.committed_at;
  for (const auto& f : obj.files) {
    SealedFile sealed_file;
    sealed_file.path = f.path;
    sealed_file.mode = f.mode;
    sealed_file.mtime_ns = f.mtime_ns;
    sealed_file.ctime = committed;
    ObjectRecord& rec = sealed_file.object;
    rec.key = obj.step_path + "/" + f.path;
    rec.size = f.size;
    rec.mtime_ns = f.mtime_ns;
    rec.crc32c = f.crc32c;
    if (!f.chunk_crcs.empty()) {
      rec.chunk_size = obj.chunk_size;
      rec.chunk_crcs = f.chunk_crcs;
    }
    rec.resident = f.size == 0;
    CKPTFS_RETURN_IF_ERROR(AddSealedFileLocked(step, sealed_file, txn.batch()).status());
  }
  for (const auto& s : obj.symlinks) {
    CKPTFS_RETURN_IF_ERROR(
        AddSealedSymlinkLocked(step, s.path, s.target, /*keep_existing=*/false, txn.batch()));
  }
  // Directories keep the step directory's mtime from the writing machine
  // (or the commit time for older objects), not the import's: a trainer that
  // orders its checkpoints by directory mtime (Hugging Face's rotation does)
  // must see them in the order they were saved, not in the order this mount
  // happened to import them.
  timespec dir_time = committed;
  if (obj.dir_mtime_ns > 0) {
    dir_time = NanosToTimespec(obj.dir_mtime_ns);
  }
  auto stamp = [&](Inode* d) {
    if (!d->is_dir()) return false;
    d->rec.mtime = dir_time;
    d->rec.ctime = committed;
    InodeTable::Put(*d, txn.batch());
    return true;
  };
  stamp(*step_dir);
  inodes_.WalkBelow(*step_dir, [&](Inode* d, const std::string&) { return stamp(d); });
  CommitFacts facts;
  facts.committed_at = obj.committed_at;
  facts.bytes = obj.bytes;
  facts.files = obj.files.size();
  facts.ephemeral = obj.ephemeral;
  facts.persisted = true;
  const StepRecord rec = steps_.AddCommitted(step_ino, *pattern_.Match(name), facts,
                                             clock_->MonotonicNanos(), txn.batch());
  CKPTFS_RETURN_IF_ERROR(txn.WriteSynced());
  CKPTFS_RETURN_IF_ERROR(data_->SyncDir());
  EmitStepEventLocked("import", step_ino, rec);
  return Status::Ok();
}

void FileSystem::RepairUploadQueue(bool whole) {
  MutexLock lock(&mu_);
  if (!options_.remote) return;
  RefreshRunDirsLocked();
  Transaction txn = BeginLocked();
  if (whole) {
    std::vector<uint64_t> nothing_to_upload;
    for (const auto& [ino, rec] : ledger_.uploads()) {
      if (!HasUploadLocked(inodes_.Find(ino))) nothing_to_upload.push_back(ino);
    }
    for (uint64_t ino : nothing_to_upload) ledger_.Dequeue(ino, txn.batch());
  }
  QueueRunFilesLocked(txn.batch());
  if (whole) QueueStrandedStepFilesLocked(txn.batch());
  (void)txn.Write();
}

void FileSystemCore::RefreshRunDirsLocked() {
  // Run directories are the parents of steps. A directory inside a step
  // is not one: its files are the step's.
  std::set<uint64_t> run_dirs;
  for (const auto& [ino, rec] : steps_) {
    Inode* step = inodes_.Find(ino);
    if (step && step->rec.parent != 0 && steps_.StepOf(inodes_, step->rec.parent) == 0) run_dirs.insert(step->rec.parent);
  }
  ledger_.SetRunDirs(std::move(run_dirs));
}

void FileSystemCore::QueueRunFilesLocked(ManifestBatch* batch) {
  for (uint64_t run : ledger_.run_dirs()) {
    Inode* dir = inodes_.Find(run);
    if (!dir) continue;
    const std::string base = inodes_.PathOf(run);
    for (const auto& [name, dent] : dir->children) {
      Inode* file = inodes_.Find(dent.ino);
      // Open for writing: its last close queues it.
      if (!file || !IsRunFileLocked(*file) || file->open_writers > 0 || ledger_.IsQueued(dent.ino)) continue;
      if (!ObjectIsCurrent(*file, ChildKey(base, name))) QueueUploadLocked(file, batch);
    }
  }
}

void FileSystemCore::QueueStrandedStepFilesLocked(ManifestBatch* batch) {
  for (const auto& [ino, rec] : steps_) {
    if (rec.state != StepState::kCommitted || rec.persisted) continue;
    if (!rec.committer.empty() && (!cluster_ || rec.committer != cluster_->node())) continue;
    Inode* dir = inodes_.Find(ino);
    if (!dir) continue;
    const std::string step_path = inodes_.PathOf(ino);
    inodes_.WalkBelow(dir, [&](Inode* child, const std::string& rel) REQUIRES(mu_) {
      // Another node's file is that node's to upload.
      if (!child->is_reg() || (child->object && !child->object->owner_node.empty())) return true;
      if (!ledger_.IsQueued(child->rec.ino) && !ObjectIsCurrent(*child, step_path + "/" + rel)) {
        QueueUploadLocked(child, batch);
      }
      return true;
    });
  }
}

Result<size_t> FileSystem::ImportRunFiles(const std::vector<RemoteObject>& objects) {
  MutexLock lock(&mu_);
  CKPTFS_RETURN_IF_ERROR(CheckHealthyLocked());
  Inode* root = inodes_.Find(kRootIno);
  const Caller owner{.uid = root->rec.uid, .gid = root->rec.gid};
  Transaction txn = BeginLocked();
  size_t imported = 0;
  Status failed;  // what is in memory already is written below either way
  for (const RemoteObject& obj : objects) {
    const std::string dir_path = ParentPath(obj.key);
    const std::string name = dir_path.empty() ? obj.key : obj.key.substr(dir_path.size() + 1);
    if (!CheckName(name).ok() || IsCkptfsName(name)) continue;
    const uint64_t dir_ino =
        dir_path.empty() ? kRootIno : ResolveRelativeLocked(kRootIno, dir_path);
    Inode* dir = dir_ino ? inodes_.Find(dir_ino) : nullptr;
    if (!dir || !HoldsStepLocked(*dir) || steps_.StepOf(inodes_, dir_ino) != 0) continue;
    if (dir->children.count(name)) continue;   // local wins
    if (ledger_.IsLiveObject(obj.key)) continue;  // a live file's object (the file moved)
    auto queued = manifest_->Get(KeySpace::kRemoteGc, RemoteGcKey(obj.key, false));
    if (!queued.ok()) {
      failed = queued.status();
      break;
    }
    if (queued->has_value()) continue;  // deleted here; the remote deletion is pending
    ObjectRecord rec;
    rec.key = obj.key;
    rec.size = obj.size;
    rec.mtime_ns =
        TimespecToNanos(clock_->Now());  // the version shown here, so it is not uploaded back
    rec.crc_known = false;  // a listing says nothing of the contents: fetches are not verified
    auto made = AddRemoteRunFileLocked(owner, dir, name, rec, txn.batch());
    if (!made.ok()) {
      failed = made.status();
      break;
    }
    imported++;
  }
  if (imported > 0) {
    CKPTFS_RETURN_IF_ERROR(txn.WriteSynced());
    CKPTFS_RETURN_IF_ERROR(data_->SyncDir());
  }
  if (!failed.ok()) return failed;
  return imported;
}

Result<Inode*> FileSystemCore::AddRemoteRunFileLocked(const Caller& owner, Inode* dir,
                                                      const std::string& name, ObjectRecord rec,
                                                      ManifestBatch* batch) {
  auto made = NewInodeLocked(owner, dir->rec.ino, name, S_IFREG | 0644, batch);
  if (!made.ok()) return made.status();
  Inode* file = *made;
  file->rec.size = rec.size;
  file->rec.mtime = NanosToTimespec(rec.mtime_ns);
  InodeTable::Put(*file, batch);
  inodes_.AddChild(dir, name, file, clock_->Now(), batch);
  rec.resident = rec.size == 0;
  file->object = std::move(rec);
  ledger_.SetObjectOwner(file->object->key, file->rec.ino);
  batch->Put(KeySpace::kObjects, InoKey(file->rec.ino), EncodeObject(*file->object));
  return file;
}

Result<bool> FileSystem::ApplyClusterRunFile(const RunFileRecord& record) {
  MutexLock lock(&mu_);
  CKPTFS_RETURN_IF_ERROR(CheckHealthyLocked());
  const std::string dir_path = ParentPath(record.path);
  const std::string name = dir_path.empty() ? record.path : record.path.substr(dir_path.size() + 1);
  if (!CheckName(name).ok() || IsCkptfsName(name)) {
    return Status::Error(EINVAL, record.path + ": not a name a run-level file can have");
  }
  const uint64_t dir_ino = dir_path.empty() ? kRootIno : ResolveRelativeLocked(kRootIno, dir_path);
  Inode* dir = dir_ino ? inodes_.Find(dir_ino) : nullptr;
  // The run directory appears here with its first step from the cluster.
  if (!dir || !HoldsStepLocked(*dir) || steps_.StepOf(inodes_, dir_ino) != 0) {
    return Status::Error(EAGAIN, record.path + ": no run directory " + dir_path + " here yet");
  }
  ObjectRecord rec;
  rec.key = record.path;
  rec.size = record.size;
  rec.mtime_ns = record.mtime_ns;
  rec.crc32c = record.crc32c;
  rec.crc_known = true;
  rec.owner_node = record.node;  // its object is that node's to replace or delete
  Transaction txn = BeginLocked();
  if (auto it = dir->children.find(name); it != dir->children.end()) {
    Inode* old = inodes_.Find(it->second.ino);
    if (!old || !old->is_reg()) return false;  // a directory or link here stays
    const bool copy_of_bucket = old->object && old->object->key == record.path &&
                                ObjectIsCurrent(*old, record.path) &&
                                (!old->object->owner_node.empty() || !old->object->crc_known);
    if (copy_of_bucket && old->object->owner_node == record.node &&
        old->object->mtime_ns == record.mtime_ns && old->object->size == record.size) {
      return false;  // this version already
    }
    // This node's own version written after the record's: it wins, and its
    // upload records it for the others in turn.
    if (!copy_of_bucket && VersionMtime(*old) > record.mtime_ns) return false;
    // Replacing a file being written, or whose upload (to this very key) is
    // queued or running, would lose a write or let the upload land over the
    // newer object: not now.
    if (old->open_writers > 0 || ledger_.IsQueued(old->rec.ino) || ledger_.IsClaimed(record.path)) {
      return Status::Error(EAGAIN, record.path + ": busy here");
    }
    // The object at the key is now the record's: dropping the old file must
    // not delete it.
    if (old->object) {
      ledger_.ForgetObject(old->object->key, old->rec.ino);
      txn.batch()->Delete(KeySpace::kObjects, InoKey(old->rec.ino));
      old->object.reset();
    }
    inodes_.RemoveChild(dir, name, clock_->Now(), txn.batch());
    DropLinkLocked(old, txn.batch());
  }
  Inode* root = inodes_.Find(kRootIno);
  const Caller owner{.uid = root->rec.uid, .gid = root->rec.gid};
  CKPTFS_RETURN_IF_ERROR(
      AddRemoteRunFileLocked(owner, dir, name, std::move(rec), txn.batch()).status());
  // The kernel's entry (or cached absence) under the name is the old one's.
  pending_invalidations_.emplace_back(dir->rec.ino, name);
  CKPTFS_RETURN_IF_ERROR(txn.Write());
  return true;
}

// Not analysed: it lets go of the caller's lock for the fetch and takes it
// back, which the analysis cannot follow through a reference.
Status FileSystem::MakeLocalForWriteLocked(MutexLock& lock, uint64_t ino) NO_THREAD_SAFETY_ANALYSIS {
  // A few rounds at most: each fetches the object the file has then.
  for (int round = 0; round < 3; round++) {
    Inode* inode = inodes_.Find(ino);
    if (!inode || !inode->is_reg() || inode->rec.sealed || !inode->object || inode->object->resident) {
      return Status::Ok();
    }
    TierHooks* const tier = tier_;
    if (!tier) return Status::Error(EIO, inodes_.PathOf(ino) + ": its data is only in the remote (mount with --remote)");
    const std::string key = inode->object->key;
    const uint64_t size = inode->rec.size;
    lock.Unlock();
    // Every byte, also those the write or truncation would replace: a
    // chunk some reader's read-ahead is fetching is waited for, so no
    // fetch lands on the new contents later. In windows, so a large file
    // is not asked for all at once.
    constexpr uint64_t kWindow = 64ULL << 20;
    auto file = data_->Open(ino, /*create=*/true);
    Status st = file.status();
    for (uint64_t off = 0; st.ok() && off < size; off += kWindow) {
      st = tier->EnsureLocal(ino, key, size, file->get(), off, static_cast<size_t>(std::min(kWindow, size - off)));
    }
    if (st.ok()) st = MarkResident(ino, file->get());
    lock.Lock();
    if (!st.ok()) return st.Annotate("fetching " + key + " before writing it");
  }
  return Status::Error(EAGAIN, "the file kept changing while it was fetched before writing");
}

FileSystem::UploadProgress FileSystemCore::ProgressLocked(uint64_t step_ino) {
  UploadProgress p;
  Inode* dir = inodes_.Find(step_ino);
  auto rec = steps_.find(step_ino);
  if (rec != steps_.end() && (rec->second.persisted || (dir && dir->entries_unloaded))) {
    // All of it is up, as its record counts (only persisted steps unload),
    // and status.json need not walk a million files to say so.
    p.files_total = p.files_done = rec->second.files;
    p.bytes_total = p.bytes_done = rec->second.bytes;
    return p;
  }
  std::vector<std::pair<std::string, uint64_t>> files;
  if (dir) CollectFilesLocked(dir, &files);
  const std::string base = inodes_.PathOf(step_ino);
  for (const auto& [rel, ino] : files) {
    Inode* f = inodes_.Find(ino);
    if (!f) continue;
    p.files_total++;
    p.bytes_total += f->rec.size;
    if (ObjectIsCurrent(*f, base + "/" + rel) && !ledger_.IsQueued(ino)) {
      p.files_done++;
      p.bytes_done += f->rec.size;
    }
  }
  return p;
}

}  // namespace ckptfs
