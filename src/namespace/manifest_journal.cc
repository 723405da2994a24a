// ManifestJournal (manifest_journal.h): why each failure keeps the mount
// consistent is in the header; docs/manifest.md has the crash cases.
#include "namespace/manifest_journal.h"

#include <cerrno>
#include <cstring>
#include <utility>

namespace ckptfs {

namespace {
// How often a refused mutation may retry the kept batches itself; the
// coordinator's idle loop retries every second besides.
constexpr int64_t kManifestRetryNs = 200'000'000;
}  // namespace

Status ManifestJournal::Apply(const ManifestBatch& batch, bool sync, bool keep_on_failure) {
  // What waits to be written later goes first: every change reaches the
  // store in the order the image took it.
  if (!later_.empty()) (void)WriteLater();
  // Nothing to record (a reader's close) is never refused, degraded or not.
  if (batch.empty() && !sync) return Status::Ok();
  if (!error_.ok()) {
    // Reached by paths that do not refuse up front (release, background
    // work): their change stands in the image, so its batch waits too.
    if (keep_on_failure && !batch.empty()) {
      pending_.Append(batch);
      pending_batches_++;
    }
    return CheckWritable();
  }
  Status st = store_->Write(batch, sync);
  if (st.ok()) return Status::Ok();
  if (keep_on_failure && !batch.empty()) {
    pending_.Append(batch);
    pending_batches_++;
  }
  NoteFailure(st);
  return Status::Error(st.err(), "the manifest cannot be written: " + st.message());
}

void ManifestJournal::ApplyLater(ManifestBatch batch) {
  if (later_.empty()) {
    later_ = std::move(batch);
  } else {
    later_.Append(std::move(batch));
  }
}

Status ManifestJournal::WriteLater() {
  if (later_.empty()) return Status::Ok();
  ManifestBatch batch = std::move(later_);
  later_ = ManifestBatch();
  // Through Apply: a manifest that cannot take it keeps it with the batches
  // kept before, in order, as any change.
  return Apply(batch, /*sync=*/false);
}

void ManifestJournal::NoteFailure(const Status& st) {
  if (!error_.ok()) return;
  error_ = st;
  error_since_ns_ = clock_->MonotonicNanos();
  retry_ns_ = error_since_ns_;
  events_->Append({{"event", "manifest_error"},
                   {"errno", st.err() == ENOSPC ? "ENOSPC" : "EIO"},
                   {"error", st.message()},
                   {"detail", "the mount is read-only until the manifest can be written again "
                              "(free space on the cache filesystem); it retries by itself"}});
}

bool ManifestJournal::TryRecover() {
  if (error_.ok()) return true;
  if (diverged_) return false;
  retry_ns_ = clock_->MonotonicNanos();
  // One synced batch: everything kept becomes durable at once, in order.
  Status st = store_->Write(pending_, /*sync=*/true);
  if (!st.ok()) return false;
  const double after_s = static_cast<double>(retry_ns_ - error_since_ns_) / 1e9;
  events_->Append({{"event", "manifest_recovered"},
                   {"after_s", after_s},
                   {"batches", pending_batches_},
                   {"error", error_.message()}});
  error_ = Status::Ok();
  pending_ = ManifestBatch();
  pending_batches_ = 0;
  return true;
}

Status ManifestJournal::CheckWritable() {
  if (error_.ok()) return Status::Ok();
  if (clock_->MonotonicNanos() - retry_ns_ >= kManifestRetryNs && TryRecover()) {
    return Status::Ok();
  }
  const int err = error_.err() == ENOSPC ? ENOSPC : EIO;
  if (diverged_) {
    return Status::Error(err, "the manifest could not be written (" + error_.message() +
                                  "); remount to recover");
  }
  return Status::Error(err, "read-only until the manifest can be written again (" +
                                error_.message() + ")");
}

ManifestHealth ManifestJournal::Health() const {
  ManifestHealth h;
  if (error_.ok()) return h;
  h.ok = false;
  h.error = error_.message();
  h.err = error_.err();
  h.pending_batches = pending_batches_;
  h.since_s = static_cast<double>(clock_->MonotonicNanos() - error_since_ns_) / 1e9;
  h.needs_restart = diverged_;
  return h;
}

}  // namespace ckptfs
