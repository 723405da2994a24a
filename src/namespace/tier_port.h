// TierPort: what the remote tier (tiering/RemoteTier) may ask of the
// namespace, and nothing else; TierHooks is the other direction. FileSystem
// implements it over its TierLedger (the upload queue, object records, key
// claims and remote deletions), InodeTable and StepBook. The tier gets this
// port, the data store and a clock: it never sees the rest of FileSystem.
//
// Every method takes the namespace lock itself; the tier calls them
// without its own locks held (lock order: namespace lock, then the tier's).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "formats/commit_object.h"
#include "manifest/records.h"

namespace ckptfs {

class BackingFile;

class TierPort {
 public:
  virtual ~TierPort() = default;

  // A file to upload: its current path is the object key; the version
  // (size, mtime) tells NoteUploaded whether it changed meanwhile.
  struct UploadJob {
    uint64_t ino = 0;
    std::string key;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    // Where to read the data from when it is not resident (a step renamed
    // after eviction): the object it was uploaded to before.
    bool resident = true;
    std::string source_key;
    // A multipart upload an earlier run left unfinished, to abort.
    std::string stale_upload_id;
    std::string stale_upload_key;
    // The CRC32C recorded for this very version, when one was (the fast
    // path's at close, the object's of an earlier upload of a moved file):
    // the bytes read for the upload must have it, so a local copy damaged
    // since is never uploaded as the good one.
    std::optional<uint32_t> expected_crc32c;
  };
  // Up to max queued uploads, skipping inos in busy and files open for
  // writing (their last close queues them again).
  virtual std::vector<UploadJob> NextUploads(size_t max, const std::set<uint64_t>& busy) = 0;
  // Records a multipart upload in progress (so a crash does not leak it).
  virtual Status NoteMultipartStarted(const UploadJob& job, const std::string& upload_id) = 0;
  // The upload of job ended with the object holding the file's contents
  // (CRC32C crc). Records it unless the file changed or moved meanwhile
  // (then it stays queued), and queues objects nobody uses any more for
  // deletion. Releases the job's key claim.
  // chunk_crcs: the CRC32C of each chunk_size bytes (none: not computed).
  virtual Status NoteUploaded(const UploadJob& job, uint32_t crc32c, uint64_t chunk_size = 0,
                              std::vector<uint32_t> chunk_crcs = {}) = 0;
  // Remote keys are natural paths, so an old file's queued deletion and a
  // new file's upload can name the same key. An upload claims its key first:
  // queued deletions of it are dropped and no deletion starts while the
  // claim lasts. ReleaseKey ends a claim whose upload failed.
  virtual void ClaimKey(const std::string& key) = 0;
  virtual void ReleaseKey(const std::string& key) = 0;

  // Committed steps whose files are all uploaded, with the commit object to
  // write; MarkPersisted records it after the Put (or queues the object for
  // deletion if the step moved or went meanwhile).
  struct PersistJob {
    uint64_t step_ino = 0;
    std::string key;  // <step path>/.ckptfs-commit.json
    std::string body;
  };
  virtual std::vector<PersistJob> StepsToPersist() = 0;
  virtual Status MarkPersisted(const PersistJob& job) = 0;

  // Remote objects to delete, in batches: commit objects first (while any is
  // queued no data object is handed out), skipping claimed keys. The caller
  // deletes them, then calls RemoteDeletionsDone with the same keys.
  struct RemoteGcBatch {
    bool commit_objects = false;
    std::vector<std::string> keys;
  };
  virtual Result<RemoteGcBatch> NextRemoteDeletions(size_t max) = 0;
  virtual Status RemoteDeletionsDone(const RemoteGcBatch& batch) = 0;
  virtual size_t RemoteDeletionsQueued() = 0;
  // Cluster mode: of these keys about to be deleted, the ones under a step
  // whose name was saved again after the removal that queued them (another
  // node's decision of the name, not the removed one, is in the bucket):
  // they may hold the new step's objects now, so they are not deleted. A
  // node's own deletions of a removed step run on its own schedule, perhaps
  // days later after a restart. Empty outside cluster mode. Blocking (reads
  // the bucket); an error keeps the batch queued.
  virtual Result<std::set<std::string>> KeysOfStepsSavedAgain(
      const std::vector<std::string>& keys) = 0;

  // Cache eviction: files of persisted steps, closed, least recently used
  // first. Evict drops the local data (the manifest first, synced).
  struct EvictionCandidate {
    uint64_t ino = 0;
    int64_t last_access_ns = 0;
    uint64_t bytes = 0;  // resident bytes (0 for files only partly fetched)
  };
  virtual std::vector<EvictionCandidate> EvictionCandidates() = 0;
  virtual Status Evict(uint64_t ino) = 0;
  // Every byte of a non-resident file has been fetched: the backing file is
  // synced and the file marked resident.
  virtual Status MarkResident(uint64_t ino, BackingFile* file) = 0;
  // Bytes of resident regular files (written here or fully fetched).
  virtual uint64_t ResidentBytes() = 0;
  // The object record of ino when it names `key` (what a fetch of key must
  // be verified against); nullopt otherwise.
  virtual std::optional<ObjectRecord> ObjectRecordFor(uint64_t ino, const std::string& key) = 0;

  // Cold mount: shows a persisted step found in the remote, its files
  // non-resident. EEXIST when the path is taken locally (the step is ours);
  // EINVAL when the path cannot be a step here.
  virtual Status ImportStep(const CommitObject& obj) = 0;
  // Step paths whose commit objects are queued for deletion: not imported.
  virtual std::set<std::string> StepPathsBeingDeleted() = 0;
  // Something is at path already (ImportStep would say EEXIST): the import
  // need not read its commit object.
  virtual bool HasEntry(const std::string& path) = 0;

  // Puts the upload queue right, as one change, so that NextUploads and
  // StepsToPersist only ever read. Refreshes the set of run directories;
  // drops queued uploads with nothing to upload (the file is gone, or moved
  // out of every step and run directory); queues what nothing else queued:
  // closed run-level files (regular files directly in a run directory, one
  // holding a step, such as DeepSpeed's `latest` and RecIS's `checkpoint`)
  // whose object is not current (the directory just got its first step, the
  // file was renamed, a crash lost the entry), and files of committed steps
  // this node persists that are not uploaded where they are now (moved
  // before the commit). The tier calls it at start and on every control
  // pass. whole: also the parts that walk the queue and every file of the
  // committed steps not yet persisted (a million entries: about a second
  // under the namespace lock), which the tier runs only as often as it can
  // afford them; run directories and run-level files are cheap and always
  // done.
  virtual void RepairUploadQueue(bool whole = true) = 0;
  // Cold mount: objects found directly in remote directories that hold a
  // persisted step become non-resident run-level files, unless the
  // directory is no run directory here, a local entry has the name (local
  // wins), the name is ckptfs's own (".ckptfs*"), or the key is a live
  // file's object or queued for deletion here. One synced batch; returns
  // how many were imported.
  struct RemoteObject {
    std::string key;
    uint64_t size = 0;
  };
  virtual Result<size_t> ImportRunFiles(const std::vector<RemoteObject>& objects) = 0;

  // Sends the kernel the entry invalidations queued by removals the daemon
  // made by itself (retention once a step is persisted).
  virtual void FlushInvalidations() = 0;

  // Files open for writing inside steps right now (the tier uploads with one
  // stream while a trainer is saving, so it does not slow the save), and
  // when a file inside a step was last opened or closed for writing
  // (monotonic ns): a trainer between two files is still saving.
  virtual int OpenWriters() const = 0;
  virtual int64_t LastSaveActivityNs() const = 0;
  // When the newest commit still pending began to be waited for (monotonic
  // ns; 0 = none): a step asked to commit and not committed yet (settling,
  // waiting for files, syncing), or, in cluster mode, a step this node
  // published a part of. Uploads wait for the commit, for a bounded time, so
  // that the commit's syncs and (in cluster mode) small requests do not queue
  // behind uploads on the same disk, cores and bucket.
  virtual int64_t CommitPendingSinceNs() { return 0; }
};

}  // namespace ckptfs
