// Retention inside the filesystem (SPEC section 5): the policy of a run
// directory, applying RetentionPlanner's decisions, removing steps from the
// namespace in the same manifest batch, and deleting their data later from a
// persistent GC queue.
#include <cstdlib>

#include "namespace/filesystem.h"

namespace ckptfs {

namespace {
constexpr const char* kRulePrefix = "user.ckptfs.";

std::optional<double> ParseScore(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || v != v) return std::nullopt;
  return v;
}

StepPhase PhaseOf(StepState state) {
  switch (state) {
    case StepState::kCommitted:
      return StepPhase::kCommitted;
    case StepState::kIncomplete:
      return StepPhase::kIncomplete;
    case StepState::kBroken:
      return StepPhase::kBroken;
    case StepState::kWriting:
    case StepState::kDeleting:
      break;
  }
  return StepPhase::kWriting;
}
}  // namespace

void FileSystem::SetInvalidateEntry(InvalidateEntryFn fn) {
  MutexLock lock(&mu_);
  invalidate_entry_ = std::move(fn);
}

void FileSystem::SetInvalidateInode(InvalidateInodeFn fn) {
  MutexLock lock(&mu_);
  invalidate_inode_ = std::move(fn);
}

void FileSystem::DropPageCache(const std::vector<uint64_t>& inos) {
  InvalidateInodeFn fn;
  {
    MutexLock lock(&mu_);
    fn = invalidate_inode_;
  }
  if (!fn) return;
  for (uint64_t ino : inos) fn(ino);
}

void FileSystem::FlushInvalidations() {
  std::vector<std::pair<uint64_t, std::string>> todo;
  InvalidateEntryFn fn;
  {
    MutexLock lock(&mu_);
    todo.swap(pending_invalidations_);
    fn = invalidate_entry_;
  }
  if (!fn) return;
  for (const auto& [parent, name] : todo) fn(parent, name);
}

// Two levels, the mount's options and the run directory's xattrs, each
// holding either a trainer preset or union rules (SetPolicyRule and
// ValidateXattr refuse the mix on one level):
//  * a preset on the run (user.ckptfs.retention) is the whole policy;
//  * else union rules set on the run (non-empty values) replace a preset
//    of the mount, and override the mount's rules one by one as before (an
//    empty value clears the mount's rule);
//  * else the mount's policy.
// Values were validated when set; a bad one (older version) is ignored.
RetentionPolicy FileSystemCore::PolicyOf(Inode* run) {
  auto preset = run->xattrs.find(std::string(kRulePrefix) + "retention");
  if (preset != run->xattrs.end() && !preset->second.empty()) {
    RetentionPolicy own;
    if (SetPolicyRule("retention", preset->second, &own).ok()) return own;
  }
  RetentionPolicy policy = options_.retention;
  bool run_rules = false;
  for (const std::string& rule : PolicyRuleNames()) {
    auto it = run->xattrs.find(kRulePrefix + rule);
    if (rule != "retention" && it != run->xattrs.end() && !it->second.empty()) run_rules = true;
  }
  if (!run_rules) return policy;
  policy.preset = std::nullopt;
  for (const std::string& rule : PolicyRuleNames()) {
    if (rule == "retention") continue;
    auto it = run->xattrs.find(kRulePrefix + rule);
    if (it != run->xattrs.end()) (void)SetPolicyRule(rule, it->second, &policy);
  }
  return policy;
}

std::vector<StepDecision> FileSystemCore::PlanLocked(Inode* run) {
  std::vector<StepFacts> facts;
  for (const auto& [name, dent] : run->children) {
    auto step = steps_.find(dent.ino);
    // A step being deleted by the user is no longer counted by any rule.
    if (step == steps_.end() || step->second.state == StepState::kDeleting) continue;
    Inode* dir = inodes_.Find(dent.ino);
    if (!dir) continue;
    StepFacts f;
    f.id = dent.ino;
    f.step = step->second.step;
    f.phase = PhaseOf(step->second.state);
    // Cluster mode: a step not committed here may still be committed by the
    // cluster, with this node's part as the bucket names it (its part
    // record stays), so no node's retention removes it: an incomplete step
    // pruned here once committed elsewhere with files nobody had any more
    // (the simulation's Seed2). It stays until the cluster commits it or a
    // user removes it.
    if (cluster_ && f.phase != StepPhase::kCommitted) f.phase = StepPhase::kWriting;
    f.committed_at_s = step->second.committed_at.tv_sec;
    f.ephemeral = step->second.ephemeral;
    f.persisted = step->second.persisted;
    f.name = name;
    f.session = step->second.session;
    f.best_ref = step->second.best_ref;
    auto pin = dir->xattrs.find("user.ckptfs.pin");
    f.pinned = pin != dir->xattrs.end() && pin->second == "1";
    auto score = dir->xattrs.find("user.ckptfs.score");
    if (score != dir->xattrs.end()) f.score = ParseScore(score->second);
    const StepRuntime* rt = steps_.FindRuntime(dent.ino);
    f.open_for_writing = OpenWritersUnderLocked(dir) > 0 || (rt && rt->committing);
    facts.push_back(f);
  }
  return PlanRetention(PolicyOf(run), facts, clock_->Now().tv_sec);
}

Result<std::vector<StepDecision>> FileSystem::PlanRetentionFor(uint64_t run_ino) {
  MutexLock lock(&mu_);
  auto run = inodes_.FindDir(run_ino);
  if (!run.ok()) return run.status();
  return PlanLocked(*run);
}

void FileSystemCore::ApplyRetentionLocked(uint64_t run_ino, ManifestBatch* batch) {
  Inode* run = inodes_.Find(run_ino);
  if (!run || !run->is_dir()) return;
  // Cluster mode: retention is decided once for the cluster, by the node
  // that commits (or persists) the run's newest step, with the view it just
  // refreshed (RefreshClusterForRetention, before mu_ is taken); its removals reach the other nodes
  // through the bucket. A node that restarts never prunes from what it remembers (SPEC section 9):
  // the mount-time pass runs before the cluster hooks are attached, so the rule keys on the
  // configured node name as well as on the hooks.
  const bool cluster_mode = cluster_ != nullptr || !options_.node.empty();
  if (cluster_mode && !retention_by_committer_) return;
  for (const StepDecision& d : PlanLocked(run)) {
    if (!d.keep) RemoveStepLocked(d.id, d.reason, batch);
  }
}

void FileSystemCore::RemoveSubtreeLocked(Inode* dir, ManifestBatch* batch) {
  // A settled step's entries are read first: each record goes in the batch.
  // (Unreadable, they are reported and left; fsck finds them.)
  (void)inodes_.EnsureLoaded(dir);
  for (const auto& [name, dent] : dir->children) {
    batch->Delete(KeySpace::kDentries, DentryKey(dir->rec.ino, name));
    Inode* child = inodes_.Find(dent.ino);
    if (!child) continue;
    if (child->is_dir()) RemoveSubtreeLocked(child, batch);
    if (!child->is_dir() && child->rec.nlink > 1) {
      // Another hard link outside the step keeps the file alive.
      child->rec.nlink--;
      InodeTable::Put(*child, batch);
      continue;
    }
    child->rec.nlink = 0;
    for (const auto& [xname, value] : child->xattrs) {
      batch->Delete(KeySpace::kXattrs, XattrKey(child->rec.ino, xname));
    }
    if (auto step = steps_.find(child->rec.ino); step != steps_.end() &&
                                                 step->second.state == StepState::kCommitted) {
      UnpersistStepLocked(child->rec.ino, inodes_.PathOf(child->rec.ino), batch);
    }
    steps_.Remove(child->rec.ino, batch);
    if (child->open_handles > 0) {
      // Readers keep their data until they close; Release deletes it, and
      // recovery deletes orphans if the daemon stops first.
      InodeTable::Put(*child, batch);
    } else {
      batch->Delete(KeySpace::kInodes, InoKey(child->rec.ino));
      if (child->is_reg()) batch->Put(KeySpace::kGc, InoKey(child->rec.ino), "");
      ForgetObjectLocked(child, batch);
      inodes_.ForgetIfUnused(child->rec.ino);
    }
  }
  dir->children.clear();
  dir->by_cookie.clear();
}

void FileSystemCore::RemoveStepLocked(uint64_t step_ino, const std::string& reason,
                                      ManifestBatch* batch) {
  Inode* step = inodes_.Find(step_ino);
  auto rec_it = steps_.find(step_ino);
  if (!step || rec_it == steps_.end()) return;
  // A settled step whose entries cannot be read stays (the loader reported
  // why): removing only its directory would leave its files' records.
  if (!inodes_.EnsureLoaded(step).ok()) return;
  const StepRecord rec = rec_it->second;
  const std::string path = inodes_.PathOf(step_ino);
  FlushDeferredRemovalsLocked(step_ino, batch);
  AnnounceClusterRemovalLocked(step_ino, rec, batch);
  const uint64_t run_ino = step->rec.parent;
  const std::string name = step->name;
  RemoveSubtreeLocked(step, batch);
  if (Inode* run = inodes_.Find(run_ino)) inodes_.RemoveChild(run, name, clock_->Now(), batch);
  DropLinkLocked(step, batch);  // removes the step record too
  inodes_.ForgetIfUnused(step_ino);
  pending_invalidations_.emplace_back(run_ino, name);
  metrics_.retention_removals++;
  events_->Append({{"event", "prune"},
                   {"path", path},
                   {"step", rec.step},
                   {"state", StepStateName(rec.state)},
                   {"reason", reason}});
}

Status FileSystem::WriteDeferredRecords() {
  MutexLock lock(&mu_);
  return journal_.WriteLater();
}

Result<size_t> FileSystem::CollectGarbage(size_t max) {
  // The end of an rm -rf left for the background goes first: it queues the
  // step's files here.
  CKPTFS_RETURN_IF_ERROR(WriteDeferredRecords());
  std::vector<uint64_t> inos;
  Status scan = manifest_->Scan(KeySpace::kGc, "", [&](std::string_view key, std::string_view) {
    auto ino = DecodeInoKey(key);
    if (ino.ok()) inos.push_back(*ino);
    return inos.size() < max;
  });
  if (!scan.ok()) return scan;
  if (inos.empty()) return size_t{0};
  {
    // The removal that queued these (an rm, a prune) must be durable before
    // its data goes: a power loss would otherwise bring the files back
    // without their bytes. One synced write makes every earlier batch so.
    MutexLock lock(&mu_);
    Transaction txn = BeginLocked();
    txn.batch()->Put(KeySpace::kMeta, "fsyncdir_seq", std::to_string(++fsyncdir_seq_));
    CKPTFS_RETURN_IF_ERROR(txn.WriteSynced());
  }
  // Data first, then the queue entry: a crash in between deletes it again.
  // A live inode's data is never touched (defence in depth: numbers in the
  // queue are not reused, see Recover).
  for (uint64_t ino : inos) {
    bool live;
    {
      MutexLock lock(&mu_);
      // Deleted inodes may stay in memory while the kernel still holds a
      // lookup on them; those are not live. Open orphans are, and their
      // last close deletes the data.
      const Inode* inode = inodes_.Find(ino);
      live = inode && (inode->rec.nlink > 0 || inode->open_handles > 0);
    }
    if (!live) CKPTFS_RETURN_IF_ERROR(data_->Remove(ino));
  }
  MutexLock lock(&mu_);
  Transaction txn = BeginLocked();
  for (uint64_t ino : inos) txn.batch()->Delete(KeySpace::kGc, InoKey(ino));
  CKPTFS_RETURN_IF_ERROR(txn.Write());
  return inos.size();
}

Status FileSystemCore::ValidateXattrLocked(Inode* inode, const std::string& name,
                                           const std::string& value) {
  if (name.rfind(kRulePrefix, 0) != 0) return Status::Ok();
  const std::string rule = name.substr(std::string(kRulePrefix).size());
  Status st;
  if (rule == "pin") {
    if (value != "0" && value != "1") st = Status::Error(EINVAL, "pin: '" + value + "' must be 0 or 1");
  } else if (rule == "score") {
    if (!ParseScore(value)) st = Status::Error(EINVAL, "score: '" + value + "' is not a number");
  } else {
    bool is_rule = false;
    for (const std::string& r : PolicyRuleNames()) is_rule |= r == rule;
    if (!is_rule) return Status::Ok();
    if (!inode->is_dir()) return Status::Error(EINVAL, rule + " is set on run directories");
    // The run's level as it would be with the new value: a preset and rules
    // on the same run directory are refused, whichever comes second.
    RetentionPolicy level;
    for (const std::string& r : PolicyRuleNames()) {
      auto it = inode->xattrs.find(kRulePrefix + r);
      if (r != rule && it != inode->xattrs.end()) (void)SetPolicyRule(r, it->second, &level);
    }
    st = SetPolicyRule(rule, value, &level);
  }
  if (!st.ok()) {
    events_->Append({{"event", "error"}, {"path", inodes_.PathOf(inode->rec.ino)}, {"error", st.message()}});
  }
  return st;
}

}  // namespace ckptfs
