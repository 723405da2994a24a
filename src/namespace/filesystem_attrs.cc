// Attributes, extended attributes and statfs.
#include <sys/xattr.h>

#include "namespace/control_xattrs.h"
#include "namespace/file_handle.h"
#include "namespace/filesystem.h"

#include <nlohmann/json.hpp>

namespace ckptfs {

namespace {
constexpr const char* kUserPrefix = "user.";
constexpr const char* kCommitXattr = "user.ckptfs.commit";
constexpr size_t kMaxXattrsPerInode = 1024;
// Read-only, computed on demand, not listed: the retention plan of a run
// directory as JSON lines (what `ckptfs retention --dry-run` prints).
constexpr const char* kPlanXattr = "user.ckptfs.retention_plan";

bool SameTime(const timespec& a, const timespec& b) { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; }

// A request that sets atime or mtime to something else than they are (a
// second `rsync -a` or `cp -a` setting the same times changes nothing).
bool ChangesTimes(const InodeRecord& rec, const SetAttrRequest& req) {
  if (req.atime_now || req.mtime_now) return true;
  return (req.atime && !SameTime(*req.atime, rec.atime)) || (req.mtime && !SameTime(*req.mtime, rec.mtime));
}

bool IsStepXattrName(const std::string& name) {
  static const char* kNames[] = {"user.ckptfs.state", "user.ckptfs.step", "user.ckptfs.bytes",
                                 "user.ckptfs.files", "user.ckptfs.committed_at",
                                 "user.ckptfs.persisted", "user.ckptfs.error"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}
}  // namespace

Result<Attr> FileSystem::GetAttr(uint64_t ino) {
  if (VirtualNodes* v = VirtualNodesFor(ino)) return v->GetAttr(ino);
  MutexLock lock(&mu_);
  Inode* inode = inodes_.Find(ino);
  if (!inode) return Status::Error(ENOENT, "no such inode");
  // stat, SEEK_END and mmap of a file the kernel writes through
  // passthrough need the backing file's size.
  if (inode->passthrough_writers > 0) SyncFromBackingLocked(inode);
  return Attr{StatOf(*inode), options_.attr_timeout};
}

Result<Attr> FileSystem::SetAttr(uint64_t ino, const SetAttrRequest& req, FileHandle* fh) {
  // A run's virtual `latest` link has no metadata of its own (it shows its
  // run directory's owner): chown -h, touch -h and chown -R/chmod -R of the
  // run succeed on it and change nothing, as Linux ignores a symlink's mode.
  if (KindOf(ino) == NodeKind::kLatestLink && !req.size) return VirtualNodesFor(ino)->GetAttr(ino);
  if (!IsRealIno(ino)) return NotPermittedVirtual();
  MutexLock lock(&mu_);
  if (req.size) WaitUntilNotCommittingLocked(lock, ino);
  if (req.size) CKPTFS_RETURN_IF_ERROR(MakeLocalForWriteLocked(lock, ino));  // remote-only run-level files
  CKPTFS_RETURN_IF_ERROR(CheckHealthyLocked());
  Inode* inode = inodes_.Find(ino);
  if (!inode) return Status::Error(ENOENT, "no such inode");
  const timespec now = clock_->Now();
  if (inode->rec.sealed && ChangesTimes(inode->rec, req)) {
    // A committed file's times describe its contents, which are frozen
    // (SPEC section 3); its owner and mode are access control and may change.
    return Status::Error(EROFS, "file belongs to a committed step: its contents and times are read-only");
  }
  if (req.size) {
    if (inode->is_dir()) return Status::Error(EISDIR, "is a directory");
    if (!inode->is_reg()) return Status::Error(EINVAL, "not a regular file");
    if (inode->rec.sealed) return Status::Error(EROFS, "file belongs to a committed step and is read-only");
    // Growing a file allocates nothing on disk (the extension is a hole):
    // the cache filesystem answers, with success or its own EFBIG. The data
    // written into the hole later is admitted by those writes.
    CKPTFS_RETURN_IF_ERROR(data_->Unseal(ino, /*keep_contents=*/*req.size > 0));
    std::unique_ptr<BackingFile> own;
    BackingFile* file = fh && fh->file ? fh->file.get() : nullptr;
    if (!file) {
      auto opened = data_->Open(ino, /*create=*/true);
      if (!opened.ok()) return opened.status();
      own = std::move(opened).value();
      file = own.get();
    }
    CKPTFS_RETURN_IF_ERROR(file->Truncate(*req.size));
    inode->rec.size = *req.size;
    inode->rec.mtime = now;
    NoteActivityLocked(ino);
  }
  if (req.mode) inode->rec.mode = (inode->rec.mode & S_IFMT) | (*req.mode & 07777);
  if (req.uid) inode->rec.uid = *req.uid;
  if (req.gid) inode->rec.gid = *req.gid;
  if (req.kill_suidgid && inode->is_reg()) inode->rec.mode = ModeWithoutSetId(inode->rec.mode);
  if (req.atime_now) inode->rec.atime = now;
  else if (req.atime) inode->rec.atime = *req.atime;
  if (req.mtime_now) inode->rec.mtime = now;
  else if (req.mtime) inode->rec.mtime = *req.mtime;
  inode->rec.ctime = now;
  Transaction txn = BeginLocked();
  InodeTable::Put(*inode, txn.batch());
  inode->dirty = false;
  CKPTFS_RETURN_IF_ERROR(txn.Write());
  return Attr{StatOf(*inode), options_.attr_timeout};
}

void FileSystem::DropSetIdBits(FileHandle* fh) {
  MutexLock lock(&mu_);
  Inode* inode = inodes_.Find(fh->ino);
  if (!inode || !inode->is_reg() || ModeWithoutSetId(inode->rec.mode) == inode->rec.mode) return;
  inode->rec.mode = ModeWithoutSetId(inode->rec.mode);  // O_TRUNC: no write to ride with
  inode->rec.ctime = clock_->Now();
  Transaction txn = BeginLocked();
  InodeTable::Put(*inode, txn.batch());
  inode->dirty = false;
  (void)txn.Write();  // a failed write is kept and reported by the journal
}

Result<std::string> FileSystem::GetXattr(uint64_t ino, const std::string& name) {
  metrics_.getxattr_requests++;
  if (VirtualNodes* v = VirtualNodesFor(ino)) return v->GetXattr(ino, name);
  // A step's state may have changed on another node.
  if (name.rfind("user.ckptfs.", 0) == 0) MaybeRefreshCluster();
  MutexLock lock(&mu_);
  if (!inodes_.Find(ino)) return Status::Error(ENOENT, "no such inode");
  if (auto v = StepXattrLocked(ino, name)) return *v;
  Inode* inode = inodes_.Find(ino);
  if (auto v = FastPathXattrLocked(*inode, name)) return *v;
  if (name == kPlanXattr && inode->is_dir()) {
    std::string out;
    for (const StepDecision& d : PlanLocked(inode)) {
      auto step = steps_.find(d.id);
      nlohmann::json line = {{"step", d.step},
                             {"name", inodes_.Find(d.id) ? inodes_.Find(d.id)->name : ""},
                             {"state", step != steps_.end() ? StepStateName(step->second.state) : ""},
                             {"keep", d.keep},
                             {"reason", d.reason}};
      out += line.dump() + "\n";
    }
    return out;
  }
  auto it = inode->xattrs.find(name);
  // ENODATA, never ENOTSUP: the kernel would stop asking for any xattr.
  if (it == inode->xattrs.end()) return Status::Error(ENODATA, "no such attribute");
  return it->second;
}

Result<std::vector<std::string>> FileSystem::ListXattr(uint64_t ino) {
  if (VirtualNodes* v = VirtualNodesFor(ino)) return v->ListXattr(ino);
  MutexLock lock(&mu_);
  Inode* inode = inodes_.Find(ino);
  if (!inode) return Status::Error(ENOENT, "no such inode");
  std::vector<std::string> names;
  if (steps_.count(ino)) {
    for (const char* n : {"user.ckptfs.state", "user.ckptfs.step", "user.ckptfs.bytes",
                          "user.ckptfs.files", "user.ckptfs.committed_at", "user.ckptfs.error"}) {
      if (StepXattrLocked(ino, n)) names.push_back(n);
    }
    if (options_.remote) names.push_back("user.ckptfs.persisted");
  }
  FastPathXattrNamesLocked(*inode, &names);
  for (const auto& [name, value] : inode->xattrs) names.push_back(name);
  return names;
}

Status FileSystem::SetXattr(uint64_t ino, const std::string& name, const std::string& value,
                            int flags) {
  if (name.rfind(kUserPrefix, 0) != 0) {
    return Status::Error(ENOTSUP, "only user.* extended attributes are supported");
  }
  if (name == kCommitXattr) {
    if (value != "1") return Status::Error(EINVAL, "user.ckptfs.commit takes the value 1");
    return CommitAndWait(ino);
  }
  MutexLock lock(&mu_);
  if (!IsRealIno(ino)) return NotPermittedVirtual();
  CKPTFS_RETURN_IF_ERROR(CheckHealthyLocked());
  Inode* inode = inodes_.Find(ino);
  if (!inode) return Status::Error(ENOENT, "no such inode");
  if (IsStepXattrName(name) || name == kPlanXattr) return Status::Error(EPERM, name + " is maintained by ckptfs");
  if (inode->rec.sealed) {
    return Status::Error(EROFS, "file belongs to a committed step: its contents and xattrs are read-only");
  }
  if (Status st = CheckControlXattrName(name, {inode->is_dir(), steps_.count(ino) != 0}); !st.ok()) {
    // setfattr only prints strerror: the reason goes to the events and log.
    events_->Append({{"event", "error"}, {"path", inodes_.PathOf(ino)}, {"error", st.message()}});
    return st;
  }
  if (name == kLatestLinkXattr && (!inode->is_dir() || (value != "on" && value != "off"))) {
    return Status::Error(EINVAL, std::string(kLatestLinkXattr) + " takes on or off, on a run directory");
  }
  CKPTFS_RETURN_IF_ERROR(ValidateXattrLocked(inode, name, value));
  const bool exists = inode->xattrs.count(name) != 0;
  if ((flags & XATTR_CREATE) && exists) return Status::Error(EEXIST, name + " exists");
  if ((flags & XATTR_REPLACE) && !exists) return Status::Error(ENODATA, name + " does not exist");
  if (!exists && inode->xattrs.size() >= kMaxXattrsPerInode) {
    return Status::Error(ENOSPC, "too many extended attributes");
  }
  inode->xattrs[name] = value;
  inode->rec.ctime = clock_->Now();
  Transaction txn = BeginLocked();
  txn.batch()->Put(KeySpace::kXattrs, XattrKey(ino, name), value);
  InodeTable::Put(*inode, txn.batch());
  return txn.Write();
}

Status FileSystem::RemoveXattr(uint64_t ino, const std::string& name) {
  MutexLock lock(&mu_);
  if (!IsRealIno(ino)) return NotPermittedVirtual();
  CKPTFS_RETURN_IF_ERROR(CheckHealthyLocked());
  Inode* inode = inodes_.Find(ino);
  if (!inode) return Status::Error(ENOENT, "no such inode");
  if (IsStepXattrName(name)) return Status::Error(EPERM, name + " is maintained by ckptfs");
  if (inode->rec.sealed) {
    return Status::Error(EROFS, "file belongs to a committed step: its contents and xattrs are read-only");
  }
  if (!inode->xattrs.erase(name)) return Status::Error(ENODATA, name + " does not exist");
  inode->rec.ctime = clock_->Now();
  Transaction txn = BeginLocked();
  txn.batch()->Delete(KeySpace::kXattrs, XattrKey(ino, name));
  InodeTable::Put(*inode, txn.batch());
  return txn.Write();
}

Result<struct statvfs> FileSystem::StatFs() {
  auto space = data_->Capacity();
  if (!space.ok()) return space.status();
  struct statvfs st {};
  st.f_bsize = space->block_size;
  st.f_frsize = space->block_size;
  st.f_blocks = space->blocks;
  st.f_bfree = space->blocks_free;
  st.f_bavail = space->blocks_avail;
  MutexLock lock(&mu_);
  st.f_files = inodes_.size() + (1ULL << 32);
  st.f_ffree = 1ULL << 32;
  st.f_favail = st.f_ffree;
  st.f_namemax = 255;
  return st;
}

}  // namespace ckptfs
