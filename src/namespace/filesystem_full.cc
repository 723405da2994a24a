// The `.full/` directories (SPEC section 6): hidden, read-only views of the
// full tensors of each checkpoint in a committed step. FullView and
// ViewFileReader (src/views) do the work; this file maps them onto inode
// numbers and serves their shards through the ordinary read path, so shards
// that are only in the remote tier are fetched like any other read.
//
// Views exist only in committed steps: their files never change, so the
// kernel may cache them (keep_cache) and a view, once built, stays valid.
#include <fcntl.h>

#include <nlohmann/json.hpp>

#include "namespace/file_handle.h"
#include "namespace/filesystem.h"
#include "views/full_view_cache.h"
#include "views/view_names.h"

namespace ckptfs {

namespace {

constexpr uint64_t kNodeMask = (uint64_t{1} << kFullNodeBits) - 1;
constexpr uint64_t kMaxDirIno = (uint64_t{1} << (61 - kFullNodeBits)) - 1;

uint64_t FullIno(uint64_t dir, uint32_t node) { return kFullViewBit | (dir << kFullNodeBits) | node; }
uint64_t DirOf(uint64_t ino) { return (ino & ~kFullViewBit) >> kFullNodeBits; }
uint32_t NodeOf(uint64_t ino) { return static_cast<uint32_t>(ino & kNodeMask); }

}  // namespace

// The files of one format root directory, read through the FileSystem:
// handles are opened on first use and released with the reader.
class FsShardReader final : public ShardReader {
 public:
  FsShardReader(FileSystem* fs, uint64_t dir) : fs_(fs), dir_(dir) {}
  ~FsShardReader() override {
    for (auto& [path, fh] : open_) (void)fs_->Release(fh);
  }

  Result<uint64_t> Size(const std::string& path) override {
    MutexLock lock(&fs_->mu_);
    const uint64_t ino = fs_->ResolveRelativeLocked(dir_, path);
    Inode* inode = ino ? fs_->inodes_.Find(ino) : nullptr;
    if (!inode || !inode->is_reg()) return Status::Error(ENOENT, path + " does not exist");
    return inode->rec.size;
  }

  Result<size_t> ReadAt(const std::string& path, uint64_t offset, void* buf, size_t n) override {
    auto it = open_.find(path);
    if (it == open_.end()) {
      uint64_t ino = 0;
      {
        MutexLock lock(&fs_->mu_);
        ino = fs_->ResolveRelativeLocked(dir_, path);
      }
      if (ino == 0) return Status::Error(ENOENT, path + " does not exist");
      Result<FileSystem::Opened> opened = fs_->OpenFile(ino, O_RDONLY);
      if (!opened.ok()) return opened.status().Annotate(path);
      it = open_.emplace(path, opened->fh).first;
    }
    CKPTFS_RETURN_IF_ERROR(fs_->EnsureReadable(it->second, offset, n));
    return fs_->ReadBacking(it->second, buf, n, offset);
  }

 private:
  FileSystem* const fs_;
  const uint64_t dir_;
  std::map<std::string, FileHandle*> open_;
};

uint64_t FileSystemCore::ResolveRelativeLocked(uint64_t dir_ino, const std::string& path) {
  uint64_t ino = dir_ino;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    const std::string name = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    Inode* dir = inodes_.Find(ino);
    if (!dir || !dir->is_dir() || !inodes_.EnsureLoaded(dir).ok()) return 0;
    auto it = dir->children.find(name);
    if (it == dir->children.end()) return 0;
    ino = it->second.ino;
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return ino;
}

bool FileSystemCore::ListsFullDirLocked(Inode* dir) {
  if (!options_.show_full || HasRealChildLocked(dir, kFullDirName)) return false;
  const uint64_t step = steps_.StepOf(inodes_, dir->rec.ino);
  auto it = steps_.find(step);
  if (it == steps_.end() || it->second.state != StepState::kCommitted) return false;
  if (auto cached = full_views_->Get(dir->rec.ino)) return !cached->ok() || **cached != nullptr;
  // Not built yet: the metadata files a view is built from (a metadata.json
  // that is not OLMo-core's shows a `.full` that does not open).
  return HasRealChildLocked(dir, ".metadata") || HasRealChildLocked(dir, "metadata.json");
}

Result<std::shared_ptr<const FullView>> FileSystem::ViewOf(uint64_t dir_ino) {
  std::string dir_name;
  {
    MutexLock lock(&mu_);
    Inode* dir = inodes_.Find(dir_ino);
    if (!dir || !dir->is_dir()) return Status::Error(ENOENT, "no such directory");
    // A step directory's name is no group name (step100.safetensors would
    // only repeat all.safetensors).
    if (!steps_.count(dir_ino)) dir_name = dir->name;
    auto step = steps_.find(steps_.StepOf(inodes_, dir_ino));
    if (step == steps_.end() || step->second.state != StepState::kCommitted) {
      return Status::Error(ENOENT, "views exist in committed steps only");
    }
    if (dir_ino > kMaxDirIno) return Status::Error(EOVERFLOW, "inode number too large for a view");
  }
  std::optional<FullViewCache::Outcome> outcome = full_views_->Get(dir_ino);
  if (!outcome) {
    FsShardReader files(this, dir_ino);
    auto built = FullView::Build(files, dir_name);
    if (!built.ok()) {
      outcome = Status::Error(EIO, built.status().message());
    } else {
      outcome = built->has_value() ? std::shared_ptr<const FullView>(**built) : nullptr;
    }
    full_views_->Put(dir_ino, *outcome);
  }
  if (!outcome->ok()) {
    ReportViewError(FullIno(dir_ino, FullView::kRootNode), PathOf(dir_ino) + "/" + kFullDirName,
                    outcome->status());
    return outcome->status();
  }
  if (**outcome == nullptr) return Status::Error(ENOENT, "no checkpoint metadata here");
  return **outcome;
}

void FileSystem::ReportViewError(uint64_t ino, const std::string& path, const Status& st) {
  if (!full_views_->FirstReport(ino)) return;
  events_->Append({{"event", "view_error"}, {"path", path}, {"error", st.message()}});
}

std::optional<Result<Entry>> FileSystem::LookupFullDir(uint64_t parent) {
  {
    MutexLock lock(&mu_);
    if (!IsRealIno(parent)) return std::nullopt;
    Inode* dir = inodes_.Find(parent);
    if (!dir || !dir->is_dir() || HasRealChildLocked(dir, kFullDirName)) return std::nullopt;
  }
  Result<std::shared_ptr<const FullView>> view = ViewOf(parent);
  if (!view.ok() && view.status().err() == ENOENT) return std::nullopt;  // not a checkpoint here
  if (!view.ok()) return Result<Entry>(view.status());
  auto attr = GetAttrFull(FullIno(parent, FullView::kRootNode));
  if (!attr.ok()) return Result<Entry>(attr.status());
  return Result<Entry>(Entry{attr->attr.st_ino, attr->attr, options_.entry_timeout, attr->timeout});
}

Result<Entry> FileSystem::LookupInFull(uint64_t parent, const std::string& name) {
  Result<std::shared_ptr<const FullView>> view = ViewOf(DirOf(parent));
  if (!view.ok()) return view.status();
  std::optional<uint32_t> node = (*view)->Lookup(NodeOf(parent), name);
  if (!node) return Status::Error(ENOENT, name + " does not exist");
  auto attr = GetAttrFull(FullIno(DirOf(parent), *node));
  if (!attr.ok()) return attr.status();
  return Entry{attr->attr.st_ino, attr->attr, options_.entry_timeout, attr->timeout};
}

Result<Attr> FileSystem::GetAttrFull(uint64_t ino) {
  Result<std::shared_ptr<const FullView>> view = ViewOf(DirOf(ino));
  if (!view.ok()) return view.status();
  const uint32_t node = NodeOf(ino);
  if (node >= (*view)->nodes().size()) return Status::Error(ENOENT, "no such view entry");
  const ViewNode& n = (*view)->nodes()[node];
  struct stat st {};
  {
    MutexLock lock(&mu_);
    Inode* dir = inodes_.Find(DirOf(ino));
    if (!dir) return Status::Error(ENOENT, "no such directory");
    st.st_uid = dir->rec.uid;
    st.st_gid = dir->rec.gid;
    st.st_atim = st.st_mtim = st.st_ctim = steps_.Find(steps_.StepOf(inodes_, DirOf(ino)))->committed_at;
  }
  st.st_ino = ino;
  st.st_blksize = 4096;
  if (n.kind == ViewNode::Kind::kDir) {
    st.st_mode = S_IFDIR | 0555;
    st.st_nlink = 2;
  } else {
    st.st_mode = S_IFREG | 0444;
    st.st_nlink = 1;
    st.st_size = static_cast<off_t>(n.size);
    st.st_blocks = static_cast<blkcnt_t>((n.size + 511) / 512);
  }
  return Attr{st, options_.attr_timeout};
}

Result<std::vector<DirEntry>> FileSystem::ReaddirFull(uint64_t ino, uint64_t offset, size_t max) {
  Result<std::shared_ptr<const FullView>> view = ViewOf(DirOf(ino));
  if (!view.ok()) return view.status();
  const uint32_t node = NodeOf(ino);
  if (node >= (*view)->nodes().size() || (*view)->nodes()[node].kind != ViewNode::Kind::kDir) {
    return Status::Error(ENOTDIR, "not a directory");
  }
  std::vector<DirEntry> out;
  const uint64_t parent = node == FullView::kRootNode ? DirOf(ino) : FullIno(DirOf(ino), FullView::kRootNode);
  if (offset < 1 && out.size() < max) out.push_back(DirEntry{".", ino, S_IFDIR, 1});
  if (offset < 2 && out.size() < max) out.push_back(DirEntry{"..", parent, S_IFDIR, 2});
  const std::vector<uint32_t>& children = (*view)->Children(node);
  for (uint64_t i = offset < 2 ? 0 : offset - 2; i < children.size() && out.size() < max; ++i) {
    const ViewNode& c = (*view)->nodes()[children[i]];
    out.push_back(DirEntry{c.name, FullIno(DirOf(ino), children[i]),
                           static_cast<uint32_t>(c.kind == ViewNode::Kind::kDir ? S_IFDIR : S_IFREG), i + 3});
  }
  return out;
}

Result<FileSystem::Opened> FileSystem::OpenFull(uint64_t ino, int flags) {
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) {
    return Status::Error(EROFS, ".full views are read-only");
  }
  Result<std::shared_ptr<const FullView>> view = ViewOf(DirOf(ino));
  if (!view.ok()) return view.status();
  const uint32_t node = NodeOf(ino);
  if (node >= (*view)->nodes().size()) return Status::Error(ENOENT, "no such view entry");
  if ((*view)->nodes()[node].kind == ViewNode::Kind::kDir) return Status::Error(EISDIR, "is a directory");
  auto fh = std::make_unique<FileHandle>();
  fh->ino = ino;
  fh->view = std::make_unique<ViewFileReader>(*view, node, std::make_unique<FsShardReader>(this, DirOf(ino)));
  // The files of a committed step never change: let the kernel keep pages.
  return Opened{fh.release(), /*keep_cache=*/true, /*direct_io=*/false};
}

Result<size_t> FileSystem::ReadFull(FileHandle* fh, void* buf, size_t n, uint64_t offset) {
  MutexLock lock(&fh->view_mu);
  Result<size_t> got = fh->view->Read(buf, n, offset);
  if (got.ok()) {
    metrics_.view_bytes_read += *got;
    return got;
  }
  // Whatever went wrong below (a shard missing, malformed or cut short), the
  // reader sees EIO; the reason goes to the events, once per file.
  const ViewNode& node = fh->view->view().nodes()[fh->view->node()];
  std::string path = PathOf(DirOf(fh->ino)) + "/" + kFullDirName + "/";
  if (node.parent == FullView::kBytesDirNode) path += std::string(kBytesDirName) + "/";
  ReportViewError(fh->ino, path + node.name, got.status());
  return Status::Error(EIO, got.status().message());
}

Result<std::string> FileSystem::GetXattrFull(uint64_t ino, const std::string& name) {
  Result<std::shared_ptr<const FullView>> view = ViewOf(DirOf(ino));
  if (!view.ok()) return view.status();
  if (auto v = (*view)->Xattr(NodeOf(ino), name)) return *v;
  return Status::Error(ENODATA, "no such attribute");
}

Result<std::vector<std::string>> FileSystem::ListXattrFull(uint64_t ino) {
  Result<std::shared_ptr<const FullView>> view = ViewOf(DirOf(ino));
  if (!view.ok()) return view.status();
  return (*view)->XattrNames(NodeOf(ino));
}

}  // namespace ckptfs

namespace ckptfs {

// `.full/` views: each call builds or reuses the view (reading the
// checkpoint's metadata outside the namespace lock) and answers from it.
class FileSystem::FullViewNodes final : public VirtualNodes {
 public:
  explicit FullViewNodes(FileSystem* fs) : fs_(fs) {}

  Result<Entry> Lookup(uint64_t parent, const std::string& name) override {
    return fs_->LookupInFull(parent, name);
  }
  Result<Attr> GetAttr(uint64_t ino) override { return fs_->GetAttrFull(ino); }
  Result<std::vector<DirEntry>> Readdir(uint64_t ino, uint64_t offset, size_t max) override {
    return fs_->ReaddirFull(ino, offset, max);
  }
  Status OpenDir(uint64_t ino) override {
    Result<Attr> attr = fs_->GetAttrFull(ino);
    if (!attr.ok()) return attr.status();
    return S_ISDIR(attr->attr.st_mode) ? Status::Ok() : Status::Error(ENOTDIR, "not a directory");
  }
  Result<Opened> Open(uint64_t ino, int flags, const Caller*) override {
    return fs_->OpenFull(ino, flags);
  }
  Result<std::string> GetXattr(uint64_t ino, const std::string& name) override {
    return fs_->GetXattrFull(ino, name);
  }
  Result<std::vector<std::string>> ListXattr(uint64_t ino) override {
    return fs_->ListXattrFull(ino);
  }

 private:
  FileSystem* const fs_;
};

std::unique_ptr<VirtualNodes> FileSystem::MakeFullViewNodes(FileSystem* fs) {
  return std::make_unique<FullViewNodes>(fs);
}

}  // namespace ckptfs
