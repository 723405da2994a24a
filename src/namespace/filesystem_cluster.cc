// The namespace's side of cluster mode (SPEC section 9, docs/cluster.md):
// this node's part of a step, the step record the cluster decided applied
// to the local image (the committing node's FinishCommit and every other
// node's refresh use the same code), and what the committing node learns
// of other nodes' uploads. The ClusterBook (src/tiering) does the I/O.
#include <algorithm>
#include <set>

#include "common/time_convert.h"
#include "namespace/file_handle.h"
#include "namespace/filesystem.h"

namespace ckptfs {

namespace {

int64_t MtimeNanos(const Inode& inode) { return TimespecToNanos(inode.rec.mtime); }

}  // namespace

void FileSystem::SetClusterHooks(ClusterHooks* hooks) {
  MutexLock lock(&mu_);
  cluster_ = hooks;
}

// OLMo-core's staging directory: "step20-tmp" beside where "step20" goes.
// Each node's local rank 0 renames its own into the step, with no barrier
// before global rank 0 writes the step's metadata on its node, so a node's
// staged files must already count as its part of the step.
std::string FileSystemCore::StagedStepPathLocked(uint64_t ino) {
  constexpr const char* kSuffix = "-tmp";
  for (int depth = 0; ino != 0 && ino != kRootIno && depth < 64; depth++) {
    Inode* inode = inodes_.Find(ino);
    if (!inode) return "";
    const std::string& name = inode->name;
    if (inode->is_dir() && name.size() > 4 && name.compare(name.size() - 4, 4, kSuffix) == 0 &&
        !steps_.count(ino)) {
      const std::string target = name.substr(0, name.size() - 4);
      if (pattern_.Match(target) && steps_.StepOf(inodes_, inode->rec.parent) == 0) {
        const std::string parent = inodes_.PathOf(inode->rec.parent);
        return parent.empty() ? target : parent + "/" + target;
      }
    }
    ino = inode->rec.parent;
  }
  return "";
}

uint64_t FileSystemCore::StagingDirOfLocked(const std::string& step_path) {
  const uint64_t ino = ResolveRelativeLocked(kRootIno, step_path + "-tmp");
  Inode* dir = ino ? inodes_.Find(ino) : nullptr;
  return dir && dir->is_dir() && !steps_.count(ino) ? ino : 0;
}

std::string FileSystemCore::ClusterStepOfLocked(uint64_t ino) {
  if (!cluster_) return "";
  const uint64_t step = steps_.StepOf(inodes_, ino);
  if (step == 0) return StagedStepPathLocked(ino);
  auto it = steps_.find(step);
  if (it == steps_.end() || it->second.state == StepState::kCommitted ||
      it->second.state == StepState::kDeleting) {
    return "";
  }
  // Callers publish this node's part of the step: its uploads now wait for
  // the commit (CommitPendingSinceNs).
  if (it->second.state == StepState::kWriting) cluster_published_[step] = clock_->MonotonicNanos();
  return inodes_.PathOf(step);
}

int64_t FileSystem::CommitPendingSinceNs() {
  MutexLock lock(&mu_);
  int64_t newest = 0;
  for (const auto& [ino, rt] : steps_.runtimes()) {
    if (rt.commit_wanted) newest = std::max(newest, rt.wanted_since);
  }
  for (auto it = cluster_published_.begin(); it != cluster_published_.end();) {
    auto step = steps_.find(it->first);
    if (step == steps_.end() || step->second.state != StepState::kWriting) {
      it = cluster_published_.erase(it);  // committed, given up on or removed
      continue;
    }
    newest = std::max(newest, it->second);
    ++it;
  }
  return newest;
}

std::string FileSystemCore::FirstWriterPublicationLocked(uint64_t ino) {
  if (!cluster_) return "";
  const std::string step_path = ClusterStepOfLocked(ino);
  if (step_path.empty()) return "";
  // Every open for writing may change bytes SyncPart made durable.
  cluster_writer_opens_[step_path]++;
  Inode* inode = inodes_.Find(ino);
  if (!inode || inode->unflushed_writers != 1) return "";
  uint64_t dir_ino = steps_.StepOf(inodes_, ino);
  if (dir_ino == 0) dir_ino = StagingDirOfLocked(step_path);
  Inode* dir = dir_ino ? inodes_.Find(dir_ino) : nullptr;
  if (!dir || UnflushedWritersUnderLocked(dir) != 1) return "";
  return step_path;
}

Status FileSystem::PublishPartOf(const std::string& step_path, bool watch) {
  if (step_path.empty() || !cluster_) return Status::Ok();
  Status st = cluster_->PublishPart(step_path);
  // This mount's node name was taken over (--replace-node): it is read-only
  // for the cluster's steps, and says why (the book logged it once).
  if (st.err() == EROFS) return st;
  if (!st.ok()) {
    // The trainer's close fails: its file is on this node's disk, but the
    // committing node could not know of it, so the save must not go on as if
    // it were part of the checkpoint.
    events_->Append({{"event", "error"}, {"kind", "cluster_publish"}, {"path", step_path},
                     {"error", st.message()}});
    return Status::Error(EIO, "cannot publish this node's part of " + step_path + " to the cluster: " +
                                  st.message());
  }
  if (watch) cluster_->WatchForCommit(step_path);
  return Status::Ok();
}

void FileSystem::MaybeRefreshCluster() {
  if (cluster_) cluster_->MaybeRefresh();
}

void FileSystem::RefreshClusterForRetention(uint64_t step_ino) {
  if (!cluster_) return;
  {
    MutexLock lock(&mu_);
    Inode* step = inodes_.Find(step_ino);
    Inode* run = step ? inodes_.Find(step->rec.parent) : nullptr;
    if (!run || !run->is_dir() || PolicyOf(run).empty()) return;  // nothing to plan
  }
  cluster_->RefreshForRetention();
}

PartRecord::File FileSystemCore::PartFileLocked(const Inode& file, const std::string& rel) {
  PartRecord::File f;
  f.path = rel;
  f.size = file.rec.size;
  f.mode = file.rec.mode & 07777;
  f.mtime_ns = MtimeNanos(file);
  return f;
}

void FileSystemCore::CollectPartLocked(Inode* dir, PartRecord* part, std::vector<uint64_t>* inos) {
  inodes_.WalkBelow(dir, [&](Inode* child, const std::string& rel) REQUIRES(mu_) {
    if (child->is_dir()) {
      part->dirs.push_back(rel);
    } else if (child->is_symlink()) {
      part->symlinks.push_back({rel, child->rec.symlink_target});
    } else if (child->is_reg()) {
      // Files materialised from other nodes' parts are theirs.
      if (child->object && !child->object->owner_node.empty()) return true;
      PartRecord::File f = PartFileLocked(*child, rel);
      const bool current = ObjectIsCurrent(*child, part->step_path + "/" + rel) &&
                           !ledger_.IsQueued(child->rec.ino) && child->object->crc_known;
      if (current) {
        f.uploaded = true;
        f.crc32c = child->object->crc32c;
        const ObjectRecord& o = *child->object;
        if (!o.chunk_crcs.empty() && (part->chunk_size == 0 || part->chunk_size == o.chunk_size)) {
          part->chunk_size = o.chunk_size;
          f.chunks = o.chunk_crcs;
        }
      }
      if (inos && !current) inos->push_back(child->rec.ino);
      part->files.push_back(std::move(f));
    }
    return true;
  });
}

Result<PartRecord> FileSystem::PartSnapshot(const std::string& step_path) {
  MutexLock lock(&mu_);
  return PartSnapshotLocked(step_path);
}

Result<PartRecord> FileSystemCore::PartSnapshotLocked(const std::string& step_path) {
  return PartSnapshotLocked(step_path, nullptr);
}

Result<PartRecord> FileSystemCore::PartSnapshotLocked(const std::string& step_path,
                                                      std::vector<uint64_t>* inos) {
  const uint64_t step = ResolveRelativeLocked(kRootIno, step_path);
  auto it = steps_.find(step);
  Inode* dir = step ? inodes_.Find(step) : nullptr;
  const uint64_t staging = StagingDirOfLocked(step_path);
  if ((it == steps_.end() || !dir) && staging == 0) return Status::Error(ENOENT, step_path + " is not a step here");
  PartRecord part;
  part.step_path = step_path;
  if (it != steps_.end() && dir) CollectPartLocked(dir, &part, inos);
  if (staging != 0) {
    // Files still in the staging directory: this node's part all the same,
    // marked as staged until the node renames the directory into the step.
    PartRecord staged;
    staged.step_path = step_path;
    Inode* staging_dir = inodes_.Find(staging);
    CollectPartLocked(staging_dir, &staged, inos);
    std::set<std::string> have;
    for (const auto& f : part.files) have.insert(f.path);
    for (auto& f : staged.files) {
      // Not uploaded from there: the upload starts once it is in the step.
      f.uploaded = false;
      f.crc32c.reset();
      f.chunks.clear();
      if (!have.count(f.path)) part.files.push_back(std::move(f));
    }
    for (auto& d : staged.dirs) part.dirs.push_back(std::move(d));
    for (auto& l : staged.symlinks) part.symlinks.push_back(std::move(l));
    part.staged_as = staging_dir->name;
    if (it == steps_.end() || !dir) dir = staging_dir;
  }
  std::sort(part.dirs.begin(), part.dirs.end());
  part.dirs.erase(std::unique(part.dirs.begin(), part.dirs.end()), part.dirs.end());
  std::sort(part.files.begin(), part.files.end(),
            [](const PartRecord::File& a, const PartRecord::File& b) { return a.path < b.path; });
  part.all_uploaded = !part.files.empty() &&
                      std::all_of(part.files.begin(), part.files.end(), [](const auto& f) { return f.uploaded; });
  // Files written since their writer's last close(): a file whose close
  // is publishing this part has been flushed, though its RELEASE is to come.
  part.open_writers = UnflushedWritersUnderLocked(dir);
  // Activity is kept on the monotonic clock; the record carries wall time.
  const StepRuntime* rt = steps_.FindRuntime(step);
  const int64_t idle_ns = rt && rt->last_activity > 0 ? clock_->MonotonicNanos() - rt->last_activity : 0;
  part.last_activity = std::max(0.0, static_cast<double>(TimespecToNanos(clock_->Now()) - idle_ns) / 1e9);
  // A committed step's files were made durable before its commit (by this
  // node's commit, or by SyncPart before another node's).
  const bool committed = it != steps_.end() && it->second.state == StepState::kCommitted;
  part.synced = part.open_writers == 0 && (committed || PartDurableLocked(part));
  return part;
}

namespace {

// What a power loss could undo in a part: its files' names, sizes, modes
// and mtimes, its directories and links (not what uploads recorded).
std::string PartShape(const PartRecord& part) {
  std::string shape;
  for (const auto& f : part.files) {
    shape += f.path + '\0' + std::to_string(f.size) + '\0' + std::to_string(f.mode) + '\0' +
             std::to_string(f.mtime_ns) + '\n';
  }
  for (const auto& d : part.dirs) shape += d + "/\n";
  for (const auto& l : part.symlinks) shape += l.path + " -> " + l.target + '\n';
  return shape + part.staged_as;
}

}  // namespace

bool FileSystemCore::PartDurableLocked(const PartRecord& part) {
  // Nothing here but files already in the bucket: durable there.
  if (std::all_of(part.files.begin(), part.files.end(), [](const auto& f) { return f.uploaded; })) {
    return true;
  }
  auto it = cluster_durable_.find(part.step_path);
  if (it == cluster_durable_.end()) return false;
  auto opens = cluster_writer_opens_.find(part.step_path);
  const uint64_t now = opens == cluster_writer_opens_.end() ? 0 : opens->second;
  return it->second.writer_opens == now && it->second.shape == PartShape(part);
}

std::vector<std::string> FileSystem::PartsToResync() {
  MutexLock lock(&mu_);
  std::vector<std::string> out;
  if (!recovered_same_boot_) return out;
  for (const auto& [ino, rec] : steps_) {
    if (rec.state != StepState::kWriting && rec.state != StepState::kIncomplete) continue;
    const std::string path = inodes_.PathOf(ino);
    auto part = PartSnapshotLocked(path);
    if (part.ok() && !part->synced &&
        std::any_of(part->files.begin(), part->files.end(),
                    [](const auto& f) { return !f.uploaded; })) {
      out.push_back(path);
    }
  }
  return out;
}

Result<bool> FileSystem::SyncPart(const std::string& step_path) {
  std::vector<uint64_t> inos;
  DurablePart before;
  {
    MutexLock lock(&mu_);
    auto part = PartSnapshotLocked(step_path, &inos);
    if (!part.ok()) return part.status();
    if (part->synced || part->open_writers > 0) return part->synced;
    before.shape = PartShape(*part);
    before.writer_opens = cluster_writer_opens_[step_path];
  }
  // The bytes (one syncfs of the cache filesystem for many files, as a
  // commit does), the backing directory, then the names: a synced manifest
  // write makes every earlier one durable.
  uint64_t failed_ino = 0;
  CKPTFS_RETURN_IF_ERROR(
      data_->SyncFiles(inos, &failed_ino).Annotate("fsync of this node's part of " + step_path));
  CKPTFS_RETURN_IF_ERROR(data_->SyncDir().Annotate("fsync of the data directory"));
  MutexLock lock(&mu_);
  Transaction txn = BeginLocked();
  txn.batch()->Put(KeySpace::kMeta, "fsyncdir_seq", std::to_string(++fsyncdir_seq_));
  CKPTFS_RETURN_IF_ERROR(txn.WriteSynced().Annotate("syncing the manifest"));
  // Steps that are no longer written here need no entry.
  for (auto it = cluster_durable_.begin(); it != cluster_durable_.end();) {
    it = it->first != step_path && !cluster_writer_opens_.count(it->first)
             ? cluster_durable_.erase(it)
             : std::next(it);
  }
  if (cluster_writer_opens_[step_path] != before.writer_opens) return false;  // opened meanwhile
  cluster_durable_[step_path] = std::move(before);
  auto now = PartSnapshotLocked(step_path);
  return now.ok() && now->synced;
}

namespace {

ClusterPort::StepView ViewOfRecord(const StepRecord& rec, const ClusterHooks* cluster) {
  ClusterPort::StepView v;
  v.committed = rec.state == StepState::kCommitted;
  v.persisted = v.committed && rec.persisted;
  v.committed_here = v.committed && cluster && rec.committer == cluster->node();
  v.follows_removal = rec.follows_removal;
  v.decision = v.committed ? rec.decision : "";
  return v;
}

}  // namespace

std::map<std::string, ClusterPort::StepView> FileSystem::StepViews() {
  MutexLock lock(&mu_);
  std::map<std::string, StepView> out;
  for (const auto& [ino, rec] : steps_) out[inodes_.PathOf(ino)] = ViewOfRecord(rec, cluster_);
  return out;
}

std::optional<ClusterPort::StepView> FileSystem::StepViewOf(const std::string& step_path) {
  MutexLock lock(&mu_);
  auto it = steps_.find(ResolveRelativeLocked(kRootIno, step_path));
  if (it == steps_.end()) return std::nullopt;
  return ViewOfRecord(it->second, cluster_);
}

Status FileSystemCore::ApplyClusterRecordLocked(uint64_t step_ino, const ClusterStepRecord& record,
                                                ManifestBatch* batch,
                                                std::vector<uint64_t>* sealed) {
  Inode* dir = inodes_.Find(step_ino);
  if (!dir) return Status::Error(ENOENT, record.step_path + " vanished");
  // Committed: its files are sealed here, nothing of the part changes now.
  cluster_writer_opens_.erase(record.step_path);
  cluster_durable_.erase(record.step_path);
  const std::string me = cluster_ ? cluster_->node() : options_.node;
  std::vector<std::pair<std::string, uint64_t>> local;
  CollectFilesLocked(dir, &local);
  std::map<std::string, uint64_t> local_by_path(local.begin(), local.end());
  std::set<std::string> listed;
  for (const auto& f : record.files) listed.insert(f.path);
  // Files here that the record does not list (written after the part the
  // decision used was published) are not part of the checkpoint.
  for (const auto& [path, ino] : local_by_path) {
    if (listed.count(path)) continue;
    Inode* inode = inodes_.Find(ino);
    Inode* parent = inode ? inodes_.Find(inode->rec.parent) : nullptr;
    if (!inode || !parent) continue;
    events_->Append({{"event", "warning"},
                     {"kind", "cluster_late_file"},
                     {"path", record.step_path + "/" + path},
                     {"error",
                      "not in the step record the cluster decided (opened after the decision, or a "
                      "shard of another save); removed from the committed step"}});
    pending_invalidations_.emplace_back(parent->rec.ino, inode->name);
    inodes_.RemoveChild(parent, inode->name, clock_->Now(), batch);
    DropLinkLocked(inode, batch);
  }
  for (const auto& d : record.dirs) CKPTFS_RETURN_IF_ERROR(EnsureDirPathLocked(dir, d, batch).status());
  for (const auto& f : record.files) {
    auto found = local_by_path.find(f.path);
    Inode* inode = found == local_by_path.end() ? nullptr : inodes_.Find(found->second);
    const bool mine = f.node == me;
    if (inode && inode->rec.nlink > 0 && (!inode->object || inode->object->owner_node.empty() ||
                                          inode->object->owner_node == f.node)) {
      if (mine && inode->rec.size == f.size && !(inode->object && !inode->object->owner_node.empty())) {
        if (!inode->rec.sealed) {
          inode->rec.sealed = true;
          InodeTable::Put(*inode, batch);
          sealed->push_back(inode->rec.ino);
        }
        if (options_.remote && !ledger_.IsQueued(inode->rec.ino) &&
            !ObjectIsCurrent(*inode, record.step_path + "/" + f.path)) {
          QueueUploadLocked(inode, batch);
        }
        continue;
      }
      if (!mine && inode->object && inode->object->owner_node == f.node && inode->rec.size == f.size) continue;
    }
    if (inode) {
      // Another node's file under the same name, or a local copy that is
      // not what the record says: the record wins. The kernel forgets the
      // name too: its entry, and the pages cached for it, are the old file's.
      if (Inode* parent = inodes_.Find(inode->rec.parent)) {
        pending_invalidations_.emplace_back(parent->rec.ino, inode->name);
        inodes_.RemoveChild(parent, inode->name, clock_->Now(), batch);
        DropLinkLocked(inode, batch);
      }
    }
    SealedFile sealed_file;
    sealed_file.path = f.path;
    sealed_file.mode = f.mode;
    sealed_file.mtime_ns = f.mtime_ns;
    sealed_file.ctime = SecondsToTimespec(record.committed_at);
    ObjectRecord& obj = sealed_file.object;
    obj.key = record.step_path + "/" + f.path;
    obj.size = f.size;
    obj.mtime_ns = f.mtime_ns;
    obj.crc32c = f.crc32c.value_or(0);
    // Nothing to fetch for an empty file; otherwise reads wait for the owner's
    // part record to say the upload is done, with its chunk CRCs.
    obj.resident = f.size == 0;
    obj.crc_known = f.size == 0;
    obj.owner_node = f.node;
    CKPTFS_RETURN_IF_ERROR(AddSealedFileLocked(dir, sealed_file, batch).status());
  }
  for (const auto& s : record.symlinks) {
    // A link this node already has under the name stays.
    CKPTFS_RETURN_IF_ERROR(
        AddSealedSymlinkLocked(dir, s.path, s.target, /*keep_existing=*/true, batch));
  }
  return Status::Ok();
}

CommitFacts FileSystemCore::ClusterCommitFacts(const StepRecord& before,
                                               const ClusterStepRecord& record) {
  CommitFacts facts;
  facts.committed_at = SecondsToTimespec(record.committed_at);
  facts.bytes = record.bytes;
  facts.files = record.files.size();
  facts.ephemeral = record.ephemeral;
  facts.session = before.session;
  facts.best_ref = record.best_ref;
  facts.committer = record.committer;
  facts.decision = record.proposal;
  return facts;
}

Status FileSystem::ApplyClusterStep(const ClusterStepRecord& record) {
  MutexLock lock(&mu_);
  CKPTFS_RETURN_IF_ERROR(CheckHealthyLocked());
  auto split = SplitStepPath(record.step_path);
  if (!split.ok()) return split.status();
  const std::vector<std::string>& parts = *split;
  if (!pattern_.Match(parts.back())) {
    return Status::Error(EINVAL, parts.back() + " does not match the step pattern of this mount");
  }
  Transaction txn = BeginLocked();
  uint64_t step_ino = ResolveRelativeLocked(kRootIno, record.step_path);
  if (step_ino == 0 && StagingDirOfLocked(record.step_path) != 0) {
    // This node's files still sit in its staging directory: the step appears
    // here when the node renames it into place (and commits it then), so the
    // trainer's rename does not meet a directory of that name.
    return Status::Error(EAGAIN, record.step_path + " is still staged here");
  }
  if (step_ino != 0) {
    auto it = steps_.find(step_ino);
    if (it == steps_.end()) return Status::Error(EEXIST, record.step_path + " is not a step here");
    if (it->second.state == StepState::kCommitted || it->second.state == StepState::kDeleting) {
      return Status::Ok();
    }
    if (const StepRuntime* rt = steps_.FindRuntime(step_ino); rt && rt->committing) {
      return Status::Error(EAGAIN, record.step_path + " is being committed here");
    }
  } else {
    Inode* root = inodes_.Find(kRootIno);
    std::string run;
    for (size_t i = 0; i + 1 < parts.size(); i++) run += (i ? "/" : "") + parts[i];
    auto run_dir = EnsureDirPathLocked(root, run, txn.batch());
    if (!run_dir.ok()) return run_dir.status();
    if (steps_.StepOf(inodes_, (*run_dir)->rec.ino) != 0) {
      return Status::Error(EINVAL, record.step_path + " would be inside a step here");
    }
    const Caller owner{.uid = root->rec.uid, .gid = root->rec.gid};
    auto made =
        NewInodeLocked(owner, (*run_dir)->rec.ino, parts.back(), S_IFDIR | 0755, txn.batch());
    if (!made.ok()) return made.status();
    inodes_.AddChild(*run_dir, parts.back(), *made, clock_->Now(), txn.batch());
    InodeTable::Put(**run_dir, txn.batch());
    step_ino = (*made)->rec.ino;
    if (record.dir_mtime_ns > 0) (*made)->rec.mtime = NanosToTimespec(record.dir_mtime_ns);
    steps_.AddWriting(step_ino, *pattern_.Match(parts.back()), clock_->MonotonicNanos(),
                      txn.batch());
  }
  std::vector<uint64_t> sealed;
  CKPTFS_RETURN_IF_ERROR(ApplyClusterRecordLocked(step_ino, record, txn.batch(), &sealed));
  steps_.Commit(step_ino, ClusterCommitFacts(*steps_.Find(step_ino), record), txn.batch());
  const StepRecord rec = *steps_.Find(step_ino);
  if (StepRuntime* rt = steps_.FindRuntime(step_ino)) {
    rt->EndRequest();
    rt->recovered = false;
    rt->outcome_gen++;
  }
  step_cv_.notify_all();
  Status st = txn.WriteSyncedOrDiscard();
  if (!st.ok()) {
    journal_.MarkDiverged();
    return st;
  }
  for (uint64_t ino : sealed) {
    if (Inode* inode = inodes_.Find(ino)) inode->dirty = false;
  }
  SaveEndedLocked(step_ino);
  cluster_removed_paths_.erase(record.step_path);  // its uploads may start
  if (tier_) tier_->UploadsQueued();
  RepublishUploadedPartLocked(record.step_path);
  events_->Append({{"event", "commit"}, {"path", record.step_path}, {"step", rec.step}, {"state", "committed"},
                   {"bytes", rec.bytes}, {"files", rec.files}, {"committer", record.committer}});
  return Status::Ok();
}

void FileSystemCore::RepublishUploadedPartLocked(const std::string& step_path) {
  // Uploads of this node's files that ended before it learnt of the commit
  // (the tier's commit hold ran out, and a kill -9 since may have lost the
  // part's PUT that said so): the committing node's persist duty reads them
  // from the part, so it is put again. Rare: uploads normally wait for the
  // commit.
  auto part = PartSnapshotLocked(step_path);
  if (part.ok() && std::any_of(part->files.begin(), part->files.end(),
                               [](const PartRecord::File& f) { return f.uploaded; })) {
    cluster_->PartUploadsChanged(step_path);
  }
}

Status FileSystem::ApplyClusterPersisted(const std::string& step_path) {
  MutexLock lock(&mu_);
  const uint64_t step = ResolveRelativeLocked(kRootIno, step_path);
  auto it = steps_.find(step);
  Transaction txn = BeginLocked();
  if (it == steps_.end() || !steps_.SetPersisted(step, true, txn.batch())) return Status::Ok();
  EmitStepEventLocked("persisted", step, it->second);
  return txn.Write();
}

void FileSystemCore::AnnounceClusterRemovalLocked(uint64_t step_ino, const StepRecord& rec,
                                                  ManifestBatch* batch) {
  if (!cluster_ || rec.committer.empty() || rec.state != StepState::kCommitted) return;
  const std::string path = inodes_.PathOf(step_ino);
  // Removed here or by another node: a save of the name again waits for its
  // commit to upload (cluster_removed_paths_).
  cluster_removed_paths_.insert(path);
  if (applying_cluster_removal_) return;
  // Owed to the cluster until the book has done it, across a kill -9.
  batch->Put(KeySpace::kMeta, kClusterRemovalPrefix + path, "");
  cluster_->StepRemoved(path);
}

std::vector<std::string> FileSystem::PartsToRepublish() {
  MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [ino, rec] : steps_) {
    if (rec.state != StepState::kCommitted || rec.persisted || rec.committer.empty()) continue;
    const std::string path = inodes_.PathOf(ino);
    auto part = PartSnapshotLocked(path);
    if (part.ok() && !part->files.empty()) out.push_back(path);
  }
  return out;
}

std::vector<std::string> FileSystem::PendingClusterRemovals() {
  MutexLock lock(&mu_);
  std::vector<std::string> out;
  Status st = manifest_->Scan(
      KeySpace::kMeta, kClusterRemovalPrefix, [&](std::string_view key, std::string_view) {
        out.emplace_back(key.substr(std::string_view(kClusterRemovalPrefix).size()));
        return true;
      });
  if (!st.ok()) {
    events_->Append({{"event", "error"},
                     {"kind", "cluster_remove"},
                     {"error", "reading the removals owed to the cluster: " + st.message()}});
  }
  return out;
}

void FileSystem::ClusterRemovalDone(const std::string& step_path) {
  MutexLock lock(&mu_);
  Transaction txn = BeginLocked();
  txn.batch()->Delete(KeySpace::kMeta, kClusterRemovalPrefix + step_path);
  // Unsynced: lost with a power loss, the removal is only done again.
  (void)txn.Write();
}

Status FileSystem::RemoveClusterStep(const std::string& step_path) {
  MutexLock lock(&mu_);
  const uint64_t step = ResolveRelativeLocked(kRootIno, step_path);
  auto it = steps_.find(step);
  // Writing: never committed here. Deleting: this node is removing it itself
  // (an rm -rf in progress must not find its files gone under it).
  if (it == steps_.end() || it->second.state == StepState::kWriting || it->second.state == StepState::kDeleting) {
    return Status::Ok();
  }
  if (const StepRuntime* rt = steps_.FindRuntime(step); rt && rt->committing) return Status::Ok();
  return ApplyClusterRemovalLocked(step);
}

Status FileSystemCore::ApplyClusterRemovalLocked(uint64_t step_ino) {
  Transaction txn = BeginLocked();
  applying_cluster_removal_ = true;
  RemoveStepLocked(step_ino, "removed by another node of the cluster", txn.batch());
  applying_cluster_removal_ = false;
  // Synced: the batch queues the deletion of what this node uploaded of the
  // step (some of it perhaps after the removing node's sweep). A power loss
  // that lost it would leave those objects in the bucket for good: applied
  // again, the removal finds nothing here that says they were uploaded.
  return txn.WriteSynced();
}

Result<bool> FileSystem::DropLeftoverStep(const std::string& step_path,
                                          const std::string& tombstone) {
  MutexLock lock(&mu_);
  const uint64_t step = ResolveRelativeLocked(kRootIno, step_path);
  auto it = steps_.find(step);
  if (it == steps_.end() || it->second.state == StepState::kCommitted ||
      it->second.state == StepState::kDeleting ||
      (!tombstone.empty() && it->second.follows_removal == tombstone) ||
      FollowsAnyRemoval(it->second.follows_removal)) {
    return false;
  }
  if (const StepRuntime* rt = steps_.FindRuntime(step); rt && rt->committing) return false;
  // A save of the name that the cluster committed and then removed, which
  // this node never saw committed (it learnt of neither in time): what it
  // holds of it is that removed step's, as a shared namespace would have
  // removed it too. Left alone, it would stay `writing` for ever, and a
  // commit request here would decide the removed step again.
  events_->Append({{"event", "warning"},
                   {"kind", "cluster_leftover"},
                   {"path", step_path},
                   {"state", StepStateName(it->second.state)},
                   {"error",
                    "left over from a save of the name that another node removed for "
                    "the cluster; dropped here"}});
  CKPTFS_RETURN_IF_ERROR(ApplyClusterRemovalLocked(step));
  return true;
}

void FileSystem::FollowRemoval(const std::string& step_path, const std::string& tombstone) {
  MutexLock lock(&mu_);
  const uint64_t step = ResolveRelativeLocked(kRootIno, step_path);
  auto it = steps_.find(step);
  if (it == steps_.end() || it->second.follows_removal == tombstone) return;
  it->second.follows_removal = tombstone;
  Transaction txn = BeginLocked();
  StepBook::Put(step, it->second, txn.batch());
  (void)txn.Write();  // lost: the next refresh asks the bucket again
}

std::vector<ClusterPort::AwaitedPart> FileSystem::PartsAwaited() {
  MutexLock lock(&mu_);
  std::vector<AwaitedPart> out;
  if (!cluster_) return out;
  for (const auto& [ino, rec] : steps_) {
    if (rec.state != StepState::kCommitted || rec.persisted || rec.committer != cluster_->node()) continue;
    Inode* dir = inodes_.Find(ino);
    if (!dir) continue;
    std::vector<std::pair<std::string, uint64_t>> files;
    CollectFilesLocked(dir, &files);
    std::set<std::string> owners;
    for (const auto& [path, file_ino] : files) {
      Inode* f = inodes_.Find(file_ino);
      if (f && f->object && !f->object->owner_node.empty() && !f->object->crc_known) {
        owners.insert(f->object->owner_node);
      }
    }
    const std::string path = inodes_.PathOf(ino);
    for (const auto& o : owners) out.push_back({path, o});
  }
  return out;
}

bool FileSystemCore::NoteRemoteUploadLocked(Inode* inode, const PartRecord& part,
                                            const PartRecord::File& f, ManifestBatch* batch) {
  if (!inode || !inode->object || inode->object->owner_node != part.node || inode->object->crc_known) return false;
  if (!f.uploaded || !f.crc32c || f.size != inode->rec.size) return false;
  ObjectRecord& o = *inode->object;
  o.crc32c = *f.crc32c;
  o.crc_known = true;
  if (!f.chunks.empty()) {
    o.chunk_size = part.chunk_size;
    o.chunk_crcs = f.chunks;
  }
  batch->Put(KeySpace::kObjects, InoKey(inode->rec.ino), EncodeObject(o));
  return true;
}

Status FileSystem::NoteRemoteUploads(const std::string& step_path, const PartRecord& part) {
  MutexLock lock(&mu_);
  const uint64_t step = ResolveRelativeLocked(kRootIno, step_path);
  if (step == 0 || !steps_.count(step)) return Status::Ok();
  Transaction txn = BeginLocked();
  size_t learned = 0;
  for (const auto& f : part.files) {
    const uint64_t ino = ResolveRelativeLocked(step, f.path);
    if (ino && NoteRemoteUploadLocked(inodes_.Find(ino), part, f, txn.batch())) learned++;
  }
  if (learned == 0) return Status::Ok();
  CKPTFS_RETURN_IF_ERROR(txn.Write());
  // The commit object may be complete now.
  if (tier_) tier_->StepsMayPersist();
  return Status::Ok();
}

Status FileSystem::AwaitOwnerUpload(FileHandle* fh) {
  // Single-node mounts read remote data on this path too: no extra lock there.
  if (!cluster_) return Status::Ok();
  std::string step_path, rel, owner;
  {
    MutexLock lock(&mu_);
    Inode* inode = inodes_.Find(fh->ino);
    if (!inode || !inode->object || inode->object->owner_node.empty() || inode->object->crc_known) {
      return Status::Ok();
    }
    const uint64_t step = steps_.StepOf(inodes_, fh->ino);
    if (step == 0) return Status::Error(EIO, "a file of another node outside a step");
    step_path = inodes_.PathOf(step);
    const std::string path = inodes_.PathOf(fh->ino);
    rel = path.substr(step_path.size() + 1);
    owner = inode->object->owner_node;
  }
  auto part = cluster_->AwaitUpload(step_path, rel, owner);
  if (!part.ok()) {
    Status failed = Status::Error(part.status().err() == ETIMEDOUT ? EIO : part.status().err(),
                                  step_path + "/" + rel + ": node " + owner + " has not uploaded it: " +
                                      part.status().message());
    // The reader only gets EIO; the event says whose upload it waited for.
    events_->Append({{"event", "error"}, {"kind", "cluster_read"}, {"path", step_path + "/" + rel},
                     {"node", owner}, {"error", failed.message()}});
    return failed;
  }
  MutexLock lock(&mu_);
  Inode* inode = inodes_.Find(fh->ino);
  Transaction txn = BeginLocked();
  for (const auto& f : part->files) {
    if (f.path == rel) (void)NoteRemoteUploadLocked(inode, *part, f, txn.batch());
  }
  return txn.Write();
}

Status FileSystem::GatherCluster(CommitPlan* plan) {
  if (!cluster_) return Status::Ok();
  plan->cluster = true;
  auto parts = cluster_->GatherParts(plan->step_path);
  if (!parts.ok()) return parts.status();
  plan->other_parts.clear();
  double newest_activity = 0;
  for (auto& p : *parts) {
    if (p.node == cluster_->node()) continue;
    if (p.open_writers > 0) {
      // EBUSY, not EAGAIN: usually a close whose PUT is a few milliseconds
      // behind (PublishLater), which the coordinator asks again for soon.
      return Status::Error(EBUSY, "waiting for " + std::to_string(p.open_writers) +
                                       " file(s) open for writing on node " + p.node);
    }
    const bool local_files = std::any_of(p.files.begin(), p.files.end(),
                                         [](const PartRecord::File& f) { return !f.uploaded; });
    if (local_files && !p.synced) {
      // Committed means durable on every node (SPEC section 9): node p
      // fsyncs its files once they are all closed, then puts its part
      // again, within milliseconds when its trainer fsynced them already.
      return Status::Error(EBUSY,
                           "waiting for node " + p.node + " to make its files durable (fsync)");
    }
    newest_activity = std::max(newest_activity, p.last_activity);
    plan->other_parts.push_back(std::move(p));
  }
  // Quiet means quiet on every node: a layout that lists nothing settles on
  // the union's last activity.
  if (newest_activity > 0) {
    const double now = static_cast<double>(TimespecToNanos(clock_->Now())) / 1e9;
    const int64_t remote_quiet = static_cast<int64_t>(std::max(0.0, now - newest_activity) * 1e9);
    plan->quiet_ns = std::min(plan->quiet_ns, remote_quiet);
  }
  return Status::Ok();
}

Result<std::string> FileSystem::ReadClusterFile(const CommitPlan& plan, const std::string& path,
                                                uint64_t offset, uint64_t length) {
  if (!cluster_) return Status::Error(ENOENT, path + " does not exist");
  for (const auto& p : plan.other_parts) {
    for (const auto& f : p.files) {
      if (f.path == path) return cluster_->ReadPartFile(plan.step_path, f, p.node, offset, length);
    }
  }
  return Status::Error(ENOENT, path + " does not exist");
}

Status FileSystem::DecideCluster(CommitPlan* plan) {
  if (!cluster_ || !plan->cluster) return Status::Ok();
  ClusterStepRecord proposal;
  std::string follows_removal;
  {
    MutexLock lock(&mu_);
    auto mine = PartSnapshotLocked(plan->step_path);
    if (!mine.ok()) return mine.status();
    auto it = steps_.find(plan->step_ino);
    Inode* dir = inodes_.Find(plan->step_ino);
    if (it == steps_.end() || !dir) return Status::Error(EALREADY, "no longer a checkpoint step");
    const std::string& me = cluster_->node();
    follows_removal = it->second.follows_removal;
    proposal.step_path = plan->step_path;
    proposal.step = it->second.step;
    proposal.committer = me;
    proposal.committed_at = static_cast<double>(TimespecToNanos(clock_->Now())) / 1e9;
    proposal.dir_mtime_ns = TimespecToNanos(dir->rec.mtime);
    proposal.ephemeral = plan->ephemeral;
    proposal.best_ref = plan->best_ref;
    std::set<std::string> dirs, links;
    std::map<std::string, ClusterStepRecord::File> files;
    auto add_part = [&](const PartRecord& part) {
      proposal.parts[part.node] = ClusterStepRecord::Part{part.seq, 0};
      for (const auto& f : part.files) {
        if (IsUnlistedShard(plan->listed_shards, f.path)) {
          // A shard the metadata does not name: left by another save of the
          // step (an abandoned attempt with more ranks); its node drops it
          // when it applies the record.
          events_->Append({{"event", "warning"},
                           {"kind", "cluster_stale_shard"},
                           {"path", plan->step_path + "/" + f.path},
                           {"node", part.node},
                           {"error", "a shard the step's metadata does not name, on node " +
                                         part.node + ": another save's; left out of the step"}});
          continue;
        }
        ClusterStepRecord::File candidate{f.path, part.node, f.size, f.crc32c, f.mode, f.mtime_ns};
        auto [kept, added] = files.try_emplace(f.path, candidate);
        if (added) continue;
        // The same path in two parts: the copy written last wins, as in a
        // shared POSIX namespace (SPEC section 9, "one save, one step"), so
        // a file an abandoned attempt left on one node never displaces the
        // re-save's copy on another. Equal times: the copy met first (the
        // committing node's, then the nodes' by name). The other is reported.
        const bool newer = candidate.mtime_ns > kept->second.mtime_ns;
        const std::string& winner = newer ? part.node : kept->second.node;
        events_->Append(
            {{"event", "warning"},
             {"kind", "cluster_duplicate_file"},
             {"path", plan->step_path + "/" + f.path},
             {"error", "written on nodes " + kept->second.node + " and " + part.node +
                           "; the step keeps node " + winner + "'s, the copy written last"}});
        if (newer) kept->second = candidate;
      }
      dirs.insert(part.dirs.begin(), part.dirs.end());
      for (const auto& l : part.symlinks) {
        if (links.insert(l.path).second) proposal.symlinks.push_back(l);
      }
    };
    mine->node = me;
    add_part(*mine);
    for (const auto& p : plan->other_parts) add_part(p);
    for (auto& [path, f] : files) {
      // A path that is a directory in one part and a file in another.
      if (dirs.count(path)) return Status::Error(EIO, plan->step_path + ": " + path + " is a file on one node and a directory on another");
      proposal.bytes += f.size;
      proposal.parts[f.node].files++;
      proposal.files.push_back(std::move(f));
    }
    proposal.dirs.assign(dirs.begin(), dirs.end());
    // Nodes whose parts hold nothing but directories are not in the record.
    for (auto it2 = proposal.parts.begin(); it2 != proposal.parts.end();) {
      it2 = it2->second.files == 0 && it2->first != me ? proposal.parts.erase(it2) : std::next(it2);
    }
  }
  auto decided = cluster_->DecideStep(proposal, follows_removal);
  if (decided.status().err() == ESTALE) {
    // Left over from a removed save (ClusterHooks::DecideStep): the request
    // ends, and the step goes here too.
    {
      MutexLock lock(&mu_);
      if (StepRuntime* rt = steps_.FindRuntime(plan->step_ino)) {
        rt->committing = false;
        rt->EndRequest();
        rt->outcome_gen++;
      }
      step_cv_.notify_all();
    }
    (void)DropLeftoverStep(plan->step_path, "");
    return Status::Error(EALREADY, decided.status().message());
  }
  if (!decided.ok()) return decided.status();
  plan->decided = std::move(decided).value();
  // The step is committed for the cluster from here on. If this node's
  // decision won, it plans the run's retention next (FinishClusterCommit),
  // on a view read now rather than one up to --refresh old: a step another
  // node persisted or removed meanwhile would be planned on as it was.
  if (plan->decided->committer == cluster_->node()) RefreshClusterForRetention(plan->step_ino);
  return Status::Ok();
}

Status FileSystemCore::FinishClusterCommitLocked(const CommitPort::CommitPlan& plan) {
  const ClusterStepRecord& record = *plan.decided;
  StepRuntime& rt = steps_.Runtime(plan.step_ino);
  auto it = steps_.find(plan.step_ino);
  Transaction txn = BeginLocked();
  std::vector<uint64_t> sealed;
  Status st = ApplyClusterRecordLocked(plan.step_ino, record, txn.batch(), &sealed);
  rt.committing = false;
  if (st.ok()) {
    steps_.Commit(plan.step_ino, ClusterCommitFacts(it->second, record), txn.batch());
    // The node whose decision won applies the run's retention for the
    // cluster, in the commit's batch (as a single node does).
    if (record.committer == cluster_->node()) {
      if (Inode* step_dir = inodes_.Find(plan.step_ino)) {
        retention_by_committer_ = true;
        ApplyRetentionLocked(step_dir->rec.parent, txn.batch());
        retention_by_committer_ = false;
      }
    }
    st = txn.WriteSyncedOrDiscard();
    // New inodes and links already changed the image: only a restart, which
    // reloads the manifest, brings back the state before.
    if (!st.ok()) journal_.MarkDiverged();
  }
  rt.outcome_gen++;
  if (st.ok()) {
    rt.EndRequest();
    rt.recovered = false;
  }
  step_cv_.notify_all();
  if (!st.ok()) return st;
  const StepRecord rec = it->second;
  for (uint64_t ino : sealed) {
    if (Inode* inode = inodes_.Find(ino)) inode->dirty = false;
  }
  SaveEndedLocked(plan.step_ino);
  cluster_removed_paths_.erase(record.step_path);  // its uploads may start
  if (tier_) tier_->UploadsQueued();
  if (record.committer != cluster_->node()) RepublishUploadedPartLocked(record.step_path);
  // This node writes the commit object once every other node's part is up.
  cluster_->AwaitingParts();
  metrics_.commits++;
  metrics_.commit_seconds.Observe(static_cast<double>(clock_->MonotonicNanos() - plan.began_ns) / 1e9);
  metrics_.commit_sync_seconds.Observe(static_cast<double>(plan.sync_ns) / 1e9);
  nlohmann::json e = {{"event", "commit"}, {"path", plan.step_path}, {"step", rec.step}, {"state", "committed"},
                      {"bytes", rec.bytes}, {"files", rec.files}, {"committer", record.committer},
                      {"nodes", record.parts.size()}};
  events_->Append(std::move(e));
  return Status::Ok();
}

}  // namespace ckptfs
