// The namespace's side of the writer library's fast path (SPEC section 7):
// a client process, identified by its socket's peer credentials, opens a
// file by path for writing and gets a descriptor of the backing file; on
// close it reports size and CRC32C, which are checked and recorded.
//
// The kernel checks permissions for FUSE requests (default_permissions);
// these requests do not pass through the kernel, so the same checks are made
// here: search permission on every directory of the path, write and search
// on the parent to create, write on an existing file.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/crc32c.h"
#include "namespace/file_handle.h"
#include "namespace/filesystem.h"

namespace ckptfs {

namespace {

constexpr const char* kWriterSocketXattr = "user.ckptfs.writer_socket";
constexpr const char* kCrc32cXattr = "user.ckptfs.crc32c";

// Splits a path relative to the mount root into its names; EINVAL for an
// empty path, an absolute one, or one with empty, "." or ".." components
// (the library sends a normalized path).
Result<std::vector<std::string>> SplitRelativePath(const std::string& path) {
  if (path.empty() || path.front() == '/') {
    return Status::Error(EINVAL, "fast path: expected a path relative to the mount root, got '" + path + "'");
  }
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    std::string name = path.substr(start, end - start);
    if (name.empty() || name == "." || name == "..") {
      return Status::Error(EINVAL, "fast path: path '" + path + "' is not normalized");
    }
    names.push_back(std::move(name));
    start = end + 1;
  }
  return names;
}

std::string Hex8(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

}  // namespace

void FileSystem::SetWriterSocket(const std::string& path) {
  MutexLock lock(&mu_);
  writer_socket_ = path;
}

Result<FileSystem::FastPathFile> FileSystem::OpenForFastPath(const FastPathCaller& who,
                                                             const std::string& path,
                                                             uint32_t mode) {
  auto names = SplitRelativePath(path);
  if (!names.ok()) return names.status();
  // The client writes without asking again: the grant is checked against
  // the manifest's reserve, as a create through the mount is.
  CKPTFS_RETURN_IF_ERROR(reserve_->Admit(0));
  uint64_t parent = kRootIno;
  uint64_t existing = 0;
  {
    MutexLock lock(&mu_);
    for (size_t i = 0; i < names->size(); i++) {
      const std::string& name = (*names)[i];
      Inode* dir = inodes_.Find(parent);
      if (!dir || !dir->is_dir()) return Status::Error(ENOTDIR, "fast path: a component of '" + path + "' is not a directory");
      if (!MayAccess(dir->rec, who, X_OK)) {
        return Status::Error(EACCES, "fast path: no search permission on a directory of '" + path + "'");
      }
      if (parent == kRootIno && name == kControlDirName) {
        return Status::Error(EROFS, "fast path: .ckptfs is read-only");
      }
      CKPTFS_RETURN_IF_ERROR(inodes_.EnsureLoaded(dir));
      auto child = dir->children.find(name);
      const bool last = i + 1 == names->size();
      if (child == dir->children.end()) {
        if (!last) return Status::Error(ENOENT, "fast path: no directory " + name + " in '" + path + "'");
        if (!MayAccess(dir->rec, who, W_OK | X_OK)) {
          return Status::Error(EACCES, "fast path: no permission to create files in the directory of '" + path + "'");
        }
        break;
      }
      if (!last) {
        parent = child->second.ino;
        continue;
      }
      Inode* file = inodes_.Find(child->second.ino);
      if (!file) return Status::Error(ENOENT, "fast path: '" + path + "' vanished");
      if (file->is_dir()) return Status::Error(EISDIR, "fast path: '" + path + "' is a directory");
      if (!file->is_reg()) return Status::Error(EINVAL, "fast path: '" + path + "' is not a regular file");
      if (!MayAccess(file->rec, who, W_OK)) {
        return Status::Error(EACCES, "fast path: no permission to write '" + path + "'");
      }
      existing = file->rec.ino;
    }
  }

  Opened opened;
  if (existing) {
    auto o = OpenFile(existing, O_WRONLY | O_TRUNC);
    if (!o.ok()) return o.status();
    opened = *o;
  } else {
    auto created = Create(Caller{.uid = who.uid, .gid = who.gid}, parent, names->back(), mode & 07777, O_WRONLY);
    if (created.err() == EEXIST) return OpenForFastPath(who, path, mode);  // raced with a creator
    if (!created.ok()) return created.status();
    opened = created->second;
    // Create took a kernel lookup reference for the entry it returns; this
    // client is not the kernel and will never send the matching forget.
    Forget(created->first.ino, 1);
  }
  FileHandle* fh = opened.fh;
  // Write-only, and of a file the daemon can take back at CLOSE (see
  // RevocationMode): the client never gets to read through it, map it, or
  // change the file after it has closed.
  auto grant = data_->GrantWrite(fh->ino);
  if (!grant.ok()) {
    (void)Release(fh);
    return grant.status().Annotate("fast path");
  }
  return FastPathFile{fh, *grant, fh->ino};
}

Result<uint32_t> FileSystemCore::Crc32cOfBacking(BackingFile* file, uint64_t size) {
  // The library writes with O_DIRECT, so the bytes are usually read back
  // from the disk: sequential readahead, large reads. (The upload reads
  // them next and finds them cached.)
  constexpr size_t kChunk = 4 << 20;
  if (file->fd() >= 0) (void)posix_fadvise(file->fd(), 0, static_cast<off_t>(size), POSIX_FADV_SEQUENTIAL);
  std::vector<char> buf(kChunk);
  uint32_t crc = 0;
  for (uint64_t off = 0; off < size;) {
    auto n = file->PRead(buf.data(), static_cast<size_t>(std::min<uint64_t>(kChunk, size - off)), off);
    if (!n.ok()) return n.status();
    if (*n == 0) return Status::Error(EIO, "the backing file ended early");
    crc = Crc32c(crc, buf.data(), *n);
    off += *n;
  }
  return crc;
}

Status FileSystem::FinishFastPath(FastPathFile* file, uint64_t size, uint32_t crc32c) {
  FileHandle* fh = file->fh;
  // Revoked before anything is measured: what is checked below stays so.
  Status revoked = data_->RevokeWrite(&file->grant);
  if (!revoked.ok()) return revoked.Annotate("fast path: revoking the writer's access");
  auto actual = fh->file->Size();
  if (!actual.ok()) return actual.status().Annotate("fast path: size of the backing file");
  if (*actual != size) {
    return Status::Error(EIO, "fast path: the writer reported " + std::to_string(size) +
                                  " bytes but the file holds " + std::to_string(*actual));
  }
  // The daemon's own checksum is the one recorded: a client's value is
  // only compared with it.
  auto computed = Crc32cOfBacking(fh->file.get(), size);
  if (!computed.ok()) return computed.status().Annotate("fast path: checksum of the backing file");
  auto identity = fh->file->Stat();
  InvalidateInodeFn invalidate;
  std::string mismatch;
  {
    MutexLock lock(&mu_);
    CKPTFS_RETURN_IF_ERROR(CheckHealthyLocked());
    Inode* inode = inodes_.Find(fh->ino);
    if (!inode) return Status::Error(ENOENT, "fast path: the file was removed");
    inode->rec.size = size;
    inode->rec.mtime = inode->rec.ctime = clock_->Now();
    inode->dirty = false;
    NoteBackingRecordedLocked(inode);
    ChecksumRecord rec{size, TimespecToNanos(inode->rec.mtime), *computed};
    if (identity.ok()) {
      rec.backing_inode = identity->inode;
      rec.backing_ctime_ns = identity->ctime_ns;
    }
    inode->checksum = rec;
    Transaction txn = BeginLocked();
    InodeTable::Put(*inode, txn.batch());
    if (inode->rec.nlink > 0)
      txn.batch()->Put(KeySpace::kChecksums, InoKey(fh->ino), EncodeChecksum(*inode->checksum));
    NoteActivityLocked(fh->ino);
    // Synced: when the client's close returns, size and checksum are recorded.
    CKPTFS_RETURN_IF_ERROR(txn.WriteSynced());
    metrics_.writer_fastpath_bytes += size;
    metrics_.writer_fastpath_files++;
    if (*computed != crc32c) {
      const std::string path = inodes_.PathOf(fh->ino);
      mismatch = "the writer reported CRC32C " + Hex8(crc32c) + " but the file holds " + Hex8(*computed);
      events_->Append({{"event", "error"}, {"kind", "checksum_mismatch"}, {"path", path}, {"error", mismatch}});
      mismatch = path + ": " + mismatch;
    }
    invalidate = invalidate_inode_;
  }
  // Pages and attributes the kernel cached before the client wrote around
  // FUSE are stale now.
  if (invalidate) invalidate(fh->ino);
  if (!mismatch.empty()) return Status::Error(EIO, "fast path: " + mismatch);
  return Status::Ok();
}

Status FileSystem::AbandonFastPath(FastPathFile* file) {
  FileHandle* fh = file->fh;
  // A client that went away must not keep writing either.
  Status revoked = data_->RevokeWrite(&file->grant);
  auto actual = fh->file->Size();
  if (!actual.ok()) return actual.status().Annotate("fast path: size of the backing file");
  InvalidateInodeFn invalidate;
  {
    MutexLock lock(&mu_);
    Inode* inode = inodes_.Find(fh->ino);
    if (!inode) return revoked;
    inode->rec.size = *actual;
    inode->rec.mtime = inode->rec.ctime = clock_->Now();
    inode->dirty = true;  // Release writes the record
    NoteBackingRecordedLocked(inode);
    invalidate = invalidate_inode_;
  }
  if (invalidate) invalidate(fh->ino);
  return revoked.Annotate("fast path: revoking an abandoned writer's access");
}

Status FileSystem::CheckUnchangedSinceClose(uint64_t ino, BackingFile* file) {
  auto now = file->Stat();
  if (!now.ok()) return now.err() == ENOTSUP ? Status::Ok() : now.status();
  MutexLock lock(&mu_);
  Inode* inode = inodes_.Find(ino);
  if (!inode || !inode->checksum || inode->checksum->backing_inode == 0) return Status::Ok();
  const ChecksumRecord& at_close = *inode->checksum;
  // Written again through the mount since: the daemon made that version.
  if (at_close.size != inode->rec.size || at_close.mtime_ns != TimespecToNanos(inode->rec.mtime)) {
    return Status::Ok();
  }
  if (now->inode == at_close.backing_inode && now->size == at_close.size &&
      now->ctime_ns == at_close.backing_ctime_ns) {
    return Status::Ok();
  }
  std::string what = now->inode != at_close.backing_inode ? "its backing file was replaced"
                     : now->size != at_close.size
                         ? "its backing file went from " + std::to_string(at_close.size) + " to " +
                               std::to_string(now->size) + " bytes"
                         : "its backing file was modified";
  const std::string path = inodes_.PathOf(ino);
  events_->Append({{"event", "error"}, {"kind", "changed_after_close"}, {"path", path}, {"error", what}});
  return Status::Error(EIO, path + " changed outside ckptfs after its writer closed it: " + what);
}

void FileSystemCore::LoadChecksums(Status* decode_error) {
  Status st = manifest_->Scan(KeySpace::kChecksums, "", [&](std::string_view k, std::string_view v) {
    mu_.AssertHeld();  // runs inside this call, under the lock
    auto ino = DecodeInoKey(k);
    auto rec = DecodeChecksum(v);
    if (!ino.ok() || !rec.ok()) {
      *decode_error = ino.ok() ? rec.status() : ino.status();
      return false;
    }
    if (Inode* inode = inodes_.Find(*ino)) inode->checksum = *rec;
    return true;
  });
  if (!st.ok()) *decode_error = st;
}

void FileSystemCore::ForgetChecksumLocked(Inode* inode, ManifestBatch* batch) {
  if (!inode->checksum) return;
  batch->Delete(KeySpace::kChecksums, InoKey(inode->rec.ino));
  inode->checksum.reset();
}

std::optional<std::string> FileSystemCore::FastPathXattrLocked(const Inode& inode,
                                                               const std::string& name) const {
  if (name == kWriterSocketXattr && inode.rec.ino == kRootIno && !writer_socket_.empty()) {
    return writer_socket_;
  }
  // Only while it still describes the file: a later write through FUSE
  // makes a new version the writer never checksummed.
  if (name == kCrc32cXattr && inode.checksum && inode.checksum->size == inode.rec.size &&
      inode.checksum->mtime_ns == TimespecToNanos(inode.rec.mtime)) {
    return Hex8(inode.checksum->crc32c);
  }
  return std::nullopt;
}

void FileSystemCore::FastPathXattrNamesLocked(const Inode& inode,
                                              std::vector<std::string>* names) const {
  for (const char* n : {kWriterSocketXattr, kCrc32cXattr}) {
    if (FastPathXattrLocked(inode, n)) names->push_back(n);
  }
}

}  // namespace ckptfs
