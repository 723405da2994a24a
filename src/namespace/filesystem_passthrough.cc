// Kernel FUSE passthrough (Linux 6.9+): an open of a regular file whose data
// is resident gets the id of its backing file, and the kernel then reads,
// writes and maps that file itself; the daemon sees only the open, getattr,
// flush, fsync and release. What the daemon no longer sees, it learns from
// the backing file: sizes and mtimes come from fstat at those requests
// (and at every getattr and step listing while a passthrough writer is
// open), and the CRC32C is computed from the file at upload as before.
//
// The kernel's rules shape the bookkeeping: one backing id per inode, shared
// by every concurrent open; an inode is opened either all through
// passthrough or all through the daemon (a mix fails with EIO); the id is
// closed at the inode's last RELEASE, never earlier.
#include <cstdio>
#include <ctime>
#include <string>

#include "common/time_convert.h"
#include "namespace/backing_registry.h"
#include "namespace/file_handle.h"
#include "namespace/filesystem.h"

namespace ckptfs {

void FileSystem::SetPassthrough(BackingRegistry* registry, PassthroughSetting setting) {
  MutexLock lock(&mu_);
  backing_registry_ = setting.active ? registry : nullptr;
  passthrough_ = std::move(setting);
}

int32_t FileSystem::PassthroughOpenLocked(Inode* inode, FileHandle* fh, bool resident) {
  if (!backing_registry_ || !fh->file || fh->file->fd() < 0) return -1;
  auto fallback = [&](const char* why) REQUIRES(mu_) {
    passthrough_fallbacks_[why]++;
    return -1;
  };
  // Data still in the remote is fetched by the daemon's reads; the file
  // switches to passthrough at an open once it is resident.
  if (!resident) return fallback("not_resident");
  // Opens already served by the daemon: the kernel refuses a mix.
  if (inode->open_handles > inode->passthrough_opens) return fallback("daemon_open");
  // The kernel's passthrough writes never tell the daemon to drop setuid
  // and setgid bits (FUSE_HANDLE_KILLPRIV_V2 leaves that to the daemon, which
  // it does on the writes it sees): such a file is written through it.
  if (fh->writable && ModeWithoutSetId(inode->rec.mode) != inode->rec.mode) return fallback("setid_bits");
  // With --cache-size, a write waits for eviction to make room; a write
  // the daemon does not see cannot.
  if (fh->writable && tier_ && tier_->LimitsCacheSize()) return fallback("cache_limit");
  // Within the manifest's reserve, the daemon path refuses each write with
  // ENOSPC; the kernel would write on until the disk is full.
  if (fh->writable && !reserve_->AdmitFresh().ok()) return fallback("metadata_reserve");
  if (inode->backing_id < 0) {
    // The kernel keeps a reference to the file registered: one of the
    // inode's own, opened read-write where it may be written, so that any
    // later open of the inode can share it.
    auto backing = data_->Open(inode->rec.ino, /*create=*/false);
    if (!backing.ok()) return fallback("backing_open_failed");
    auto seen = (*backing)->Stat();
    if (!seen.ok()) return fallback("backing_open_failed");
    auto id = backing_registry_->Register((*backing)->fd());
    if (!id.ok()) {
      if (passthrough_register_errors_++ == 0) {
        std::fprintf(stderr, "ckptfs: passthrough: registering a backing file failed: %s; "
                             "such opens go through the daemon\n", id.status().ToString().c_str());
      }
      return fallback("register_failed");
    }
    inode->backing_id = *id;
    passthrough_files_open_++;
    inode->passthrough_backing = std::move(backing).value();
    inode->backing_seen = *seen;
  } else if (fh->writable) {
    // A rewrite of a file a writer-library client sealed gets a new backing
    // inode (DataStore::Unseal); the registered one must be that file.
    auto mine = fh->file->Stat();
    auto registered = inode->passthrough_backing->Stat();
    if (!mine.ok() || !registered.ok() || mine->inode != registered->inode) return fallback("backing_replaced");
  }
  inode->passthrough_opens++;
  if (fh->writable) {
    inode->passthrough_writers++;
    passthrough_writing_.insert(inode->rec.ino);
  }
  fh->passthrough = true;
  metrics_.passthrough_opens++;
  return inode->backing_id;
}

bool FileSystem::SyncFromBackingLocked(Inode* inode) {
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

void FileSystem::NoteBackingRecordedLocked(Inode* inode) {
  if (!inode->passthrough_backing) return;
  if (auto now = inode->passthrough_backing->Stat(); now.ok()) inode->backing_seen = *now;
}

void FileSystem::SyncPassthroughWritersLocked() {
  for (uint64_t ino : passthrough_writing_) {
    if (Inode* inode = inodes_.Find(ino)) SyncFromBackingLocked(inode);
  }
}

void FileSystem::PassthroughReleaseLocked(Inode* inode, FileHandle* fh) {
  if (!fh->passthrough) return;
  if (inode->passthrough_opens > 0) inode->passthrough_opens--;
  if (fh->writable && inode->passthrough_writers > 0) inode->passthrough_writers--;
  if (inode->passthrough_writers == 0) passthrough_writing_.erase(inode->rec.ino);
  if (inode->passthrough_opens > 0) return;
  // The inode's last passthrough open is gone: the kernel has let go of
  // the file, and a later open registers it again.
  if (backing_registry_ && inode->backing_id >= 0) {
    backing_registry_->Unregister(inode->backing_id);
    passthrough_files_open_--;
  }
  inode->backing_id = -1;
  inode->passthrough_backing.reset();
}

nlohmann::json FileSystem::PassthroughStatusLocked() {
  nlohmann::json fallbacks = nlohmann::json::object();
  for (const auto& [why, n] : passthrough_fallbacks_) fallbacks[why] = n;
  return {{"mode", passthrough_.mode},
          {"active", passthrough_.active},
          {"reason", passthrough_.reason},
          {"opens", metrics_.passthrough_opens.load()},
          {"files_open", passthrough_files_open_},
          {"handles_killpriv", passthrough_.handles_killpriv},
          {"daemon_opens", fallbacks}};
}

}  // namespace ckptfs
