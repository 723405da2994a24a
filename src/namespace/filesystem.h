// FileSystem: the namespace and checkpoint lifecycle, independent of FUSE.
// Operations take inode numbers and names as the FUSE low-level API does,
// and return values or a Status carrying the errno to reply with.
//
// The RocksDB manifest (ManifestStore) is the only source of truth for the
// namespace; FileSystem keeps an in-memory image of it, loaded at Open(), in
// owners that each hold one piece (docs/architecture.md, "Inside the
// namespace"): InodeTable (inodes, names, links), StepBook (steps, states,
// commit requests), TierLedger (uploads, object keys, claims, run-level
// files), ManifestJournal (writing batches, failures). All of them are
// guarded by the one mutex mu_: an operation takes it, begins a Transaction,
// asks the owners, which add their changes to the transaction's batch, and
// writes it once before letting go, so each operation is one manifest batch
// and the manifest's order is the order of changes. StepBook's transitions
// are the only code that sets a step's state. File data
// goes to backing files in the DataStore, outside mu_.
//
// Virtual nodes (/.ckptfs, `latest` links, `.full/` views) are routed at one
// point, VirtualNodesFor(). The commit coordinator and the remote tier see
// FileSystem only through CommitPort and TierPort.
//
// Thread safety: every public method may be called from any thread. mu_
// is never held across I/O on file contents (read, write, fsync). Lock
// order: mu_ before the CommitCoordinator's queue lock, the EventLog's lock
// and the remote tier's locks (the requesters, event emission and TierHooks
// are called with mu_ held).
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <map>
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
  kRetry,          // a close in a step whose commit waits asks again
  kMarker,         // a commit marker closed or renamed directly in the step
  kNestedMarker,   // a commit marker in a subdirectory (OLMo-core model/, optim/)
  kRename,         // a directory renamed into a step name
  kIndex,          // the run's index file (DeepSpeed latest, RecIS checkpoint) names it
  kExplicit,       // ckptfs commit, setfattr user.ckptfs.commit
  kIdle,           // --commit-idle
};

class FileHandle;
class FullView;
class FullViewCache;

// One row of status.json.
struct StepSummary {
  uint64_t ino = 0;
  std::string path;  // relative to the mount root
  StepRecord rec;
};

class FileSystem : public CommitPort, public TierPort, public ClusterPort {
 public:
  // Loads the namespace from the manifest and recovers from an unclean stop
  // (SPEC section 3): writing steps become incomplete, orphaned inodes and
  // backing files are removed, nothing committed is touched.
  static Result<std::unique_ptr<FileSystem>> Open(FileSystemOptions options,
                                                  std::unique_ptr<ManifestStore> manifest,
                                                  std::unique_ptr<DataStore> data, const Clock* clock,
                                                  EventLog* events);
  ~FileSystem();
  FileSystem(const FileSystem&) = delete;
  FileSystem& operator=(const FileSystem&) = delete;
  // Configuration is all in FileSystemOptions, given to Open. The Set*
  // methods below are wiring, not configuration: each attaches a
  // collaborator that can only be made once the FileSystem exists (the
  // commit coordinator, the remote tier and the ClusterBook take it as their
  // port; the FUSE session, which gives the kernel notifications and the
  // passthrough registry, takes it as its userdata). The daemon attaches
  // them before serving requests and detaches them (nullptr) before it
  // destroys the collaborator.

  // --- entries (filesystem_entries.cc)
  Result<Entry> Lookup(uint64_t parent, const std::string& name);
  void Forget(uint64_t ino, uint64_t nlookup);
  Result<Entry> Mkdir(const Caller& c, uint64_t parent, const std::string& name, uint32_t mode);
  Result<Entry> Mknod(const Caller& c, uint64_t parent, const std::string& name, uint32_t mode);
  Result<Entry> Symlink(const Caller& c, uint64_t parent, const std::string& name,
                        const std::string& target);
  Result<Entry> Link(uint64_t ino, uint64_t new_parent, const std::string& new_name);
  Status Unlink(uint64_t parent, const std::string& name);
  Status Rmdir(uint64_t parent, const std::string& name);
  Status Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                const std::string& new_name, unsigned int flags);
  Result<std::string> Readlink(uint64_t ino);
  // Entries of a directory after offset (0 = from the start), at most max.
  Result<std::vector<DirEntry>> Readdir(uint64_t ino, uint64_t offset, size_t max);

  // --- attributes and xattrs (filesystem_attrs.cc)
  Result<Attr> GetAttr(uint64_t ino);
  Result<Attr> SetAttr(uint64_t ino, const SetAttrRequest& req, FileHandle* fh);
  Result<std::string> GetXattr(uint64_t ino, const std::string& name);
  Result<std::vector<std::string>> ListXattr(uint64_t ino);
  Status SetXattr(uint64_t ino, const std::string& name, const std::string& value, int flags);
  Status RemoveXattr(uint64_t ino, const std::string& name);
  Result<struct statvfs> StatFs();

  // --- file I/O (filesystem_io.cc)
  using Opened = ckptfs::Opened;
  // pid: the opening process (0 = unknown), for the commit's session.
  // who: the opener; /.ckptfs/status.json and events show it only the steps
  // and events whose paths it could look up itself (nullptr: everything,
  // for the daemon's own use).
  Result<Opened> OpenFile(uint64_t ino, int flags, uint32_t pid = 0, const Caller* who = nullptr,
                          OpenFor for_whom = OpenFor::kDaemon);
  // Opening ino needs the caller's supplementary groups (Caller::groups).
  static bool NeedsGroups(uint64_t ino) { return ino == kStatusFileIno || ino == kEventsFileIno; }
  // Create and open in one step (O_CREAT).
  Result<std::pair<Entry, Opened>> Create(const Caller& c, uint64_t parent, const std::string& name,
                                          uint32_t mode, int flags, OpenFor for_whom = OpenFor::kDaemon);
  Result<size_t> Read(FileHandle* fh, void* buf, size_t n, uint64_t offset);
  // Makes [offset, offset + n) of the file local (fetching what is only in
  // the remote); Read does it itself, the FUSE glue's splice path calls it
  // before handing the backing descriptor to the kernel.
  Status PrepareRead(FileHandle* fh, uint64_t offset, size_t n);
  Result<size_t> Write(FileHandle* fh, const void* buf, size_t n, uint64_t offset, bool kill_suidgid = false);
  // For the FUSE glue's splice path: the backing descriptor (or -1), and the
  // bookkeeping to do after it wrote n bytes at offset itself.
  int BackingFd(FileHandle* fh) const;
  // After an open with O_TRUNC that the kernel marked FUSE_OPEN_KILL_SUIDGID
  // (the caller lacks CAP_FSETID): the file loses its setuid and setgid bits.
  void DropSetIdBits(FileHandle* fh);
  // Before n bytes are written (Write does it itself): with --cache-size,
  // waits for room in the cache; ENOSPC when none comes.
  Status PrepareWrite(FileHandle* fh, size_t n);
  // kill_suidgid: the kernel marked the write FUSE_WRITE_KILL_SUIDGID (the
  // writer lacks CAP_FSETID): the file loses its setuid and setgid bits, in
  // the same update as its size.
  void NoteWritten(FileHandle* fh, uint64_t offset, size_t n, bool kill_suidgid = false);
  Status Flush(FileHandle* fh);
  // The largest file whose writeback Flush starts when its writer closes
  // it. Early writeback makes a commit's sync short, but the disk's work
  // then overlaps the trainer's writes of its next files: for small files
  // that is hidden behind their per-file create and close (a step of 1,000
  // files of 64 KiB wrote no slower, and its commit took 8 ms instead of
  // 45), while a large file is written at memory speed and its writeback
  // competes with it (8 files of 128 MiB without fsync: 0.91-0.95 of a
  // direct save with it, 0.98 without; docs/benchmarks.md). Larger files
  // are written back by the commit's sync, as on a plain disk by fsync.
  static constexpr uint64_t kEarlyWritebackMaxBytes = uint64_t{8} << 20;
  Status Fsync(FileHandle* fh, bool datasync);
  Status Release(FileHandle* fh);
  Status OpenDir(uint64_t ino);
  Status FsyncDir();

  // --- checkpoint steps (filesystem_steps.cc)
  // Asks for the step to be committed (setfattr user.ckptfs.commit) and
  // waits for the first attempt: Ok when committed or when the request is
  // still pending (waiting for files or for quiet; the reason is in
  // user.ckptfs.error), EIO when broken, ETIMEDOUT when files stayed open
  // past --commit-wait. `ckptfs commit` then polls the step's state.
  Status CommitAndWait(uint64_t step_ino);
  // Asks for a commit without waiting (the outcome shows in the step's state).
  void RequestCommit(uint64_t step_ino);
  std::vector<StepSummary> Steps();
  // Path of an inode relative to the root ("" for the root).
  std::string PathOf(uint64_t ino);
  // Hooks for tests: how many inodes are in memory, the first background error.
  size_t InodeCountForTest();
  // Retries manifest batches kept after a write failure (the coordinator's
  // idle loop calls it every second); true when the manifest is healthy.
  bool RetryManifest() override;
  // For status.json: ok when healthy, else the kept error.
  using ManifestHealth = ckptfs::ManifestHealth;
  ManifestHealth ManifestHealthNow();
  // Bytes kept free for the manifest (0 = off or unknown yet).
  uint64_t MetadataReserveBytes() const { return reserve_ ? reserve_->reserve_bytes() : 0; }

  void SetCommitRequester(CommitRequester fn) override;
  void SetIndexRequester(IndexRequester fn) override;
  Status CommitStepsNamedBy(uint64_t file_ino, uint64_t session) override;

  // CommitPort (filesystem_steps.cc): see commit_port.h.
  Result<CommitPlan> BeginCommit(uint64_t step_ino) override;
  void AbortCommit(uint64_t step_ino, const Status& why, bool waiting, bool broken,
                   bool settling = false) override;
  void DropCommitRequest(uint64_t step_ino) override;
  Status FinishCommit(const CommitPlan& plan) override;
  void RequestIdleCommits() override;
  void RequestSettledCommits() override;
  void RequestRecoveredCommits() override;
  // The data store and clock the namespace was opened with: the daemon
  // hands them to the commit coordinator and the remote tier.
  DataStore* data() { return data_.get(); }
  const Clock* clock() const { return clock_; }

  // Retention (filesystem_retention.cc).
  // The plan for a run directory without applying it (ckptfs retention --dry-run).
  Result<std::vector<StepDecision>> PlanRetentionFor(uint64_t run_ino);
  // Deletes up to max backing files of removed steps queued in the manifest's
  // GC key space; returns how many were deleted. Runs on the coordinator's
  // idle thread, so removal never waits for data deletion.
  Result<size_t> CollectGarbage(size_t max) override;
  // Kernel cache invalidation for entries the daemon removed by itself
  // (pruned steps): fn(parent, name) is called outside mu_ by
  // FlushInvalidations, from a thread that is not serving a FUSE request.
  using InvalidateEntryFn = std::function<void(uint64_t parent, const std::string& name)>;
  void SetInvalidateEntry(InvalidateEntryFn fn);
  // Drops the kernel's page cache of a file. After a commit the sealed files'
  // pages are cached twice (the FUSE file and its backing file); dropping the
  // FUSE copy halves the memory a fresh checkpoint holds, and spares a later
  // unlink the work (about 45 ms per GiB, inside the user's rm).
  using InvalidateInodeFn = std::function<void(uint64_t ino)>;
  void SetInvalidateInode(InvalidateInodeFn fn);
  // Drops the kernel page cache of these files now (the coordinator calls it
  // between a commit's fsyncs and its batch, while the step is frozen).
  void DropPageCache(const std::vector<uint64_t>& inos) override;
  void FlushInvalidations() override;

  // CommitPort's cluster methods (filesystem_cluster.cc).
  Status GatherCluster(CommitPlan* plan) override;
  Result<std::string> ReadClusterFile(const CommitPlan& plan, const std::string& path, uint64_t offset,
                                      uint64_t length) override;
  Status DecideCluster(CommitPlan* plan) override;

  // --- cluster mode (filesystem_cluster.cc). Set once before serving
  // requests when the mount has --node.
  void SetClusterHooks(ClusterHooks* hooks);
  // ClusterPort: see cluster_port.h.
  Result<PartRecord> PartSnapshot(const std::string& step_path) override;
  std::map<std::string, StepView> StepViews() override;
  Status ApplyClusterStep(const ClusterStepRecord& record) override;
  Status ApplyClusterPersisted(const std::string& step_path) override;
  Status RemoveClusterStep(const std::string& step_path) override;
  std::vector<AwaitedPart> PartsAwaited() override;
  Status NoteRemoteUploads(const std::string& step_path, const PartRecord& part) override;

  // --- kernel passthrough (filesystem_passthrough.cc). Set once, before
  // requests are served: with `active`, opens of resident regular files get
  // a backing id from `registry` (Opened::backing_id); status.json shows the
  // setting and why passthrough is not active.
  using PassthroughSetting = ckptfs::PassthroughSetting;
  void SetPassthrough(BackingRegistry* registry, PassthroughSetting setting);

  // --- remote tier (filesystem_tiering.cc). Called by RemoteTier's threads.
  // Set once before serving requests when a remote is configured.
  void SetTierHooks(TierHooks* hooks);

  // TierPort (filesystem_tiering.cc): see tier_port.h.
  std::vector<UploadJob> NextUploads(size_t max, const std::set<uint64_t>& busy) override;
  Status NoteMultipartStarted(const UploadJob& job, const std::string& upload_id) override;
  Status NoteUploaded(const UploadJob& job, uint32_t crc32c, uint64_t chunk_size = 0,
                      std::vector<uint32_t> chunk_crcs = {}) override;
  void ClaimKey(const std::string& key) override;
  void ReleaseKey(const std::string& key) override;
  std::vector<PersistJob> StepsToPersist() override;
  Status MarkPersisted(const PersistJob& job) override;
  Result<RemoteGcBatch> NextRemoteDeletions(size_t max) override;
  Status RemoteDeletionsDone(const RemoteGcBatch& batch) override;
  size_t RemoteDeletionsQueued() override;
  std::vector<EvictionCandidate> EvictionCandidates() override;
  Status Evict(uint64_t ino) override;
  Status MarkResident(uint64_t ino, BackingFile* file) override;
  uint64_t ResidentBytes() override;
  std::optional<ObjectRecord> ObjectRecordFor(uint64_t ino, const std::string& key) override;
  Status ImportStep(const CommitObject& obj) override;
  std::set<std::string> StepPathsBeingDeleted() override;
  void RepairUploadQueue() override;
  Result<size_t> ImportRunFiles(const std::vector<RemoteObject>& objects) override;

  // Upload progress and persisted state, for status.json and xattrs.
  struct UploadProgress {
    uint64_t bytes_done = 0;
    uint64_t bytes_total = 0;
    uint64_t files_done = 0;
    uint64_t files_total = 0;
  };

  // --- writer library fast path (filesystem_fast_path.cc)
  // Who asks, from the socket's peer credentials (SO_PEERCRED, SO_PEERGROUPS).
  // Checked as the kernel would (namespace/access_check.h).
  using FastPathCaller = Credentials;
  // A file opened for a writer-library client: fh counts as a FUSE open for
  // writing (commit waits, uploads wait) until Release; grant.client_fd is
  // a write-only descriptor, owned by the caller, to pass to the client
  // (the backing file itself or a staging file, per the data store's
  // RevocationMode).
  struct FastPathFile {
    FileHandle* fh = nullptr;
    WriteGrant grant;
    uint64_t ino = 0;
  };
  // The socket the daemon serves the fast path on, shown to clients as the
  // root's user.ckptfs.writer_socket xattr ("" = none).
  void SetWriterSocket(const std::string& path);
  // Creates or truncates the file at path (relative to the mount root, no
  // "." or ".." names) with the kernel's permission checks for who; mode is
  // the new file's permissions (the client's umask applied).
  Result<FastPathFile> OpenForFastPath(const FastPathCaller& who, const std::string& path, uint32_t mode);
  // The client says it wrote size bytes with this CRC32C and synced them.
  // Revokes the client's write access first, then computes the file's
  // CRC32C itself and records it (synced) with what the backing file is
  // now (Identity, for CheckUnchangedSinceClose), and drops the kernel's
  // cached pages and attributes. A size or checksum that differs from the
  // client's is EIO (and a checksum_mismatch event); the recorded checksum
  // is always the daemon's. The caller then calls Release(fh).
  Status FinishFastPath(FastPathFile* file, uint64_t size, uint32_t crc32c);
  // The client went away without closing: its access is revoked and the
  // file takes the size its backing file has, with no checksum. The caller
  // then calls Release(fh).
  Status AbandonFastPath(FastPathFile* file);
  // At commit: EIO when the backing file of ino (file) is no longer what it
  // was when its fast-path writer closed it (another inode, size or change
  // time): it was changed around the daemon, and the step must not commit
  // as good. Ok for files the daemon wrote itself or that were rewritten.
  Status CheckUnchangedSinceClose(uint64_t ino, BackingFile* file) override;

  const FileSystemOptions& options() const { return options_; }
  // Counters for /.ckptfs/metrics; the commit coordinator records latency.
  FsMetrics& metrics() { return metrics_; }
  // TierPort: saves in progress (atomics, no lock).
  int OpenWriters() const override { return open_writers_total_.load(std::memory_order_relaxed); }
  int64_t CommitPendingSinceNs() override;
  int64_t LastSaveActivityNs() const override {
    return last_save_activity_ns_.load(std::memory_order_relaxed);
  }

 private:
  FileSystem(FileSystemOptions options, StepPattern pattern, std::unique_ptr<ManifestStore> manifest,
             std::unique_ptr<DataStore> data, const Clock* clock, EventLog* events);


  // Loading and recovery (filesystem_recovery.cc).
  Status LoadLocked() REQUIRES(mu_);
  Status RecoverLocked() REQUIRES(mu_);

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
  // The step the run's virtual `latest` link points at, or 0 when there is
  // no link: no committed step, a real entry named `latest` (the trainer's
  // own, e.g. DeepSpeed's), or the link turned off for this run.
  uint64_t VirtualLatestOfLocked(uint64_t run_ino) REQUIRES(mu_);
  bool HasRealChild(Inode* dir, const std::string& name) const;
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
  void RecoverWritingStepLocked(uint64_t step_ino, StepRecord* rec, bool same_boot, ManifestBatch* batch) REQUIRES(mu_);
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
  void RemoveStepLocked(uint64_t step_ino, const std::string& reason, ManifestBatch* batch) REQUIRES(mu_);
  void RemoveSubtreeLocked(Inode* dir, ManifestBatch* batch) REQUIRES(mu_);
  Status ValidateXattrLocked(Inode* inode, const std::string& name, const std::string& value)
      REQUIRES(mu_);

  // Rename without cluster publication (filesystem_entries.cc).
  Status RenameEntry(uint64_t parent, const std::string& name, uint64_t new_parent,
                     const std::string& new_name, unsigned int flags);
  // Cluster helpers (filesystem_cluster.cc).
  // The path of the writing step ino is in, when this node's part of it must
  // be published before the operation returns ("" = none, or not a cluster).
  std::string ClusterStepOfLocked(uint64_t ino) REQUIRES(mu_);
  // The step a staging directory (step20-tmp) at or above ino stands for ("" = none).
  std::string StagedStepPathLocked(uint64_t ino) REQUIRES(mu_);
  // The staging directory of a step path here (0 = none).
  uint64_t StagingDirOfLocked(const std::string& step_path) REQUIRES(mu_);
  // Publishes this node's part of the step (no-op for ""); call without mu_.
  // EIO when the bucket cannot take it. closed: the file a close() is for,
  // as its part record names it, whose PUT may go to the background
  // (ClusterHooks::PublishClose).
  Status PublishPartOf(const std::string& step_path, const PartRecord::File* closed = nullptr) EXCLUDES(mu_);
  // A regular file's entry in a part record: path (rel), size, mode, mtime.
  PartRecord::File PartFileLocked(const Inode& file, const std::string& rel) REQUIRES(mu_);
  // A file's path relative to the step at step_path, or to its staging
  // directory ("" when under neither).
  std::string PathInStepLocked(uint64_t ino, const std::string& step_path) REQUIRES(mu_);
  // fsync's local half: the backing file (and a new file's directory entry)
  // made durable, and the inode's record written with a synced batch.
  Status SyncFileAndRecord(FileHandle* fh) EXCLUDES(mu_);
  // Brings the cluster's steps up to date when the view is older than
  // --refresh; call without mu_.
  void MaybeRefreshCluster() EXCLUDES(mu_);
  // Before a read of another node's file: waits for its upload and records
  // its CRCs. Call without mu_.
  Status AwaitOwnerUpload(FileHandle* fh) EXCLUDES(mu_);
  Result<PartRecord> PartSnapshotLocked(const std::string& step_path) REQUIRES(mu_);
  void CollectPartLocked(Inode* dir, PartRecord* part) REQUIRES(mu_);
  // The materialiser (filesystem_materialize.cc): a committed step's tree
  // built from a record, by import and cluster apply alike. The directories
  // of rel below base, made where missing (EIO for a file in the way or an
  // invalid name).
  Result<Inode*> EnsureDirPathLocked(Inode* base, const std::string& rel, ManifestBatch* batch) REQUIRES(mu_);
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
  Status ApplyClusterRecordLocked(uint64_t step_ino, const ClusterStepRecord& record, ManifestBatch* batch,
                                  std::vector<uint64_t>* sealed) REQUIRES(mu_);
  static CommitFacts ClusterCommitFacts(const StepRecord& before, const ClusterStepRecord& record);
  // FinishCommit for a cluster step (plan.decided set).
  Status FinishClusterCommitLocked(const CommitPlan& plan) REQUIRES(mu_);
  bool NoteRemoteUploadLocked(Inode* inode, const PartRecord& part, const PartRecord::File& f,
                              ManifestBatch* batch) REQUIRES(mu_);

  // Remote tier helpers (filesystem_tiering.cc); REQUIRES: mu_ held.
  // EPERM for the commit object's name directly in a step (with a remote).
  Status CheckNotReservedLocked(uint64_t parent, const std::string& name) const REQUIRES(mu_);
  void LoadTierStateLocked(Status* decode_error) REQUIRES(mu_);
  // Queues an upload of the file's current contents (no-op without a remote
  // or outside steps).
  void QueueUploadLocked(Inode* inode, ManifestBatch* batch) REQUIRES(mu_);
  // The file's data is going away: its object, queued upload and recorded
  // checksum too.
  void ForgetObjectLocked(Inode* inode, ManifestBatch* batch) REQUIRES(mu_);
  // Queues a remote object for deletion unless a live file's object uses it.
  void QueueRemoteDeleteLocked(const std::string& key, bool commit_object, ManifestBatch* batch) REQUIRES(mu_);
  // A committed step is leaving (removed, renamed, being deleted): its commit
  // object goes first, and it is no longer persisted.
  void UnpersistStepLocked(uint64_t step_ino, const std::string& old_path, ManifestBatch* batch) REQUIRES(mu_);
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
  // Before a non-resident file that is not sealed (a run-level file shown
  // by a cold mount) is opened for writing or truncated: fetches every byte
  // and marks it resident, releasing mu_ meanwhile, so writes never mix
  // with ranges fetched later. EIO when the remote cannot serve it.
  Status MakeLocalForWriteLocked(MutexLock& lock, uint64_t ino) REQUIRES(mu_);

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

  // `.full/` views (filesystem_full.cc). Entry points call these before
  // taking mu_: building a view reads the checkpoint's metadata.
  // nullopt: not a `.full` name here (a real entry, not a committed
  // checkpoint directory); the ordinary lookup goes on.
  std::optional<Result<Entry>> LookupFullDir(uint64_t parent);
  Result<Entry> LookupInFull(uint64_t parent, const std::string& name);
  Result<Attr> GetAttrFull(uint64_t ino);
  Result<std::vector<DirEntry>> ReaddirFull(uint64_t ino, uint64_t offset, size_t max);
  Result<Opened> OpenFull(uint64_t ino, int flags);
  Result<size_t> ReadFull(FileHandle* fh, void* buf, size_t n, uint64_t offset);
  Result<std::string> GetXattrFull(uint64_t ino, const std::string& name);
  Result<std::vector<std::string>> ListXattrFull(uint64_t ino);
  // The view of a format root directory inside a committed step: ENOENT when
  // there is none, EIO (reported as an event once) when its metadata is bad.
  Result<std::shared_ptr<const FullView>> ViewOf(uint64_t dir_ino);
  // The file at a path relative to dir (for a view's shard reads), or 0.
  // REQUIRES: mu_ held.
  uint64_t ResolveRelativeLocked(uint64_t dir_ino, const std::string& path) REQUIRES(mu_);
  // Shows `.full` in dir's readdir (--show-full). REQUIRES: mu_ held.
  bool ListsFullDirLocked(Inode* dir) REQUIRES(mu_);
  void ReportViewError(uint64_t ino, const std::string& path, const Status& st);
  // Read without counting it as a FUSE read (a view reading its shards):
  // fetches what is only in the remote, then reads the backing file.
  Status EnsureReadable(FileHandle* fh, uint64_t offset, size_t n);
  Result<size_t> ReadBacking(FileHandle* fh, void* buf, size_t n, uint64_t offset);
  friend class FsShardReader;

  // Virtual nodes (virtual_nodes.h). VirtualNodesFor is the one routing
  // point: the nodes that serve ino, nullptr for a real inode. Changes to a
  // virtual node are refused before routing (NotPermittedVirtual, EROFS).
  class ControlNodes;   // filesystem_virtual.cc: /.ckptfs, its files, `latest` links
  class FullViewNodes;  // filesystem_full.cc: `.full/` views
  static std::unique_ptr<VirtualNodes> MakeControlNodes(FileSystem* fs);
  static std::unique_ptr<VirtualNodes> MakeFullViewNodes(FileSystem* fs);
  VirtualNodes* VirtualNodesFor(uint64_t ino) const;
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
  std::vector<EvictionCandidate> EvictionCandidatesLocked() REQUIRES(mu_);
  uint64_t ResidentBytesLocked() REQUIRES(mu_);
  std::optional<std::string> StepXattrLocked(uint64_t ino, const std::string& name) REQUIRES(mu_);

  const FileSystemOptions options_;
  const StepPattern pattern_;
  std::unique_ptr<ManifestStore> manifest_;
  std::unique_ptr<DataStore> data_;
  const Clock* const clock_;
  EventLog* const events_;
  const timespec start_time_;

  mutable Mutex mu_;
  std::condition_variable step_cv_;  // commit outcomes; commit reservations ending
  InodeTable inodes_ GUARDED_BY(mu_);  // inodes, names, links
  StepBook steps_ GUARDED_BY(mu_);     // steps, states, commit requests
  CommitRequester request_commit_;
  IndexRequester request_index_;
  // Writes every batch, and keeps them while the manifest cannot take them.
  ManifestJournal journal_ GUARDED_BY(mu_);
  std::unique_ptr<MetadataReserve> reserve_;
  InvalidateEntryFn invalidate_entry_;
  std::vector<std::pair<uint64_t, std::string>> pending_invalidations_ GUARDED_BY(mu_);
  InvalidateInodeFn invalidate_inode_;
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
  uint64_t fsyncdir_seq_ GUARDED_BY(mu_) = 0;

  FsMetrics metrics_;
  std::unique_ptr<FullViewCache> full_views_;
  const std::unique_ptr<VirtualNodes> control_nodes_;
  const std::unique_ptr<VirtualNodes> full_view_nodes_;
  std::atomic<int> open_writers_total_{0};
  std::atomic<int64_t> last_save_activity_ns_{0};
  // The step of the last writer that closed (set with last_save_activity_ns_):
  // once that step commits, the save it was part of is over (SaveEndedLocked).
  uint64_t last_saved_step_ GUARDED_BY(mu_) = 0;
  // Cluster mode: steps this node published a part of, with when it last
  // did, until they leave `writing` (CommitPendingSinceNs).
  std::map<uint64_t, int64_t> cluster_published_ GUARDED_BY(mu_);

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
  // Announces the removal of a committed cluster step (rm, retention).
  void AnnounceClusterRemovalLocked(uint64_t step_ino, const StepRecord& rec) REQUIRES(mu_);
};

}  // namespace ckptfs
