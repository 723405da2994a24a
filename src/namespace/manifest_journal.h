// ManifestJournal: the one writer of the namespace's manifest batches, and
// the owner of what happens when a write fails (a full cache disk, an I/O
// error): the mount stays up, read-only, and heals itself.
//
// FileSystem changes its in-memory image first and then hands the journal
// the batch that records the change. When the write fails the image is ahead
// of the manifest by exactly that batch; the journal keeps it and writes it
// later, after every batch kept before it, so image and manifest agree again
// without a restart. The first failure is kept, as LevelDB's bg_error_, and
// every later mutation is refused up front (CheckWritable) before it touches
// the image; reads never need the manifest.
//
// Not thread-safe by itself: FileSystem owns it under its mutex
// (GUARDED_BY(mu_)), so the manifest's write order is the change order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "control/event_log.h"
#include "manifest/manifest_store.h"

namespace ckptfs {

// For status.json and `ckptfs status`.
struct ManifestHealth {
  bool ok = true;
  std::string error;
  int err = 0;
  size_t pending_batches = 0;
  double since_s = 0;
  bool needs_restart = false;
};

class ManifestJournal {
 public:
  ManifestJournal(ManifestStore* store, const Clock* clock, EventLog* events)
      : store_(store), clock_(clock), events_(events) {}
  ManifestJournal(const ManifestJournal&) = delete;
  ManifestJournal& operator=(const ManifestJournal&) = delete;

  // Writes a batch whose change the image already holds. On failure the
  // batch is kept (keep_on_failure) and the caller gets the store's errno
  // (ENOSPC for a full disk); keep_on_failure = false: the caller undoes its
  // change itself.
  Status Apply(const ManifestBatch& batch, bool sync, bool keep_on_failure = true);
  // A change the image already holds, written later: by WriteLater (the
  // coordinator's tick, a clean stop) or before the next Apply, whichever
  // comes first, so the manifest's order stays the change order. Only for a
  // change whose loss in a crash recovery makes good by itself (the end of
  // an rm -rf: a `deleting` step is removed whole at the next mount), and
  // whose records nobody reads from the manifest meanwhile.
  void ApplyLater(ManifestBatch batch);
  // Writes what ApplyLater left (unsynced, kept on failure as Apply keeps).
  Status WriteLater();
  bool HasLater() const { return !later_.empty(); }
  // Ok while the manifest takes writes; else retries the kept batches (at
  // most every 200 ms) and, if that fails, the errno mutations get.
  Status CheckWritable();
  // Writes the kept batches as one synced batch; true when healthy after.
  bool TryRecover();
  // A change could neither be kept nor undone (a commit's pruning): only a
  // remount, which reloads the manifest, makes the image right again.
  void MarkDiverged() { diverged_ = true; }
  bool healthy() const { return error_.ok(); }
  ManifestHealth Health() const;

 private:
  void NoteFailure(const Status& st);

  ManifestStore* const store_;
  const Clock* const clock_;
  EventLog* const events_;
  Status error_;             // ok = the manifest takes writes
  ManifestBatch pending_;    // failed batches, in order
  ManifestBatch later_;      // ApplyLater's batches, in order, not yet handed to the store
  size_t pending_batches_ = 0;
  bool diverged_ = false;
  int64_t error_since_ns_ = 0;
  int64_t retry_ns_ = 0;     // last retry
};

}  // namespace ckptfs
