// RemoteTier's upload workers: each takes a queued file, claims its key,
// uploads it (one PUT, or multipart with parts in flight in parallel), and
// tells the namespace what the object now holds. A failure leaves the file
// queued; it is tried again after a growing delay.
#include <algorithm>
#include <cstdio>
#include <deque>

#include "common/crc32c_chunks.h"
#include "tiering/remote_tier.h"

namespace ckptfs {

bool RemoteTier::TakeUpload(TierPort::UploadJob* job, const std::set<uint64_t>& also_skip) {
  std::set<uint64_t> skip = also_skip;
  {
    MutexLock lock(&mu_);
    const int64_t now = clock_->MonotonicNanos();
    skip.insert(uploading_.begin(), uploading_.end());
    for (const auto& [ino, when] : retry_after_) {
      if (when > now) skip.insert(ino);
    }
  }
  for (TierPort::UploadJob& candidate : ns_->NextUploads(options_.upload_files + 1, skip)) {
    MutexLock lock(&mu_);
    if (uploading_.count(candidate.ino)) continue;  // another worker took it meanwhile
    uploading_.insert(candidate.ino);
    bytes_in_flight_ += candidate.size;
    *job = std::move(candidate);
    return true;
  }
  return false;
}

void RemoteTier::UploadLoop() {
  for (;;) {
    {
      MutexLock lock(&mu_);
      // Wake on new work, and now and then for retries that came due.
      lock.WaitFor(*clock_, work_cv_, 500'000'000, [&] {
        mu_.AssertHeld();  // WaitFor calls it with the lock held
        return stopping_ || uploads_pending_;
      });
      if (stopping_) return;
      uploads_pending_ = false;
    }
    TierPort::UploadJob job;
    for (;;) {
      if (size_t allowed = UploadsAllowedNow(); allowed < static_cast<size_t>(options_.upload_files)) {
        MutexLock lock(&mu_);
        if (stopping_) return;
        if (uploading_.size() >= allowed) {
          lock.WaitFor(*clock_, work_cv_, 50'000'000, [&] {
            mu_.AssertHeld();  // WaitFor calls it with the lock held
            return stopping_;
          });
          continue;
        }
      }
      if (!TakeUpload(&job)) break;
      Status st = Upload(job);
      UploadFinished(job.ino, st, job.size);
      MutexLock lock(&mu_);
      if (stopping_) return;
    }
  }
}

size_t RemoteTier::UploadsAllowedNow() {
  // The trainer's save comes first (SPEC section 4: saves at local-disk
  // speed): while files in steps are being written, and for a short quiet
  // period after the last one closed (a trainer between two files is still
  // saving), no new upload starts; nor while a step is being committed (asked
  // to commit and not committed yet, or in cluster mode a step this node
  // published a part of), for up to commit_hold from when that began. A save
  // that goes on for longer than save_grace gets one upload stream, so
  // uploads are never starved.
  const int64_t now = clock_->MonotonicNanos();
  const int64_t committing = ns_->CommitPendingSinceNs();
  const bool saving = ns_->OpenWriters() > 0 || now - ns_->LastSaveActivityNs() < options_.save_quiet_ns ||
                      (committing != 0 && now - committing < options_.commit_hold_ns);
  MutexLock lock(&mu_);
  if (!saving) {
    saving_since_ = 0;
    return static_cast<size_t>(options_.upload_files);
  }
  if (saving_since_ == 0) saving_since_ = now;
  return now - saving_since_ < options_.save_grace_ns ? 0 : 1;
}

void RemoteTier::UploadFinished(uint64_t ino, const Status& st, uint64_t bytes) {
  {
    MutexLock lock(&mu_);
    uploading_.erase(ino);
    bytes_in_flight_ -= std::min(bytes_in_flight_, bytes);
    if (st.ok()) {
      retry_after_.erase(ino);
      retry_delay_.erase(ino);
      bytes_uploaded_ += bytes;
      files_uploaded_++;
      upload_rate_.Record(clock_->MonotonicNanos(), bytes_uploaded_);
    } else {
      upload_failures_++;
      int64_t& delay = retry_delay_[ino];
      delay = delay == 0 ? options_.retry_min_ns : std::min(delay * 2, options_.retry_max_ns);
      retry_after_[ino] = clock_->MonotonicNanos() + delay;
    }
    // Finished uploads may complete a step: the control thread writes its
    // commit object now.
    uploads_pending_ = true;
    if (st.ok()) persist_due_ = true;
  }
  work_cv_.notify_all();
  NoteRemoteResult(st, "uploading");
}

Status RemoteTier::ReadForUpload(const TierPort::UploadJob& job, BackingFile* file, uint64_t offset,
                                 size_t n, std::string* out) {
  if (!job.resident) {
    // A moved step whose data was evicted: fetch it from its old object.
    CKPTFS_RETURN_IF_ERROR(EnsureLocal(job.ino, job.source_key, job.size, file, offset, n));
  }
  out->resize(n);
  size_t done = 0;
  while (done < n) {
    auto got = file->PRead(out->data() + done, n - done, offset + done);
    if (!got.ok()) return got.status().Annotate("reading " + job.key + " for upload");
    if (*got == 0) {
      // Shorter than recorded: it changed under us; NoteUploaded will see
      // the new version and queue it again.
      return Status::Error(EAGAIN, job.key + " changed while it was uploaded");
    }
    done += *got;
  }
  return Status::Ok();
}

Status RemoteTier::Upload(const TierPort::UploadJob& job) {
  if (!job.stale_upload_id.empty()) {
    // A multipart upload an earlier run began: abort it so it does not
    // linger (S3 keeps unfinished parts, and bills them, until aborted).
    (void)store_->AbortMultipart(job.stale_upload_key, job.stale_upload_id);
  }
  // An empty file may have no backing file at all (never written).
  auto file = data_->Open(job.ino, /*create=*/!job.resident || job.size == 0);
  if (!file.ok()) return file.status().Annotate("opening " + job.key + " for upload");
  {
    // Wait out a deletion of the same key in flight, then claim the key so
    // that no deletion of it starts while the upload runs.
    MutexLock keys(&key_mu_);
    while (deleting_keys_.count(job.key)) keys.Wait(key_cv_);
    ns_->ClaimKey(job.key);
  }
  // The whole-file CRC32C and the per-chunk ones the commit object records
  // come from the same pass over the bytes sent.
  ChunkCrc32c sums(options_.checksum_chunk);
  Status st;
  if (job.size <= PartSizeFor(job.size, std::max(options_.min_part_size, store_->min_part_size()))) {
    std::string data;
    st = ReadForUpload(job, file->get(), 0, job.size, &data);
    if (st.ok()) {
      // The CRC32Cs of the very buffer that is sent: the store checksums the
      // same bytes on their way (upload_checksums.h), so what the commit
      // object records is what the remote holds.
      sums.Add(data.data(), data.size());
      st = CheckReadForUpload(job, sums.Whole());
    }
    if (st.ok()) st = store_->Put(job.key, data);
  } else {
    st = UploadMultipart(job, file->get(), &sums);
  }
  if (!st.ok()) {
    ns_->ReleaseKey(job.key);
    return st;
  }
  return ns_->NoteUploaded(job, sums.Whole(), options_.checksum_chunk, sums.Chunks());
}

Status RemoteTier::CheckReadForUpload(const TierPort::UploadJob& job, uint32_t crc) {
  if (!job.expected_crc32c || *job.expected_crc32c == crc) return Status::Ok();
  char msg[200];
  std::snprintf(msg, sizeof msg,
                "not uploaded: the %s copy has CRC32C %08x, %08x was recorded for this version",
                job.resident ? "local" : "fetched", crc, *job.expected_crc32c);
  events_->Append({{"event", "error"}, {"kind", "checksum_mismatch"}, {"path", job.key}, {"error", msg}});
  return Status::Error(EIO, job.key + ": " + msg);
}

Status RemoteTier::UploadMultipart(const TierPort::UploadJob& job, BackingFile* file, ChunkCrc32c* sums) {
  const uint64_t part_size = PartSizeFor(job.size, std::max(options_.min_part_size, store_->min_part_size()));
  const int parts = static_cast<int>((job.size + part_size - 1) / part_size);
  // Parts in flight: parts_per_file, fewer for huge parts (a 5 TiB file has
  // 525 MiB parts), so one file's upload holds about 64 MiB at most.
  constexpr uint64_t kInFlightBytes = 64ULL << 20;
  const int window = static_cast<int>(std::clamp<uint64_t>(kInFlightBytes / part_size, 1,
                                                           static_cast<uint64_t>(options_.parts_per_file)));
  auto upload_id = store_->BeginMultipart(job.key);
  if (!upload_id.ok()) return upload_id.status();
  (void)ns_->NoteMultipartStarted(job, *upload_id);

  // This thread reads the parts in order (the CRC needs them in order) and
  // hands them to up to parts_per_file senders.
  Mutex mu;  // guards the locals below (unchecked: GUARDED_BY takes members only)
  std::condition_variable cv;
  std::deque<std::pair<int, std::string>> ready;
  std::vector<std::string> etags(parts);
  Status failed;
  bool reading_done = false;
  int in_flight = 0;
  auto sender = [&] {
    for (;;) {
      std::pair<int, std::string> part;
      {
        MutexLock lock(&mu);
        while (ready.empty() && !reading_done && failed.ok()) lock.Wait(cv);
        if (!failed.ok() || ready.empty()) return;
        part = std::move(ready.front());
        ready.pop_front();
      }
      auto etag = store_->UploadPart(job.key, *upload_id, part.first, part.second);
      MutexLock lock(&mu);
      in_flight--;
      if (etag.ok()) {
        etags[part.first - 1] = std::move(etag).value();
      } else if (failed.ok()) {
        failed = etag.status();
      }
      cv.notify_all();
    }
  };
  std::vector<std::thread> senders;
  for (int i = 0; i < std::min(window, parts); i++) senders.emplace_back(sender);
  for (int p = 1; p <= parts; p++) {
    const uint64_t offset = static_cast<uint64_t>(p - 1) * part_size;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(part_size, job.size - offset));
    {
      // Bounded memory: at most `window` parts read ahead of the senders.
      MutexLock lock(&mu);
      while (in_flight >= window && failed.ok()) lock.Wait(cv);
      if (!failed.ok()) break;
    }
    std::string data;
    Status st = ReadForUpload(job, file, offset, n, &data);
    if (!st.ok()) {
      MutexLock lock(&mu);
      if (failed.ok()) failed = st;
      break;
    }
    sums->Add(data.data(), data.size());
    MutexLock lock(&mu);
    in_flight++;
    ready.emplace_back(p, std::move(data));
    cv.notify_all();
  }
  {
    MutexLock lock(&mu);
    reading_done = true;
  }
  cv.notify_all();
  for (auto& t : senders) t.join();
  // The parts' CRC32Cs in order make the file's: checked before Complete,
  // so an object of damaged local bytes never becomes visible.
  if (failed.ok()) failed = CheckReadForUpload(job, sums->Whole());
  if (failed.ok()) failed = store_->CompleteMultipart(job.key, *upload_id, etags);
  if (!failed.ok()) {
    (void)store_->AbortMultipart(job.key, *upload_id);
    return failed;
  }
  return Status::Ok();
}

}  // namespace ckptfs
