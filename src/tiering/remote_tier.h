// RemoteTier: the I/O side of the object-storage tier (SPEC section 4). It
// owns the threads that
//   * upload queued files (whole-object PUT or multipart with parts in
//     parallel), computing each file's CRC32C on the way;
//   * write a committed step's commit object once all its files are up, and
//     delete remote objects queued for deletion (commit objects first);
//   * keep the cache under --cache-size by evicting persisted files, least
//     recently used first, and make writers wait (bounded) when only
//     unpersisted data is left;
//   * fetch ranges of non-resident files on read, with read-ahead, into
//     sparse backing files (what was fetched is kept in a presence map);
//   * import persisted steps from the remote at mount (cold mount), and the
//     run-level files beside them (DeepSpeed's `latest`, RecIS's index).
// Every decision about the namespace is the namespace's: the tier sees it
// only through TierPort (FileSystem implements it over its TierLedger), and
// never touches the manifest itself. File data it reads and writes in the
// DataStore directly.
//
// Lock order: the namespace lock -> mu_ / fetch_mu_ (FileSystem calls the
// TierHooks with its lock held). This class never calls TierPort while
// holding mu_ or fetch_mu_. key_mu_ (deletions vs uploads of one key) is
// taken before the namespace lock and never inside a hook. No two of the
// tier's own locks are ever held at once: the EXCLUDES on the helpers below
// name those each takes, itself or through the helpers it calls.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/crc32c_chunks.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "control/event_log.h"
#include "control/rate_meter.h"
#include "data/data_store.h"
#include "namespace/tier_hooks.h"
#include "namespace/tier_port.h"
#include "remote/object_store.h"
#include "tiering/remote_error_events.h"

namespace ckptfs {

struct RemoteTierOptions {
  int upload_files = 8;                  // files uploading at once
  int parts_per_file = 4;                // parts of one file in flight at once
  uint64_t min_part_size = 8ULL << 20;   // grows so any file fits in 10,000 parts
  uint64_t fetch_chunk = 8ULL << 20;     // unit of ranged GETs and of the presence map
  // The chunk size of the CRC32Cs recorded at upload (commit object
  // "chunk_size"); a fetch unit is rounded up to a multiple of the recorded one.
  uint64_t checksum_chunk = kDefaultChecksumChunk;
  // Verify fetched bytes before serving them. No mount option turns this
  // off: false exists only for bench/verified_fetch to measure the cost.
  bool verify_reads = true;
  int readahead_chunks = 16;             // fetched ahead of a sequential reader (128 MiB)
  int fetch_threads = 12;
  uint64_t cache_size = 0;               // 0 = unlimited
  int64_t cache_full_wait_ns = 60LL * 1'000'000'000;
  // A failed upload or deletion is tried again after a delay that doubles
  // from retry_min to retry_max (the client already retried each request).
  int64_t retry_min_ns = 1LL * 1'000'000'000;
  int64_t retry_max_ns = 30LL * 1'000'000'000;
  int64_t control_interval_ns = 200LL * 1'000'000;
  // Uploads give way to a save in progress: none start while files in steps
  // are open for writing or were closed less than save_quiet ago, unless the
  // save has gone on for save_grace (then one stream runs).
  int64_t save_quiet_ns = 300LL * 1'000'000;
  int64_t save_grace_ns = 10LL * 1'000'000'000;
  // While a step is being committed (TierPort::CommitPendingSinceNs), no
  // upload starts, for at most commit_hold from when the commit was asked
  // for (the daemon makes it at least --commit-settle plus 1 s, so that a
  // settling commit is covered). Measured by bench/cluster: with 4 nodes'
  // uploads running, the committer's dozen small requests queued behind their
  // parts in the bucket and the commit took 2-4 s instead of about 0.5 s; by
  // bench/object_store: a single node's uploads, started 300 ms after the
  // last close, made an explicit commit (2 s of settling) take 2.6-3.0 s
  // instead of 2.25 s on a disk and 2 cores shared with the server.
  int64_t commit_hold_ns = 2LL * 1'000'000'000;
  // Times retries, rates and every timed wait (nullptr: the system clock);
  // tests may pass a ManualClock.
  const Clock* clock = nullptr;
};

// Part size for an object of `size` bytes: at least min_part, a multiple of
// 1 MiB, and large enough that the object fits in 10,000 parts (S3's limit).
uint64_t PartSizeFor(uint64_t size, uint64_t min_part);

class RemoteTier : public TierHooks {
 public:
  // ns and data must outlive the tier.
  RemoteTier(TierPort* ns, DataStore* data, std::unique_ptr<ObjectStore> store, EventLog* events,
             RemoteTierOptions options);
  ~RemoteTier() override;  // stops the threads; queued work resumes at the next mount
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  // Shows every persisted step of the remote that is not here (cold mount),
  // then the run-level files in their directories (TierPort::
  // ImportRunFiles). Returns how many steps were imported; on failure the
  // control thread tries again until it succeeds once.
  Result<size_t> ImportPersistedSteps();
  // Starts the background threads (uploads, control, fetches). The control
  // thread imports persisted steps first, then keeps trying until it works.
  void Start();
  // Waits up to timeout for the first import to succeed; false if it has not.
  bool WaitForImport(std::chrono::nanoseconds timeout);

  // For tests: runs one pass of every background job on the calling thread
  // (run-level files queued, uploads, commit objects, the uploads those
  // released, remote deletions, eviction) and returns once nothing more can
  // be done right now.
  Status RunOnceForTest();

  // TierHooks.
  void UploadsQueued() override;
  void StepsMayPersist() override;
  Status EnsureLocal(uint64_t ino, const std::string& key, uint64_t size, BackingFile* file,
                     uint64_t offset, size_t n) override EXCLUDES(fetch_mu_, mu_);
  Status WaitForCacheSpace(uint64_t n) override;
  bool LimitsCacheSize() const override { return options_.cache_size != 0; }
  void Forget(uint64_t ino) override;
  bool ReleaseForUnload(uint64_t ino, bool* drop_data) override;
  void AddStatus(nlohmann::json* status) override;
  void AddMetrics(PrometheusWriter* out) override;

  ObjectStore* store() { return store_.get(); }

 private:
  // Uploads (remote_tier_upload.cc).
  void UploadLoop();
  // Takes the next job not taken by another worker; false when none.
  bool TakeUpload(TierPort::UploadJob* job, const std::set<uint64_t>& also_skip = {}) EXCLUDES(mu_);
  // How many uploads may run now (fewer while a save is in progress).
  size_t UploadsAllowedNow() EXCLUDES(mu_);
  Status Upload(const TierPort::UploadJob& job) EXCLUDES(key_mu_, mu_, fetch_mu_);
  Status UploadMultipart(const TierPort::UploadJob& job, BackingFile* file, ChunkCrc32c* sums)
      EXCLUDES(mu_, fetch_mu_);
  // EIO and a checksum_mismatch event when the bytes read for job (CRC32C
  // crc) are not those whose CRC32C was recorded for this version.
  Status CheckReadForUpload(const TierPort::UploadJob& job, uint32_t crc);
  Status ReadForUpload(const TierPort::UploadJob& job, BackingFile* file, uint64_t offset, size_t n,
                       std::string* out) EXCLUDES(mu_, fetch_mu_);
  void UploadFinished(uint64_t ino, const Status& st, uint64_t bytes) EXCLUDES(mu_);

  // Commit objects, remote deletions, import (remote_tier.cc).
  void ControlLoop();
  Status PersistSteps() EXCLUDES(mu_);
  Status DeleteRemoteGarbage() EXCLUDES(mu_, key_mu_);
  void NoteRemoteResult(const Status& st, const char* what) EXCLUDES(mu_);

  // Cache (remote_tier_cache.cc).
  void RecomputeCacheUse() EXCLUDES(fetch_mu_);
  Status EvictIfNeeded() EXCLUDES(mu_, fetch_mu_);

  // Fetching (remote_tier_fetch.cc).
  // How fetched bytes of a file are verified (docs/architecture.md,
  // "Verified reads").
  enum class Verify : uint8_t {
    kChunks,     // each fetched chunk against the commit object's chunk CRC32Cs
    kWholeFile,  // older objects: the whole file (fetched at once) against its CRC32C
    kNone,       // nothing recorded (run-level files imported from a listing)
  };
  struct Presence {
    std::vector<uint8_t> chunks;  // kAbsent, kFetching, kPresent
    uint64_t present_bytes = 0;
    uint64_t last_chunk = 0;  // the last chunk a read touched (sequential detection)
    bool complete_queued = false;    // every chunk present; waiting for the control thread
    bool complete_reported = false;  // marked resident in the manifest
    // Set when the entry is made, constant afterwards.
    uint64_t unit = 0;  // bytes per presence chunk (one ranged GET)
    Verify verify = Verify::kNone;
    std::shared_ptr<const ObjectRecord> object;  // what the bytes must match
    // kWholeFile: each present chunk's CRC32C, joined once all are there.
    std::vector<uint32_t> got_crcs;
    bool verified = false;               // kWholeFile: the whole file matched
    std::set<uint64_t> mismatch_events;  // offsets already reported (one event each)
  };
  enum : uint8_t { kAbsent = 0, kFetching = 1, kPresent = 2 };
  // Makes the presence entry of ino (its unit and verification from the
  // object record) unless it exists. Called without fetch_mu_.
  void EnsurePresence(uint64_t ino, const std::string& key, uint64_t size) EXCLUDES(fetch_mu_);
  Status FetchChunk(uint64_t ino, const std::string& key, uint64_t size, BackingFile* file,
                    uint64_t chunk) EXCLUDES(fetch_mu_, mu_);
  // kWholeFile, every chunk present: joins their CRC32Cs and checks the
  // file's. EILSEQ on a mismatch (the chunks are dropped so they are fetched
  // again), EAGAIN when a chunk is missing (another reader's fetch failed).
  Status VerifyWholeFile(uint64_t ino, const std::string& key, uint32_t* got_crc,
                         uint32_t* expected_crc) EXCLUDES(fetch_mu_);
  // A checksum_mismatch event (once per offset while the entry lives) and
  // the EIO the read gets.
  Status ReportMismatch(uint64_t ino, const std::string& key, uint64_t offset, uint64_t len,
                        uint32_t expected, uint32_t got) EXCLUDES(fetch_mu_);
  void FetchLoop();
  // Queues a fully fetched file for MarkFetchedFilesResident (control thread).
  void MaybeMarkResident(uint64_t ino) EXCLUDES(fetch_mu_);
  void MarkFetchedFilesResident() EXCLUDES(fetch_mu_);

  TierPort* const ns_;  // the namespace, as the tier sees it
  DataStore* const data_;
  std::unique_ptr<ObjectStore> store_;
  EventLog* const events_;
  const RemoteTierOptions options_;

  Mutex mu_;                          // upload bookkeeping, health, counters
  std::condition_variable work_cv_;   // uploads queued, stop
  std::condition_variable space_cv_;  // cache use went down
  std::condition_variable import_cv_;  // the cold-mount import is done
  bool stopping_ GUARDED_BY(mu_) = false;
  bool uploads_pending_ GUARDED_BY(mu_) = true;  // re-scan the queue
  // A step may have become persisted (an upload ended here, or another
  // node's did): the control thread's next pass starts at once.
  bool persist_due_ GUARDED_BY(mu_) = false;
  std::set<uint64_t> uploading_ GUARDED_BY(mu_);
  std::map<uint64_t, int64_t> retry_after_ GUARDED_BY(mu_);  // ino -> monotonic ns
  std::map<uint64_t, int64_t> retry_delay_ GUARDED_BY(mu_);
  int64_t gc_retry_after_ GUARDED_BY(mu_) = 0;
  bool import_done_ GUARDED_BY(mu_) = false;
  std::string last_error_ GUARDED_BY(mu_);
  double last_error_at_ GUARDED_BY(mu_) = 0;
  bool healthy_ GUARDED_BY(mu_) = true;
  RemoteErrorEvents error_events_ GUARDED_BY(mu_);
  uint64_t bytes_uploaded_ GUARDED_BY(mu_) = 0;
  RateMeter upload_rate_ GUARDED_BY(mu_);  // of bytes_uploaded_
  uint64_t bytes_in_flight_ GUARDED_BY(mu_) = 0;
  uint64_t files_uploaded_ GUARDED_BY(mu_) = 0;
  uint64_t upload_failures_ GUARDED_BY(mu_) = 0;
  uint64_t objects_deleted_ GUARDED_BY(mu_) = 0;
  uint64_t steps_persisted_ GUARDED_BY(mu_) = 0;
  uint64_t evictions_ GUARDED_BY(mu_) = 0;
  uint64_t space_waiters_ GUARDED_BY(mu_) = 0;
  uint64_t space_wanted_ GUARDED_BY(mu_) = 0;  // bytes the waiters need
  int64_t saving_since_ GUARDED_BY(mu_) = 0;   // monotonic ns, 0 = no save

  Mutex key_mu_;  // remote deletions vs uploads of the same key
  std::condition_variable key_cv_;
  std::set<std::string> deleting_keys_ GUARDED_BY(key_mu_);

  std::atomic<uint64_t> cache_used_{0};
  std::atomic<uint64_t> bytes_fetched_{0};
  std::atomic<uint64_t> checksum_mismatches_{0};  // bad ranges received (retried ones too)
  std::atomic<uint64_t> checksum_failures_{0};  // bad twice: reads get EIO

  Mutex fetch_mu_;
  // Two conditions, so that a finished chunk wakes only the readers waiting
  // for chunks and a queued read-ahead job only one idle fetcher.
  std::condition_variable fetch_cv_;  // read-ahead queued; stop (fetchers wait)
  std::condition_variable chunk_cv_;  // a chunk changed state (readers wait)
  std::unordered_map<uint64_t, Presence> presence_ GUARDED_BY(fetch_mu_);
  struct ReadAhead {
    uint64_t ino;
    std::string key;
    uint64_t size;
    uint64_t chunk;
  };
  std::deque<ReadAhead> readahead_ GUARDED_BY(fetch_mu_);
  bool fetch_stopping_ GUARDED_BY(fetch_mu_) = false;
  std::vector<uint64_t> complete_ GUARDED_BY(fetch_mu_);  // fully fetched, not yet resident

  const Clock* const clock_;
  std::atomic<bool> started_{false};  // threads run: read-ahead has takers
  std::vector<std::thread> threads_;
};

}  // namespace ckptfs
