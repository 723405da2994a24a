// FileSystem construction and the helpers every operation shares: finding
// inodes, building entries and stat buffers, linking and unlinking, and
// applying manifest batches.
#include "namespace/filesystem.h"
#include "views/full_view_cache.h"

#include <fcntl.h>

#include <cstring>

namespace ckptfs {

namespace {
constexpr size_t kNameMax = 255;
constexpr blksize_t kPreferredIoSize = 1 << 20;  // matches the FUSE max_write
}  // namespace

FileSystem::FileSystem(FileSystemOptions options, StepPattern pattern,
                       std::unique_ptr<ManifestStore> manifest, std::unique_ptr<DataStore> data,
                       const Clock* clock, EventLog* events)
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

FileSystem::~FileSystem() {
  // Persist sizes of files still open so a clean stop loses no metadata.
  MutexLock lock(&mu_);
  ManifestBatch batch;
  for (auto& [ino, inode] : inodes_) {
    if (inode->dirty && inode->rec.nlink > 0) PutInode(*inode, &batch);
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
  CKPTFS_RETURN_IF_ERROR(fs->Load());
  CKPTFS_RETURN_IF_ERROR(fs->Recover());
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

void FileSystem::SetSessionOf(SessionOfFn fn) {
  MutexLock lock(&mu_);
  session_of_ = std::move(fn);
}

Inode* FileSystem::Find(uint64_t ino) {
  auto it = inodes_.find(ino);
  return it == inodes_.end() ? nullptr : it->second.get();
}

Result<Inode*> FileSystem::FindDir(uint64_t ino) {
  Inode* inode = Find(ino);
  if (!inode) return Status::Error(ENOENT, "no inode " + std::to_string(ino));
  if (!inode->is_dir()) return Status::Error(ENOTDIR, "not a directory");
  return inode;
}

struct stat FileSystem::StatOf(const Inode& inode) const {
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

Entry FileSystem::MakeEntry(Inode* inode) {
  inode->lookups++;
  Entry e;
  e.ino = inode->rec.ino;
  e.attr = StatOf(*inode);
  e.entry_timeout = options_.entry_timeout;
  e.attr_timeout = options_.attr_timeout;
  return e;
}

Status FileSystem::CheckName(const std::string& name) const {
  if (name.empty() || name == "." || name == "..") return Status::Error(EINVAL, "invalid name");
  if (name.size() > kNameMax) {
    return Status::Error(ENAMETOOLONG, "name longer than 255 bytes");
  }
  if (name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
    return Status::Error(EINVAL, "name contains '/' or NUL");
  }
  return Status::Ok();
}

Status FileSystem::CheckWritableDir(Inode* dir) const {
  CKPTFS_RETURN_IF_ERROR(const_cast<FileSystem*>(this)->CheckHealthy());
  uint64_t step = const_cast<FileSystem*>(this)->StepOf(dir->rec.ino);
  if (step != 0 && IsSealedStep(step)) {
    return Status::Error(EROFS, "step is committed or being deleted; its contents are read-only");
  }
  return Status::Ok();
}

bool FileSystem::HasRealChild(Inode* dir, const std::string& name) const {
  return dir->children.count(name) != 0;
}

void FileSystem::PutInode(const Inode& inode, ManifestBatch* batch) {
  batch->Put(KeySpace::kInodes, InoKey(inode.rec.ino), EncodeInode(inode.rec));
}

void FileSystem::TouchDir(Inode* dir, const timespec& now) {
  dir->rec.mtime = now;
  dir->rec.ctime = now;
}

Result<Inode*> FileSystem::NewInode(const Caller& c, uint64_t parent, const std::string& name,
                                    uint32_t mode, ManifestBatch* batch) {
  Inode* dir = Find(parent);
  auto inode = std::make_unique<Inode>();
  const timespec now = clock_->Now();
  inode->rec.ino = next_ino_++;
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
  Inode* raw = inode.get();
  inodes_[raw->rec.ino] = std::move(inode);
  if (S_ISREG(mode)) {
    auto file = data_->Open(raw->rec.ino, /*create=*/true);
    if (!file.ok()) {
      inodes_.erase(raw->rec.ino);
      return file.status();
    }
    raw->backing_unsynced = true;
  }
  PutInode(*raw, batch);
  return raw;
}

void FileSystem::AddChild(Inode* dir, const std::string& name, Inode* child, ManifestBatch* batch) {
  DentryRecord d{child->rec.ino, dir->rec.next_cookie++};
  dir->children[name] = d;
  dir->by_cookie[d.cookie] = name;
  batch->Put(KeySpace::kDentries, DentryKey(dir->rec.ino, name), EncodeDentry(d));
  if (child->is_dir()) dir->rec.nlink++;
  child->rec.parent = dir->rec.ino;
  child->name = name;
  TouchDir(dir, clock_->Now());
  PutInode(*dir, batch);
}

void FileSystem::RemoveChild(Inode* dir, const std::string& name, ManifestBatch* batch) {
  auto it = dir->children.find(name);
  if (it == dir->children.end()) return;
  Inode* child = Find(it->second.ino);
  dir->by_cookie.erase(it->second.cookie);
  dir->children.erase(it);
  batch->Delete(KeySpace::kDentries, DentryKey(dir->rec.ino, name));
  if (child && child->is_dir() && dir->rec.nlink > 2) dir->rec.nlink--;
  TouchDir(dir, clock_->Now());
  PutInode(*dir, batch);
}

void FileSystem::DropLink(Inode* inode, ManifestBatch* batch) {
  inode->rec.ctime = clock_->Now();
  if (inode->is_dir()) {
    inode->rec.nlink = 0;
  } else if (inode->rec.nlink > 0) {
    inode->rec.nlink--;
  }
  if (inode->rec.nlink > 0) {
    PutInode(*inode, batch);
    return;
  }
  const uint64_t ino = inode->rec.ino;
  if (auto step = steps_.find(ino); step != steps_.end() &&
                                    (step->second.state == StepState::kCommitted ||
                                     step->second.state == StepState::kDeleting)) {
    UnpersistStepLocked(ino, PathOfLocked(ino), batch);
  }
  if (steps_.erase(ino)) {
    batch->Delete(KeySpace::kSteps, InoKey(ino));
    step_runtime_.erase(ino);
  }
  if (inode->open_handles > 0) {
    // An orphan: the data stays readable through its handles; Release
    // deletes it, and recovery deletes it if the daemon dies first.
    PutInode(*inode, batch);
    return;
  }
  batch->Delete(KeySpace::kInodes, InoKey(ino));
  for (const auto& [name, value] : inode->xattrs) batch->Delete(KeySpace::kXattrs, XattrKey(ino, name));
  // The data goes through the GC queue: unlinking a 1 GiB backing file takes
  // the disk hundreds of milliseconds, which rm must not wait for.
  if (inode->is_reg()) batch->Put(KeySpace::kGc, InoKey(ino), "");
  ForgetObjectLocked(inode, batch);
}

void FileSystem::MaybeEvict(uint64_t ino) {
  Inode* inode = Find(ino);
  if (inode && inode->rec.nlink == 0 && inode->open_handles == 0 && inode->lookups == 0 &&
      ino != kRootIno) {
    inodes_.erase(ino);
  }
}

std::string FileSystem::PathOf(uint64_t ino) {
  MutexLock lock(&mu_);
  return PathOfLocked(ino);
}

size_t FileSystem::InodeCountForTest() {
  MutexLock lock(&mu_);
  return inodes_.size();
}

std::string FileSystem::PathOfLocked(uint64_t ino) {
  std::string path;
  for (int depth = 0; ino != kRootIno && ino != 0 && depth < 4096; ++depth) {
    Inode* inode = Find(ino);
    if (!inode) break;
    path = path.empty() ? inode->name : inode->name + "/" + path;
    ino = inode->rec.parent;
  }
  return path;
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
