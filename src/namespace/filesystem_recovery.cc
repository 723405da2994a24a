// Loading the namespace from the manifest, and recovery after an unclean
// stop. Why each crash point is safe is written down in docs/manifest.md.
#include <unistd.h>

#include <algorithm>
#include <set>

#include "manifest/schema.h"
#include "namespace/filesystem.h"

namespace ckptfs {

Status FileSystemCore::LoadWholeLocked() {
  Status decode_error;
  CKPTFS_RETURN_IF_ERROR(manifest_->Scan(KeySpace::kInodes, "", [&](std::string_view, std::string_view v) {
    mu_.AssertHeld();  // runs inside this call, under the lock
    auto rec = DecodeInode(v);
    if (!rec.ok()) {
      decode_error = rec.status();
      return false;
    }
    Inode inode;
    inode.rec = std::move(rec).value();
    inodes_.Insert(std::move(inode));
    return true;
  }));
  CKPTFS_RETURN_IF_ERROR(decode_error);
  CKPTFS_RETURN_IF_ERROR(manifest_->Scan(KeySpace::kDentries, "", [&](std::string_view k, std::string_view v) {
    mu_.AssertHeld();  // runs inside this call, under the lock
    auto key = DecodeNamedKey(k);
    auto dent = DecodeDentry(v);
    if (!key.ok() || !dent.ok()) {
      decode_error = key.ok() ? dent.status() : key.status();
      return false;
    }
    Inode* dir = inodes_.Find(key->first);
    Inode* child = inodes_.Find(dent->ino);
    if (!dir || !child) {
      decode_error = Status::Error(EIO, "manifest entry " + key->second + " points to a missing inode");
      return false;
    }
    dir->children[key->second] = *dent;
    dir->by_cookie[dent->cookie] = key->second;
    child->name = key->second;
    if (child->is_dir()) child->rec.parent = key->first;
    return true;
  }));
  CKPTFS_RETURN_IF_ERROR(decode_error);
  CKPTFS_RETURN_IF_ERROR(manifest_->Scan(KeySpace::kXattrs, "", [&](std::string_view k, std::string_view v) {
    mu_.AssertHeld();  // runs inside this call, under the lock
    auto key = DecodeNamedKey(k);
    if (!key.ok()) {
      decode_error = key.status();
      return false;
    }
    if (Inode* inode = inodes_.Find(key->first)) inode->xattrs[key->second] = std::string(v);
    return true;
  }));
  CKPTFS_RETURN_IF_ERROR(decode_error);
  CKPTFS_RETURN_IF_ERROR(manifest_->Scan(KeySpace::kSteps, "", [&](std::string_view k, std::string_view v) {
    mu_.AssertHeld();  // runs inside this call, under the lock
    auto ino = DecodeInoKey(k);
    auto rec = DecodeStep(v);
    if (!ino.ok() || !rec.ok()) {
      decode_error = ino.ok() ? rec.status() : ino.status();
      return false;
    }
    if (inodes_.Find(*ino)) steps_.Load(*ino, std::move(rec).value());
    return true;
  }));
  if (decode_error.ok()) LoadTierStateLocked(&decode_error);
  if (decode_error.ok()) LoadChecksums(&decode_error);
  return decode_error;
}

Status FileSystemCore::RecoverLocked() {
  Transaction txn = BeginLocked();
  const timespec now = clock_->Now();
  // Same boot: only the daemon died, and every byte it (or a fast-path
  // client) wrote is in the kernel's page cache or on disk, synced or not;
  // the commit fsyncs it before its batch, as a live commit does.
  auto last_boot = manifest_->Get(KeySpace::kMeta, kBootIdKey);
  if (!last_boot.ok()) return last_boot.status();
  const bool same_boot = !options_.boot_id.empty() && last_boot->has_value() && **last_boot == options_.boot_id;
  if (!options_.boot_id.empty()) txn.batch()->Put(KeySpace::kMeta, kBootIdKey, options_.boot_id);
  recovered_same_boot_ = same_boot;
  if (!inodes_.Find(kRootIno)) {
    // A new cache: the root directory, owned by whoever mounts.
    Inode root;
    root.rec.ino = kRootIno;
    root.rec.mode = S_IFDIR | 0755;
    root.rec.uid = getuid();
    root.rec.gid = getgid();
    root.rec.nlink = 2;
    root.rec.atime = root.rec.mtime = root.rec.ctime = now;
    InodeTable::Put(root, txn.batch());
    inodes_.Insert(std::move(root));
  }

  // Orphans: unlinked while open when the daemon stopped.
  std::vector<uint64_t> orphans;
  for (const auto& [ino, node] : inodes_) {
    const Inode* inode = &node;
    if (inode->rec.nlink == 0 && ino != kRootIno) orphans.push_back(ino);
  }
  for (uint64_t ino : orphans) {
    Inode* inode = inodes_.Find(ino);
    ForgetObjectLocked(inode, txn.batch());
    InodeTable::EraseOrphanRecord(*inode, txn.batch());
    inodes_.Erase(ino);
  }

  // Backing files: remove those no inode owns (created just before a crash);
  // unsealed files take the size their data actually reached.
  // Data of pruned steps waits in the GC queue: the background GC deletes it,
  // so that a mount after a big prune does not wait for the deletion.
  std::set<uint64_t> queued_for_gc;
  CKPTFS_RETURN_IF_ERROR(manifest_->Scan(KeySpace::kGc, "", [&](std::string_view k, std::string_view) {
    if (auto ino = DecodeInoKey(k); ino.ok()) queued_for_gc.insert(*ino);
    return true;
  }));
  // Never hand out a number still in the GC queue: the GC would delete the
  // new file's data (its backing file may already be gone, key not yet).
  if (!queued_for_gc.empty()) inodes_.ReserveThrough(*queued_for_gc.rbegin());
  // A lazy mount leaves this to the background (SweepStrayBackingFiles):
  // the numbers are covered by the reservation, and the listing grows with
  // the namespace.
  if (!lazy_) {
    auto listed = data_->List();
    if (!listed.ok()) return listed.status();
    for (uint64_t ino : *listed) {
      inodes_.ReserveThrough(ino);
      Inode* inode = inodes_.Find(ino);
      if ((!inode || !inode->is_reg()) && !queued_for_gc.count(ino)) (void)data_->Remove(ino);
    }
  }
  std::vector<uint64_t> resident;
  for (const auto& [ino, node] : inodes_) {
    if (!node.is_reg()) continue;
    if (node.object && !node.object->resident) continue;  // fetched on demand
    resident.push_back(ino);
  }
  // In ino order: backing files made one after another sit together on disk.
  std::sort(resident.begin(), resident.end());
  const std::vector<Result<uint64_t>> sizes = data_->SizesOf(resident);
  for (size_t i = 0; i < resident.size(); i++) {
    const uint64_t ino = resident[i];
    Inode* inode = inodes_.Find(ino);
    const uint64_t actual = sizes[i].ok() ? *sizes[i] : 0;
    if (!inode->rec.sealed) {
      if (actual != inode->rec.size) {
        inode->rec.size = actual;
        InodeTable::Put(*inode, txn.batch());
      }
      continue;
    }
    if (actual < inode->rec.size && inode->object && inode->object->crc_known &&
        ObjectIsCurrent(*inode, inodes_.PathOf(ino))) {
      // The remote holds this very version, checked (its upload ended, or
      // it was fetched from there).
      DropLostLocalCopyLocked(ino, *inode->object, inodes_.PathOf(ino), actual, txn.batch());
      continue;
    }
    if (actual < inode->rec.size) {
      // Committed data must be there; if the disk lost it, say so loudly.
      const uint64_t step = steps_.StepOf(inodes_, ino);
      const std::string why = "committed file " + inodes_.PathOf(ino) + " lost data: " +
                              std::to_string(actual) + " of " + std::to_string(inode->rec.size) + " bytes";
      events_->Append({{"event", "error"}, {"path", inodes_.PathOf(ino)}, {"error", why}});
      if (step != 0) steps_.MarkBroken(step, why, txn.batch());
    }
  }

  // Steps: writing ones were not committed before the stop, unless their
  // commit's trigger survived it.
  const int64_t mono = clock_->MonotonicNanos();
  for (auto& [ino, rec] : steps_) steps_.Runtime(ino).last_activity = mono;
  for (auto& [ino, rec] : steps_) {
    if (rec.state == StepState::kWriting || rec.pending_commit != 0) {
      RecoverWritingStepLocked(ino, &rec, same_boot, txn.batch());
    }
  }

  // A deletion (rm -rf) the stop interrupted is finished: the user asked for it.
  std::vector<uint64_t> deleting;
  for (const auto& [ino, rec] : steps_) {
    if (rec.state == StepState::kDeleting) deleting.push_back(ino);
  }
  for (uint64_t ino : deleting)
    RemoveStepLocked(ino, "deletion interrupted by a daemon stop", txn.batch());

  // Retention runs at mount too (SPEC section 5), in the same transaction;
  // in cluster mode ApplyRetentionLocked declines (SPEC section 9).
  std::set<uint64_t> runs;
  for (const auto& [ino, rec] : steps_) runs.insert(inodes_.Find(ino)->rec.parent);
  for (uint64_t run : runs) ApplyRetentionLocked(run, txn.batch());
  pending_invalidations_.clear();  // nothing is mounted yet
  FinishFormatUpgradeLocked(txn.batch());

  CKPTFS_RETURN_IF_ERROR(txn.WriteSynced());
  // Removals of orphans' data only after the manifest forgot them.
  for (uint64_t ino : orphans) (void)data_->Remove(ino);
  return data_->SyncDir();
}

void FileSystemCore::DropLostLocalCopyLocked(uint64_t ino, ObjectRecord object,
                                             const std::string& path, uint64_t have,
                                             ManifestBatch* batch) {
  object.resident = false;
  batch->Put(KeySpace::kObjects, InoKey(ino), EncodeObject(object));
  if (Inode* inode = inodes_.Find(ino); inode && inode->object) inode->object->resident = false;
  (void)data_->Remove(ino);
  events_->Append({{"event", "warning"},
                   {"kind", "local_copy_lost"},
                   {"path", path},
                   {"error", "the local copy lost data (" + std::to_string(have) + " of " +
                                 std::to_string(object.size) +
                                 " bytes); the file is read from the remote, which holds it"}});
}

void FileSystemCore::RecoverWritingStepLocked(uint64_t step_ino, StepRecord* rec, bool same_boot,
                                              ManifestBatch* batch) {
  const bool committed_or_deleting = rec->state == StepState::kCommitted || rec->state == StepState::kDeleting;
  if (rec->pending_commit != 0 && same_boot && !committed_or_deleting) {
    // A marker closed, a rename done, an index file naming the step, an
    // explicit or settling commit, with every file of the step closed: the
    // commit the daemon did not finish is asked for again, with the same
    // checks. The coordinator starts it (RequestRecoveredCommits); files
    // found missing or short then make the step incomplete (AbortCommit).
    StepRuntime& rt = steps_.Runtime(step_ino);
    rt.commit_wanted = true;
    rt.wanted_since = clock_->MonotonicNanos();
    rt.renamed = (rec->pending_commit & kPendingCommitRenamed) != 0;
    rt.forced = (rec->pending_commit & kPendingCommitForced) != 0;
    rt.direct = (rec->pending_commit & kPendingCommitDirect) != 0;
    rt.explicit_commit = (rec->pending_commit & kPendingCommitExplicit) != 0;
    rt.session = rec->session;
    rt.recovered = true;
    EmitStepEventLocked("recovered", step_ino, *rec,
                        "finishing the commit asked for before the daemon stopped");
    return;
  }
  const bool forgot = rec->pending_commit != 0;
  if (rec->state == StepState::kWriting) {
    steps_.MarkIncomplete(step_ino,
                          forgot
                              ? "the daemon stopped before this step was committed, in an earlier "
                                "boot of the machine (unsynced data may be lost): not committed"
                              : "the daemon stopped before this step was committed",
                          batch);
    EmitStepEventLocked("recovered", step_ino, *rec, rec->error);
    return;
  }
  rec->pending_commit = 0;
  StepBook::Put(step_ino, *rec, batch);
}

}  // namespace ckptfs
