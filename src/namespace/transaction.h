// Transaction: one change to the namespace, as LevelDB's VersionEdit and
// LogAndApply. FileSystem begins it with its mutex held (BeginLocked), the
// operation changes the in-memory image through the owners and adds the
// change's manifest records to the transaction's one batch, and the batch is
// written exactly once, at the end (Write*). So one FUSE operation, one
// commit, one cluster apply, one recovery pass is one manifest batch: a crash
// finds the change whole or not at all.
//
// A transaction that ends without Write* (an error return after part of the
// change was made, say a directory path created before the step record was
// refused) still writes what it gathered when it goes out of scope, with the
// mutex still held: the image holds that part, so the manifest must too.
#pragma once

#include "manifest/manifest_store.h"
#include "namespace/manifest_journal.h"

namespace ckptfs {

class Transaction {
 public:
  explicit Transaction(ManifestJournal* journal) : journal_(journal) {}
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();

  // Where the operation and its helpers add the change's records.
  ManifestBatch* batch() { return &batch_; }
  bool empty() const { return batch_.empty(); }

  // Writes the change (ManifestJournal::Apply): buffered, as the kernel's
  // own metadata is until fsync; kept and written later when the manifest
  // cannot take it now, and the journal's errno returned.
  Status Write() { return Finish(/*sync=*/false, /*keep_on_failure=*/true); }
  // Durable when it returns: a fsync's, recovery's and the fast path's.
  Status WriteSynced() { return Finish(/*sync=*/true, /*keep_on_failure=*/true); }
  // Durable, or not kept: the caller undoes its change itself on failure
  // (a commit: the step goes back to writing rather than half-committed).
  Status WriteSyncedOrDiscard() { return Finish(/*sync=*/true, /*keep_on_failure=*/false); }
  // Handed to the journal to write after the reply (ManifestJournal::
  // ApplyLater, which says when that is allowed).
  void WriteLater();

 private:
  Status Finish(bool sync, bool keep_on_failure);

  ManifestJournal* const journal_;
  ManifestBatch batch_;
  bool written_ = false;
};

}  // namespace ckptfs
