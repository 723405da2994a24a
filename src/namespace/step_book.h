// StepBook: the owner of the checkpoint steps' records (which directories
// are steps, their numbers, states and commit bookkeeping, as persisted in
// the manifest's steps key space) and of what only lives while the daemon
// runs (StepRuntime: pending commit requests, activity, commit attempts).
// It answers the questions every operation asks about steps: which step
// holds an inode, whether it is sealed, which is a run's newest committed
// step. Changes it makes go into the caller's manifest batch.
//
// Not thread-safe by itself: FileSystem holds it GUARDED_BY its one mutex,
// beside the InodeTable it reads parents from.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "manifest/manifest_store.h"
#include "manifest/records.h"
#include "namespace/inode_table.h"

namespace ckptfs {

// A settled step: committed, with no commit pending, so nothing in it
// changes (its files are sealed) and recovery has nothing to finish or undo
// there. The lazy namespace leaves such steps unloaded, and unloads them
// again when memory runs over. Broken and incomplete steps stay writable.
inline bool SettledStep(const StepRecord& rec) {
  return rec.pending_commit == 0 && rec.state == StepState::kCommitted;
}

// A step's commit request and activity while the daemon runs.
struct StepRuntime {
  bool commit_wanted = false;
  int64_t wanted_since = 0;  // monotonic ns
  bool committing = false;
  int64_t last_activity = 0;  // monotonic ns
  uint64_t outcome_gen = 0;   // bumped whenever a commit attempt ends
  // The pending request's triggers (reset when it ends).
  bool renamed = false;
  bool forced = false;
  // The user's word that the step is complete (ckptfs commit, setfattr):
  // no settling for quiet (SPEC section 3).
  bool explicit_commit = false;
  bool direct = false;    // a trigger other than a subdirectory marker
  bool settling = false;  // the last attempt waited for quiet
  uint64_t session = 0;
  // Recovery resumed this request (its trigger survived a crash): no
  // writer is coming back, so an attempt that finds files missing makes
  // the step incomplete instead of waiting.
  bool recovered = false;

  // The pending request ended (committed, given up or dropped).
  void EndRequest() {
    commit_wanted = false;
    renamed = forced = explicit_commit = direct = settling = false;
    session = 0;
  }
};

// What a commit records beside the state (local commit, cluster apply,
// import of a step from the bucket).
struct CommitFacts {
  timespec committed_at{};
  uint64_t bytes = 0;
  uint64_t files = 0;
  bool ephemeral = false;
  uint64_t session = 0;    // the trainer process that asked (0 = unknown)
  std::string best_ref;    // the checkpoint the trainer calls best
  std::string committer;   // cluster mode: the node that decided ("" = local)
  std::string decision;    // cluster mode: the decided proposal (StepRecord::decision)
  bool persisted = false;  // imported from the bucket: its copy is complete
};

class StepBook {
 public:
  using Records = std::unordered_map<uint64_t, StepRecord>;

  // Read access to the records, keyed by step directory inode. A record
  // changed through them is written with Put.
  Records::iterator find(uint64_t ino) { return records_.find(ino); }
  Records::const_iterator find(uint64_t ino) const { return records_.find(ino); }
  Records::iterator begin() { return records_.begin(); }
  Records::iterator end() { return records_.end(); }
  Records::const_iterator begin() const { return records_.begin(); }
  Records::const_iterator end() const { return records_.end(); }
  size_t count(uint64_t ino) const { return records_.count(ino); }
  size_t size() const { return records_.size(); }
  StepRecord* Find(uint64_t ino);

  // A directory becomes a writing step (mkdir or rename into a step name,
  // a cluster step first seen here), numbered step; activity as of now_ns.
  // follows_removal: StepRecord::follows_removal (cluster mode).
  StepRecord& AddWriting(uint64_t ino, int64_t step, int64_t now_ns, ManifestBatch* batch,
                         std::string follows_removal = "");
  // A committed step arrives whole (a cold mount's import from the bucket).
  StepRecord& AddCommitted(uint64_t ino, int64_t step, const CommitFacts& facts, int64_t now_ns,
                           ManifestBatch* batch);
  // A record loaded from the manifest at mount.
  void Load(uint64_t ino, StepRecord rec) { records_[ino] = std::move(rec); }
  // The directory stops being a step (deleted, renamed to another name,
  // moved into a step): false when it was none.
  bool Remove(uint64_t ino, ManifestBatch* batch);
  // Records rec as ino's record in the batch.
  static void Put(uint64_t ino, const StepRecord& rec, ManifestBatch* batch);

  // Transitions (SPEC section 3). The only code that sets a step's state:
  // each applies its rule to the record, ends the pending commit request
  // where the step leaves `writing`, and writes the record into the batch.
  //
  // writing -> committed, with what the commit learnt. Returns the record as
  // it was, which Restore puts back when the batch fails.
  StepRecord Commit(uint64_t ino, const CommitFacts& facts, ManifestBatch* batch);
  void Restore(uint64_t ino, StepRecord before) { records_[ino] = std::move(before); }
  // writing -> incomplete: nobody will finish it (a crash, a cluster step
  // whose files never came).
  void MarkIncomplete(uint64_t ino, std::string why, ManifestBatch* batch);
  // -> broken: the step cannot be committed as it is (bad metadata, a
  // committed file that lost data).
  void MarkBroken(uint64_t ino, std::string why, ManifestBatch* batch);
  // committed, incomplete or broken -> deleting (rm, retention). False for a
  // writing step (a trainer deletes its own files) or one already deleting.
  bool MarkDeleting(uint64_t ino, ManifestBatch* batch);
  // A committed step's remote copy became complete (persisted = true) or
  // stopped being so (false). False when nothing changed: not committed, or
  // already so.
  bool SetPersisted(uint64_t ino, bool persisted, ManifestBatch* batch);

  // Runtime state, created on first use.
  StepRuntime& Runtime(uint64_t ino) { return runtime_[ino]; }
  StepRuntime* FindRuntime(uint64_t ino);
  const std::unordered_map<uint64_t, StepRuntime>& runtimes() const { return runtime_; }
  std::unordered_map<uint64_t, StepRuntime>& runtimes() { return runtime_; }

  // The step directory containing ino (itself included), or 0.
  uint64_t StepOf(const InodeTable& inodes, uint64_t ino) const;
  // Committed or being deleted: no new contents.
  bool IsSealed(uint64_t step_ino) const;
  // The newest committed step directly under run, or 0.
  uint64_t LatestOf(const InodeTable& inodes, uint64_t run_ino) const;

 private:
  // The step leaves `writing` without a commit, in state, for why.
  void EndUncommitted(uint64_t ino, StepState state, std::string why, ManifestBatch* batch);

  Records records_;
  std::unordered_map<uint64_t, StepRuntime> runtime_;
};

}  // namespace ckptfs
