// Entries that are not in the manifest: the read-only control directory
// /.ckptfs (status.json, events), each run directory's `latest` symlink, and
// the read-only step xattrs. status.json and events are filtered per
// caller (docs/operations.md, "Who sees what"): a user who could not look a
// step's path up through the mount does not learn it from them either. They have short (zero) cache timeouts because
// they change without the kernel's involvement.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "control/status_report.h"
#include "namespace/access_check.h"
#include "namespace/file_handle.h"
#include "namespace/filesystem.h"

namespace ckptfs {

Result<Entry> FileSystemCore::LookupVirtualLocked(uint64_t parent, const std::string& name) {
  uint64_t ino = 0;
  if (parent == kRootIno && name == kControlDirName) {
    ino = kControlDirIno;
  } else if (parent == kControlDirIno && name == "status.json") {
    ino = kStatusFileIno;
  } else if (parent == kControlDirIno && name == "events") {
    ino = kEventsFileIno;
  } else if (parent == kControlDirIno && name == "metrics") {
    ino = kMetricsFileIno;
  } else if (IsRealIno(parent) && name == kLatestName && VirtualLatestOfLocked(parent) != 0) {
    ino = kLatestBit | parent;
  } else {
    return Status::Error(ENOENT, name + " does not exist");
  }
  auto attr = GetAttrVirtualLocked(ino);
  if (!attr.ok()) return attr.status();
  Entry e;
  e.ino = ino;
  e.attr = attr->attr;
  e.entry_timeout = 0;
  e.attr_timeout = 0;
  return e;
}

Result<Attr> FileSystemCore::GetAttrVirtualLocked(uint64_t ino) {
  struct stat st {};
  st.st_ino = ino;
  st.st_nlink = 1;
  st.st_atim = st.st_mtim = st.st_ctim = start_time_;
  st.st_blksize = 4096;
  if (ino == kControlDirIno) {
    st.st_mode = S_IFDIR | 0555;
    st.st_nlink = 2;
  } else if (ino == kStatusFileIno || ino == kEventsFileIno || ino == kMetricsFileIno) {
    st.st_mode = S_IFREG | 0444;
    st.st_size = static_cast<off_t>(RenderControlFileLocked(ino).size());
    st.st_mtim = st.st_ctim = clock_->Now();
  } else if ((ino & kLatestBit) && !(ino & kVirtualBit)) {
    const uint64_t step = VirtualLatestOfLocked(ino & ~kLatestBit);
    if (step == 0) return Status::Error(ENOENT, "no committed step");
    Inode* target = inodes_.Find(step);
    st.st_mode = S_IFLNK | 0444;
    // Owned as its run directory is, so `chown -R` of the run leaves no
    // root-owned entry behind (the link itself cannot be changed).
    if (Inode* run = inodes_.Find(ino & ~kLatestBit)) {
      st.st_uid = run->rec.uid;
      st.st_gid = run->rec.gid;
    }
    st.st_size = static_cast<off_t>(target->name.size());
    st.st_mtim = st.st_ctim = steps_.Find(step)->committed_at;
  } else {
    return Status::Error(ENOENT, "no such inode");
  }
  return Attr{st, 0};
}

std::pair<uint64_t, uint64_t> FileSystemCore::CurrentSizeLocked(uint64_t step_ino) {
  SyncPassthroughWritersLocked();  // user.ckptfs.bytes counts what the kernel wrote
  std::vector<std::pair<std::string, uint64_t>> files;
  if (Inode* dir = inodes_.Find(step_ino)) CollectFilesLocked(dir, &files);
  uint64_t bytes = 0;
  for (const auto& f : files) bytes += inodes_.Find(f.second)->rec.size;
  return {bytes, files.size()};
}

bool FileSystemCore::SeesEverything(const Caller* who) const {
  return who == nullptr || who->uid == 0 || who->uid == options_.owner_uid;
}

bool FileSystemCore::MayLookUpLocked(uint64_t ino, const Caller& who) {
  const Credentials cred{who.uid, who.gid, who.groups};
  Inode* inode = inodes_.Find(ino);
  if (!inode) return false;
  for (uint64_t dir = inode->rec.parent; ; ) {
    Inode* d = inodes_.Find(dir);
    if (!d || !MayAccess(d->rec, cred, X_OK)) return false;
    if (dir == kRootIno) return true;
    dir = d->rec.parent;
  }
}

bool FileSystemCore::MayLookUpPathLocked(const std::string& path, const Caller& who) {
  const Credentials cred{who.uid, who.gid, who.groups};
  Inode* dir = inodes_.Find(kRootIno);
  size_t start = 0;
  for (;;) {
    if (!dir || !dir->is_dir() || !MayAccess(dir->rec, cred, X_OK)) return false;
    const size_t slash = path.find('/', start);
    if (slash == std::string::npos) return true;  // the last name: may be gone
    if (!inodes_.EnsureLoaded(dir).ok()) return false;
    auto child = dir->children.find(path.substr(start, slash - start));
    if (child == dir->children.end()) return false;  // cannot tell: hide it
    dir = inodes_.Find(child->second.ino);
    start = slash + 1;
  }
}

// Events are filtered line by line: one that names a path is shown when the
// caller could look that path up; one that names none is shown only when
// its kind says nothing about paths (remote errors quote object keys).
std::string FileSystemCore::RenderEventsForLocked(const Caller& who) {
  static const std::set<std::string> kPathFree = {"mount", "unmount", "remote_ok", "import_done"};
  std::string out;
  std::istringstream lines(events_->Render());
  std::string line;
  while (std::getline(lines, line)) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_discarded() || !e.is_object()) continue;
    bool show;
    if (e.contains("path") && e["path"].is_string()) {
      show = MayLookUpPathLocked(e["path"].get<std::string>(), who);
    } else {
      show = kPathFree.count(e.value("event", "")) != 0;
    }
    if (show) out += line + "\n";
  }
  return out;
}

std::string FileSystemCore::RenderControlFileLocked(uint64_t ino, const Caller* who) {
  const bool everything = SeesEverything(who);
  if (ino == kEventsFileIno) return everything ? events_->Render() : RenderEventsForLocked(*who);
  if (ino == kMetricsFileIno) return RenderMetricsLocked();
  std::vector<StatusStep> steps;
  for (const auto& [step_ino, rec] : steps_) {
    // Steps inside directories the caller may not search stay unknown to it.
    if (!everything && !MayLookUpLocked(step_ino, *who)) continue;
    StatusStep s{.path = inodes_.PathOf(step_ino), .rec = rec};
    if (rec.state != StepState::kCommitted) {
      // Not frozen yet: what is there now, as the step's xattrs show it.
      std::tie(s.rec.bytes, s.rec.files) = CurrentSizeLocked(step_ino);
    }
    if (options_.remote && rec.state == StepState::kCommitted) {
      const UploadProgress p = ProgressLocked(step_ino);
      s.upload = StatusStep::Upload{p.bytes_done, p.bytes_total, p.files_done, p.files_total};
    }
    steps.push_back(std::move(s));
  }
  std::sort(steps.begin(), steps.end(),
            [](const StatusStep& a, const StatusStep& b) { return a.path < b.path; });
  StatusInfo info;
  info.mountpoint = options_.mountpoint;
  info.cache_dir = options_.cache_dir;
  if (auto space = data_->Capacity(); space.ok()) {
    info.cache_bytes_total = space->blocks * space->block_size;
    info.cache_bytes_free = space->blocks_avail * space->block_size;
  }
  info.holdings = HoldingsLocked();
  if (tier_) tier_->AddStatus(&info.extra);
  info.extra["passthrough"] = passthrough_.Status();
  if (fuse_status_) info.extra["fuse"] = fuse_status_();
  if (cluster_) cluster_->AddStatus(&info.extra);
  // The remote's last error quotes object keys, that is paths.
  if (!everything && info.extra.contains("remote")) info.extra["remote"]["last_error"] = nullptr;
  // Whether metadata changes are being recorded: "error" means the mount is
  // read-only until the manifest can be written again (a full cache disk).
  const ManifestHealth health = journal_.Health();
  nlohmann::json manifest = {{"state", health.ok ? "ok" : "error"},
                             {"metadata_reserve_bytes", reserve_->reserve_bytes()}};
  if (!health.ok) {
    manifest["error"] = health.error;
    manifest["errno"] = health.err == ENOSPC ? "ENOSPC" : "EIO";
    manifest["since_s"] = health.since_s;
    manifest["pending_batches"] = health.pending_batches;
    manifest["needs_remount"] = health.needs_restart;
  }
  info.extra["manifest"] = std::move(manifest);
  return RenderStatusJson(info, steps);
}

// Totals over the whole mount, whoever reads status.json: sums show no
// path, and the cache filesystem's own free space is no more private.
Holdings FileSystemCore::HoldingsLocked() {
  Holdings h;
  h.local_bytes = ResidentBytesLocked();
  for (const auto& [step_ino, rec] : steps_) {
    if (rec.state == StepState::kCommitted) {
      h.committed_bytes += rec.bytes;
      if (rec.persisted) h.persisted_bytes += rec.bytes;
    } else if (rec.state == StepState::kWriting) {
      h.writing_bytes += CurrentSizeLocked(step_ino).first;
    }
  }
  for (const TierPort::EvictionCandidate& c : EvictionCandidatesLocked())
    h.evictable_bytes += c.bytes;
  return h;
}

std::optional<std::string> FileSystemCore::StepXattrLocked(uint64_t ino, const std::string& name) {
  auto it = steps_.find(ino);
  if (it == steps_.end() || name.rfind("user.ckptfs.", 0) != 0) return std::nullopt;
  const StepRecord& rec = it->second;
  const std::string key = name.substr(12);
  if (key == "state") {
    const StepRuntime* rt = steps_.FindRuntime(ino);
    if (rt && rt->committing) return std::string("writing");
    return std::string(StepStateName(rec.state));
  }
  if (key == "step") return std::to_string(rec.step);
  if (key == "bytes" || key == "files") {
    if (rec.state == StepState::kCommitted) return std::to_string(key == "bytes" ? rec.bytes : rec.files);
    // Before commit: what is there now.
    const auto [bytes, files] = CurrentSizeLocked(ino);
    return std::to_string(key == "bytes" ? bytes : files);
  }
  if (key == "committed_at") {
    if (rec.state != StepState::kCommitted) return std::nullopt;
    char buf[64];
    snprintf(buf, sizeof buf, "%.6f", TimespecToSeconds(rec.committed_at));
    return std::string(buf);
  }
  if (key == "error") return rec.error;
  if (key == "persisted") return std::string(rec.persisted ? "true" : "false");
  return std::nullopt;
}

}  // namespace ckptfs

namespace ckptfs {

// /.ckptfs, its generated files and the runs' `latest` links: served from
// the in-memory image, under the namespace lock.
class FileSystem::ControlNodes final : public VirtualNodes {
 public:
  explicit ControlNodes(FileSystem* fs) : fs_(fs) {}

  Result<Entry> Lookup(uint64_t parent, const std::string& name) override {
    MutexLock lock(&fs_->mu_);
    return fs_->LookupVirtualLocked(parent, name);
  }

  Result<Attr> GetAttr(uint64_t ino) override {
    MutexLock lock(&fs_->mu_);
    return fs_->GetAttrVirtualLocked(ino);
  }

  Result<std::vector<DirEntry>> Readdir(uint64_t ino, uint64_t offset, size_t max) override {
    if (ino != kControlDirIno) return Status::Error(ENOTDIR, "not a directory");
    const std::pair<const char*, uint64_t> fixed[] = {{".", kControlDirIno},
                                                      {"..", kRootIno},
                                                      {"status.json", kStatusFileIno},
                                                      {"events", kEventsFileIno},
                                                      {"metrics", kMetricsFileIno}};
    std::vector<DirEntry> out;
    for (uint64_t i = offset; i < 5 && out.size() < max; ++i) {
      out.push_back(DirEntry{fixed[i].first, fixed[i].second,
                             static_cast<uint32_t>(i < 2 ? S_IFDIR : S_IFREG), i + 1});
    }
    return out;
  }

  Status OpenDir(uint64_t ino) override {
    return ino == kControlDirIno ? Status::Ok() : Status::Error(ENOTDIR, "not a directory");
  }

  Result<Opened> Open(uint64_t ino, int flags, const Caller* who) override {
    if (ino != kStatusFileIno && ino != kEventsFileIno && ino != kMetricsFileIno) {
      return Status::Error(EISDIR, "not a regular file");
    }
    if ((flags & O_ACCMODE) != O_RDONLY) {
      return Status::Error(EROFS, "ckptfs control files are read-only");
    }
    auto fh = std::make_unique<FileHandle>();
    fh->ino = ino;
    {
      // Rendered once at open: a reader sees one consistent snapshot.
      MutexLock lock(&fs_->mu_);
      fh->content = fs_->RenderControlFileLocked(ino, who);
    }
    return Opened{fh.release(), false, true};
  }

  Result<std::string> GetXattr(uint64_t, const std::string&) override {
    return Status::Error(ENODATA, "no such attribute");
  }

  Result<std::vector<std::string>> ListXattr(uint64_t) override {
    return std::vector<std::string>{};
  }

 private:
  FileSystem* const fs_;
};

std::unique_ptr<VirtualNodes> FileSystem::MakeControlNodes(FileSystem* fs) {
  return std::make_unique<ControlNodes>(fs);
}

}  // namespace ckptfs
