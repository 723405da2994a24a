// RemoteTier's lifecycle and control thread: commit objects, remote
// deletions, the cold-mount import, health and status. See remote_tier.h.
#include "tiering/remote_tier.h"

#include <malloc.h>

#include <algorithm>

#include "common/pacer.h"
#include "formats/commit_object.h"

namespace ckptfs {

namespace {
constexpr size_t kDeleteBatch = 1000;  // S3 DeleteObjects' limit

// "run1/step100" -> "run1"; "step100" -> "" (the root).
std::string ParentOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}
}  // namespace

uint64_t PartSizeFor(uint64_t size, uint64_t min_part) {
  constexpr uint64_t kMiB = 1ULL << 20;
  constexpr uint64_t kMaxParts = 10000;
  uint64_t part = std::max(min_part, (size + kMaxParts - 1) / kMaxParts);
  return (part + kMiB - 1) / kMiB * kMiB;
}

RemoteTier::RemoteTier(TierPort* ns, DataStore* data, std::unique_ptr<ObjectStore> store,
                       EventLog* events, RemoteTierOptions options)
    : ns_(ns),
      data_(data),
      store_(std::move(store)),
      events_(events),
      options_(options),
      clock_(options.clock ? options.clock : &SystemClockInstance()) {}

RemoteTier::~RemoteTier() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  space_cv_.notify_all();
  {
    MutexLock lock(&fetch_mu_);
    fetch_stopping_ = true;
  }
  fetch_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void RemoteTier::Start() {
  RecomputeCacheUse();
  // Before any upload worker asks for work: which directories are runs,
  // so queued run-level files are recognised as such.
  ns_->RepairUploadQueue();
  for (int i = 0; i < options_.upload_files; i++) threads_.emplace_back([this] { UploadLoop(); });
  for (int i = 0; i < options_.fetch_threads; i++) threads_.emplace_back([this] { FetchLoop(); });
  threads_.emplace_back([this] { ControlLoop(); });
  started_ = options_.fetch_threads > 0;
}

void RemoteTier::NoteRemoteResult(const Status& st, const char* what) {
  MutexLock lock(&mu_);
  if (st.ok()) {
    healthy_ = true;
    if (error_events_.OnSuccess()) {
      events_->Append({{"event", "remote_ok"}, {"remote", store_->Describe()}});
    }
    return;
  }
  const std::string message = std::string(what) + ": " + st.ToString();
  // One event per distinct error (remote_error_events.h), not one per file
  // and retry; status.json and the metrics see every failure.
  if (error_events_.OnFailure(RemoteErrorEvents::Signature(what, st.err()), clock_->MonotonicNanos())) {
    events_->Append({{"event", "remote_error"}, {"remote", store_->Describe()}, {"error", message}});
  }
  healthy_ = false;
  last_error_ = message;
  last_error_at_ = static_cast<double>(clock_->Now().tv_sec);
}

Result<size_t> RemoteTier::ImportPersistedSteps() {
  auto listed = store_->List("");
  NoteRemoteResult(listed.status(), "listing the remote for persisted steps");
  if (!listed.ok()) return listed.status();
  const std::set<std::string> being_deleted = ns_->StepPathsBeingDeleted();
  size_t imported = 0;
  std::set<std::string> run_paths;  // directories holding a persisted step
  for (const ObjectInfo& info : *listed) {
    std::string step_path;
    if (!IsCommitObjectKey(info.key, &step_path) || being_deleted.count(step_path)) continue;
    run_paths.insert(ParentOf(step_path));
    // A step this cache has (every step, on a warm mount) costs no GET.
    if (ns_->HasEntry(step_path)) continue;
    auto body = store_->GetRange(info.key, 0, info.size);
    if (!body.ok()) {
      if (body.err() == ENOENT) continue;  // deleted since the listing
      NoteRemoteResult(body.status(), "reading a commit object");
      return body.status();
    }
    auto obj = DecodeCommitObject(*body, step_path);
    if (!obj.ok()) {
      events_->Append({{"event", "error"}, {"path", step_path}, {"error", obj.status().message()}});
      continue;
    }
    Status st = ns_->ImportStep(*obj);
    if (st.ok()) {
      imported++;
    } else if (st.err() != EEXIST) {
      events_->Append({{"event", "error"},
                       {"path", step_path},
                       {"error", "not imported from the remote: " + st.message()}});
    }
  }
  // Run-level files (the trainers' own indexes) come after the steps they
  // sit beside: objects directly in those directories. The namespace decides
  // which of them to show. Directories of every listed step, not only those
  // imported now, so a crash between the two imports is made good later.
  std::vector<TierPort::RemoteObject> run_objects;
  for (const ObjectInfo& info : *listed) {
    if (run_paths.count(ParentOf(info.key))) run_objects.push_back({info.key, info.size});
  }
  auto run_files = ns_->ImportRunFiles(run_objects);
  if (!run_files.ok()) {
    events_->Append({{"event", "error"}, {"error", "run-level files not imported from the remote: " +
                                                       run_files.status().message()}});
    return run_files.status();
  }
  {
    MutexLock lock(&mu_);
    import_done_ = true;
  }
  import_cv_.notify_all();
  if (imported > 0 || *run_files > 0) {
    events_->Append({{"event", "import_done"},
                     {"remote", store_->Describe()},
                     {"steps", imported},
                     {"run_files", *run_files}});
  }
  return imported;
}

bool RemoteTier::WaitForImport(std::chrono::nanoseconds timeout) {
  MutexLock lock(&mu_);
  return lock.WaitFor(*clock_, import_cv_, timeout.count(), [&] {
    mu_.AssertHeld();  // WaitFor calls it with the lock held
    return import_done_ || stopping_;
  }) && import_done_;
}

Status RemoteTier::PersistSteps() {
  for (const TierPort::PersistJob& job : ns_->StepsToPersist()) {
    // The commit object's key may still be queued for deletion (a step of
    // the same name was removed): the claim drops that.
    ns_->ClaimKey(job.key);
    Status st = store_->Put(job.key, job.body);
    NoteRemoteResult(st, "writing a commit object");
    if (!st.ok()) {
      ns_->ReleaseKey(job.key);
      return st;
    }
    CKPTFS_RETURN_IF_ERROR(ns_->MarkPersisted(job));
    ns_->FlushInvalidations();  // steps retention removed just now
    MutexLock lock(&mu_);
    steps_persisted_++;
  }
  return Status::Ok();
}

Status RemoteTier::DeleteRemoteGarbage() {
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (stopping_) return Status::Ok();
    }
    TierPort::RemoteGcBatch batch;
    {
      MutexLock keys(&key_mu_);
      auto next = ns_->NextRemoteDeletions(kDeleteBatch);
      if (!next.ok()) return next.status();
      batch = std::move(next).value();
      deleting_keys_.insert(batch.keys.begin(), batch.keys.end());
    }
    if (batch.keys.empty()) return Status::Ok();
    // Cluster mode: a step's name saved again since its removal may hold
    // new objects under these keys; those deletions are dropped instead.
    auto saved_again = ns_->KeysOfStepsSavedAgain(batch.keys);
    Status st = saved_again.status();
    if (st.ok() && !saved_again->empty()) {
      std::vector<std::string> to_delete;
      for (const auto& k : batch.keys) {
        if (!saved_again->count(k)) to_delete.push_back(k);
      }
      events_->Append({{"event", "warning"},
                       {"kind", "remote_gc_saved_again"},
                       {"objects", saved_again->size()},
                       {"key", *saved_again->begin()},
                       {"error",
                        "not deleted: the step's name was saved again since its "
                        "removal, and these keys may hold the new step's objects"}});
      if (!to_delete.empty()) st = store_->Delete(to_delete);
    } else if (st.ok()) {
      st = store_->Delete(batch.keys);
    }
    NoteRemoteResult(st, "deleting objects");
    if (st.ok()) st = ns_->RemoteDeletionsDone(batch);
    {
      MutexLock keys(&key_mu_);
      for (const auto& k : batch.keys) deleting_keys_.erase(k);
    }
    key_cv_.notify_all();
    if (!st.ok()) return st;
    MutexLock lock(&mu_);
    objects_deleted_ += batch.keys.size();
  }
}

void RemoteTier::ControlLoop() {
  int64_t import_retry_at = 0;
  int64_t import_delay = options_.retry_min_ns;
  int64_t gc_delay = options_.retry_min_ns;
  int passes_since_recount = 0;
  int64_t last_full_pass = 0;
  // The whole queue repair walks every file of the steps not yet persisted
  // under the namespace lock: with a million files waiting that took about
  // a second of every one-second pass, and uploads, which need the lock,
  // crawled (11 files/s). It runs again only after 100 times as long as it
  // took: every pass for small namespaces, about every 100 s at a million.
  Pacer whole_repair(100);
  // An early persist (a finished upload woke the loop) walks the steps not
  // yet persisted under the namespace lock. After every upload, with a
  // million files waiting, that took most of a CPU and starved the uploads
  // (336 files/s). Early persists take at most a tenth of the time: after
  // one that took d, the next waits 9 d (nothing, for small namespaces).
  Pacer early_persist(10);
  for (bool first = true;; first = false) {
    bool import_needed;
    bool persist_woke = false;
    {
      MutexLock lock(&mu_);
      if (!first) {
        lock.WaitFor(*clock_, work_cv_, options_.control_interval_ns, [&] {
          mu_.AssertHeld();  // WaitFor calls it with the lock held
          return stopping_ || persist_due_;
        });
      }
      if (stopping_) return;
      persist_woke = persist_due_;
      persist_due_ = false;
      import_needed = !import_done_;
      // A sample per pass: the rate falls while uploads stall.
      upload_rate_.Record(clock_->MonotonicNanos(), bytes_uploaded_);
    }
    const int64_t now = clock_->MonotonicNanos();
    if (persist_woke && now - last_full_pass < options_.control_interval_ns) {
      // Woken early because a step may be persisted (StepsMayPersist, a
      // finished upload): write its commit object now; the rest of the pass
      // (garbage, recounts, eviction) keeps its own pace.
      if (!early_persist.Due(now)) {
        MutexLock lock(&mu_);
        lock.WaitFor(*clock_, work_cv_, early_persist.next_ns() - now, [&] {
          mu_.AssertHeld();  // WaitFor calls it with the lock held
          return stopping_;
        });
        if (stopping_) return;
        persist_due_ = false;  // the persist below covers uploads finished meanwhile
      }
      const int64_t started = clock_->MonotonicNanos();
      (void)PersistSteps();
      early_persist.Ran(started, clock_->MonotonicNanos());
      continue;
    }
    last_full_pass = now;
    if (import_needed && now >= import_retry_at) {
      if (ImportPersistedSteps().ok()) {
        // The listing of the whole bucket is freed: its pages go back, or
        // a warm mount's RSS keeps the size of the bucket's key list.
        malloc_trim(0);
        import_delay = options_.retry_min_ns;
      } else {
        import_retry_at = now + import_delay;
        import_delay = std::min(import_delay * 2, options_.retry_max_ns);
      }
    }
    MarkFetchedFilesResident();
    if (whole_repair.Due(now)) {
      const int64_t started = clock_->MonotonicNanos();
      ns_->RepairUploadQueue(/*whole=*/true);
      whole_repair.Ran(started, clock_->MonotonicNanos());
    } else {
      ns_->RepairUploadQueue(/*whole=*/false);
    }
    (void)PersistSteps();
    bool gc_due;
    {
      MutexLock lock(&mu_);
      gc_due = now >= gc_retry_after_;
    }
    if (gc_due) {
      Status st = DeleteRemoteGarbage();
      MutexLock lock(&mu_);
      if (st.ok()) {
        gc_delay = options_.retry_min_ns;
      } else {
        gc_retry_after_ = now + gc_delay;
        gc_delay = std::min(gc_delay * 2, options_.retry_max_ns);
      }
    }
    // Recounting walks every inode under the namespace lock: every pass when
    // a limit needs it, else now and then for status.json.
    if (options_.cache_size > 0 || ++passes_since_recount >= 25) {
      passes_since_recount = 0;
      RecomputeCacheUse();
    }
    (void)EvictIfNeeded();
  }
}

Status RemoteTier::RunOnceForTest() {
  {
    MutexLock lock(&mu_);
    retry_after_.clear();
  }
  Status first;
  auto upload_all = [&] {
    TierPort::UploadJob job;
    std::set<uint64_t> tried;  // each file once per round, failed or not
    while (TakeUpload(&job, tried)) {
      tried.insert(job.ino);
      Status st = Upload(job);
      UploadFinished(job.ino, st, job.size);
      if (!st.ok() && first.ok()) first = st;
    }
    MutexLock lock(&mu_);
    retry_after_.clear();
  };
  ns_->RepairUploadQueue();
  upload_all();
  MarkFetchedFilesResident();
  if (Status st = PersistSteps(); !st.ok() && first.ok()) first = st;
  // Run-level files that waited for the steps just persisted.
  upload_all();
  if (Status st = DeleteRemoteGarbage(); !st.ok() && first.ok()) first = st;
  RecomputeCacheUse();
  if (Status st = EvictIfNeeded(); !st.ok() && first.ok()) first = st;
  return first;
}

void RemoteTier::StepsMayPersist() {
  {
    MutexLock lock(&mu_);
    persist_due_ = true;
  }
  work_cv_.notify_all();
}

void RemoteTier::UploadsQueued() {
  {
    MutexLock lock(&mu_);
    uploads_pending_ = true;
  }
  work_cv_.notify_all();
}

void RemoteTier::AddStatus(nlohmann::json* status) {
  MutexLock lock(&mu_);
  nlohmann::json remote = {{"url", store_->Describe()},
                           {"healthy", healthy_},
                           {"last_error", last_error_.empty() ? nlohmann::json(nullptr) : nlohmann::json(last_error_)},
                           {"last_error_at", last_error_at_ > 0 ? nlohmann::json(last_error_at_) : nlohmann::json(nullptr)},
                           {"uploads_in_flight", uploading_.size()},
                           {"upload_bytes_in_flight", bytes_in_flight_},
                           {"uploads_waiting_to_retry", retry_after_.size()},
                           {"bytes_uploaded", bytes_uploaded_},
                           // Over the last 30 s: `ckptfs status` derives ETAs from it.
                           {"upload_rate_bytes_per_s", upload_rate_.PerSecond(clock_->MonotonicNanos())},
                           {"files_uploaded", files_uploaded_},
                           {"upload_failures", upload_failures_},
                           // Upload attempts whose body arrived damaged (retried, never kept).
                           {"upload_checksum_mismatches", store_->UploadChecksumMismatches()},
                           {"steps_persisted", steps_persisted_},
                           {"objects_deleted", objects_deleted_},
                           {"bytes_fetched", bytes_fetched_.load()},
                           {"cold_import_done", import_done_}};
  (*status)["remote"] = std::move(remote);
  (*status)["cache"]["bytes_used"] = cache_used_.load();
  (*status)["cache"]["bytes_limit"] = options_.cache_size;
  (*status)["cache"]["evictions"] = evictions_;
  (*status)["cache"]["writers_waiting"] = space_waiters_;
}

void RemoteTier::AddMetrics(PrometheusWriter* w) {
  MutexLock lock(&mu_);
  auto one = [&](const char* name, const char* type, const char* help, double v) {
    w->Family(name, type, help);
    w->Sample(name, v);
  };
  one("ckptfs_remote_healthy", "gauge", "1 when the last request to the remote succeeded.", healthy_ ? 1 : 0);
  one("ckptfs_uploads_in_flight", "gauge", "Files uploading now.", static_cast<double>(uploading_.size()));
  one("ckptfs_upload_bytes_in_flight", "gauge", "Bytes of the files uploading now.",
      static_cast<double>(bytes_in_flight_));
  one("ckptfs_upload_bytes_total", "counter", "Bytes uploaded (files whose upload finished).",
      static_cast<double>(bytes_uploaded_));
  one("ckptfs_uploaded_files_total", "counter", "Files uploaded.", static_cast<double>(files_uploaded_));
  one("ckptfs_remote_request_failures_total", "counter",
      "Requests to the remote that failed (each distinct error is one remote_error event).",
      static_cast<double>(error_events_.failures()));
  one("ckptfs_remote_error_events_suppressed_total", "counter",
      "Remote failures not reported as an event: the same error was reported in the last minute.",
      static_cast<double>(error_events_.suppressed()));
  one("ckptfs_upload_failures_total", "counter", "File uploads that failed (each is tried again).",
      static_cast<double>(upload_failures_));
  one("ckptfs_upload_checksum_mismatches_total", "counter",
      "Upload attempts whose body arrived damaged (caught by the checksums; retried, never kept).",
      static_cast<double>(store_->UploadChecksumMismatches()));
  one("ckptfs_steps_persisted_total", "counter", "Commit objects written.", static_cast<double>(steps_persisted_));
  one("ckptfs_remote_objects_deleted_total", "counter", "Remote objects deleted.",
      static_cast<double>(objects_deleted_));
  one("ckptfs_remote_fetch_bytes_total", "counter", "Bytes fetched from the remote for reads.",
      static_cast<double>(bytes_fetched_.load()));
  one("ckptfs_remote_checksum_mismatches_total", "counter",
      "Fetched ranges whose bytes did not match the recorded CRC32C (each is fetched once more).",
      static_cast<double>(checksum_mismatches_.load()));
  one("ckptfs_remote_checksum_failures_total", "counter",
      "Fetched ranges still corrupt after a second fetch (reads of them get EIO).",
      static_cast<double>(checksum_failures_.load()));
  one("ckptfs_cache_bytes", "gauge", "File data in the cache, as counted against --cache-size.",
      static_cast<double>(cache_used_.load()));
  one("ckptfs_cache_limit_bytes", "gauge", "--cache-size (0: no limit).", static_cast<double>(options_.cache_size));
  one("ckptfs_cache_evictions_total", "counter", "Files evicted from the cache.", static_cast<double>(evictions_));
  one("ckptfs_cache_writers_waiting", "gauge", "Writes waiting for room in the cache.",
      static_cast<double>(space_waiters_));
}

}  // namespace ckptfs
