// Kernel FUSE passthrough (Linux 6.9+): an open of a regular file whose data
// is resident gets the id of its backing file, and the kernel then reads,
// writes and maps that file itself; the daemon sees only the open, getattr,
// flush, fsync and release. What the daemon no longer sees, it learns from
// the backing file: sizes and mtimes come from fstat at those requests
// (and at every getattr and step listing while a passthrough writer is
// open), and the CRC32C is computed from the file at upload as before.
//
// The kernel's bookkeeping (backing ids, passthrough writers, why opens went
// through the daemon) is the PassthroughBook's (passthrough_book.h); this
// file decides which opens may pass and learns what the kernel wrote.
#include <ctime>
#include <string>
#include <utility>

#include "common/time_convert.h"
#include "namespace/backing_registry.h"
#include "namespace/file_handle.h"
#include "namespace/filesystem.h"

namespace ckptfs {

void FileSystem::SetPassthrough(BackingRegistry* registry, PassthroughSetting setting) {
  MutexLock lock(&mu_);
  passthrough_.Configure(registry, std::move(setting));
}

void FileSystem::SetFuseStatus(FuseStatusFn fn) {
  MutexLock lock(&mu_);
  fuse_status_ = std::move(fn);
}

const char* FileSystemCore::DaemonOnlyReasonLocked(const Inode& inode, const FileHandle& fh,
                                                   bool resident) {
  // Data still in the remote is fetched by the daemon's reads; the file
  // switches to passthrough at an open once it is resident.
  if (!resident) return "not_resident";
  // Opens already served by the daemon: the kernel refuses a mix.
  if (inode.open_handles > inode.passthrough_opens) return "daemon_open";
  if (!fh.writable) return nullptr;
  // The kernel's passthrough writes never tell the daemon to drop setuid
  // and setgid bits (FUSE_HANDLE_KILLPRIV_V2 leaves that to the daemon, which
  // it does on the writes it sees): such a file is written through it.
  if (ModeWithoutSetId(inode.rec.mode) != inode.rec.mode) return "setid_bits";
  // With --cache-size, a write waits for eviction to make room; a write
  // the daemon does not see cannot.
  if (tier_ && tier_->LimitsCacheSize()) return "cache_limit";
  // Within the manifest's reserve, the daemon path refuses each write with
  // ENOSPC; the kernel would write on until the disk is full.
  if (!reserve_->AdmitFresh().ok()) return "metadata_reserve";
  return nullptr;
}

int32_t FileSystemCore::PassthroughOpenLocked(Inode* inode, FileHandle* fh, bool resident) {
  if (!passthrough_.active() || !fh->file || fh->file->fd() < 0) return -1;
  if (const char* why = DaemonOnlyReasonLocked(*inode, *fh, resident)) {
    passthrough_.ServeInDaemon(why);
    return -1;
  }
  return passthrough_.Open(inode, fh, data_.get());
}

bool FileSystemCore::SyncFromBackingLocked(Inode* inode) {
  if (!inode->passthrough_backing) return false;
  auto now = inode->passthrough_backing->Stat();
  if (!now.ok() || *now == inode->backing_seen) return false;
  inode->backing_seen = *now;
  if (now->size == inode->rec.size && now->mtime_ns == TimespecToNanos(inode->rec.mtime)) return false;
  // Written (or truncated, or mapped and stored to) by the kernel on the
  // caller's behalf: the backing file says when.
  inode->rec.size = now->size;
  inode->rec.mtime = NanosToTimespec(now->mtime_ns);
  inode->rec.ctime = inode->rec.mtime;
  inode->dirty = true;
  NoteActivityLocked(inode->rec.ino);
  return true;
}

void FileSystemCore::NoteBackingRecordedLocked(Inode* inode) {
  if (!inode->passthrough_backing) return;
  if (auto now = inode->passthrough_backing->Stat(); now.ok()) inode->backing_seen = *now;
}

void FileSystemCore::SyncPassthroughWritersLocked() {
  for (uint64_t ino : passthrough_.writing()) {
    if (Inode* inode = inodes_.Find(ino)) SyncFromBackingLocked(inode);
  }
}

}  // namespace ckptfs
