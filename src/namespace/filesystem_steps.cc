// Checkpoint steps inside the namespace: which directories are steps, their
// states, commit requests and the state changes of a commit (SPEC section 3).
// The commit procedure that runs between BeginCommit and FinishCommit
// (completeness check, fsync) is CommitCoordinator's.
#include <algorithm>
#include <set>
#include <utility>

#include "namespace/filesystem.h"

namespace ckptfs {

void FileSystemCore::NoteDeletionLocked(uint64_t dir_ino, ManifestBatch* batch) {
  const uint64_t step = steps_.StepOf(inodes_, dir_ino);
  auto it = steps_.find(step);
  if (it == steps_.end()) return;
  StepRecord& rec = it->second;
  // A trainer may delete its own files while writing; only a finished step
  // (committed, incomplete, broken) turns into a deletion.
  if (rec.state == StepState::kWriting || rec.state == StepState::kDeleting) return;
  // The remote copy stops being complete now: its commit object goes first.
  UnpersistStepLocked(step, inodes_.PathOf(step), batch);
  AnnounceClusterRemovalLocked(step, rec, batch);
  steps_.MarkDeleting(step, batch);
  EmitStepEventLocked("delete", step, rec);
}

ManifestBatch* FileSystemCore::RemovalBatchLocked(uint64_t dir_ino, const Inode& child,
                                                  ManifestBatch* txn_batch) {
  // With a remote tier an unlink also forgets the file's object and queues
  // its deletion in the bucket, which the uploader acts on at once: those
  // records are written with the unlink, as before.
  if (options_.remote || child.open_handles > 0) return txn_batch;
  if (!child.is_dir() && child.rec.nlink != 1) return txn_batch;
  const uint64_t step = steps_.StepOf(inodes_, dir_ino);
  StepRecord* rec = step != 0 ? steps_.Find(step) : nullptr;
  if (!rec || rec->state != StepState::kDeleting || step == child.rec.ino) return txn_batch;
  return &deferred_removals_[step];
}

void FileSystemCore::FlushDeferredRemovalsLocked(uint64_t step_ino, ManifestBatch* batch) {
  auto it = deferred_removals_.find(step_ino);
  if (it == deferred_removals_.end()) return;
  // The deferred records hold the directories' records as of each unlink;
  // those still here are written again as they are now, so that the batch
  // ends with their current state whatever the caller added before.
  std::set<uint64_t> dirs;
  for (const ManifestBatch::Op& op : it->second.ops()) {
    if (op.space != KeySpace::kInodes || !op.value) continue;
    if (auto ino = DecodeInoKey(op.key); ino.ok()) dirs.insert(*ino);
  }
  batch->Append(std::move(it->second));
  for (uint64_t ino : dirs) {
    if (Inode* dir = inodes_.Find(ino); dir && dir->rec.nlink > 0) InodeTable::Put(*dir, batch);
  }
  deferred_removals_.erase(it);
}

uint64_t FileSystemCore::VirtualLatestOfLocked(uint64_t run_ino) {
  Inode* run = inodes_.Find(run_ino);
  if (!run || !run->is_dir() || HasRealChildLocked(run, kLatestName)) return 0;
  if (auto it = run->xattrs.find(kLatestLinkXattr); it != run->xattrs.end() && it->second == "off") return 0;
  const uint64_t step = steps_.LatestOf(inodes_, run_ino);
  // DeepSpeed writes its own `latest` with open("latest", "w"), which would
  // follow a link to the step directory and fail with EISDIR: its runs get
  // no link even before its file exists. A DeepSpeed run: the default tags
  // (global_step<N>), its zero_to_fp32.py beside the steps, or the newest
  // step holding its mp_rank_<NN>_model_states.pt.
  Inode* s = step ? inodes_.Find(step) : nullptr;
  if (!s) return 0;
  if (s->name.rfind("global_step", 0) == 0 || HasRealChildLocked(run, "zero_to_fp32.py")) return 0;
  if (!inodes_.EnsureLoaded(s).ok()) return 0;
  for (auto it = s->children.lower_bound("mp_rank_"); it != s->children.end() && it->first.rfind("mp_rank_", 0) == 0; ++it) {
    if (it->first.size() > 19 && it->first.compare(it->first.size() - 16, 16, "_model_states.pt") == 0) return 0;
  }
  return step;
}

void FileSystemCore::ReclassifyDirLocked(Inode* dir, ManifestBatch* batch, bool* commit_now) {
  const uint64_t ino = dir->rec.ino;
  std::optional<int64_t> number;
  if (ino != kRootIno && steps_.StepOf(inodes_, dir->rec.parent) == 0) number = pattern_.Match(dir->name);
  auto it = steps_.find(ino);
  if (number && it == steps_.end()) {
    // Becoming a step by mkdir, or by rename into a step name (a commit).
    // Cluster mode: which removal of the name, if any, this save follows.
    steps_.AddWriting(ino, *number, clock_->MonotonicNanos(), batch,
                      cluster_ ? cluster_->RemovalSeen(inodes_.PathOf(ino)) : "");
    *commit_now = true;
  } else if (number && it != steps_.end()) {
    if (it->second.step != *number) {
      it->second.step = *number;
      StepBook::Put(ino, it->second, batch);
    }
  } else if (!number && it != steps_.end()) {
    // Renamed to a name that is no step: an ordinary directory from now on.
    // Files it sealed stay read-only.
    FlushDeferredRemovalsLocked(ino, batch);
    steps_.Remove(ino, batch);
  }
}

void FileSystemCore::DemoteNestedStepsLocked(Inode* dir, ManifestBatch* batch) {
  if (steps_.StepOf(inodes_, dir->rec.ino) == 0) return;
  inodes_.WalkBelow(dir, [&](Inode* child, const std::string&) REQUIRES(mu_) {
    if (child->is_dir()) {
      FlushDeferredRemovalsLocked(child->rec.ino, batch);
      steps_.Remove(child->rec.ino, batch);
    }
    return child->is_dir();
  });
}

void FileSystemCore::NoteActivityLocked(uint64_t ino) {
  const uint64_t step = steps_.StepOf(inodes_, ino);
  if (step != 0) steps_.Runtime(step).last_activity = clock_->MonotonicNanos();
}

bool FileSystemCore::IsMarkerName(const std::string& name) const {
  return std::find(options_.commit_markers.begin(), options_.commit_markers.end(), name) !=
         options_.commit_markers.end();
}

void FileSystemCore::RequestCommitLocked(uint64_t step_ino, CommitTrigger why, ManifestBatch* batch,
                                         uint64_t session) {
  auto it = steps_.find(step_ino);
  if (it == steps_.end() || it->second.state == StepState::kCommitted) return;
  // A step being deleted that is committed again keeps what rm removed
  // removed: its deferred records are written with the request.
  FlushDeferredRemovalsLocked(step_ino, batch);
  StepRuntime& rt = steps_.Runtime(step_ino);
  if (why == CommitTrigger::kRetry && !rt.commit_wanted) return;
  if (!rt.commit_wanted) {
    rt.commit_wanted = true;
    rt.wanted_since = clock_->MonotonicNanos();
  }
  switch (why) {
    case CommitTrigger::kRetry:
    case CommitTrigger::kNestedMarker:
      break;
    case CommitTrigger::kRename:
      rt.renamed = true;
      rt.direct = true;
      break;
    case CommitTrigger::kExplicit:
      rt.explicit_commit = true;
      rt.forced = true;
      rt.direct = true;
      break;
    case CommitTrigger::kIdle:
      rt.forced = true;
      rt.direct = true;
      break;
    case CommitTrigger::kMarker:
    case CommitTrigger::kIndex:
      rt.direct = true;
      break;
  }
  if (session != 0) rt.session = session;
  RecordPendingCommitLocked(step_ino, batch);
  if (request_commit_) request_commit_(step_ino);
}

void FileSystemCore::RecordPendingCommitLocked(uint64_t step_ino, ManifestBatch* batch) {
  auto it = steps_.find(step_ino);
  if (it == steps_.end() || steps_.IsSealed(step_ino)) return;
  const StepRuntime& rt = steps_.Runtime(step_ino);
  if (!rt.commit_wanted) return;
  uint8_t bits = kPendingCommit;
  if (rt.renamed) bits |= kPendingCommitRenamed;
  if (rt.forced) bits |= kPendingCommitForced;
  if (rt.direct) bits |= kPendingCommitDirect;
  if (rt.explicit_commit) bits |= kPendingCommitExplicit;
  StepRecord& rec = it->second;
  if (rec.pending_commit == bits && rec.session == rt.session) return;
  Inode* dir = inodes_.Find(step_ino);
  if (!dir || UnflushedWritersUnderLocked(dir) > 0) return;  // the last close records it
  rec.pending_commit = bits;
  rec.session = rt.session;
  // In the operation's batch, which is not synced: a daemon crash keeps
  // what reached the kernel, and after a machine restart recovery does not
  // finish commits anyway.
  StepBook::Put(step_ino, rec, batch);
}

void FileSystemCore::ForgetPendingCommitLocked(uint64_t dir_ino, ManifestBatch* batch) {
  const uint64_t step = steps_.StepOf(inodes_, dir_ino);
  auto it = steps_.find(step);
  if (it == steps_.end()) return;
  if (StepRuntime* rt = steps_.FindRuntime(step)) rt->recovered = false;
  if (it->second.pending_commit == 0) return;
  it->second.pending_commit = 0;
  StepBook::Put(step, it->second, batch);
}

uint64_t FileSystemCore::SessionOfLocked(uint32_t pid) {
  if (pid == 0) return 0;
  return options_.session_of ? options_.session_of(pid) : pid;
}

void FileSystemCore::NoteTriggerFileLocked(Inode* file, uint32_t writer_pid, ManifestBatch* batch) {
  const uint64_t parent = file->rec.parent;
  const uint64_t step = steps_.StepOf(inodes_, parent);
  if (step != 0) {
    auto it = steps_.find(step);
    if (IsMarkerName(file->name) && it->second.state == StepState::kWriting) {
      RequestCommitLocked(step,
                          step == parent ? CommitTrigger::kMarker : CommitTrigger::kNestedMarker,
                          batch, SessionOfLocked(writer_pid));
    } else {
      // Any close in a step whose commit waits for files lets it try again.
      RequestCommitLocked(step, CommitTrigger::kRetry, batch);
    }
    return;
  }
  if (std::find(kRunIndexFiles.begin(), kRunIndexFiles.end(), file->name) == kRunIndexFiles.end()) return;
  Inode* run = inodes_.Find(parent);
  if (run && HoldsStepLocked(*run) && request_index_) request_index_(file->rec.ino, SessionOfLocked(writer_pid));
}

Status FileSystem::CommitStepsNamedBy(uint64_t file_ino, uint64_t session) {
  // Index files are a few lines; a long RecIS history only grows at the end.
  constexpr uint64_t kMaxIndexBytes = 64 << 10;
  uint64_t size = 0;
  {
    MutexLock lock(&mu_);
    Inode* file = inodes_.Find(file_ino);
    if (!file || !file->is_reg() || file->rec.nlink == 0) return Status::Ok();
    size = file->rec.size;
  }
  auto backing = data_->Open(file_ino, /*create=*/false);
  if (!backing.ok()) return backing.status();
  const uint64_t offset = size > kMaxIndexBytes ? size - kMaxIndexBytes : 0;
  std::string text(size - offset, '\0');
  auto n = (*backing)->PRead(text.data(), text.size(), offset);
  if (!n.ok()) return n.status();
  text.resize(*n);

  MutexLock lock(&mu_);
  Inode* file = inodes_.Find(file_ino);
  if (!file || file->rec.nlink == 0) return Status::Ok();
  Inode* run = inodes_.Find(file->rec.parent);
  if (!run || !run->is_dir()) return Status::Ok();
  // Tokens: whitespace-separated, quotes and a directory part dropped, so
  // TensorFlow's `model_checkpoint_path: "/dir/ckpt-5"` names ckpt-5 too.
  Transaction txn = BeginLocked();  // the requests the file makes, as one change
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = text.find_first_not_of(" \t\r\n", pos);
    if (start == std::string::npos) break;
    size_t end = text.find_first_of(" \t\r\n", start);
    if (end == std::string::npos) end = text.size();
    pos = end;
    std::string token = text.substr(start, end - start);
    while (!token.empty() && (token.front() == '"' || token.front() == '\'')) token.erase(0, 1);
    while (!token.empty() && (token.back() == '"' || token.back() == '\'' || token.back() == '/')) token.pop_back();
    if (const size_t slash = token.rfind('/'); slash != std::string::npos) token.erase(0, slash + 1);
    if (token.empty()) continue;
    const bool number = token.find_first_not_of("0123456789") == std::string::npos && token.size() <= 18;
    for (const auto& [name, dent] : run->children) {
      auto it = steps_.find(dent.ino);
      if (it == steps_.end() || it->second.state != StepState::kWriting) continue;
      if (name == token || (number && it->second.step == std::stoll(token))) {
        RequestCommitLocked(dent.ino, CommitTrigger::kIndex, txn.batch(), session);
      }
    }
  }
  return txn.Write();
}

uint32_t FileSystemCore::OpenWritersUnderLocked(Inode* dir) {
  uint32_t n = 0;
  inodes_.WalkLoadedBelow(dir, [&](Inode* inode, const std::string&) {
    n += inode->open_writers;
    return true;
  });
  return n;
}

uint32_t FileSystemCore::UnflushedWritersUnderLocked(Inode* dir) {
  uint32_t n = 0;
  inodes_.WalkLoadedBelow(dir, [&](Inode* inode, const std::string&) {
    n += inode->unflushed_writers;
    return true;
  });
  return n;
}

void FileSystemCore::CollectFilesLocked(Inode* dir,
                                        std::vector<std::pair<std::string, uint64_t>>* out) {
  inodes_.WalkBelow(dir, [&](Inode* inode, const std::string& rel) {
    if (inode->is_reg()) out->emplace_back(rel, inode->rec.ino);
    return true;
  });
}

void FileSystemCore::WaitUntilNotCommittingLocked(MutexLock& lock, uint64_t dir_ino) {
  for (;;) {
    const uint64_t step = steps_.StepOf(inodes_, dir_ino);
    if (step == 0) return;
    const StepRuntime* rt = steps_.FindRuntime(step);
    if (!rt || !rt->committing) return;
    lock.Wait(step_cv_);
  }
}

void FileSystemCore::EmitStepEventLocked(const char* event, uint64_t step_ino,
                                         const StepRecord& rec, const std::string& detail) {
  nlohmann::json e = {{"event", event},
                      {"path", inodes_.PathOf(step_ino)},
                      {"step", rec.step},
                      {"state", StepStateName(rec.state)}};
  if (rec.state == StepState::kCommitted) {
    e["bytes"] = rec.bytes;
    e["files"] = rec.files;
  }
  if (!detail.empty()) e["error"] = detail;
  events_->Append(std::move(e));
}

Result<FileSystem::CommitPlan> FileSystem::BeginCommit(uint64_t step_ino) {
  MutexLock lock(&mu_);
  auto it = steps_.find(step_ino);
  if (it == steps_.end()) return Status::Error(EALREADY, "no longer a checkpoint step");
  if (it->second.state == StepState::kCommitted) return Status::Error(EALREADY, "already committed");
  StepRuntime& rt = steps_.Runtime(step_ino);
  if (!rt.commit_wanted) return Status::Error(EALREADY, "no commit requested");
  if (rt.committing) return Status::Error(EALREADY, "commit in progress");
  Inode* dir = inodes_.Find(step_ino);
  if (!dir) return Status::Error(EALREADY, "step vanished");
  const uint32_t writers = OpenWritersUnderLocked(dir);
  if (writers > 0) {
    if (clock_->MonotonicNanos() - rt.wanted_since > options_.commit_wait_ns) {
      rt.EndRequest();
      it->second.pending_commit = 0;  // forgotten when the files were opened
      it->second.error = "commit timed out: " + std::to_string(writers) +
                         " file(s) still open for writing";
      rt.outcome_gen++;
      step_cv_.notify_all();
      EmitStepEventLocked("commit_failed", step_ino, it->second, it->second.error);
      return Status::Error(ETIMEDOUT, it->second.error);
    }
    it->second.error = "waiting for " + std::to_string(writers) + " file(s) open for writing";
    return Status::Error(EAGAIN, it->second.error);
  }
  Transaction pending_txn = BeginLocked();
  RecordPendingCommitLocked(step_ino, pending_txn.batch());
  if (!pending_txn.empty()) (void)pending_txn.Write();  // a failure is kept and retried
  rt.committing = true;
  CommitPlan plan;
  plan.step_ino = step_ino;
  plan.step_path = inodes_.PathOf(step_ino);
  plan.renamed = rt.renamed;
  plan.forced = rt.forced;
  plan.explicit_commit = rt.explicit_commit;
  plan.nested_only = !rt.direct;
  plan.session = rt.session;
  plan.began_ns = clock_->MonotonicNanos();
  plan.quiet_ns = plan.began_ns - rt.last_activity;
  plan.settle_ns = options_.commit_settle_ns;
  plan.job_nodes = options_.job_nodes;
  std::vector<std::pair<std::string, uint64_t>> files;
  CollectFilesLocked(dir, &files);
  for (auto& [path, ino] : files) {
    const Inode* inode = inodes_.Find(ino);
    const bool around = inode->checksum && inode->checksum->backing_inode != 0;
    plan.files.push_back({std::move(path), ino, inode->rec.size, around});
  }
  return plan;
}

void FileSystem::AbortCommit(uint64_t step_ino, const Status& why, bool waiting, bool broken, bool settling) {
  MutexLock lock(&mu_);
  StepRuntime& rt = steps_.Runtime(step_ino);
  rt.committing = false;
  rt.settling = settling;
  rt.outcome_gen++;
  step_cv_.notify_all();
  auto it = steps_.find(step_ino);
  if (it == steps_.end()) return;
  StepRecord& rec = it->second;
  const std::string old_error = rec.error;
  bool gave_up_after_crash = false;
  const bool cluster_gave_up = cluster_ && waiting && !settling &&
                               clock_->MonotonicNanos() - rt.wanted_since > options_.commit_wait_ns;
  Transaction txn = BeginLocked();
  if (cluster_gave_up) {
    // Cluster mode: files another node was to write never came (SPEC
    // section 9: the step stays writing, then incomplete after the bound).
    rt.EndRequest();
    steps_.MarkIncomplete(step_ino, "incomplete after --commit-wait: " + why.message(),
                          txn.batch());
  } else if (waiting && !settling && rt.recovered) {
    // The commit recovery resumed finds files missing or short: nobody will
    // write them now, so the step is incomplete as SPEC's crash rule says.
    rt.EndRequest();
    rt.recovered = false;
    steps_.MarkIncomplete(step_ino,
                          "the daemon stopped before this step was committed; " + why.message(),
                          txn.batch());
    gave_up_after_crash = true;
  } else if (broken) {
    rt.EndRequest();
    steps_.MarkBroken(step_ino, why.message(), txn.batch());
  } else {
    rec.error = why.message();
    if (!waiting) {
      rt.EndRequest();
      rec.pending_commit = 0;
    }
    StepBook::Put(step_ino, rec, txn.batch());
  }
  (void)txn.Write();
  if (gave_up_after_crash) {
    EmitStepEventLocked("recovered", step_ino, rec, rec.error);
  } else if (broken) {
    metrics_.steps_broken++;
    EmitStepEventLocked("broken", step_ino, rec, rec.error);
  } else if (!waiting || cluster_gave_up) {
    metrics_.commits_failed++;
    EmitStepEventLocked("commit_failed", step_ino, rec, rec.error);
  } else if (old_error != rec.error) {
    EmitStepEventLocked("commit_waiting", step_ino, rec, rec.error);
  }
}

void FileSystem::DropCommitRequest(uint64_t step_ino) {
  MutexLock lock(&mu_);
  StepRuntime& rt = steps_.Runtime(step_ino);
  rt.committing = false;
  rt.outcome_gen++;
  if (!rt.direct) {
    rt.EndRequest();
    rt.recovered = false;
    if (auto it = steps_.find(step_ino); it != steps_.end() && it->second.pending_commit != 0) {
      it->second.pending_commit = 0;
      Transaction txn = BeginLocked();
      StepBook::Put(step_ino, it->second, txn.batch());
      (void)txn.Write();
    }
  } else if (request_commit_) {
    // A direct trigger (ckptfs commit, an index file) arrived meanwhile.
    request_commit_(step_ino);
  }
  step_cv_.notify_all();
}

Status FileSystem::FinishCommit(const CommitPlan& plan) {
  MutexLock lock(&mu_);
  StepRuntime& rt = steps_.Runtime(plan.step_ino);
  auto it = steps_.find(plan.step_ino);
  if (it == steps_.end() || !rt.committing) {
    rt.committing = false;
    step_cv_.notify_all();
    return Status::Error(EALREADY, "step changed during commit");
  }
  // A manifest that cannot be written refuses the commit before the image
  // changes (the step stays writing; the commit is asked for again later).
  if (Status health = CheckHealthyLocked(); !health.ok()) {
    rt.committing = false;
    step_cv_.notify_all();
    return health;
  }
  if (plan.decided) return FinishClusterCommitLocked(plan);
  Transaction txn = BeginLocked();
  CommitFacts facts;
  facts.committed_at = clock_->Now();
  facts.ephemeral = plan.ephemeral;
  facts.session = plan.session;
  facts.best_ref = plan.best_ref;
  facts.committer = it->second.committer;
  facts.decision = it->second.decision;
  facts.persisted = it->second.persisted;
  // Inode numbers, not pointers: retention below may evict inodes.
  std::vector<uint64_t> sealed;
  for (const auto& file : plan.files) {
    Inode* inode = inodes_.Find(file.ino);
    if (!inode || inode->rec.nlink == 0) continue;
    facts.bytes += inode->rec.size;
    facts.files++;
    if (!inode->rec.sealed) {
      inode->rec.sealed = true;
      InodeTable::Put(*inode, txn.batch());
      sealed.push_back(file.ino);
    }
    // Uploads of everything not yet uploaded where it is now, in the
    // commit's own batch (SPEC section 3).
    if (options_.remote && !ledger_.IsQueued(file.ino) &&
        !ObjectIsCurrent(*inode, plan.step_path + "/" + file.path)) {
      QueueUploadLocked(inode, txn.batch());
    }
  }
  // Retention decides with the step counted as committed, and its removals
  // join the same batch: the decision is atomic with the commit. (If the
  // batch fails, the commit is undone below and the mount is read-only until
  // the manifest takes writes again; the manifest still has the state before
  // the commit.)
  const StepRecord before = steps_.Commit(plan.step_ino, facts, txn.batch());
  const StepRecord rec = it->second;
  rt.committing = false;
  const std::string path = inodes_.PathOf(plan.step_ino);
  const size_t before_retention = txn.batch()->size();
  if (Inode* step_dir = inodes_.Find(plan.step_ino))
    ApplyRetentionLocked(step_dir->rec.parent, txn.batch());
  // The one synced batch: before it the step is not committed, after it it is.
  Status st = txn.WriteSyncedOrDiscard();
  // Steps the retention took out of the image are not put back: only a
  // restart (which reloads the manifest, where they still are) brings them.
  if (!st.ok() && txn.batch()->size() != before_retention) journal_.MarkDiverged();
  if (StepRuntime* rt = steps_.FindRuntime(plan.step_ino)) {
    rt->outcome_gen++;
    if (st.ok()) {
      rt->EndRequest();
      rt->recovered = false;
    }
  }
  step_cv_.notify_all();
  if (!st.ok()) {
    for (uint64_t ino : sealed) {
      if (Inode* inode = inodes_.Find(ino)) inode->rec.sealed = false;
    }
    if (steps_.count(plan.step_ino)) steps_.Restore(plan.step_ino, before);
    return st;
  }
  for (uint64_t ino : sealed) {
    if (Inode* inode = inodes_.Find(ino)) inode->dirty = false;
  }
  SaveEndedLocked(plan.step_ino);
  metrics_.commits++;
  metrics_.commit_seconds.Observe(static_cast<double>(clock_->MonotonicNanos() - plan.began_ns) / 1e9);
  metrics_.commit_sync_seconds.Observe(static_cast<double>(plan.sync_ns) / 1e9);
  nlohmann::json e = {{"event", "commit"}, {"path", path}, {"step", rec.step}, {"state", "committed"},
                      {"bytes", rec.bytes}, {"files", rec.files}};
  events_->Append(std::move(e));
  return Status::Ok();
}

void FileSystemCore::SaveEndedLocked(uint64_t step) {
  // A commit waits for every writer of its step to close, so a commit of
  // the last closed writer's step comes after that close: the trainer has
  // reached its commit trigger and is no longer between two files of it.
  // A writer closed in another step meanwhile moved last_saved_step_ on.
  if (step != 0 && step == last_saved_step_) last_save_activity_ns_ = 0;
}

void FileSystem::RequestIdleCommits() {
  if (options_.commit_idle_ns <= 0) return;
  MutexLock lock(&mu_);
  const int64_t now = clock_->MonotonicNanos();
  // One tick, one transaction, however many steps went idle.
  Transaction txn = BeginLocked();
  for (auto& [ino, rec] : steps_) {
    if (rec.state != StepState::kWriting) continue;
    StepRuntime& rt = steps_.Runtime(ino);
    if (rt.commit_wanted || rt.committing) continue;
    if (now - rt.last_activity < options_.commit_idle_ns) continue;
    Inode* dir = inodes_.Find(ino);
    if (!dir || OpenWritersUnderLocked(dir) > 0) continue;
    RequestCommitLocked(ino, CommitTrigger::kIdle, txn.batch());
  }
  (void)txn.Write();  // a failure is kept and retried
}

void FileSystem::RequestSettledCommits() {
  MutexLock lock(&mu_);
  const int64_t now = clock_->MonotonicNanos();
  Transaction txn = BeginLocked();  // one per tick
  for (auto& [ino, rt] : steps_.runtimes()) {
    if (!rt.commit_wanted || rt.committing || !rt.settling) continue;
    if (now - rt.last_activity < options_.commit_settle_ns) continue;
    RequestCommitLocked(ino, CommitTrigger::kRetry, txn.batch());
  }
  (void)txn.Write();  // a failure is kept and retried
}

void FileSystem::RequestRecoveredCommits() {
  MutexLock lock(&mu_);
  if (!request_commit_) return;
  for (const auto& [ino, rt] : steps_.runtimes()) {
    if (rt.recovered && rt.commit_wanted) request_commit_(ino);
  }
}

void FileSystem::RequestCommit(uint64_t step_ino) {
  MutexLock lock(&mu_);
  Transaction txn = BeginLocked();
  RequestCommitLocked(step_ino, CommitTrigger::kExplicit, txn.batch());
  (void)txn.Write();  // a failure is kept and retried
}

Status FileSystem::CommitAndWait(uint64_t step_ino) {
  MutexLock lock(&mu_);
  auto it = steps_.find(step_ino);
  if (it == steps_.end()) {
    return Status::Error(EINVAL, "not a checkpoint step directory (name does not match the step pattern)");
  }
  if (it->second.state == StepState::kCommitted) return Status::Ok();
  const uint64_t gen = steps_.Runtime(step_ino).outcome_gen;
  Transaction txn = BeginLocked();
  RequestCommitLocked(step_ino, CommitTrigger::kExplicit, txn.batch());
  CKPTFS_RETURN_IF_ERROR(txn.Write());
  // Waits for the first attempt only. This runs inside the setxattr, which
  // holds the step directory's inode lock in the kernel: waiting longer
  // would block the very creates (a late shard, a straggler rank) the
  // commit may be waiting for. `ckptfs commit` polls the state afterwards.
  lock.WaitFor(*clock_, step_cv_, options_.commit_wait_ns + 5'000'000'000, [&] {
    mu_.AssertHeld();  // WaitFor calls it with the lock held
    const StepRuntime* rt = steps_.FindRuntime(step_ino);
    return !rt || rt->outcome_gen != gen;
  });
  it = steps_.find(step_ino);
  if (it == steps_.end()) return Status::Error(ENOENT, "step was removed");
  switch (it->second.state) {
    case StepState::kCommitted:
      return Status::Ok();
    case StepState::kBroken:
      return Status::Error(EIO, "step is broken: " + it->second.error);
    default:
      break;
  }
  const StepRuntime* rt = steps_.FindRuntime(step_ino);
  // No attempt ended in time: files stayed open for writing.
  if (rt && rt->outcome_gen == gen) {
    return Status::Error(ETIMEDOUT, "commit timed out: " + it->second.error);
  }
  // Still asked for (waiting for files or for quiet): accepted. A trainer's
  // commit callback must not fail because a shard is still to come.
  if (rt && rt->commit_wanted) return Status::Ok();
  return Status::Error(EBUSY, "not committed: " + it->second.error);
}

bool FileSystem::HasSteps() {
  MutexLock lock(&mu_);
  return steps_.begin() != steps_.end();
}

std::vector<StepSummary> FileSystem::Steps() {
  MutexLock lock(&mu_);
  std::vector<StepSummary> out;
  for (const auto& [ino, rec] : steps_) out.push_back(StepSummary{ino, inodes_.PathOf(ino), rec});
  std::sort(out.begin(), out.end(), [](const StepSummary& a, const StepSummary& b) {
    return a.path < b.path;
  });
  return out;
}

}  // namespace ckptfs
