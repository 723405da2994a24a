// Read-through for files whose data is only in the remote: a read fetches
// the chunks it needs with ranged GETs (in parallel when it spans several)
// and, for a sequential reader, queues the next chunks for the read-ahead
// threads. Fetched chunks are written into the sparse backing file and
// recorded in a presence map; once every chunk is there the file is synced
// and marked resident, and reads no longer come here.
//
// The presence map lives in memory only: after a restart a partly fetched
// file is fetched again. That is deliberate: recording presence durably
// would need an fsync of the data before every record.
#include <algorithm>
#include <string_view>

#include "tiering/remote_tier.h"

namespace ckptfs {

Status RemoteTier::FetchChunk(uint64_t ino, const std::string& key, uint64_t size, BackingFile* file,
                              uint64_t chunk) {
  const uint64_t offset = chunk * options_.fetch_chunk;
  const uint64_t len = std::min(options_.fetch_chunk, size - offset);
  // The body goes into the backing file piece by piece as it arrives
  // (64 KiB from S3): no buffer of the whole chunk is allocated, grown and
  // copied, and the pwrites stay small (see S3ObjectStore::kSinkPiece). In
  // bench/object_store's cold read this took the daemon from ~3.5 to ~1.3
  // CPU seconds per GiB. A retried request writes the same bytes again at
  // the same offsets; no reader sees them before the chunk is present.
  auto got = store_->ReadRange(key, offset, len, [&](uint64_t at, std::string_view piece) -> Status {
    auto wrote = file->PWrite(piece.data(), piece.size(), offset + at);
    if (!wrote.ok()) return wrote.status().Annotate("writing fetched data to the cache");
    return Status::Ok();
  });
  Status st = got.status();
  if (st.ok() && *got != len) {
    st = Status::Error(EIO, "remote object " + key + " is shorter than its file (" +
                                std::to_string(offset + *got) + " of " + std::to_string(size) +
                                " bytes)");
  }
  NoteRemoteResult(st, "fetching");
  {
    std::lock_guard<std::mutex> lock(fetch_mu_);
    auto it = presence_.find(ino);
    // Forgotten meanwhile (evicted or deleted): what was written is moot.
    if (it != presence_.end() && chunk < it->second.chunks.size() &&
        it->second.chunks[chunk] == kFetching) {
      if (st.ok()) {
        it->second.chunks[chunk] = kPresent;
        it->second.present_bytes += len;
        cache_used_ += len;
        bytes_fetched_ += len;
      } else {
        it->second.chunks[chunk] = kAbsent;
      }
    }
  }
  chunk_cv_.notify_all();
  if (!st.ok()) {
    events_->Append({{"event", "error"}, {"path", key}, {"error", "read from the remote failed: " + st.ToString()}});
    return Status::Error(EIO, "reading " + key + " from the remote failed: " + st.message());
  }
  return Status::Ok();
}

void RemoteTier::MaybeMarkResident(uint64_t ino) {
  std::lock_guard<std::mutex> lock(fetch_mu_);
  auto it = presence_.find(ino);
  if (it == presence_.end() || it->second.complete_reported || it->second.complete_queued) return;
  for (uint8_t c : it->second.chunks) {
    if (c != kPresent) return;
  }
  // The fsync that makes it resident runs on the control thread: a reader
  // must not wait for the disk to flush what it just fetched.
  it->second.complete_queued = true;
  complete_.push_back(ino);
}

void RemoteTier::MarkFetchedFilesResident() {
  std::vector<uint64_t> inos;
  {
    std::lock_guard<std::mutex> lock(fetch_mu_);
    inos.swap(complete_);
  }
  for (uint64_t ino : inos) {
    auto file = fs_->data()->Open(ino, /*create=*/false);
    Status st = file.ok() ? fs_->MarkResident(ino, file->get()) : file.status();
    std::lock_guard<std::mutex> lock(fetch_mu_);
    auto it = presence_.find(ino);
    if (it == presence_.end()) continue;  // evicted or deleted meanwhile
    it->second.complete_queued = false;
    // Once resident, the file's bytes count as resident bytes, not fetched.
    if (st.ok()) it->second.complete_reported = true;
  }
}

Status RemoteTier::EnsureLocal(uint64_t ino, const std::string& key, uint64_t size, BackingFile* file,
                               uint64_t offset, size_t n) {
  if (n == 0 || offset >= size) return Status::Ok();
  const uint64_t chunk = options_.fetch_chunk;
  const uint64_t chunks = (size + chunk - 1) / chunk;
  const uint64_t first = offset / chunk;
  const uint64_t last = std::min(chunks - 1, (offset + n - 1) / chunk);
  for (int attempt = 0;; attempt++) {
    std::vector<uint64_t> mine;
    size_t queued = 0;
    bool all_present = true;
    {
      std::lock_guard<std::mutex> lock(fetch_mu_);
      Presence& p = presence_[ino];
      if (p.chunks.size() != chunks) p.chunks.assign(chunks, kAbsent);
      for (uint64_t c = first; c <= last; c++) {
        if (p.chunks[c] == kAbsent) {
          p.chunks[c] = kFetching;
          mine.push_back(c);
        }
        all_present &= p.chunks[c] == kPresent;
      }
      if (attempt == 0) {
        // Sequential readers get the next chunks fetched ahead of them.
        // The kernel's own read-ahead sends reads slightly out of order, so
        // "sequential" means: in the chunk last read or the next one.
        const bool sequential = offset == 0 || (first >= p.last_chunk && first <= p.last_chunk + 1);
        p.last_chunk = last;
        if (sequential && started_) {
          for (uint64_t c = last + 1; c < chunks && c <= last + options_.readahead_chunks; c++) {
            if (p.chunks[c] != kAbsent) continue;
            p.chunks[c] = kFetching;
            readahead_.push_back(ReadAhead{ino, key, size, c});
            queued++;
          }
        }
      }
    }
    // One idle fetcher per job: waking all of them for one job costs more
    // than the job's own scheduling.
    if (queued == 1) {
      fetch_cv_.notify_one();
    } else if (queued > 1) {
      fetch_cv_.notify_all();
    }
    if (all_present) return Status::Ok();
    // Our chunks: one on this thread, more in parallel.
    Status st;
    if (mine.size() == 1) {
      st = FetchChunk(ino, key, size, file, mine[0]);
    } else if (!mine.empty()) {
      std::vector<Status> results(mine.size());
      std::vector<std::thread> threads;
      for (size_t i = 0; i < mine.size(); i++) {
        threads.emplace_back([&, i] { results[i] = FetchChunk(ino, key, size, file, mine[i]); });
      }
      for (auto& t : threads) t.join();
      for (const Status& r : results) {
        if (!r.ok() && st.ok()) st = r;
      }
    }
    if (!st.ok()) return st;
    // Chunks other threads are fetching: wait for them; one that failed
    // there is ours to try (once more).
    bool retry = false;
    {
      std::unique_lock<std::mutex> lock(fetch_mu_);
      chunk_cv_.wait(lock, [&] {
        auto it = presence_.find(ino);
        if (it == presence_.end()) return true;
        for (uint64_t c = first; c <= last; c++) {
          if (it->second.chunks[c] == kFetching) return false;
        }
        return true;
      });
      auto it = presence_.find(ino);
      if (it == presence_.end()) return Status::Error(EIO, "cached data of " + key + " was dropped during the read");
      for (uint64_t c = first; c <= last; c++) retry |= it->second.chunks[c] != kPresent;
    }
    if (!retry) break;
    if (attempt >= 1) return Status::Error(EIO, "reading " + key + " from the remote failed");
  }
  MaybeMarkResident(ino);
  return Status::Ok();
}

void RemoteTier::FetchLoop() {
  for (;;) {
    ReadAhead job;
    {
      std::unique_lock<std::mutex> lock(fetch_mu_);
      fetch_cv_.wait(lock, [&] { return fetch_stopping_ || !readahead_.empty(); });
      if (fetch_stopping_) return;
      job = std::move(readahead_.front());
      readahead_.pop_front();
    }
    auto file = fs_->data()->Open(job.ino, /*create=*/true);
    if (!file.ok()) {
      std::lock_guard<std::mutex> lock(fetch_mu_);
      auto it = presence_.find(job.ino);
      if (it != presence_.end() && it->second.chunks[job.chunk] == kFetching) {
        it->second.chunks[job.chunk] = kAbsent;
      }
      chunk_cv_.notify_all();
      continue;
    }
    if (FetchChunk(job.ino, job.key, job.size, file->get(), job.chunk).ok()) MaybeMarkResident(job.ino);
  }
}

void RemoteTier::Forget(uint64_t ino) {
  {
    std::lock_guard<std::mutex> lock(fetch_mu_);
    auto it = presence_.find(ino);
    if (it == presence_.end()) return;
    const uint64_t bytes = it->second.complete_reported ? 0 : it->second.present_bytes;
    cache_used_ -= std::min<uint64_t>(cache_used_.load(), bytes);
    presence_.erase(it);
  }
  chunk_cv_.notify_all();
}

}  // namespace ckptfs
