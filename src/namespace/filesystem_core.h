// FileSystemCore: the namespace's image and the operations on it that hold
// the lock. FileSystem (namespace/filesystem.h) is built on it: FileSystem's
// methods are the entry points (the POSIX operations, the ports the commit
// coordinator, the remote tier and cluster mode call, the daemon's wiring),
// and each takes mu_, begins a Transaction and calls the `Locked` operations
// declared here, which change the image through its owners and add their
// records to the transaction's batch. The rule that sorts a method into one
// class or the other: a method that requires mu_ (REQUIRES, the `Locked`
// suffix), or that only computes from its arguments, is the core's; a method
// that takes mu_ itself, or does I/O without it, is FileSystem's. A core
// operation never calls an entry point, so none can take mu_ twice.
//
// The state is here, each piece with one owner (docs/architecture.md,
// "Inside the namespace"): InodeTable (inodes, names, links), StepBook
// (steps, states, commit requests; its transitions are the only code that
// sets a step's state), TierLedger (uploads, object keys, claims, run-level
// files), ManifestJournal (writing batches, failures), PassthroughBook (the
// kernel's backing ids). All of them are guarded by the one mutex mu_.
//
// Only FileSystem derives from it; nothing else names it.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "control/event_log.h"
#include "control/metrics.h"
#include "data/data_store.h"
#include "data/metadata_reserve.h"
#include "formats/commit_object.h"
#include "manifest/manifest_store.h"
#include "manifest/schema.h"
#include "namespace/access_check.h"
#include "namespace/backing_registry.h"
#include "namespace/cluster_hooks.h"
#include "namespace/cluster_port.h"
#include "namespace/commit_port.h"
#include "namespace/filesystem_options.h"
#include "namespace/fs_types.h"
#include "namespace/inode.h"
#include "namespace/inode_table.h"
#include "namespace/manifest_journal.h"
#include "namespace/passthrough_book.h"
#include "namespace/step_book.h"
#include "namespace/step_pattern.h"
#include "namespace/tier_hooks.h"
#include "namespace/tier_ledger.h"
#include "namespace/tier_port.h"
#include "namespace/transaction.h"
#include "namespace/virtual_nodes.h"
#include "retention/retention_planner.h"

namespace ckptfs {

struct Holdings;  // control/status_report.h

// What asked for a step's commit (SPEC section 3's triggers). The commit
// procedure treats them differently: a directory rename and an explicit
// commit do not wait for quiet; explicit and idle commits override waits that only the
// layout suggests; a marker in a subdirectory commits only a recognised
// format.
enum class CommitTrigger {
  kRetry,         // a close in a step whose commit waits asks again
  kMarker,        // a commit marker closed or renamed directly in the step
  kNestedMarker,  // a commit marker in a subdirectory (OLMo-core model/, optim/)
  kRename,        // a directory renamed into a step name
  kIndex,         // the run's index file (DeepSpeed latest, RecIS checkpoint) names it
  kExplicit,      // ckptfs commit, setfattr user.ckptfs.commit
  kIdle,          // --commit-idle
};

class FileHandle;
class FullView;
class FullViewCache;

class FileSystemCore {
 public:
  // Upload progress and persisted state, for status.json and xattrs.
  struct UploadProgress {
    uint64_t bytes_done = 0;
    uint64_t bytes_total = 0;
    uint64_t files_done = 0;
    uint64_t files_total = 0;
  };
  // Kernel cache invalidation (FileSystem::SetInvalidateEntry and
  // SetInvalidateInode say when they are called).
  using InvalidateEntryFn = std::function<void(uint64_t parent, const std::string& name)>;
  using InvalidateInodeFn = std::function<void(uint64_t ino)>;

 protected:
  FileSystemCore(FileSystemOptions options, StepPattern pattern,
                 std::unique_ptr<ManifestStore> manifest, std::unique_ptr<DataStore> data,
                 const Clock* clock, EventLog* events);
  ~FileSystemCore();
  FileSystemCore(const FileSystemCore&) = delete;
  FileSystemCore& operator=(const FileSystemCore&) = delete;

  // Loading and recovery (filesystem_recovery.cc); the lazy namespace
  // (filesystem_lazy.cc).
  Status LoadLocked() REQUIRES(mu_);
  Status LoadWholeLocked() REQUIRES(mu_);
  Status LoadSettledStepsLazilyLocked() REQUIRES(mu_);
  Status RecoverLocked() REQUIRES(mu_);
  // Reads ino's record, xattrs and checksum into the table; nullptr when the
  // manifest has no such inode.
  Result<Inode*> ReadInodeLocked(uint64_t ino) REQUIRES(mu_);
  // The same from a record already read: its xattrs and checksum read.
  Result<Inode*> AddInodeLocked(InodeRecord rec) REQUIRES(mu_);
  // The same for many (those the manifest lacks are skipped).
  Status ReadInodesLocked(std::vector<uint64_t> inos) REQUIRES(mu_);
  // A remote mount reloading step_ino: the object records of its files
  // (read back as they were when it unloaded).
  Status LoadObjectsLocked(uint64_t step_ino, const std::vector<Inode*>& files) REQUIRES(mu_);
  // A remote mount's lazy load (filesystem_lazy_tier.cc): the upload queue
  // whole, the steps its files lie in, the object records of what is
  // loaded, and a first count of what each unloaded step holds.
  Status LoadTierStateLazilyLocked() REQUIRES(mu_);
  // Loads the unloaded step that ino (not in memory) lies in, if any,
  // finding it through the manifest's parent records.
  Status LoadStepHoldingLocked(uint64_t ino) REQUIRES(mu_);
  // The object records of inos (sorted, unique; those the manifest has),
  // a range scan per run of close numbers.
  Result<std::map<uint64_t, ObjectRecord>> ReadObjectsLocked(const std::vector<uint64_t>& inos)
      REQUIRES(mu_);
  // The same, given to the loaded files they belong to (and to the ledger).
  Status LoadObjectRecordsLocked(const std::vector<uint64_t>& inos) REQUIRES(mu_);
  // What an unloaded step holds in the cache, as the background check
  // counted it (an entry of unloaded_cached_; none for nothing).
  void SetUnloadedResidentBytesLocked(uint64_t step_ino, uint64_t bytes) REQUIRES(mu_);
  // The records of inos (sorted, unique; those the manifest has), with one
  // range scan where the numbers are close together.
  Result<std::map<uint64_t, InodeRecord>> ReadRecordsLocked(const std::vector<uint64_t>& inos)
      REQUIRES(mu_);
  // dir's entries as the manifest holds them, in name order.
  Result<std::vector<std::pair<std::string, DentryRecord>>> ReadEntriesLocked(uint64_t dir_ino)
      REQUIRES(mu_);
  // Reads dir's entries and links them, reading inodes not in memory yet;
  // subdirectories go to dirs, regular files to files (when given).
  Status LoadEntriesLocked(Inode* dir, std::vector<Inode*>* dirs, std::vector<Inode*>* files)
      REQUIRES(mu_);
  // The SubtreeLoader: a settled step's subtree, read on first use, and its
  // committed files' sizes checked against their backing files if the
  // background pass has not done so yet.
  Status LoadSubtreeLocked(Inode* step_dir) REQUIRES(mu_);
  // Reads and links everything below step_dir (its regular files to files).
  Status LoadEntriesBelowLocked(Inode* step_dir, std::vector<Inode*>* files) REQUIRES(mu_);
  // A committed file the manifest records as size bytes long, modified at
  // mtime_ns; on a remote mount, with its object record if it has one.
  struct CommittedSize {
    uint64_t ino = 0;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    std::string path;
    std::optional<ObjectRecord> object;
  };
  // Marks the step broken (an error event per file) when a committed file's
  // backing file is shorter than its record: the disk lost committed data
  // while the daemon was down. A file the bucket holds, checked, loses only
  // its local copy (DropLostLocalCopyLocked); one that is not resident has
  // none to check. Returns the bytes of the files still resident.
  uint64_t CheckCommittedSizesLocked(uint64_t step_ino, std::vector<CommittedSize> files,
                                     ManifestBatch* batch) REQUIRES(mu_);
  // Adds each file's object record (one read per run of close numbers).
  Status AttachObjectsLocked(std::vector<CommittedSize>* files) REQUIRES(mu_);
  // A committed file whose local copy holds only `have` bytes while the
  // bucket holds this very version, checked (a power loss cut the copy an
  // upload or a fetch wrote without fsync): the copy goes, and the file is
  // read from the remote again, as an evicted one.
  void DropLostLocalCopyLocked(uint64_t ino, ObjectRecord object, const std::string& path,
                               uint64_t have, ManifestBatch* batch) REQUIRES(mu_);
  // The sealed files below an unloaded step, read from the manifest without
  // loading them.
  Result<std::vector<CommittedSize>> ReadSealedFilesLocked(uint64_t step_ino) REQUIRES(mu_);
  // Unloading settled steps again past options_.max_cached_inodes
  // (filesystem_unload.cc). A loaded settled step was used now (loaded, or
  // a lookup reached the daemon inside it): it is unloaded last.
  void NoteStepUsedLocked(uint64_t step_ino) REQUIRES(mu_);
  // A lookup in dir_ino: the step it lies in, if loaded, was used now.
  void NoteLookupInLocked(uint64_t dir_ino) REQUIRES(mu_);
  void ForgetLoadedStepLocked(uint64_t step_ino) REQUIRES(mu_);
  // A loaded step was read for the daemon's own work (eviction), not for a
  // user: it is unloaded first.
  void NoteStepIdleLocked(uint64_t step_ino) REQUIRES(mu_);
  // Loaded settled steps the book does not know yet (committed during this
  // mount, or loaded whole at it) join it.
  void AdoptSettledStepsLocked() REQUIRES(mu_);
  // How many inodes unloading step frees, or nullopt when something below
  // it is in use (kernel references, open handles, unsaved state, a view).
  std::optional<size_t> UnloadableSizeLocked(const Inode* step) REQUIRES(mu_);
  // Drops step's subtree from memory; it loads again on next use.
  void UnloadStepLocked(Inode* step) REQUIRES(mu_);
  // A remote mount's step about to unload: the tier forgets its files
  // (partly fetched ones are added to *drop, their data to be removed).
  // False when a file's fetch is completing: the step stays this time.
  bool ReleaseTierStateLocked(const Inode* step, std::vector<uint64_t>* drop) REQUIRES(mu_);
  // Before Allocate hands out a number above the reservation: reserves the
  // next block durably (kInoReservedKey).
  Status ReserveInoLocked() REQUIRES(mu_);
  // Recovery's last word on the format: version 2, the reservation covering
  // every number seen.
  void FinishFormatUpgradeLocked(ManifestBatch* batch) REQUIRES(mu_);

  // Helpers; REQUIRES: mu_ held.
  Entry MakeEntry(Inode* inode);
  struct stat StatOf(const Inode& inode) const;
  Status CheckName(const std::string& name) const;
  Status CheckWritableDirLocked(Inode* dir) const REQUIRES(mu_);
  // The checks every operation that adds an entry makes: a real, writable
  // directory outside committed steps, a valid name that is not taken.
  // Waits while the step is committing (see WaitUntilNotCommitting).
  Result<Inode*> PrepareNewEntryLocked(MutexLock& lock, uint64_t parent, const std::string& name)
      REQUIRES(mu_);
  bool InsideStepLocked(uint64_t dir_ino) REQUIRES(mu_) {
    return steps_.StepOf(inodes_, dir_ino) != 0;
  }
  // An unlink or rmdir below dir_ino: a finished step it belongs to becomes
  // `deleting` at once, so `latest` and retention stop counting a step that
  // `rm -rf` is taking apart file by file.
  void NoteDeletionLocked(uint64_t dir_ino, ManifestBatch* batch) REQUIRES(mu_);
  // Where an unlink or rmdir of child in dir_ino writes its records: the
  // step's deferred batch when the step is being deleted and child leaves
  // no trace elsewhere (its last link, nothing open, no remote tier
  // bookkeeping), else txn_batch. rm -rf of a step is then one manifest
  // change when it begins (the step turns `deleting`) and one when it ends
  // (the step's rmdir, or anything else that removes the step, writes the
  // deferred records first, FlushDeferredRemovalsLocked). A stop in between
  // loses only the deferred records: recovery finishes the deletion of a
  // `deleting` step whole, as the user asked.
  ManifestBatch* RemovalBatchLocked(uint64_t dir_ino, const Inode& child, ManifestBatch* txn_batch)
      REQUIRES(mu_);
  void FlushDeferredRemovalsLocked(uint64_t step_ino, ManifestBatch* batch) REQUIRES(mu_);
  // The step the run's virtual `latest` link points at, or 0 when there is
  // no link: no committed step, a real entry named `latest` (the trainer's
  // own, e.g. DeepSpeed's), or the link turned off for this run.
  uint64_t VirtualLatestOfLocked(uint64_t run_ino) REQUIRES(mu_);
  bool HasRealChildLocked(Inode* dir, const std::string& name) const REQUIRES(mu_);
  // `rm latest` on a run's virtual link.
  Status TurnOffLatestLinkLocked(Inode* run) REQUIRES(mu_);
  // A regular file gets its backing file at once (before its record can be
  // durable); `backing`, when given, receives that open file, so that a
  // create does not open it again.
  Result<Inode*> NewInodeLocked(const Caller& c, uint64_t parent, const std::string& name,
                                uint32_t mode, ManifestBatch* batch,
                                std::unique_ptr<BackingFile>* backing = nullptr) REQUIRES(mu_);
  // Drops a link; deletes the inode when the last link and handle are gone
  // (its data through the GC queue).
  void DropLinkLocked(Inode* inode, ManifestBatch* batch) REQUIRES(mu_);
  // Begins one change (namespace/transaction.h): the operation changes the
  // image and adds its records to the transaction, written once at its end.
  Transaction BeginLocked() REQUIRES(mu_) { return Transaction(&journal_); }
  // Step records follow directory names (mkdir, rename, rmdir).
  void ReclassifyDirLocked(Inode* dir, ManifestBatch* batch, bool* commit_now) REQUIRES(mu_);
  // A directory moved into a step, or renamed into one, takes the steps
  // below it along as plain directories: a step is never inside a step
  // (the reference-model test found files created in a committed step
  // through a step record left below it).
  void DemoteNestedStepsLocked(Inode* dir, ManifestBatch* batch) REQUIRES(mu_);
  void NoteActivityLocked(uint64_t ino) REQUIRES(mu_);
  // Asks for the step's commit; the manifest's record of the request goes
  // into the caller's batch (the operation's one batch).
  void RequestCommitLocked(uint64_t step_ino, CommitTrigger why, ManifestBatch* batch,
                           uint64_t session = 0) REQUIRES(mu_);
  // A file closed or renamed into place: commit markers and run index files
  // trigger commits. writer_pid: the process whose close this is (0: none,
  // as for a rename); its session is looked up (a read of /proc) only where
  // the file asks for a commit, not at every close.
  void NoteTriggerFileLocked(Inode* file, uint32_t writer_pid, ManifestBatch* batch) REQUIRES(mu_);
  uint64_t SessionOfLocked(uint32_t pid) REQUIRES(mu_);
  // The manifest learns of a commit request once nothing in the step is open
  // for writing (StepRecord::pending_commit), and forgets it when a file in
  // the step is opened for writing again: a file open at a crash may hold
  // half its bytes, so only a request made with every file closed may be
  // finished by recovery.
  void RecordPendingCommitLocked(uint64_t step_ino, ManifestBatch* batch) REQUIRES(mu_);
  void ForgetPendingCommitLocked(uint64_t dir_ino, ManifestBatch* batch) REQUIRES(mu_);
  // A marker closed (its FLUSH) or renamed into place while its RELEASE is
  // still to come, with every file of the step closed: records the commit
  // request its RELEASE will make (pid: the writer's, 0 = unknown).
  void RecordClosedMarkerLocked(uint32_t pid, Inode* marker, ManifestBatch* batch) REQUIRES(mu_);
  // Writable handles below dir written since their last close().
  uint32_t UnflushedWritersUnderLocked(Inode* dir) REQUIRES(mu_);
  // Recovery (filesystem_recovery.cc): a writing step becomes incomplete,
  // or, when its pending commit may be finished, stays writing with the
  // request restored.
  void RecoverWritingStepLocked(uint64_t step_ino, StepRecord* rec, bool same_boot,
                                ManifestBatch* batch) REQUIRES(mu_);
  bool IsMarkerName(const std::string& name) const;
  uint32_t OpenWritersUnderLocked(Inode* dir) REQUIRES(mu_);
  // The regular files below dir: (path relative to dir, ino).
  void CollectFilesLocked(Inode* dir, std::vector<std::pair<std::string, uint64_t>>* out)
      REQUIRES(mu_);
  void EmitStepEventLocked(const char* event, uint64_t step_ino, const StepRecord& rec,
                           const std::string& detail = "") REQUIRES(mu_);
  // Waits (releasing mu_) until no step containing dir_ino is committing,
  // so a step is frozen between BeginCommit and its outcome.
  void WaitUntilNotCommittingLocked(MutexLock& lock, uint64_t dir_ino) REQUIRES(mu_);
  // Every mutation asks first, before it changes the image: refused with the
  // kept errno while the manifest cannot be written (ManifestJournal).
  Status CheckHealthyLocked() REQUIRES(mu_) { return journal_.CheckWritable(); }

  // Retention helpers (filesystem_retention.cc); REQUIRES: mu_ held.
  RetentionPolicy PolicyOf(Inode* run);
  std::vector<StepDecision> PlanLocked(Inode* run) REQUIRES(mu_);
  // Applies the run's plan: removed steps leave the namespace in `batch`.
  void ApplyRetentionLocked(uint64_t run_ino, ManifestBatch* batch) REQUIRES(mu_);
  // Takes a step directory and everything below it out of the namespace;
  // closed files' data is queued for GC in the same batch, open files
  // become orphans that Release deletes.
  void RemoveStepLocked(uint64_t step_ino, const std::string& reason, ManifestBatch* batch)
      REQUIRES(mu_);
  void RemoveSubtreeLocked(Inode* dir, ManifestBatch* batch) REQUIRES(mu_);
  // Another node's removal of the step, applied here (RemoveStepLocked
  // without announcing it again), in a synced write of its own.
  Status ApplyClusterRemovalLocked(uint64_t step_ino) REQUIRES(mu_);
  Status ValidateXattrLocked(Inode* inode, const std::string& name, const std::string& value)
      REQUIRES(mu_);

  // Cluster helpers (filesystem_cluster.cc).
  // The path of the writing step ino is in, when this node's part of it must
  // be published before the operation returns ("" = none, or not a cluster).
  std::string ClusterStepOfLocked(uint64_t ino) REQUIRES(mu_);
  // The step path to publish after a writable open of ino ("" = none): in
  // cluster mode, when that open made ino the only file of its step (or of
  // the step's staging directory) open for writing on this node. The part
  // published then says a file is open, so no node commits the step without
  // it (SPEC section 9); later opens find the part saying so already. The
  // count walks the step's tree (CPU only, in cluster mode).
  std::string FirstWriterPublicationLocked(uint64_t ino) REQUIRES(mu_);
  // The step a staging directory (step20-tmp) at or above ino stands for ("" = none).
  std::string StagedStepPathLocked(uint64_t ino) REQUIRES(mu_);
  // The staging directory of a step path here (0 = none).
  uint64_t StagingDirOfLocked(const std::string& step_path) REQUIRES(mu_);
  // A regular file's entry in a part record: path (rel), size, mode, mtime.
  PartRecord::File PartFileLocked(const Inode& file, const std::string& rel) REQUIRES(mu_);
  Result<PartRecord> PartSnapshotLocked(const std::string& step_path) REQUIRES(mu_);
  // inos, when given, gets the inode of each file collected.
  void CollectPartLocked(Inode* dir, PartRecord* part, std::vector<uint64_t>* inos = nullptr)
      REQUIRES(mu_);
  // PartSnapshotLocked, with the inode of each of its files not yet
  // uploaded in inos when given (SyncPart's files to make durable).
  Result<PartRecord> PartSnapshotLocked(const std::string& step_path, std::vector<uint64_t>* inos)
      REQUIRES(mu_);
  // The materialiser (filesystem_materialize.cc): a committed step's tree
  // built from a record, by import and cluster apply alike. The directories
  // of rel below base, made where missing (EIO for a file in the way or an
  // invalid name).
  Result<Inode*> EnsureDirPathLocked(Inode* base, const std::string& rel, ManifestBatch* batch)
      REQUIRES(mu_);
  // A file of the step whose bytes are in the bucket: sealed, at
  // f.path below step_dir (its directories made), pointing at f.object.
  struct SealedFile {
    std::string path;  // relative to the step
    uint32_t mode = 0644;
    int64_t mtime_ns = 0;
    timespec ctime{};
    ObjectRecord object;  // key, size, version, CRCs; owner_node for a cluster file
  };
  Result<Inode*> AddSealedFileLocked(Inode* step_dir, const SealedFile& f, ManifestBatch* batch)
      REQUIRES(mu_);
  // keep_existing: an entry already at path stays (a cluster apply on a node
  // that has the link); otherwise it is a duplicate (EIO).
  Status AddSealedSymlinkLocked(Inode* step_dir, const std::string& path, const std::string& target,
                                bool keep_existing, ManifestBatch* batch) REQUIRES(mu_);
  // Makes the step the record says (sealing this node's files, adding the
  // other nodes' as remote, dropping local files it does not list), in batch.
  Status ApplyClusterRecordLocked(uint64_t step_ino, const ClusterStepRecord& record,
                                  ManifestBatch* batch, std::vector<uint64_t>* sealed)
      REQUIRES(mu_);
  static CommitFacts ClusterCommitFacts(const StepRecord& before, const ClusterStepRecord& record);
  // FinishCommit for a cluster step (plan.decided set).
  Status FinishClusterCommitLocked(const CommitPort::CommitPlan& plan) REQUIRES(mu_);
  bool NoteRemoteUploadLocked(Inode* inode, const PartRecord& part, const PartRecord::File& f,
                              ManifestBatch* batch) REQUIRES(mu_);

  // Remote tier helpers (filesystem_tiering.cc); REQUIRES: mu_ held.
  // EPERM for the commit object's name directly in a step (with a remote).
  Status CheckNotReservedLocked(uint64_t parent, const std::string& name) const REQUIRES(mu_);
  void LoadTierStateLocked(Status* decode_error) REQUIRES(mu_);
  // The upload queue, whole, into the ledger: the numbers it names.
  Result<std::vector<uint64_t>> LoadUploadQueueLocked() REQUIRES(mu_);
  // Queues an upload of the file's current contents (no-op without a remote
  // or outside steps).
  void QueueUploadLocked(Inode* inode, ManifestBatch* batch) REQUIRES(mu_);
  // The file's data is going away: its object, queued upload and recorded
  // checksum too.
  void ForgetObjectLocked(Inode* inode, ManifestBatch* batch) REQUIRES(mu_);
  // Queues a remote object for deletion unless a live file's object uses it.
  void QueueRemoteDeleteLocked(const std::string& key, bool commit_object, ManifestBatch* batch)
      REQUIRES(mu_);
  // A committed step is leaving (removed, renamed, being deleted): its commit
  // object goes first, and it is no longer persisted.
  void UnpersistStepLocked(uint64_t step_ino, const std::string& old_path, ManifestBatch* batch)
      REQUIRES(mu_);
  // Committed steps at or below dir, with their paths now (before a rename).
  std::vector<std::pair<uint64_t, std::string>> CommittedStepsUnderLocked(Inode* dir) REQUIRES(mu_);
  // After a rename moved those steps: new commit objects, re-uploads.
  void NoteStepsMovedLocked(const std::vector<std::pair<uint64_t, std::string>>& moved,
                            ManifestBatch* batch) REQUIRES(mu_);
  bool ObjectIsCurrent(const Inode& inode, const std::string& path) const;
  // Run-level files (filesystem_tiering.cc); REQUIRES: mu_ held.
  // Exact: a step directly in dir (walks its entries). the ledger's run_dirs() holds the
  // same answer as of the last RepairUploadQueue, for checks on hot paths.
  bool HoldsStepLocked(const Inode& dir) const REQUIRES(mu_);
  bool IsRunFileLocked(const Inode& inode) const REQUIRES(mu_);
  // A queued upload of inode has something to upload: the file exists and
  // is in a step or is a run-level file.
  bool HasUploadLocked(Inode* inode) REQUIRES(mu_);
  // RepairUploadQueue's parts: the run directories, the run-level files to
  // queue, and the files of committed steps not uploaded where they are now.
  void RefreshRunDirsLocked() REQUIRES(mu_);
  void QueueRunFilesLocked(ManifestBatch* batch) REQUIRES(mu_);
  void QueueStrandedStepFilesLocked(ManifestBatch* batch) REQUIRES(mu_);
  // What the file's current version waits for: the steps of its run that
  // may be the one it names and are not persisted.
  RunFileWait RunFileWaitLocked(const Inode& file) REQUIRES(mu_);
  // The queued upload of a run-level file may start: it is closed and every
  // step its version waits for is persisted or gone from the run.
  bool RunFileReadyLocked(Inode* inode) REQUIRES(mu_);
  // Paths of runs ("" = the root) with a run-level upload ready to start.
  std::set<std::string> RunsWithReadyRunFilesLocked() REQUIRES(mu_);
  // A run-level file at key's path will be uploaded to key: the key's
  // queued deletion waits, so the old object goes only by being replaced.
  bool RunFileWillReplaceLocked(const std::string& key) REQUIRES(mu_);
  // A run-level file whose data is the object rec names (imported from a
  // listing, or another node's version): a new entry of dir, owned by owner,
  // with rec's size and mtime, its data fetched when first read.
  Result<Inode*> AddRemoteRunFileLocked(const Caller& owner, Inode* dir, const std::string& name,
                                        ObjectRecord rec, ManifestBatch* batch) REQUIRES(mu_);

  // CRC32C of the first size bytes of file (filesystem_fast_path.cc).
  static Result<uint32_t> Crc32cOfBacking(BackingFile* file, uint64_t size);
  // Fast-path helpers (filesystem_fast_path.cc); REQUIRES: mu_ held.
  void LoadChecksums(Status* decode_error);
  void ForgetChecksumLocked(Inode* inode, ManifestBatch* batch) REQUIRES(mu_);
  // user.ckptfs.writer_socket (root) and user.ckptfs.crc32c (files written
  // through the fast path, while the checksum describes them).
  std::optional<std::string> FastPathXattrLocked(const Inode& inode, const std::string& name) const
      REQUIRES(mu_);
  void FastPathXattrNamesLocked(const Inode& inode, std::vector<std::string>* names) const
      REQUIRES(mu_);
  UploadProgress ProgressLocked(uint64_t step_ino) REQUIRES(mu_);
  void CollectTreeLocked(Inode* dir, CommitObject* obj, bool* complete) REQUIRES(mu_);
  // False at the first file below dir still queued for upload or never
  // uploaded (a quick look; CollectTreeLocked decides).
  bool MayBeAllUploadedLocked(const Inode* dir) REQUIRES(mu_);

  // The file at a path relative to dir (for a view's shard reads), or 0.
  // REQUIRES: mu_ held.
  uint64_t ResolveRelativeLocked(uint64_t dir_ino, const std::string& path) REQUIRES(mu_);
  // Shows `.full` in dir's readdir (--show-full). REQUIRES: mu_ held.
  bool ListsFullDirLocked(Inode* dir) REQUIRES(mu_);
  static Status NotPermittedVirtual() {
    return Status::Error(EPERM, "ckptfs control entries and 'latest' links are managed by ckptfs");
  }
  Result<Entry> LookupVirtualLocked(uint64_t parent, const std::string& name) REQUIRES(mu_);
  Result<Attr> GetAttrVirtualLocked(uint64_t ino) REQUIRES(mu_);
  // who == nullptr: unfiltered.
  std::string RenderControlFileLocked(uint64_t ino, const Caller* who = nullptr) REQUIRES(mu_);
  // Sees every path: root, the daemon's own user, or the daemon itself.
  bool SeesEverything(const Caller* who) const;
  // who could look ino's path up: search permission on every directory
  // above it. REQUIRES: mu_ held.
  bool MayLookUpLocked(uint64_t ino, const Caller& who) REQUIRES(mu_);
  // The same for a path relative to the root: every directory on the way
  // exists and grants search; the last component may be gone (a pruned
  // step). REQUIRES: mu_ held.
  bool MayLookUpPathLocked(const std::string& path, const Caller& who) REQUIRES(mu_);
  std::string RenderEventsForLocked(const Caller& who) REQUIRES(mu_);
  std::string RenderMetricsLocked() REQUIRES(mu_);
  // Bytes and regular files below a step now (for steps not yet committed).
  std::pair<uint64_t, uint64_t> CurrentSizeLocked(uint64_t step_ino) REQUIRES(mu_);
  // What ckptfs holds, for status.json (mu_ held); and the two queries it
  // shares with the remote tier, lock already held.
  Holdings HoldingsLocked() REQUIRES(mu_);
  std::vector<TierPort::EvictionCandidate> EvictionCandidatesLocked() REQUIRES(mu_);
  // The files of inos that may be evicted now marked not resident (one
  // synced batch), the tier told, and each marked evicting; the caller
  // removes their data and clears evicting. strict: EBUSY if any may not.
  Result<std::vector<uint64_t>> BeginEvictionLocked(const std::vector<uint64_t>& inos, bool strict)
      REQUIRES(mu_);
  uint64_t ResidentBytesLocked() REQUIRES(mu_);
  // Bytes of the committed steps a lazy mount has not loaded (their records').
  uint64_t UnloadedStepBytesLocked() REQUIRES(mu_);
  std::optional<std::string> StepXattrLocked(uint64_t ino, const std::string& name) REQUIRES(mu_);

  const FileSystemOptions options_;
  const StepPattern pattern_;
  std::unique_ptr<ManifestStore> manifest_;
  std::unique_ptr<DataStore> data_;
  const Clock* const clock_;
  EventLog* const events_;
  const timespec start_time_;

  mutable Mutex mu_;
  std::condition_variable step_cv_;    // commit outcomes; commit reservations ending
  InodeTable inodes_ GUARDED_BY(mu_);  // inodes, names, links
  StepBook steps_ GUARDED_BY(mu_);     // steps, states, commit requests
  CommitPort::CommitRequester request_commit_;
  CommitPort::IndexRequester request_index_;
  // Writes every batch, and keeps them while the manifest cannot take them.
  ManifestJournal journal_ GUARDED_BY(mu_);
  std::unique_ptr<MetadataReserve> reserve_;
  InvalidateEntryFn invalidate_entry_;
  std::vector<std::pair<uint64_t, std::string>> pending_invalidations_ GUARDED_BY(mu_);
  InvalidateInodeFn invalidate_inode_;
  std::function<nlohmann::json()> fuse_status_ GUARDED_BY(mu_);  // FileSystem::SetFuseStatus
  std::string writer_socket_ GUARDED_BY(mu_);

  // Kernel passthrough (filesystem_passthrough.cc; the kernel's bookkeeping
  // is the PassthroughBook's). The open's backing id, or -1 (it goes
  // through the daemon).
  int32_t PassthroughOpenLocked(Inode* inode, FileHandle* fh, bool resident) REQUIRES(mu_);
  // Why this open must go through the daemon, or nullptr.
  const char* DaemonOnlyReasonLocked(const Inode& inode, const FileHandle& fh, bool resident)
      REQUIRES(mu_);
  // Takes size and mtime from the backing file of an inode open through
  // passthrough; true when they changed.
  bool SyncFromBackingLocked(Inode* inode) REQUIRES(mu_);
  // The step just committed (here, or by another node of the cluster): when
  // it is the step the last closed writer belonged to, the trainer's save
  // has reached its end, and uploads need not wait out the quiet period
  // after that close (RemoteTierOptions::save_quiet).
  void SaveEndedLocked(uint64_t step) REQUIRES(mu_);
  void SyncPassthroughWritersLocked() REQUIRES(mu_);
  // The daemon recorded the backing file's state itself (a writer-library
  // close): kernel opens of it must not take that for a write of theirs.
  void NoteBackingRecordedLocked(Inode* inode) REQUIRES(mu_);
  PassthroughBook passthrough_ GUARDED_BY(mu_);
  // Per step being deleted: the records of the entries rm has removed so
  // far, written when the step's removal ends (RemovalBatchLocked).
  std::map<uint64_t, ManifestBatch> deferred_removals_ GUARDED_BY(mu_);
  uint64_t fsyncdir_seq_ GUARDED_BY(mu_) = 0;
  // The lazy namespace (filesystem_lazy.cc): whether this mount left settled
  // steps unloaded, those whose committed sizes nobody has checked yet, the
  // one background removal of unowned backing files, and the highest inode
  // number reserved in the manifest.
  bool lazy_ GUARDED_BY(mu_) = false;
  std::set<uint64_t> unchecked_steps_ GUARDED_BY(mu_);
  bool strays_swept_ GUARDED_BY(mu_) = false;
  uint64_t ino_reserved_ GUARDED_BY(mu_) = 0;
  // Loaded settled steps, by last use (filesystem_unload.cc): the unload
  // order, and whether the kernel was already asked to drop the step.
  struct LoadedStep {
    uint64_t use = 0;
    bool invalidated = false;
  };
  std::unordered_map<uint64_t, LoadedStep> loaded_steps_ GUARDED_BY(mu_);
  std::map<uint64_t, uint64_t> steps_by_use_ GUARDED_BY(mu_);  // use -> step ino
  // Uses count up from far above zero, so a step can also be put before
  // every other (NoteStepIdleLocked) without running out of numbers.
  uint64_t use_seq_ GUARDED_BY(mu_) = uint64_t{1} << 62;
  // A remote mount's unloaded steps: what each still holds in the cache and
  // when it was last read, recorded as it unloads, so the cache limit counts
  // it and eviction finds it without loading it (the step is evicted whole,
  // loaded for that). Absent for a step with nothing resident.
  struct UnloadedCachedStep {
    uint64_t resident_bytes = 0;
    int64_t last_access_ns = 0;
  };
  std::unordered_map<uint64_t, UnloadedCachedStep> unloaded_cached_ GUARDED_BY(mu_);

  FsMetrics metrics_;
  std::unique_ptr<FullViewCache> full_views_;
  std::atomic<int> open_writers_total_{0};
  std::atomic<int64_t> last_save_activity_ns_{0};
  // The step of the last writer that closed (set with last_save_activity_ns_):
  // once that step commits, the save it was part of is over (SaveEndedLocked).
  uint64_t last_saved_step_ GUARDED_BY(mu_) = 0;
  // Cluster mode: steps this node published a part of, with when it last
  // did, until they leave `writing` (CommitPendingSinceNs).
  std::map<uint64_t, int64_t> cluster_published_ GUARDED_BY(mu_);
  // Cluster mode, "committed means durable" (SPEC section 9): another node
  // commits this node's files, so its part says whether they are on disk.
  // Per step path: how many opens for writing the step has had here, and
  // the part as SyncPart last made it durable (its shape, PartShape) with
  // that count then. PartSnapshot calls the part synced while both hold:
  // every change of a file's bytes needs an open, and every other change
  // (rename, unlink) changes the shape.
  struct DurablePart {
    uint64_t writer_opens = 0;
    std::string shape;
  };
  std::map<std::string, uint64_t> cluster_writer_opens_ GUARDED_BY(mu_);
  std::map<std::string, DurablePart> cluster_durable_ GUARDED_BY(mu_);
  // Recovery found the machine's boot unchanged (only the daemon died):
  // files of steps not yet committed are intact in the kernel's cache, so
  // their parts may be synced and put again (PartsToResync).
  bool recovered_same_boot_ GUARDED_BY(mu_) = false;
  bool PartDurableLocked(const PartRecord& part) REQUIRES(mu_);

  // Remote tier state (filesystem_tiering.cc).
  TierHooks* tier_ = nullptr;
  TierLedger ledger_ GUARDED_BY(mu_);  // uploads, objects, key claims, run-level files

  // Cluster mode (filesystem_cluster.cc): set once before serving requests.
  ClusterHooks* cluster_ = nullptr;
  // Retention acts in cluster mode only where the committing node decides
  // it (its commit, its persisted step); removals another node announced
  // are applied without announcing them again.
  bool retention_by_committer_ GUARDED_BY(mu_) = false;
  bool applying_cluster_removal_ GUARDED_BY(mu_) = false;
  // Paths of committed cluster steps removed while this daemon runs (here,
  // or by another node): a step saved again under such a name uploads
  // nothing before it commits, because the cluster's removal of the old one
  // may still be deleting objects of the same names (issue 28, 4); its
  // commit comes only once that removal is done (ClusterBook::DecideStep).
  std::set<std::string> cluster_removed_paths_ GUARDED_BY(mu_);
  // Announces the removal of a committed cluster step (rm, retention), and
  // remembers its path in cluster_removed_paths_ (also for a removal another
  // node announced, applied here). The announcement is also recorded in
  // batch (meta key kClusterRemovalPrefix + path) until the ClusterBook has
  // removed the step from the bucket (ClusterRemovalDone), so a kill -9
  // before that does not lose it (PendingClusterRemovals).
  void AnnounceClusterRemovalLocked(uint64_t step_ino, const StepRecord& rec, ManifestBatch* batch)
      REQUIRES(mu_);
  // A step committed by another node's decision, applied here: this node's
  // part is put again when some of its files were uploaded already.
  void RepublishUploadedPartLocked(const std::string& step_path) REQUIRES(mu_);
};

}  // namespace ckptfs
