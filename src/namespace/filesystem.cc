// FileSystem and FileSystemCore construction, and the core's helpers every
// operation shares: building entries and stat buffers, checking names,
// making and dropping links.
#include "namespace/filesystem.h"
#include "views/full_view_cache.h"

#include <fcntl.h>

#include <cstring>

namespace ckptfs {

namespace {
constexpr size_t kNameMax = 255;
constexpr blksize_t kPreferredIoSize = 1 << 20;  // matches the FUSE max_write
}  // namespace

FileSystemCore::FileSystemCore(FileSystemOptions options, StepPattern pattern,
                               std::unique_ptr<ManifestStore> manifest,
                               std::unique_ptr<DataStore> data, const Clock* clock,
                               EventLog* events)
    : options_(std::move(options)),
      pattern_(std::move(pattern)),
      manifest_(std::move(manifest)),
      data_(std::move(data)),
      clock_(clock),
      events_(events),
      start_time_(clock->Now()),
      journal_(manifest_.get(), clock, events),
      reserve_(std::make_unique<MetadataReserve>(options_.metadata_reserve, data_.get(), clock)),
      full_views_(std::make_unique<FullViewCache>()) {}

// Defined here, where FullViewCache is complete.
FileSystemCore::~FileSystemCore() = default;

FileSystem::FileSystem(FileSystemOptions options, StepPattern pattern,
                       std::unique_ptr<ManifestStore> manifest, std::unique_ptr<DataStore> data,
                       const Clock* clock, EventLog* events)
    : FileSystemCore(std::move(options), std::move(pattern), std::move(manifest), std::move(data),
                     clock, events),
      control_nodes_(MakeControlNodes(this)),
      full_view_nodes_(MakeFullViewNodes(this)) {}

VirtualNodes* FileSystem::VirtualNodesFor(uint64_t ino) const {
  switch (KindOf(ino)) {
    case NodeKind::kReal:
      return nullptr;
    case NodeKind::kControl:
    case NodeKind::kLatestLink:
      return control_nodes_.get();
    case NodeKind::kFullView:
      return full_view_nodes_.get();
  }
  return nullptr;
}

FileSystem::~FileSystem() {
  // Persist sizes of files still open so a clean stop loses no metadata.
  MutexLock lock(&mu_);
  // What was left to write in the background (the end of an rm -rf) first.
  (void)journal_.WriteLater();
  // Not a Transaction: when the manifest failed earlier and still fails,
  // these records are dropped rather than kept (nothing would retry them).
  ManifestBatch batch;
  for (auto& [ino, node] : inodes_) {
    const Inode* inode = &node;
    if (inode->dirty && inode->rec.nlink > 0) InodeTable::Put(*inode, &batch);
  }
  // A manifest that failed earlier gets one more try: its kept batches first.
  if (!journal_.healthy() && !journal_.TryRecover()) return;
  if (!batch.empty()) (void)manifest_->Write(batch, true);
}

Result<std::unique_ptr<FileSystem>> FileSystem::Open(FileSystemOptions options,
                                                     std::unique_ptr<ManifestStore> manifest,
                                                     std::unique_ptr<DataStore> data,
                                                     const Clock* clock, EventLog* events) {
  auto pattern = StepPattern::Compile(options.step_pattern);
  if (!pattern.ok()) return pattern.status();
  std::unique_ptr<FileSystem> fs(new FileSystem(std::move(options), std::move(pattern).value(),
                                                std::move(manifest), std::move(data), clock, events));
  MutexLock lock(&fs->mu_);
  CKPTFS_RETURN_IF_ERROR(fs->LoadLocked());
  CKPTFS_RETURN_IF_ERROR(fs->RecoverLocked());
  return fs;
}

void FileSystem::SetCommitRequester(CommitRequester fn) {
  MutexLock lock(&mu_);
  request_commit_ = std::move(fn);
}

void FileSystem::SetIndexRequester(IndexRequester fn) {
  MutexLock lock(&mu_);
  request_index_ = std::move(fn);
}

struct stat FileSystemCore::StatOf(const Inode& inode) const {
  struct stat st {};
  st.st_ino = inode.rec.ino;
  st.st_mode = inode.rec.mode;
  st.st_nlink = inode.rec.nlink;
  st.st_uid = inode.rec.uid;
  st.st_gid = inode.rec.gid;
  st.st_size = static_cast<off_t>(inode.rec.size);
  st.st_blksize = kPreferredIoSize;
  st.st_blocks = static_cast<blkcnt_t>((inode.rec.size + 511) / 512);
  st.st_atim = inode.rec.atime;
  st.st_mtim = inode.rec.mtime;
  st.st_ctim = inode.rec.ctime;
  return st;
}

Entry FileSystemCore::MakeEntry(Inode* inode) {
  inode->lookups++;
  Entry e;
  e.ino = inode->rec.ino;
  e.attr = StatOf(*inode);
  e.entry_timeout = options_.entry_timeout;
  e.attr_timeout = options_.attr_timeout;
  return e;
}

Status FileSystemCore::CheckName(const std::string& name) const {
  if (name.empty() || name == "." || name == "..") return Status::Error(EINVAL, "invalid name");
  if (name.size() > kNameMax) {
    return Status::Error(ENAMETOOLONG, "name longer than 255 bytes");
  }
  if (name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
    return Status::Error(EINVAL, "name contains '/' or NUL");
  }
  return Status::Ok();
}

Status FileSystemCore::CheckWritableDirLocked(Inode* dir) const {
  CKPTFS_RETURN_IF_ERROR(const_cast<FileSystemCore*>(this)->CheckHealthyLocked());
  const uint64_t step = steps_.StepOf(inodes_, dir->rec.ino);
  if (step != 0 && steps_.IsSealed(step)) {
    return Status::Error(EROFS, "step is committed or being deleted; its contents are read-only");
  }
  return Status::Ok();
}

bool FileSystemCore::HasRealChildLocked(Inode* dir, const std::string& name) const {
  // Unreadable entries (the loader reported why) count as absent here.
  (void)inodes_.EnsureLoaded(dir);
  return dir->children.count(name) != 0;
}

Result<Inode*> FileSystemCore::NewInodeLocked(const Caller& c, uint64_t parent,
                                              const std::string& name, uint32_t mode,
                                              ManifestBatch* batch,
                                              std::unique_ptr<BackingFile>* backing) {
  Inode* dir = inodes_.Find(parent);
  CKPTFS_RETURN_IF_ERROR(ReserveInoLocked());
  Inode* inode = inodes_.Allocate();
  const timespec now = clock_->Now();
  inode->rec.mode = mode;
  inode->rec.uid = c.uid;
  inode->rec.gid = c.gid;
  // BSD group semantics under a setgid directory, as ext4 does.
  if (dir && (dir->rec.mode & S_ISGID)) {
    inode->rec.gid = dir->rec.gid;
    if (S_ISDIR(mode)) inode->rec.mode |= S_ISGID;
  }
  inode->rec.nlink = S_ISDIR(mode) ? 2 : 1;
  inode->rec.atime = inode->rec.mtime = inode->rec.ctime = now;
  inode->rec.parent = parent;
  inode->name = name;
  if (S_ISREG(mode)) {
    auto file = data_->Open(inode->rec.ino, /*create=*/true);
    if (!file.ok()) {
      inodes_.Erase(inode->rec.ino);
      return file.status();
    }
    inode->backing_unsynced = true;
    if (backing) *backing = std::move(file).value();
  }
  InodeTable::Put(*inode, batch);
  return inode;
}

void FileSystemCore::DropLinkLocked(Inode* inode, ManifestBatch* batch) {
  inode->rec.ctime = clock_->Now();
  if (inode->is_dir()) {
    inode->rec.nlink = 0;
  } else if (inode->rec.nlink > 0) {
    inode->rec.nlink--;
  }
  if (inode->rec.nlink > 0) {
    InodeTable::Put(*inode, batch);
    return;
  }
  const uint64_t ino = inode->rec.ino;
  if (auto step = steps_.find(ino); step != steps_.end() &&
                                    (step->second.state == StepState::kCommitted ||
                                     step->second.state == StepState::kDeleting)) {
    UnpersistStepLocked(ino, inodes_.PathOf(ino), batch);
  }
  FlushDeferredRemovalsLocked(ino, batch);
  steps_.Remove(ino, batch);
  if (inode->open_handles > 0) {
    // An orphan: the data stays readable through its handles; Release
    // deletes it, and recovery deletes it if the daemon dies first.
    InodeTable::Put(*inode, batch);
    return;
  }
  batch->Delete(KeySpace::kInodes, InoKey(ino));
  for (const auto& [name, value] : inode->xattrs) batch->Delete(KeySpace::kXattrs, XattrKey(ino, name));
  // The data goes through the GC queue: unlinking a 1 GiB backing file takes
  // the disk hundreds of milliseconds, which rm must not wait for.
  if (inode->is_reg()) batch->Put(KeySpace::kGc, InoKey(ino), "");
  ForgetObjectLocked(inode, batch);
}

std::string FileSystem::PathOf(uint64_t ino) {
  MutexLock lock(&mu_);
  return inodes_.PathOf(ino);
}

size_t FileSystem::InodeCountForTest() {
  MutexLock lock(&mu_);
  return inodes_.size();
}

void FileSystem::ForgetEverythingForTest() {
  std::vector<std::pair<uint64_t, uint64_t>> held;
  {
    MutexLock lock(&mu_);
    for (const auto& [ino, inode] : inodes_) {
      if (inode.lookups > 0) held.emplace_back(ino, inode.lookups);
    }
  }
  for (const auto& [ino, n] : held) Forget(ino, n);
}

bool FileSystem::RetryManifest() {
  MutexLock lock(&mu_);
  return journal_.TryRecover();
}

FileSystem::ManifestHealth FileSystem::ManifestHealthNow() {
  MutexLock lock(&mu_);
  return journal_.Health();
}

}  // namespace ckptfs
