// File I/O: open, create, read, write, flush, fsync, release. Data moves
// between the caller and the backing file without mu_; sizes and mtimes are
// kept in memory and reach the manifest at flush, fsync, release and commit,
// never with a manifest write per write() call.
#include <fcntl.h>

#include <algorithm>
#include <cstring>
#include <system_error>

#include "namespace/file_handle.h"
#include "namespace/filesystem.h"

namespace ckptfs {

namespace {
bool WantsWrite(int flags) { return (flags & O_ACCMODE) != O_RDONLY; }
}  // namespace

Result<FileSystem::Opened> FileSystem::OpenFile(uint64_t ino, int flags, uint32_t pid, const Caller* who,
                                                OpenFor for_whom) {
  if (VirtualNodes* v = VirtualNodesFor(ino)) return v->Open(ino, flags, who);
  MutexLock lock(&mu_);
  // libfuse negotiates atomic O_TRUNC: the kernel sends O_TRUNC with the open
  // instead of a separate truncate, and Linux truncates even O_RDONLY opens.
  const bool truncate = (flags & O_TRUNC) != 0;
  const bool write = WantsWrite(flags) || truncate;
  if (write) WaitUntilNotCommittingLocked(lock, ino);
  if (write) CKPTFS_RETURN_IF_ERROR(MakeLocalForWriteLocked(lock, ino));  // remote-only run-level files
  Inode* inode = inodes_.Find(ino);
  while (inode && inode->evicting) {
    lock.Wait(step_cv_);
    inode = inodes_.Find(ino);
  }
  if (!inode) return Status::Error(ENOENT, "no such inode");
  if (inode->is_dir()) return Status::Error(EISDIR, "is a directory");
  if (!inode->is_reg()) return Status::Error(EINVAL, "not a regular file");
  if (write) {
    CKPTFS_RETURN_IF_ERROR(CheckHealthyLocked());
    if (inode->rec.sealed) {
      return Status::Error(EROFS, "file belongs to a committed step and is read-only");
    }
    Transaction txn = BeginLocked();
    ForgetPendingCommitLocked(inode->rec.parent, txn.batch());
    CKPTFS_RETURN_IF_ERROR(txn.Write());
  }
  // A backing file lost in a crash before it was synced reads as empty.
  // Data only in the remote is fetched into a (sparse) backing file.
  const bool remote_only = inode->object && !inode->object->resident;
  // A file a fast-path writer closed is sealed against its descriptor; the
  // daemon's own rewrite gets a fresh backing file (the old one's bytes are
  // kept unless this open truncates).
  if (write) CKPTFS_RETURN_IF_ERROR(data_->Unseal(ino, /*keep_contents=*/!truncate));
  auto file = data_->Open(ino, /*create=*/!inode->rec.sealed || remote_only);
  if (!file.ok()) return file.status().Annotate("opening backing file");
  if (truncate && inode->rec.size > 0) {
    CKPTFS_RETURN_IF_ERROR((*file)->Truncate(0));
    inode->rec.size = 0;
    inode->rec.mtime = inode->rec.ctime = clock_->Now();
    inode->dirty = true;
  }
  auto fh = std::make_unique<FileHandle>();
  fh->ino = ino;
  fh->writable = WantsWrite(flags);
  fh->pid = pid;
  fh->file = std::move(file).value();
  if (remote_only) {
    fh->remote_key = inode->object->key;
    fh->remote_size = inode->rec.size;
  }
  const int32_t backing_id = for_whom == OpenFor::kKernel ? PassthroughOpenLocked(inode, fh.get(), !remote_only) : -1;
  inode->open_handles++;
  inode->last_access_ns = clock_->MonotonicNanos();
  if (fh->writable) {
    inode->open_writers++;
    inode->unflushed_writers++;
    fh->saving_step = steps_.StepOf(inodes_, ino);
    fh->saving = fh->saving_step != 0;
    if (fh->saving) {
      open_writers_total_++;
      last_save_activity_ns_ = clock_->MonotonicNanos();
    }
    NoteActivityLocked(ino);
  }
  const std::string publish = fh->writable ? FirstWriterPublicationLocked(ino) : "";
  // The kernel refuses keep_cache next to a backing id (the page cache is
  // the backing file's then).
  const Opened opened{fh.release(), inode->rec.sealed && backing_id < 0, false, backing_id};
  lock.Unlock();
  CKPTFS_RETURN_IF_ERROR(PublishOpenedWriter(publish, opened.fh));
  return opened;
}

Result<std::pair<Entry, FileSystem::Opened>> FileSystem::Create(const Caller& c, uint64_t parent,
                                                                const std::string& name,
                                                                uint32_t mode, int flags, OpenFor for_whom) {
  MutexLock lock(&mu_);
  auto dir = PrepareNewEntryLocked(lock, parent, name);
  if (!dir.ok()) return dir.status();
  // A new file is new data: refused within the manifest's reserve, as its
  // writes would be (directories and xattrs are not: they are metadata).
  CKPTFS_RETURN_IF_ERROR(reserve_->Admit(0));
  Transaction txn = BeginLocked();
  std::unique_ptr<BackingFile> file;
  auto inode = NewInodeLocked(c, parent, name, S_IFREG | (mode & 07777), txn.batch(), &file);
  if (!inode.ok()) return inode.status().Annotate("creating backing file");
  inodes_.AddChild(*dir, name, *inode, clock_->Now(), txn.batch());
  NoteActivityLocked(parent);
  ForgetPendingCommitLocked(parent, txn.batch());
  CKPTFS_RETURN_IF_ERROR(txn.Write());
  auto fh = std::make_unique<FileHandle>();
  fh->ino = (*inode)->rec.ino;
  fh->writable = WantsWrite(flags);
  fh->pid = c.pid;
  fh->file = std::move(file);
  const int32_t backing_id = for_whom == OpenFor::kKernel ? PassthroughOpenLocked(*inode, fh.get(), /*resident=*/true) : -1;
  (*inode)->open_handles++;
  if (fh->writable) {
    (*inode)->open_writers++;
    (*inode)->unflushed_writers++;
    fh->saving_step = steps_.StepOf(inodes_, parent);
    fh->saving = fh->saving_step != 0;
    if (fh->saving) {
      open_writers_total_++;
      last_save_activity_ns_ = clock_->MonotonicNanos();
    }
  }
  const std::string publish = fh->writable ? FirstWriterPublicationLocked(fh->ino) : "";
  Entry e = MakeEntry(*inode);
  const Opened opened{fh.release(), false, false, backing_id};
  lock.Unlock();
  if (Status st = PublishOpenedWriter(publish, opened.fh); !st.ok()) {
    Forget(e.ino, 1);  // the kernel never learns of the entry
    return st;
  }
  return std::make_pair(e, opened);
}

Status FileSystem::PublishOpenedWriter(const std::string& publish, FileHandle* fh) {
  if (publish.empty()) return Status::Ok();
  Status st = PublishPartOf(publish, /*watch=*/false);
  if (!st.ok()) (void)Release(fh);
  return st;
}

Result<size_t> FileSystem::Read(FileHandle* fh, void* buf, size_t n, uint64_t offset) {
  if (fh->view) {
    metrics_.fuse_bytes_read += n;
    return ReadFull(fh, buf, n, offset);
  }
  if (!fh->file) {
    if (offset >= fh->content.size()) return size_t{0};
    const size_t len = std::min<size_t>(n, fh->content.size() - offset);
    std::memcpy(buf, fh->content.data() + offset, len);
    return len;
  }
  CKPTFS_RETURN_IF_ERROR(PrepareRead(fh, offset, n));
  return ReadBacking(fh, buf, n, offset);
}

Result<size_t> FileSystem::ReadBacking(FileHandle* fh, void* buf, size_t n, uint64_t offset) {
  if (!fh->remote_key.empty() && offset < fh->remote_size) {
    n = static_cast<size_t>(std::min<uint64_t>(n, fh->remote_size - offset));
  }
  return fh->file->PRead(buf, n, offset);
}

Status FileSystem::PrepareRead(FileHandle* fh, uint64_t offset, size_t n) {
  metrics_.fuse_bytes_read += n;
  return EnsureReadable(fh, offset, n);
}

Status FileSystem::EnsureReadable(FileHandle* fh, uint64_t offset, size_t n) {
  if (fh->remote_key.empty() || !tier_ || offset >= fh->remote_size) return Status::Ok();
  // Another node's file: its owner uploads it; wait for that (and its CRCs).
  CKPTFS_RETURN_IF_ERROR(AwaitOwnerUpload(fh));
  const size_t len = static_cast<size_t>(std::min<uint64_t>(n, fh->remote_size - offset));
  return tier_->EnsureLocal(fh->ino, fh->remote_key, fh->remote_size, fh->file.get(), offset, len);
}

Result<size_t> FileSystem::Write(FileHandle* fh, const void* buf, size_t n, uint64_t offset, bool kill_suidgid) {
  if (!fh->writable || !fh->file) return Status::Error(EBADF, "not open for writing");
  CKPTFS_RETURN_IF_ERROR(PrepareWrite(fh, n));
  auto written = fh->file->PWrite(buf, n, offset);
  if (!written.ok()) return written.status();
  NoteWritten(fh, offset, *written, kill_suidgid);
  return written;
}

Status FileSystem::PrepareWrite(FileHandle* /*fh*/, size_t n) {
  // The manifest's headroom first: eviction cannot help a disk that other
  // programs filled, and the trainer should hear ENOSPC at once.
  CKPTFS_RETURN_IF_ERROR(reserve_->Admit(n));
  return tier_ ? tier_->WaitForCacheSpace(n) : Status::Ok();
}

int FileSystem::BackingFd(FileHandle* fh) const { return fh->file ? fh->file->fd() : -1; }

void FileSystem::NoteWritten(FileHandle* fh, uint64_t offset, size_t n, bool kill_suidgid) {
  metrics_.fuse_bytes_written += n;
  MutexLock lock(&mu_);
  Inode* inode = inodes_.Find(fh->ino);
  if (!inode) return;
  inode->rec.size = std::max<uint64_t>(inode->rec.size, offset + n);
  inode->rec.mtime = inode->rec.ctime = clock_->Now();
  if (kill_suidgid && inode->is_reg()) inode->rec.mode = ModeWithoutSetId(inode->rec.mode);
  inode->dirty = true;
  NoteActivityLocked(fh->ino);
  if (fh->flushed) {
    // Written after a close() (through a dup of the descriptor): the file
    // is being written again, and recovery must not finish a commit of it.
    fh->flushed = false;
    inode->unflushed_writers++;
    Transaction txn = BeginLocked();
    ForgetPendingCommitLocked(inode->rec.parent, txn.batch());
    if (!txn.empty()) (void)txn.Write();
  }
}

Status FileSystem::Flush(FileHandle* fh) {
  std::string publish;
  bool start_writeback = false;
  {
    MutexLock lock(&mu_);
    Inode* inode = inodes_.Find(fh->ino);
    if (!inode || inode->rec.nlink == 0) return Status::Ok();
    // close(): what the kernel wrote through passthrough is in the record
    // before close() returns (a commit may follow at once).
    if (fh->passthrough) SyncFromBackingLocked(inode);
    Transaction txn = BeginLocked();
    if (inode->dirty) {
      InodeTable::Put(*inode, txn.batch());
      inode->dirty = false;
    }
    if (fh->writable && !fh->flushed) {
      fh->flushed = true;
      start_writeback = fh->file != nullptr && inode->rec.size >= kEarlyWritebackMinBytes &&
                        inode->rec.size <= kEarlyWritebackMaxBytes;
      if (inode->unflushed_writers > 0) inode->unflushed_writers--;
      if (IsMarkerName(inode->name)) RecordClosedMarkerLocked(fh->pid, inode, txn.batch());
    }
    CKPTFS_RETURN_IF_ERROR(txn.Write());
    if (fh->writable) publish = ClusterStepOfLocked(fh->ino);
  }
  // The commit that follows syncs this file: a small file's writeback
  // starts now, while the trainer goes on (kEarlyWritebackMaxBytes,
  // data/writeback_starter.h).
  if (start_writeback) data_->StartWriteback(fh->ino);
  // Cluster mode: close() never waits for the bucket. The part there still
  // counts the file open (its first open put it so) until the book's thread
  // puts it again, so no node commits the step without it meanwhile.
  if (cluster_ && !publish.empty()) {
    cluster_->PublishLater(publish);
    cluster_->WatchForCommit(publish);
  }
  return Status::Ok();
}

void FileSystemCore::RecordClosedMarkerLocked(uint32_t pid, Inode* marker, ManifestBatch* batch) {
  // close() returns to the trainer once FLUSH is answered; RELEASE, which
  // asks for the commit, follows asynchronously (and a rename of the marker
  // into place may come before it). The manifest learns of the commit
  // request here, so that a daemon killed before the RELEASE still finishes
  // the commit at restart; the RELEASE asks for the same commit.
  const uint64_t step = steps_.StepOf(inodes_, marker->rec.parent);
  auto it = steps_.find(step);
  if (it == steps_.end() || it->second.state != StepState::kWriting) return;
  Inode* dir = inodes_.Find(step);
  if (!dir || UnflushedWritersUnderLocked(dir) > 0) return;
  StepRecord& rec = it->second;
  uint8_t bits = rec.pending_commit | kPendingCommit;
  if (step == marker->rec.parent) bits |= kPendingCommitDirect;
  if (bits == rec.pending_commit) return;
  rec.pending_commit = bits;
  if (pid != 0 && rec.session == 0) rec.session = SessionOfLocked(pid);
  StepBook::Put(step, rec, batch);
}

Status FileSystem::Fsync(FileHandle* fh, bool /*datasync*/) {
  if (!fh->file) return Status::Ok();
  // Cluster mode publishes nothing here: the part already counts the file
  // open, and its close puts the part again (PublishLater).
  return SyncFileAndRecord(fh);
}

Status FileSystem::SyncFileAndRecord(FileHandle* fh) {
  CKPTFS_RETURN_IF_ERROR(fh->file->Sync());
  bool sync_dir = false;
  {
    MutexLock lock(&mu_);
    Inode* inode = inodes_.Find(fh->ino);
    sync_dir = inode && inode->backing_unsynced;
  }
  // A new file's backing directory entry must be durable too.
  if (sync_dir) CKPTFS_RETURN_IF_ERROR(data_->SyncDir());
  MutexLock lock(&mu_);
  Inode* inode = inodes_.Find(fh->ino);
  if (!inode) return Status::Ok();
  if (sync_dir) inode->backing_unsynced = false;
  if (fh->passthrough) SyncFromBackingLocked(inode);
  Transaction txn = BeginLocked();
  if (inode->rec.nlink > 0) InodeTable::Put(*inode, txn.batch());
  inode->dirty = false;
  return txn.WriteSynced();
}

Status FileSystem::Release(FileHandle* fh) {
  std::unique_ptr<FileHandle> owned(fh);
  if (!fh->file) return Status::Ok();  // control files
  fh->file.reset();
  MutexLock lock(&mu_);
  if (fh->saving) {
    open_writers_total_--;
    last_save_activity_ns_ = clock_->MonotonicNanos();
    last_saved_step_ = fh->saving_step;
  }
  Inode* inode = inodes_.Find(fh->ino);
  if (!inode) return Status::Ok();
  // The RELEASE is one change: one batch, written once at its end.
  Transaction txn = BeginLocked();
  if (fh->passthrough && SyncFromBackingLocked(inode) && fh->writable && fh->flushed && inode->rec.nlink > 0) {
    // Written after its close() through a copy of the descriptor (or a
    // mapping): as NoteWritten does, recovery must not finish a commit.
    fh->flushed = false;
    inode->unflushed_writers++;
    ForgetPendingCommitLocked(inode->rec.parent, txn.batch());
  }
  passthrough_.Release(inode, fh);
  if (inode->open_handles > 0) inode->open_handles--;
  if (fh->writable && inode->open_writers > 0) inode->open_writers--;
  if (fh->writable && !fh->flushed && inode->unflushed_writers > 0) inode->unflushed_writers--;
  if (inode->rec.nlink == 0) {
    if (inode->open_handles == 0) {
      // The last handle of an unlinked file: now its data can go.
      InodeTable::EraseOrphanRecord(*inode, txn.batch());
      ForgetObjectLocked(inode, txn.batch());
      Status st = txn.Write();
      if (st.ok() && inode->is_reg()) (void)data_->Remove(fh->ino);
      inodes_.ForgetIfUnused(fh->ino);
      return st;
    }
    return txn.Write();
  }
  if (inode->dirty) {
    InodeTable::Put(*inode, txn.batch());
    inode->dirty = false;
  }
  if (fh->writable) {
    NoteActivityLocked(fh->ino);
    // Closed files of a step go up at once, before the step is committed.
    if (inode->open_writers == 0 && options_.remote && !inode->rec.sealed) {
      QueueUploadLocked(inode, txn.batch());
    }
    if (inode->open_writers == 0) NoteTriggerFileLocked(inode, fh->pid, txn.batch());
  }
  return txn.Write();
}

Status FileSystem::OpenDir(uint64_t ino) {
  if (VirtualNodes* v = VirtualNodesFor(ino)) return v->OpenDir(ino);
  MutexLock lock(&mu_);
  auto dir = inodes_.FindDir(ino);
  return dir.ok() ? Status::Ok() : dir.status();
}

Status FileSystem::FsyncDir() {
  // Directory entries live in the manifest: a synced write makes every
  // earlier one durable.
  MutexLock lock(&mu_);
  Transaction txn = BeginLocked();
  txn.batch()->Put(KeySpace::kMeta, "fsyncdir_seq", std::to_string(++fsyncdir_seq_));
  return txn.WriteSynced();
}

}  // namespace ckptfs
