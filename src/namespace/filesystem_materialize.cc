// The materialiser: the parts of a committed step built from a record of it
// rather than written here. A cold mount's import (a commit object) and a
// cluster apply (the decided step record) both build the step's tree with
// these, so a file from the bucket looks the same whichever way it came:
// sealed, no local bytes, its object record pointing at its key.
#include <cerrno>

#include "common/time_convert.h"
#include "namespace/filesystem.h"

namespace ckptfs {

Result<Inode*> FileSystemCore::EnsureDirPathLocked(Inode* base, const std::string& rel,
                                                   ManifestBatch* batch) {
  Inode* at = base;
  size_t start = 0;
  while (start < rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    const std::string part = rel.substr(start, end - start);
    if (!CheckName(part).ok() || part == "." || part == "..") {
      return Status::Error(EIO, "invalid path component '" + part + "' in " + rel);
    }
    CKPTFS_RETURN_IF_ERROR(inodes_.EnsureLoaded(at));
    auto it = at->children.find(part);
    Inode* next = it == at->children.end() ? nullptr : inodes_.Find(it->second.ino);
    if (!next) {
      const Caller owner{.uid = base->rec.uid, .gid = base->rec.gid};
      auto made = NewInodeLocked(owner, at->rec.ino, part, S_IFDIR | 0755, batch);
      if (!made.ok()) return made.status();
      inodes_.AddChild(at, part, *made, clock_->Now(), batch);
      InodeTable::Put(*at, batch);
      next = *made;
    } else if (!next->is_dir()) {
      return Status::Error(EIO, part + " is a file here and a directory in the step's record");
    }
    at = next;
    start = end + 1;
  }
  return at;
}

Result<Inode*> FileSystemCore::AddSealedFileLocked(Inode* step_dir, const SealedFile& f,
                                                   ManifestBatch* batch) {
  const size_t slash = f.path.rfind('/');
  const std::string leaf = slash == std::string::npos ? f.path : f.path.substr(slash + 1);
  auto parent = EnsureDirPathLocked(
      step_dir, slash == std::string::npos ? "" : f.path.substr(0, slash), batch);
  if (!parent.ok()) return parent.status();
  if ((*parent)->children.count(leaf))
    return Status::Error(EIO, "duplicate " + f.path + " in the step's record");
  const Caller owner{.uid = step_dir->rec.uid, .gid = step_dir->rec.gid};
  auto made = NewInodeLocked(owner, (*parent)->rec.ino, leaf, S_IFREG | (f.mode & 07777), batch);
  if (!made.ok()) return made.status();
  Inode* file = *made;
  file->rec.size = f.object.size;
  file->rec.sealed = true;
  file->rec.mtime = NanosToTimespec(f.mtime_ns);
  file->rec.ctime = f.ctime;
  file->backing_unsynced = false;  // no local bytes to sync
  InodeTable::Put(*file, batch);
  inodes_.AddChild(*parent, leaf, file, clock_->Now(), batch);
  file->object = f.object;
  ledger_.SetObjectOwner(f.object.key, file->rec.ino);
  batch->Put(KeySpace::kObjects, InoKey(file->rec.ino), EncodeObject(f.object));
  return file;
}

Status FileSystemCore::AddSealedSymlinkLocked(Inode* step_dir, const std::string& path,
                                              const std::string& target, bool keep_existing,
                                              ManifestBatch* batch) {
  const size_t slash = path.rfind('/');
  const std::string leaf = slash == std::string::npos ? path : path.substr(slash + 1);
  auto parent =
      EnsureDirPathLocked(step_dir, slash == std::string::npos ? "" : path.substr(0, slash), batch);
  if (!parent.ok()) return parent.status();
  if ((*parent)->children.count(leaf)) {
    return keep_existing ? Status::Ok()
                         : Status::Error(EIO, "duplicate " + path + " in the step's record");
  }
  const Caller owner{.uid = step_dir->rec.uid, .gid = step_dir->rec.gid};
  auto link = NewInodeLocked(owner, (*parent)->rec.ino, leaf, S_IFLNK | 0777, batch);
  if (!link.ok()) return link.status();
  (*link)->rec.symlink_target = target;
  (*link)->rec.sealed = true;
  InodeTable::Put(**link, batch);
  inodes_.AddChild(*parent, leaf, *link, clock_->Now(), batch);
  return Status::Ok();
}

}  // namespace ckptfs
