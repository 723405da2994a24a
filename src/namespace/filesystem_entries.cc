// Namespace operations on directory entries: lookup, create, link, unlink,
// rename, readdir.
#include <fcntl.h>
#include <linux/fs.h>  // RENAME_NOREPLACE, RENAME_EXCHANGE

#include "namespace/filesystem.h"
#include "views/view_names.h"

namespace ckptfs {

namespace {
constexpr uint64_t kFirstRealOffset = 4;  // after ".", "..", ".ckptfs" or ".full", "latest"
constexpr size_t kSymlinkMax = 4095;

}  // namespace

Result<Inode*> FileSystemCore::PrepareNewEntryLocked(MutexLock& lock, uint64_t parent,
                                                     const std::string& name) {
  if (!IsRealIno(parent)) return Status::Error(EROFS, "the ckptfs control directory is read-only");
  WaitUntilNotCommittingLocked(lock, parent);
  auto dir = inodes_.FindDir(parent);
  if (!dir.ok()) return dir.status();
  // A removed directory still open somewhere (a process's cwd): the kernel
  // refuses new entries in it, and so do we for callers that are not the
  // kernel (the writer fast path), or recovery would find entries in a
  // directory that is gone.
  if ((*dir)->rec.nlink == 0) return Status::Error(ENOENT, "directory was removed");
  CKPTFS_RETURN_IF_ERROR(CheckName(name));
  CKPTFS_RETURN_IF_ERROR(CheckWritableDirLocked(*dir));
  CKPTFS_RETURN_IF_ERROR(CheckNotReservedLocked(parent, name));
  if (HasRealChildLocked(*dir, name) || (parent == kRootIno && name == kControlDirName)) {
    return Status::Error(EEXIST, name + " exists");
  }
  return dir;
}

Result<Entry> FileSystem::Lookup(uint64_t parent, const std::string& name) {
  if (name.size() > 255) return Status::Error(ENAMETOOLONG, "name longer than 255 bytes");
  // Cluster mode: steps committed or removed by other nodes show up here.
  MaybeRefreshCluster();
  if (VirtualNodes* v = VirtualNodesFor(parent)) return v->Lookup(parent, name);
  if (name == kFullDirName) {
    if (std::optional<Result<Entry>> full = LookupFullDir(parent)) return *full;
  }
  MutexLock lock(&mu_);
  auto dir = inodes_.FindDir(parent);
  if (!dir.ok()) return dir.status();
  auto it = (*dir)->children.find(name);
  if (it != (*dir)->children.end()) {
    Inode* child = inodes_.Find(it->second.ino);
    if (!child) return Status::Error(EIO, "dangling entry " + name);
    NoteLookupInLocked(parent);
    return MakeEntry(child);
  }
  return LookupVirtualLocked(parent, name);
}

void FileSystem::Forget(uint64_t ino, uint64_t nlookup) {
  MutexLock lock(&mu_);
  if (!IsRealIno(ino)) return;
  Inode* inode = inodes_.Find(ino);
  if (!inode) return;
  inode->lookups = nlookup > inode->lookups ? 0 : inode->lookups - nlookup;
  inodes_.ForgetIfUnused(ino);
}

Result<Entry> FileSystem::Mkdir(const Caller& c, uint64_t parent, const std::string& name,
                                uint32_t mode) {
  // Cluster mode: a new step records the removal of its name it follows
  // (StepRecord::follows_removal), from a view of the bucket just read.
  if (cluster_ && pattern_.Match(name)) cluster_->RefreshForNewStep();
  MutexLock lock(&mu_);
  auto dir = PrepareNewEntryLocked(lock, parent, name);
  if (!dir.ok()) return dir.status();
  Transaction txn = BeginLocked();
  auto inode = NewInodeLocked(c, parent, name, S_IFDIR | (mode & 07777), txn.batch());
  if (!inode.ok()) return inode.status();
  inodes_.AddChild(*dir, name, *inode, clock_->Now(), txn.batch());
  bool unused = false;
  ReclassifyDirLocked(*inode, txn.batch(), &unused);
  NoteActivityLocked(parent);
  CKPTFS_RETURN_IF_ERROR(txn.Write());
  return MakeEntry(*inode);
}

Result<Entry> FileSystem::Mknod(const Caller& c, uint64_t parent, const std::string& name,
                                uint32_t mode) {
  const uint32_t type = mode & S_IFMT;
  if (type != S_IFREG && type != S_IFIFO && type != S_IFSOCK) {
    return Status::Error(EPERM, "device nodes are not supported");
  }
  MutexLock lock(&mu_);
  auto dir = PrepareNewEntryLocked(lock, parent, name);
  if (!dir.ok()) return dir.status();
  Transaction txn = BeginLocked();
  auto inode = NewInodeLocked(c, parent, name, mode, txn.batch());
  if (!inode.ok()) return inode.status();
  inodes_.AddChild(*dir, name, *inode, clock_->Now(), txn.batch());
  NoteActivityLocked(parent);
  CKPTFS_RETURN_IF_ERROR(txn.Write());
  return MakeEntry(*inode);
}

Result<Entry> FileSystem::Symlink(const Caller& c, uint64_t parent, const std::string& name,
                                  const std::string& target) {
  if (target.empty()) return Status::Error(ENOENT, "empty symlink target");
  if (target.size() > kSymlinkMax) return Status::Error(ENAMETOOLONG, "symlink target too long");
  MutexLock lock(&mu_);
  auto dir = PrepareNewEntryLocked(lock, parent, name);
  if (!dir.ok()) return dir.status();
  Transaction txn = BeginLocked();
  auto inode = NewInodeLocked(c, parent, name, S_IFLNK | 0777, txn.batch());
  if (!inode.ok()) return inode.status();
  (*inode)->rec.symlink_target = target;
  (*inode)->rec.size = target.size();
  InodeTable::Put(**inode, txn.batch());
  inodes_.AddChild(*dir, name, *inode, clock_->Now(), txn.batch());
  NoteActivityLocked(parent);
  CKPTFS_RETURN_IF_ERROR(txn.Write());
  return MakeEntry(*inode);
}

Result<Entry> FileSystem::Link(uint64_t ino, uint64_t new_parent, const std::string& new_name) {
  MutexLock lock(&mu_);
  if (!IsRealIno(ino)) return NotPermittedVirtual();
  auto dir = PrepareNewEntryLocked(lock, new_parent, new_name);
  if (!dir.ok()) return dir.status();
  Inode* inode = inodes_.Find(ino);
  if (!inode || inode->rec.nlink == 0) return Status::Error(ENOENT, "no such file");
  if (inode->is_dir()) return Status::Error(EPERM, "hard links to directories are not allowed");
  if (inode->rec.nlink >= 65000) return Status::Error(EMLINK, "too many links");
  Transaction txn = BeginLocked();
  inode->rec.nlink++;
  inode->rec.ctime = clock_->Now();
  inodes_.AddChild(*dir, new_name, inode, clock_->Now(), txn.batch());
  InodeTable::Put(*inode, txn.batch());
  NoteActivityLocked(new_parent);
  CKPTFS_RETURN_IF_ERROR(txn.Write());
  return MakeEntry(inode);
}

Status FileSystem::Unlink(uint64_t parent, const std::string& name) {
  MutexLock lock(&mu_);
  if (!IsRealIno(parent)) return Status::Error(EROFS, "the ckptfs control directory is read-only");
  WaitUntilNotCommittingLocked(lock, parent);
  CKPTFS_RETURN_IF_ERROR(CheckHealthyLocked());
  auto dir = inodes_.FindDir(parent);
  if (!dir.ok()) return dir.status();
  auto it = (*dir)->children.find(name);
  if (it == (*dir)->children.end()) {
    if (parent == kRootIno && name == kControlDirName) return NotPermittedVirtual();
    if (name == kLatestName && VirtualLatestOfLocked(parent) != 0)
      return TurnOffLatestLinkLocked(*dir);
    return Status::Error(ENOENT, name + " does not exist");
  }
  Inode* child = inodes_.Find(it->second.ino);
  if (!child) return Status::Error(EIO, "dangling entry " + name);
  if (child->is_dir()) return Status::Error(EISDIR, name + " is a directory");
  // Deleting from a committed step is allowed: steps may be pruned file by
  // file (rm -rf); what is sealed is the data, not the directory.
  Transaction txn = BeginLocked();
  NoteDeletionLocked(parent, txn.batch());
  ManifestBatch* records = RemovalBatchLocked(parent, *child, txn.batch());
  inodes_.RemoveChild(*dir, name, clock_->Now(), records);
  DropLinkLocked(child, records);
  NoteActivityLocked(parent);
  CKPTFS_RETURN_IF_ERROR(txn.Write());
  inodes_.ForgetIfUnused(child->rec.ino);
  return Status::Ok();
}

Status FileSystem::Rmdir(uint64_t parent, const std::string& name) {
  MutexLock lock(&mu_);
  if (!IsRealIno(parent)) return Status::Error(EROFS, "the ckptfs control directory is read-only");
  WaitUntilNotCommittingLocked(lock, parent);
  CKPTFS_RETURN_IF_ERROR(CheckHealthyLocked());
  auto dir = inodes_.FindDir(parent);
  if (!dir.ok()) return dir.status();
  auto it = (*dir)->children.find(name);
  if (it == (*dir)->children.end()) {
    if (parent == kRootIno && name == kControlDirName) return NotPermittedVirtual();
    return Status::Error(ENOENT, name + " does not exist");
  }
  Inode* child = inodes_.Find(it->second.ino);
  if (!child) return Status::Error(EIO, "dangling entry " + name);
  if (!child->is_dir()) return Status::Error(ENOTDIR, name + " is not a directory");
  WaitUntilNotCommittingLocked(lock, child->rec.ino);
  dir = inodes_.FindDir(parent);  // the wait may have released mu_
  if (!dir.ok()) return dir.status();
  it = (*dir)->children.find(name);
  if (it == (*dir)->children.end()) return Status::Error(ENOENT, name + " does not exist");
  child = inodes_.Find(it->second.ino);
  CKPTFS_RETURN_IF_ERROR(inodes_.EnsureLoaded(child));  // a settled step's entries count
  if (!child->children.empty()) return Status::Error(ENOTEMPTY, name + " is not empty");
  Transaction txn = BeginLocked();
  // The records rm -rf deferred go first: this removal may be the step's.
  const bool ends_rm_rf = deferred_removals_.count(child->rec.ino) > 0;
  FlushDeferredRemovalsLocked(child->rec.ino, txn.batch());
  if (StepRecord* step = steps_.Find(child->rec.ino)) {
    if (step->state == StepState::kWriting || step->state == StepState::kDeleting) {
      events_->Append(
          {{"event", "delete"}, {"path", inodes_.PathOf(child->rec.ino)}, {"step", step->step}});
    } else {
      // A finished step with no files: nothing was unlinked in it, so its
      // removal (remote copy, cluster announcement) starts here.
      NoteDeletionLocked(child->rec.ino, txn.batch());
    }
  } else {
    NoteDeletionLocked(parent, txn.batch());
  }
  ManifestBatch* records = RemovalBatchLocked(parent, *child, txn.batch());
  inodes_.RemoveChild(*dir, name, clock_->Now(), records);
  DropLinkLocked(child, records);
  NoteActivityLocked(parent);
  if (ends_rm_rf) {
    // The end of an rm -rf: this batch holds every record the unlinks
    // deferred (tens of thousands for a big step, tens of milliseconds to
    // write), so it is written after the reply, in the background (the
    // coordinator's next tick, or before the next change). A stop before
    // then loses it whole, and recovery removes the `deleting` step whole:
    // what rm asked for. Until then its records are only the removed
    // step's and its run's, which no loader reads (a run is never unloaded).
    txn.WriteLater();
  } else {
    CKPTFS_RETURN_IF_ERROR(txn.Write());
  }
  inodes_.ForgetIfUnused(child->rec.ino);
  return Status::Ok();
}

Status FileSystemCore::TurnOffLatestLinkLocked(Inode* run) {
  // `rm latest` on the virtual link: the user (or a trainer about to write
  // its own `latest`) manages the name from now on. Recorded as the run's
  // xattr so it survives restarts and can be undone with setfattr.
  Transaction txn = BeginLocked();
  run->xattrs[kLatestLinkXattr] = "off";
  run->rec.ctime = clock_->Now();
  txn.batch()->Put(KeySpace::kXattrs, XattrKey(run->rec.ino, kLatestLinkXattr), "off");
  InodeTable::Put(*run, txn.batch());
  return txn.Write();
}

Result<std::string> FileSystem::Readlink(uint64_t ino) {
  if (KindOf(ino) == NodeKind::kLatestLink) MaybeRefreshCluster();
  MutexLock lock(&mu_);
  if (KindOf(ino) == NodeKind::kLatestLink) {
    const uint64_t run = ino & ~kLatestBit;
    const uint64_t step = VirtualLatestOfLocked(run);
    if (step == 0) return Status::Error(ENOENT, "no committed step");
    return inodes_.Find(step)->name;
  }
  Inode* inode = inodes_.Find(ino);
  if (!inode) return Status::Error(ENOENT, "no such inode");
  if (!inode->is_symlink()) return Status::Error(EINVAL, "not a symlink");
  return inode->rec.symlink_target;
}

Status FileSystem::Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                          const std::string& new_name, unsigned int flags) {
  std::string before;
  if (cluster_) {
    MutexLock lock(&mu_);
    before = ClusterStepOfLocked(parent);
  }
  CKPTFS_RETURN_IF_ERROR(RenameEntry(parent, name, new_parent, new_name, flags));
  if (!cluster_) return Status::Ok();
  // Cluster mode: the step the entry left and the one it joined (a staging
  // directory renamed into a step, a marker renamed into place) publish this
  // node's part before rename() returns.
  std::string after;
  {
    MutexLock lock(&mu_);
    auto dir = inodes_.FindDir(new_parent);
    if (dir.ok()) {
      auto it = (*dir)->children.find(new_name);
      if (it != (*dir)->children.end()) after = ClusterStepOfLocked(it->second.ino);
    }
  }
  if (!before.empty() && before != after) CKPTFS_RETURN_IF_ERROR(PublishPartOf(before));
  return PublishPartOf(after);
}

Status FileSystem::RenameEntry(uint64_t parent, const std::string& name, uint64_t new_parent,
                               const std::string& new_name, unsigned int flags) {
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
    return Status::Error(EINVAL, "unsupported rename flags");
  }
  if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE)) {
    return Status::Error(EINVAL, "RENAME_NOREPLACE and RENAME_EXCHANGE together");
  }
  MutexLock lock(&mu_);
  if (!IsRealIno(parent) || !IsRealIno(new_parent)) {
    return Status::Error(EXDEV, "cannot move into or out of the ckptfs control directory");
  }
  WaitUntilNotCommittingLocked(lock, parent);
  WaitUntilNotCommittingLocked(lock, new_parent);
  CKPTFS_RETURN_IF_ERROR(CheckHealthyLocked());
  auto src_dir = inodes_.FindDir(parent);
  if (!src_dir.ok()) return src_dir.status();
  auto dst_dir = inodes_.FindDir(new_parent);
  if (!dst_dir.ok()) return dst_dir.status();
  CKPTFS_RETURN_IF_ERROR(CheckName(new_name));
  CKPTFS_RETURN_IF_ERROR(CheckNotReservedLocked(new_parent, new_name));
  auto sit = (*src_dir)->children.find(name);
  if (sit == (*src_dir)->children.end()) {
    if ((parent == kRootIno && name == kControlDirName) ||
        (name == kLatestName && VirtualLatestOfLocked(parent) != 0)) {
      return NotPermittedVirtual();
    }
    return Status::Error(ENOENT, name + " does not exist");
  }
  if (new_parent == kRootIno && new_name == kControlDirName) return NotPermittedVirtual();
  Inode* src = inodes_.Find(sit->second.ino);
  if (!src) return Status::Error(EIO, "dangling entry " + name);
  if (src->is_dir()) WaitUntilNotCommittingLocked(lock, src->rec.ino);
  // Re-resolve: the waits may have released mu_.
  src_dir = inodes_.FindDir(parent);
  dst_dir = inodes_.FindDir(new_parent);
  if (!src_dir.ok() || !dst_dir.ok()) return Status::Error(ENOENT, "directory vanished");
  sit = (*src_dir)->children.find(name);
  if (sit == (*src_dir)->children.end()) return Status::Error(ENOENT, name + " does not exist");
  src = inodes_.Find(sit->second.ino);

  // Moving an entry across a committed step's boundary would change sealed
  // contents; a whole step directory may move.
  const uint64_t src_step = steps_.StepOf(inodes_, parent);
  const uint64_t dst_step = steps_.StepOf(inodes_, new_parent);
  if ((src_step != 0 && steps_.IsSealed(src_step)) || (dst_step != 0 && steps_.IsSealed(dst_step))) {
    return Status::Error(EROFS, "step is committed or being deleted; its contents are read-only");
  }
  // A directory may not move below itself.
  if (src->is_dir()) {
    for (uint64_t x = new_parent; x != 0 && x != kRootIno; x = inodes_.Find(x) ? inodes_.Find(x)->rec.parent : 0) {
      if (x == src->rec.ino) return Status::Error(EINVAL, "cannot move a directory below itself");
    }
  }
  auto dit = (*dst_dir)->children.find(new_name);
  Inode* dst = dit == (*dst_dir)->children.end() ? nullptr : inodes_.Find(dit->second.ino);
  if (dst == src) return Status::Ok();  // same inode: POSIX says do nothing

  Transaction txn = BeginLocked();
  const timespec now = clock_->Now();
  // Committed steps that move get new objects at their new keys.
  auto moved_steps = CommittedStepsUnderLocked(src);
  if (dst && (flags & RENAME_EXCHANGE)) {
    for (auto& m : CommittedStepsUnderLocked(dst)) moved_steps.push_back(std::move(m));
  }
  // Cluster mode: a committed step is the cluster's, under its name: its
  // record, the other nodes' parts and copies, and their bucket objects
  // all use it, and one node cannot move them (docs/cluster.md). EXDEV, as
  // overlayfs gives for what it cannot rename: mv then copies the step to
  // the new name (a new step, committed by this node) and removes the old
  // one for the whole cluster.
  if (cluster_ && !moved_steps.empty()) {
    return Status::Error(EXDEV, "step " + moved_steps.front().second +
                                    " is committed for the cluster and cannot be renamed; copy it instead");
  }
  bool commit_src = false;
  bool commit_dst = false;
  if (flags & RENAME_EXCHANGE) {
    if (!dst) return Status::Error(ENOENT, new_name + " does not exist");
    if (dst->is_dir()) {
      for (uint64_t x = parent; x != 0 && x != kRootIno; x = inodes_.Find(x) ? inodes_.Find(x)->rec.parent : 0) {
        if (x == dst->rec.ino) return Status::Error(EINVAL, "cannot move a directory below itself");
      }
      WaitUntilNotCommittingLocked(lock, dst->rec.ino);
    }
    // Swap the two entries in place, keeping their readdir cookies.
    DentryRecord& a = (*src_dir)->children[name];
    DentryRecord& b = (*dst_dir)->children[new_name];
    std::swap(a.ino, b.ino);
    txn.batch()->Put(KeySpace::kDentries, DentryKey(parent, name), EncodeDentry(a));
    txn.batch()->Put(KeySpace::kDentries, DentryKey(new_parent, new_name), EncodeDentry(b));
    if (parent != new_parent && src->is_dir() != dst->is_dir()) {
      if (src->is_dir()) {
        (*src_dir)->rec.nlink--;
        (*dst_dir)->rec.nlink++;
      } else {
        (*src_dir)->rec.nlink++;
        (*dst_dir)->rec.nlink--;
      }
    }
    src->rec.parent = new_parent;
    src->name = new_name;
    dst->rec.parent = parent;
    dst->name = name;
    src->rec.ctime = dst->rec.ctime = now;
    (*src_dir)->rec.mtime = (*src_dir)->rec.ctime = now;
    (*dst_dir)->rec.mtime = (*dst_dir)->rec.ctime = now;
    InodeTable::Put(*src, txn.batch());
    InodeTable::Put(*dst, txn.batch());
    InodeTable::Put(**src_dir, txn.batch());
    if (*dst_dir != *src_dir) InodeTable::Put(**dst_dir, txn.batch());
    if (src->is_dir()) ReclassifyDirLocked(src, txn.batch(), &commit_src);
    if (dst->is_dir()) ReclassifyDirLocked(dst, txn.batch(), &commit_dst);
    if (src->is_dir()) DemoteNestedStepsLocked(src, txn.batch());
    if (dst->is_dir()) DemoteNestedStepsLocked(dst, txn.batch());
  } else {
    if (dst) {
      if (flags & RENAME_NOREPLACE) return Status::Error(EEXIST, new_name + " exists");
      if (src->is_dir() && !dst->is_dir()) return Status::Error(ENOTDIR, new_name + " is not a directory");
      if (!src->is_dir() && dst->is_dir()) return Status::Error(EISDIR, new_name + " is a directory");
      if (dst->is_dir()) {
        WaitUntilNotCommittingLocked(lock, dst->rec.ino);
        CKPTFS_RETURN_IF_ERROR(inodes_.EnsureLoaded(dst));
        if (!dst->children.empty()) return Status::Error(ENOTEMPTY, new_name + " is not empty");
      }
      inodes_.RemoveChild(*dst_dir, new_name, clock_->Now(), txn.batch());
      DropLinkLocked(dst, txn.batch());
    }
    inodes_.RemoveChild(*src_dir, name, clock_->Now(), txn.batch());
    inodes_.AddChild(*dst_dir, new_name, src, clock_->Now(), txn.batch());
    src->rec.ctime = now;
    InodeTable::Put(*src, txn.batch());
    if (src->is_dir()) {
      ReclassifyDirLocked(src, txn.batch(), &commit_src);
      DemoteNestedStepsLocked(src, txn.batch());
    }
  }
  NoteStepsMovedLocked(moved_steps, txn.batch());
  NoteActivityLocked(parent);
  NoteActivityLocked(new_parent);
  // The commits the rename asks for are recorded in its own transaction.
  if (commit_src) RequestCommitLocked(src->rec.ino, CommitTrigger::kRename, txn.batch());
  if (commit_dst) RequestCommitLocked(dst->rec.ino, CommitTrigger::kRename, txn.batch());
  // A marker or run index file renamed into place triggers as its close
  // would: DCP writes .metadata.tmp and renames it to .metadata, OLMo-core
  // renames a temporary file to .metadata.json.
  if (!src->is_dir() && src->open_writers == 0) NoteTriggerFileLocked(src, 0, txn.batch());
  // A marker renamed into place before its RELEASE arrived (DCP closes
  // .metadata.tmp and renames it at once): its RELEASE triggers the commit,
  // but the manifest learns of the request now.
  if (src->is_reg() && src->open_writers > 0 && IsMarkerName(src->name)) {
    RecordClosedMarkerLocked(0, src, txn.batch());
  }
  CKPTFS_RETURN_IF_ERROR(txn.Write());
  if (dst && !(flags & RENAME_EXCHANGE)) inodes_.ForgetIfUnused(dst->rec.ino);
  return Status::Ok();
}

Result<std::vector<DirEntry>> FileSystem::Readdir(uint64_t ino, uint64_t offset, size_t max) {
  if (offset == 0) MaybeRefreshCluster();
  if (VirtualNodes* v = VirtualNodesFor(ino)) return v->Readdir(ino, offset, max);
  MutexLock lock(&mu_);
  std::vector<DirEntry> out;
  auto dir = inodes_.FindDir(ino);
  if (!dir.ok()) return dir.status();
  Inode* d = *dir;
  if (offset < 1 && out.size() < max) out.push_back(DirEntry{".", ino, S_IFDIR, 1});
  if (offset < 2 && out.size() < max) out.push_back(DirEntry{"..", d->rec.parent ? d->rec.parent : ino, S_IFDIR, 2});
  // The root lists .ckptfs unless the root itself is a run directory, whose
  // listing trainers take for their checkpoints (as for `latest` below).
  if (offset < 3 && out.size() < max && ino == kRootIno &&
      !HasRealChildLocked(d, kControlDirName) && !HoldsStepLocked(*d)) {
    out.push_back(DirEntry{kControlDirName, kControlDirIno, S_IFDIR, 3});
  }
  // Offset 3 is the root's .ckptfs; no checkpoint lives in the root itself.
  if (offset < 3 && out.size() < max && ino != kRootIno && ListsFullDirLocked(d)) {
    out.push_back(DirEntry{kFullDirName, kFullViewBit | (ino << kFullNodeBits), S_IFDIR, 3});
  }
  if (offset < 4 && out.size() < max && options_.show_latest && VirtualLatestOfLocked(ino) != 0) {
    out.push_back(DirEntry{kLatestName, kLatestBit | ino, S_IFLNK, 4});
  }
  const uint64_t after = offset < kFirstRealOffset ? 0 : offset - kFirstRealOffset;
  for (auto it = d->by_cookie.upper_bound(after); it != d->by_cookie.end() && out.size() < max; ++it) {
    const DentryRecord& dent = d->children.at(it->second);
    Inode* child = inodes_.Find(dent.ino);
    out.push_back(DirEntry{it->second, dent.ino, child ? (child->rec.mode & S_IFMT) : 0u,
                           it->first + kFirstRealOffset});
  }
  return out;
}

Result<std::vector<DirEntry>> FileSystem::ReaddirPlus(uint64_t ino, uint64_t offset, size_t budget,
                                                      const DirEntrySizeFn& size_of) {
  // Every entry takes at least 32 bytes of the budget (as in Readdir's
  // caller); the attributes make it more, and the loop below stops there.
  auto listed = Readdir(ino, offset, budget / 32 + 1);
  if (!listed.ok()) return listed;
  std::vector<DirEntry> out;
  out.reserve(listed->size());
  size_t used = 0;
  MutexLock lock(&mu_);
  for (DirEntry& d : *listed) {
    const size_t need = size_of(d.name);
    if (need > budget - used) break;
    used += need;
    d.plus = Entry{};
    d.plus->attr.st_ino = d.ino;
    d.plus->attr.st_mode = d.mode;
    // Real entries only: "." and ".." are the kernel's, and virtual nodes
    // (latest, .ckptfs, .full) are looked up when used, as their contents
    // follow the steps. An entry gone since Readdir (mu_ was released)
    // stays a plain name.
    Inode* child =
        d.name == "." || d.name == ".." || !IsRealIno(d.ino) ? nullptr : inodes_.Find(d.ino);
    if (child && child->rec.nlink > 0) d.plus = MakeEntry(child);
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace ckptfs
