// FileSystem: the namespace and checkpoint lifecycle, independent of FUSE.
// Operations take inode numbers and names as the FUSE low-level API does,
// and return values or a Status carrying the errno to reply with.
//
// The RocksDB manifest (ManifestStore) is the only source of truth for the
// namespace; the in-memory image of it, loaded at Open(), and the locked
// operations on it are FileSystemCore's (namespace/filesystem_core.h). This
// class holds the entry points: each public method takes the core's mutex,
// begins a Transaction, calls the core's `Locked` operations and writes the
// transaction once before letting go, so each operation is one manifest batch
// and the manifest's order is the order of changes. File data goes to backing
// files in the DataStore, outside the mutex.
//
// Virtual nodes (/.ckptfs, `latest` links, `.full/` views) are routed at one
// point, VirtualNodesFor(). The commit coordinator, the remote tier and
// cluster mode see FileSystem only through CommitPort, TierPort and
// ClusterPort.
//
// Thread safety: every public method may be called from any thread. mu_
// is never held across I/O on file contents (read, write, fsync). Lock
// order: mu_ before the CommitCoordinator's queue lock, the EventLog's lock
// and the remote tier's locks (the requesters, event emission and TierHooks
// are called with mu_ held).
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "control/event_log.h"
#include "data/data_store.h"
#include "manifest/manifest_store.h"
#include "namespace/cluster_port.h"
#include "namespace/commit_port.h"
#include "namespace/filesystem_core.h"
#include "namespace/filesystem_options.h"
#include "namespace/fs_types.h"
#include "namespace/tier_port.h"
#include "namespace/virtual_nodes.h"

namespace ckptfs {

// One row of status.json.
struct StepSummary {
  uint64_t ino = 0;
  std::string path;  // relative to the mount root
  StepRecord rec;
};

class FileSystem : public FileSystemCore, public CommitPort, public TierPort, public ClusterPort {
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
  // READDIRPLUS: Readdir's entries with their attributes, as many as fit in
  // budget bytes when each takes size_of(name). Each real entry returned
  // counts as a lookup (the kernel keeps it, and forgets it later), so rm -rf
  // and ls -l of a step need no LOOKUP per file.
  using DirEntrySizeFn = std::function<size_t(const std::string& name)>;
  Result<std::vector<DirEntry>> ReaddirPlus(uint64_t ino, uint64_t offset, size_t budget,
                                            const DirEntrySizeFn& size_of);

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
  // The smallest: below it the writeback is left to the commit's sync too.
  // Starting it costs the same whatever the file's size (a sync_file_range,
  // a block request and, on a virtual disk, an exit to the hypervisor for
  // the doorbell), while what it saves the commit grows with the size. For
  // 1,000 files of 1-4 KiB it made the commit 5 ms shorter (8 ms instead of
  // 13) and cost the writer about 80 us a file, 30% of a small-file save's
  // rate through the mount; at 16 KiB 12 ms for about the same; at 64 KiB 40
  // ms (docs/benchmarks.md, "Small files and the early writeback").
  static constexpr uint64_t kEarlyWritebackMinBytes = uint64_t{16} << 10;
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
  // Whether the namespace holds any step (a cache that holds none is cold).
  bool HasSteps();
  // Path of an inode relative to the root ("" for the root).
  std::string PathOf(uint64_t ino);
  // Hooks for tests: how many inodes are in memory, the first background error.
  size_t InodeCountForTest();
  // What the kernel does at umount or under memory pressure: forgets every
  // inode it looked up (FORGET with each one's whole count).
  void ForgetEverythingForTest();
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
  // idle thread, so removal never waits for data deletion. Writes what
  // waits to be written in the background first (WriteDeferredRecords).
  Result<size_t> CollectGarbage(size_t max) override;
  // Writes the records left for the background: the end of an rm -rf
  // (Rmdir, ManifestJournal::ApplyLater). The next change writes them first
  // anyway; this is the coordinator's tick (in CollectGarbage) and tests.
  Status WriteDeferredRecords();
  Result<size_t> CheckUnloadedSteps(size_t max) override;
  Result<size_t> UnloadIdleSteps() override;
  // Kernel cache invalidation for entries the daemon removed by itself
  // (pruned steps): fn(parent, name) is called outside mu_ by
  // FlushInvalidations, from a thread that is not serving a FUSE request.
  void SetInvalidateEntry(InvalidateEntryFn fn);
  // Drops the kernel's page cache of a file. After a commit the sealed files'
  // pages are cached twice (the FUSE file and its backing file); dropping the
  // FUSE copy halves the memory a fresh checkpoint holds, and spares a later
  // unlink the work (about 45 ms per GiB, inside the user's rm).
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
  Result<bool> SyncPart(const std::string& step_path) override;
  std::vector<std::string> PartsToResync() override;
  std::vector<std::string> PartsToRepublish() override;
  std::vector<std::string> PendingClusterRemovals() override;
  void ClusterRemovalDone(const std::string& step_path) override;
  std::map<std::string, StepView> StepViews() override;
  Status ApplyClusterStep(const ClusterStepRecord& record) override;
  Status ApplyClusterPersisted(const std::string& step_path) override;
  Status RemoveClusterStep(const std::string& step_path) override;
  Result<bool> DropLeftoverStep(const std::string& step_path,
                                const std::string& tombstone) override;
  void FollowRemoval(const std::string& step_path, const std::string& tombstone) override;
  std::optional<StepView> StepViewOf(const std::string& step_path) override;
  std::vector<AwaitedPart> PartsAwaited() override;
  Status NoteRemoteUploads(const std::string& step_path, const PartRecord& part) override;
  Result<bool> ApplyClusterRunFile(const RunFileRecord& record) override;

  // --- kernel passthrough (filesystem_passthrough.cc). Set once, before
  // requests are served: with `active`, opens of resident regular files get
  // a backing id from `registry` (Opened::backing_id); status.json shows the
  // setting and why passthrough is not active.
  using PassthroughSetting = ckptfs::PassthroughSetting;
  void SetPassthrough(BackingRegistry* registry, PassthroughSetting setting);
  // status.json's "fuse": how requests reach the daemon (/dev/fuse or
  // io_uring). Set once, before requests are served; fn must not block.
  using FuseStatusFn = std::function<nlohmann::json()>;
  void SetFuseStatus(FuseStatusFn fn);

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
  Result<std::set<std::string>> KeysOfStepsSavedAgain(
      const std::vector<std::string>& keys) override;
  std::vector<EvictionCandidate> EvictionCandidates() override;
  Status Evict(uint64_t ino) override;
  Status MarkResident(uint64_t ino, BackingFile* file) override;
  uint64_t ResidentBytes() override;
  std::optional<ObjectRecord> ObjectRecordFor(uint64_t ino, const std::string& key) override;
  Status ImportStep(const CommitObject& obj) override;
  std::set<std::string> StepPathsBeingDeleted() override;
  bool HasEntry(const std::string& path) override;
  void RepairUploadQueue(bool whole = true) override;
  Result<size_t> ImportRunFiles(const std::vector<RemoteObject>& objects) override;

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
  FileSystem(FileSystemOptions options, StepPattern pattern,
             std::unique_ptr<ManifestStore> manifest, std::unique_ptr<DataStore> data,
             const Clock* clock, EventLog* events);
  // The lazy mount's one background removal of backing files no inode owns
  // (filesystem_lazy.cc), once every unloaded step is checked.
  Status SweepStrayBackingFiles() EXCLUDES(mu_);
  // Rename without cluster publication (filesystem_entries.cc).
  Status RenameEntry(uint64_t parent, const std::string& name, uint64_t new_parent,
                     const std::string& new_name, unsigned int flags);
  // Before a non-resident file that is not sealed (a run-level file shown
  // by a cold mount) is opened for writing or truncated: fetches every byte
  // and marks it resident, releasing mu_ meanwhile, so writes never mix
  // with ranges fetched later. EIO when the remote cannot serve it.
  Status MakeLocalForWriteLocked(MutexLock& lock, uint64_t ino) REQUIRES(mu_);
  // Publishes this node's part of the step (no-op for ""); call without mu_.
  // EIO when the bucket cannot take it. watch: the node then watches for the
  // step's commit (ClusterHooks::WatchForCommit); an open does not ask, its
  // close will, so a long save does not use the watch's polls up.
  Status PublishPartOf(const std::string& step_path, bool watch = true) EXCLUDES(mu_);
  // Cluster mode, after a writable open (mu_ released): publishes this
  // node's part of the step publish names ("" = nothing to do), so the part
  // says a file is open for writing before the open returns; when the
  // bucket cannot take it, the open is undone (Release) and fails with EIO.
  Status PublishOpenedWriter(const std::string& publish, FileHandle* fh) EXCLUDES(mu_);
  // fsync's local half: the backing file (and a new file's directory entry)
  // made durable, and the inode's record written with a synced batch.
  Status SyncFileAndRecord(FileHandle* fh) EXCLUDES(mu_);
  // Brings the cluster's steps up to date when the view is older than
  // --refresh; call without mu_.
  void MaybeRefreshCluster() EXCLUDES(mu_);
  // Before this node plans retention for the cluster in the run of
  // step_ino: reads the cluster's view afresh when the run has a policy
  // (one LIST). Call without mu_.
  void RefreshClusterForRetention(uint64_t step_ino) EXCLUDES(mu_);
  // Before a read of another node's file: waits for its upload and records
  // its CRCs. Call without mu_.
  Status AwaitOwnerUpload(FileHandle* fh) EXCLUDES(mu_);
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
  const std::unique_ptr<VirtualNodes> control_nodes_;
  const std::unique_ptr<VirtualNodes> full_view_nodes_;
};

}  // namespace ckptfs
