// What the FileSystem does when the manifest cannot be written (a full cache
// disk, an I/O error): it stays up, read-only, and heals itself.
//
// Every mutation changes the in-memory image first and then writes the batch
// that records the change (Apply). When that write fails the image is ahead
// of the manifest by exactly that batch. Undoing arbitrary changes would need
// an undo path in every operation; instead the batch is kept and written
// later, in order, so image and manifest agree again without a restart. The
// operation still reports the failure (ENOSPC): its change becomes durable
// only once the manifest recovers, and a crash before that loses it, as a
// crash before any unsynced write would. Meanwhile every mutation is refused
// up front (CheckHealthy), before it touches the image, so at most the
// failing operations' batches wait; reads never need the manifest.
#include <cerrno>
#include <cstring>

#include "namespace/filesystem.h"

namespace ckptfs {

namespace {
// How often a refused mutation may retry the kept batches itself; the
// coordinator's idle loop retries every second besides.
constexpr int64_t kManifestRetryNs = 200'000'000;
}  // namespace

Status FileSystem::Apply(const ManifestBatch& batch, bool sync, bool keep_on_failure) {
  // Nothing to record (a reader's close) is never refused, degraded or not.
  if (batch.empty() && !sync) return Status::Ok();
  if (!manifest_error_.ok()) {
    // Reached by paths that do not refuse up front (release, background
    // work): their change stands in the image, so its batch waits too.
    if (keep_on_failure && !batch.empty()) {
      manifest_pending_.Append(batch);
      manifest_pending_batches_++;
    }
    return CheckHealthy();
  }
  Status st = manifest_->Write(batch, sync);
  if (st.ok()) return Status::Ok();
  if (keep_on_failure && !batch.empty()) {
    manifest_pending_.Append(batch);
    manifest_pending_batches_++;
  }
  NoteManifestFailureLocked(st);
  return Status::Error(st.err(), "the manifest cannot be written: " + st.message());
}

void FileSystem::NoteManifestFailureLocked(const Status& st) {
  if (!manifest_error_.ok()) return;
  manifest_error_ = st;
  manifest_error_since_ns_ = clock_->MonotonicNanos();
  manifest_retry_ns_ = manifest_error_since_ns_;
  events_->Append({{"event", "manifest_error"},
                   {"errno", st.err() == ENOSPC ? "ENOSPC" : "EIO"},
                   {"error", st.message()},
                   {"detail", "the mount is read-only until the manifest can be written again "
                              "(free space on the cache filesystem); it retries by itself"}});
}

bool FileSystem::TryRecoverManifestLocked() {
  if (manifest_error_.ok()) return true;
  if (manifest_diverged_) return false;
  manifest_retry_ns_ = clock_->MonotonicNanos();
  // One synced batch: everything kept becomes durable at once, in order.
  Status st = manifest_->Write(manifest_pending_, /*sync=*/true);
  if (!st.ok()) return false;
  const double after_s = static_cast<double>(manifest_retry_ns_ - manifest_error_since_ns_) / 1e9;
  events_->Append({{"event", "manifest_recovered"},
                   {"after_s", after_s},
                   {"batches", manifest_pending_batches_},
                   {"error", manifest_error_.message()}});
  manifest_error_ = Status::Ok();
  manifest_pending_ = ManifestBatch();
  manifest_pending_batches_ = 0;
  return true;
}

Status FileSystem::CheckHealthy() {
  if (manifest_error_.ok()) return Status::Ok();
  if (clock_->MonotonicNanos() - manifest_retry_ns_ >= kManifestRetryNs && TryRecoverManifestLocked()) {
    return Status::Ok();
  }
  const int err = manifest_error_.err() == ENOSPC ? ENOSPC : EIO;
  if (manifest_diverged_) {
    return Status::Error(err, "the manifest could not be written (" + manifest_error_.message() +
                                  "); remount to recover");
  }
  return Status::Error(err, "read-only until the manifest can be written again (" +
                                manifest_error_.message() + ")");
}

bool FileSystem::RetryManifest() {
  MutexLock lock(&mu_);
  return TryRecoverManifestLocked();
}

FileSystem::ManifestHealth FileSystem::ManifestHealthNow() {
  MutexLock lock(&mu_);
  ManifestHealth h;
  if (manifest_error_.ok()) return h;
  h.ok = false;
  h.error = manifest_error_.message();
  h.err = manifest_error_.err();
  h.pending_batches = manifest_pending_batches_;
  h.since_s = static_cast<double>(clock_->MonotonicNanos() - manifest_error_since_ns_) / 1e9;
  h.needs_restart = manifest_diverged_;
  return h;
}

}  // namespace ckptfs
