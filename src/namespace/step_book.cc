#include "namespace/step_book.h"

#include "manifest/schema.h"

namespace ckptfs {

namespace {
// Guards against a damaged parent chain only.
constexpr int kMaxDepth = 4096;
}  // namespace

StepRecord* StepBook::Find(uint64_t ino) {
  auto it = records_.find(ino);
  return it == records_.end() ? nullptr : &it->second;
}

StepRecord& StepBook::AddWriting(uint64_t ino, int64_t step, int64_t now_ns, ManifestBatch* batch,
                                 std::string follows_removal) {
  StepRecord rec;
  rec.state = StepState::kWriting;
  rec.step = step;
  rec.follows_removal = std::move(follows_removal);
  Put(ino, rec, batch);
  runtime_[ino].last_activity = now_ns;
  return records_[ino] = std::move(rec);
}

StepRecord& StepBook::AddCommitted(uint64_t ino, int64_t step, const CommitFacts& facts,
                                   int64_t now_ns, ManifestBatch* batch) {
  StepRecord& rec = records_[ino] = StepRecord{};
  rec.step = step;
  runtime_[ino].last_activity = now_ns;
  Commit(ino, facts, batch);  // writes the record
  return rec;
}

StepRecord StepBook::Commit(uint64_t ino, const CommitFacts& facts, ManifestBatch* batch) {
  StepRecord& rec = records_[ino];
  StepRecord before = rec;
  rec.state = StepState::kCommitted;
  rec.committed_at = facts.committed_at;
  rec.bytes = facts.bytes;
  rec.files = facts.files;
  rec.error.clear();
  rec.ephemeral = facts.ephemeral;
  rec.session = facts.session;
  rec.best_ref = facts.best_ref;
  rec.committer = facts.committer;
  rec.decision = facts.decision;
  rec.persisted = facts.persisted;
  rec.pending_commit = 0;
  Put(ino, rec, batch);
  return before;
}

void StepBook::MarkIncomplete(uint64_t ino, std::string why, ManifestBatch* batch) {
  EndUncommitted(ino, StepState::kIncomplete, std::move(why), batch);
}

void StepBook::MarkBroken(uint64_t ino, std::string why, ManifestBatch* batch) {
  EndUncommitted(ino, StepState::kBroken, std::move(why), batch);
}

void StepBook::EndUncommitted(uint64_t ino, StepState state, std::string why,
                              ManifestBatch* batch) {
  StepRecord& rec = records_[ino];
  rec.state = state;
  rec.error = std::move(why);
  rec.pending_commit = 0;  // no commit will come of the request
  Put(ino, rec, batch);
}

bool StepBook::MarkDeleting(uint64_t ino, ManifestBatch* batch) {
  StepRecord* rec = Find(ino);
  if (!rec || rec->state == StepState::kWriting || rec->state == StepState::kDeleting) return false;
  rec->state = StepState::kDeleting;
  rec->error.clear();
  Put(ino, *rec, batch);
  return true;
}

bool StepBook::SetPersisted(uint64_t ino, bool persisted, ManifestBatch* batch) {
  StepRecord* rec = Find(ino);
  if (!rec || rec->persisted == persisted) return false;
  // Only a committed step becomes persisted; any step may stop being so.
  if (persisted && rec->state != StepState::kCommitted) return false;
  rec->persisted = persisted;
  Put(ino, *rec, batch);
  return true;
}

bool StepBook::Remove(uint64_t ino, ManifestBatch* batch) {
  runtime_.erase(ino);
  if (!records_.erase(ino)) return false;
  batch->Delete(KeySpace::kSteps, InoKey(ino));
  return true;
}

void StepBook::Put(uint64_t ino, const StepRecord& rec, ManifestBatch* batch) {
  batch->Put(KeySpace::kSteps, InoKey(ino), EncodeStep(rec));
}

StepRuntime* StepBook::FindRuntime(uint64_t ino) {
  auto it = runtime_.find(ino);
  return it == runtime_.end() ? nullptr : &it->second;
}

uint64_t StepBook::StepOf(const InodeTable& inodes, uint64_t ino) const {
  for (int depth = 0; ino != 0 && depth < kMaxDepth; ++depth) {
    if (records_.count(ino)) return ino;
    if (ino == kRootIno) return 0;
    Inode* inode = inodes.Find(ino);
    if (!inode) return 0;
    ino = inode->rec.parent;
  }
  return 0;
}

bool StepBook::IsSealed(uint64_t step_ino) const {
  auto it = records_.find(step_ino);
  return it != records_.end() &&
         (it->second.state == StepState::kCommitted || it->second.state == StepState::kDeleting);
}

uint64_t StepBook::LatestOf(const InodeTable& inodes, uint64_t run_ino) const {
  Inode* run = inodes.Find(run_ino);
  if (!run || !run->is_dir()) return 0;
  uint64_t best = 0;
  int64_t best_step = -1;
  for (const auto& [name, dent] : run->children) {
    auto it = records_.find(dent.ino);
    if (it == records_.end() || it->second.state != StepState::kCommitted) continue;
    if (it->second.step > best_step) {
      best_step = it->second.step;
      best = dent.ino;
    }
  }
  return best;
}

}  // namespace ckptfs
