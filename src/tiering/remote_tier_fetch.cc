// Read-through for files whose data is only in the remote: a read fetches
// the chunks it needs with ranged GETs (in parallel when it spans several)
// and, for a sequential reader, queues the next chunks for the read-ahead
// threads. Fetched chunks are written into the sparse backing file and
// recorded in a presence map; once every chunk is there the file is synced
// and marked resident, and reads no longer come here.
//
// Nothing fetched is trusted before it is verified (docs/architecture.md,
// "Verified reads"): a chunk whose bytes do not match the CRC32C the commit
// object recorded is not marked present, is fetched once more (the damage
// may have been in transit), and then the read gets EIO and a
// checksum_mismatch event names the object and the range. Objects recorded
// before chunk CRC32Cs existed are fetched whole on the first read and
// checked against the file's CRC32C before any byte is served.
//
// The presence map lives in memory only: after a restart a partly fetched
// file is fetched again. That is deliberate: recording presence durably
// would need an fsync of the data before every record.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <string_view>

#include "common/crc32c.h"
#include "tiering/remote_tier.h"

namespace ckptfs {

namespace {

std::string Hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08" PRIx32, v);
  return buf;
}

// The CRC32Cs of bytes [offset, offset + len) of the backing file, read
// back: for a range whose body did not arrive as one in-order stream.
Status ChecksumFromFile(BackingFile* file, uint64_t offset, uint64_t len, ChunkCrc32c* sums) {
  sums->Reset();
  std::string buf(static_cast<size_t>(std::min<uint64_t>(len, 1 << 20)), '\0');
  while (sums->bytes() < len) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), len - sums->bytes()));
    auto got = file->PRead(buf.data(), want, offset + sums->bytes());
    if (!got.ok()) return got.status().Annotate("reading fetched data back to verify it");
    if (*got == 0) return Status::Error(EIO, "fetched data is missing from the cache file");
    sums->Add(buf.data(), *got);
  }
  return Status::Ok();
}

}  // namespace

void RemoteTier::EnsurePresence(uint64_t ino, const std::string& key, uint64_t size) {
  {
    MutexLock lock(&fetch_mu_);
    if (presence_.count(ino)) return;
  }
  // The namespace is asked without fetch_mu_ (lock order); a racing reader may
  // make the entry meanwhile, and then its entry stands.
  std::optional<ObjectRecord> rec;
  if (options_.verify_reads) rec = ns_->ObjectRecordFor(ino, key);
  Presence p;
  p.unit = options_.fetch_chunk;
  if (rec && !rec->chunk_crcs.empty() && rec->chunk_size > 0) {
    p.verify = Verify::kChunks;
    // Whole recorded chunks per GET: the fetch unit rounded to a multiple.
    p.unit = std::max<uint64_t>(1, options_.fetch_chunk / rec->chunk_size) * rec->chunk_size;
  } else if (rec && rec->crc_known) {
    p.verify = Verify::kWholeFile;
  }
  if (rec) p.object = std::make_shared<const ObjectRecord>(std::move(*rec));
  const uint64_t chunks = ChunkCount(size, p.unit);
  p.chunks.assign(chunks, kAbsent);
  if (p.verify == Verify::kWholeFile) p.got_crcs.assign(chunks, 0);
  MutexLock lock(&fetch_mu_);
  presence_.emplace(ino, std::move(p));
}

Status RemoteTier::ReportMismatch(uint64_t ino, const std::string& key, uint64_t offset, uint64_t len,
                                  uint32_t expected, uint32_t got) {
  checksum_failures_++;
  bool first = true;
  {
    MutexLock lock(&fetch_mu_);
    if (auto it = presence_.find(ino); it != presence_.end()) {
      first = it->second.mismatch_events.insert(offset).second;
    }
  }
  const std::string range = std::to_string(offset) + "-" + std::to_string(offset + len);
  if (first) {
    events_->Append({{"event", "checksum_mismatch"},
                     {"key", key},
                     {"offset", offset},
                     {"length", len},
                     {"expected", Hex32(expected)},
                     {"got", Hex32(got)},
                     {"error", "bytes " + range + " of remote object " + key +
                                   " do not match the CRC32C recorded at upload, twice: not served"}});
  }
  return Status::Error(EIO, "remote object " + key + " is corrupt (bytes " + range + ": CRC32C " + Hex32(got) +
                                ", recorded " + Hex32(expected) + ")");
}

Status RemoteTier::FetchChunk(uint64_t ino, const std::string& key, uint64_t size, BackingFile* file,
                              uint64_t chunk) {
  uint64_t unit = 0;
  Verify verify = Verify::kNone;
  std::shared_ptr<const ObjectRecord> object;
  {
    MutexLock lock(&fetch_mu_);
    auto it = presence_.find(ino);
    if (it == presence_.end()) return Status::Error(EIO, "cached data of " + key + " was dropped during the read");
    unit = it->second.unit;
    verify = it->second.verify;
    object = it->second.object;
  }
  const uint64_t offset = chunk * unit;
  const uint64_t len = std::min(unit, size - offset);
  // Checksummed at the recorded granularity (kChunks) or as one range.
  const uint64_t sum_chunk = verify == Verify::kChunks ? object->chunk_size : std::max<uint64_t>(len, 1);
  ChunkCrc32c sums(sum_chunk);
  Status st;
  bool corrupt = false;  // st is ReportMismatch's: reported already
  bool in_order = true;  // every piece extended the checksummed prefix
  // Two tries when the bytes are wrong: the damage may have been in transit.
  for (int attempt = 0;; attempt++) {
    sums.Reset();
    in_order = true;
    // The body goes into the backing file piece by piece as it arrives
    // (64 KiB from S3): no buffer of the whole chunk is allocated, grown and
    // copied, and the pwrites stay small (see S3ObjectStore::kSinkPiece). In
    // bench/object_store's cold read this took the daemon from ~3.5 to ~1.3
    // CPU seconds per GiB. The CRC32C is taken of the same pieces, in order;
    // a request the client retries streams the range again from its start.
    // No reader sees the bytes before the chunk is verified and present.
    auto got = store_->ReadRange(key, offset, len, [&](uint64_t at, std::string_view piece) -> Status {
      auto wrote = file->PWrite(piece.data(), piece.size(), offset + at);
      if (!wrote.ok()) return wrote.status().Annotate("writing fetched data to the cache");
      if (verify != Verify::kNone) {
        if (at == 0) sums.Reset();
        if (at == sums.bytes()) {
          sums.Add(piece.data(), piece.size());
        } else {
          in_order = false;
        }
      }
      return Status::Ok();
    });
    st = got.status();
    if (st.ok() && *got != len) {
      st = Status::Error(EIO, "remote object " + key + " is shorter than its file (" +
                                  std::to_string(offset + *got) + " of " + std::to_string(size) + " bytes)");
    }
    NoteRemoteResult(st, "fetching");
    if (!st.ok() || verify != Verify::kChunks) break;
    if (!in_order || sums.bytes() != len) st = ChecksumFromFile(file, offset, len, &sums);
    if (!st.ok()) break;
    const std::vector<uint32_t> got_crcs = sums.Chunks();
    const uint64_t first = offset / object->chunk_size;
    size_t bad = got_crcs.size();
    for (size_t i = 0; i < got_crcs.size(); i++) {
      if (first + i >= object->chunk_crcs.size() || got_crcs[i] != object->chunk_crcs[first + i]) {
        bad = i;
        break;
      }
    }
    if (bad == got_crcs.size()) break;
    checksum_mismatches_++;
    if (attempt == 0) continue;
    const uint64_t bad_offset = (first + bad) * object->chunk_size;
    const uint32_t expected = first + bad < object->chunk_crcs.size() ? object->chunk_crcs[first + bad] : 0;
    st = ReportMismatch(ino, key, bad_offset, std::min(object->chunk_size, size - bad_offset), expected,
                        got_crcs[bad]);
    corrupt = true;
    break;
  }
  if (st.ok() && verify == Verify::kWholeFile && (!in_order || sums.bytes() != len)) {
    st = ChecksumFromFile(file, offset, len, &sums);
  }
  {
    MutexLock lock(&fetch_mu_);
    auto it = presence_.find(ino);
    // Forgotten meanwhile (evicted or deleted): what was written is moot.
    if (it != presence_.end() && chunk < it->second.chunks.size() &&
        it->second.chunks[chunk] == kFetching) {
      if (st.ok()) {
        it->second.chunks[chunk] = kPresent;
        if (verify == Verify::kWholeFile) it->second.got_crcs[chunk] = sums.Whole();
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
    if (corrupt) return st;
    events_->Append({{"event", "error"}, {"path", key}, {"error", "read from the remote failed: " + st.ToString()}});
    return Status::Error(EIO, "reading " + key + " from the remote failed: " + st.message());
  }
  return Status::Ok();
}

Status RemoteTier::VerifyWholeFile(uint64_t ino, const std::string& key, uint32_t* got_crc,
                                   uint32_t* expected_crc) {
  uint32_t got = 0;
  uint64_t size = 0;
  {
    MutexLock lock(&fetch_mu_);
    auto it = presence_.find(ino);
    if (it == presence_.end()) return Status::Error(EIO, "cached data of " + key + " was dropped during the read");
    Presence& p = it->second;
    if (p.verify != Verify::kWholeFile || p.verified) return Status::Ok();
    for (uint8_t c : p.chunks) {
      if (c != kPresent) return Status::Error(EAGAIN, "not every chunk is present");
    }
    size = p.object->size;
    for (size_t c = 0; c < p.got_crcs.size(); c++) {
      got = Crc32cCombine(got, p.got_crcs[c], std::min(p.unit, size - c * p.unit));
    }
    *got_crc = got;
    *expected_crc = p.object->crc32c;
    if (got == *expected_crc) {
      p.verified = true;
      return Status::Ok();
    }
    // Dropped, so the next try fetches every byte again.
    p.chunks.assign(p.chunks.size(), kAbsent);
    cache_used_ -= std::min<uint64_t>(cache_used_.load(), p.present_bytes);
    p.present_bytes = 0;
  }
  checksum_mismatches_++;
  return Status::Error(EILSEQ, "the whole file does not match its CRC32C");
}

void RemoteTier::MaybeMarkResident(uint64_t ino) {
  MutexLock lock(&fetch_mu_);
  auto it = presence_.find(ino);
  if (it == presence_.end() || it->second.complete_reported || it->second.complete_queued) return;
  for (uint8_t c : it->second.chunks) {
    if (c != kPresent) return;
  }
  if (it->second.verify == Verify::kWholeFile && !it->second.verified) return;
  // The fsync that makes it resident runs on the control thread: a reader
  // must not wait for the disk to flush what it just fetched.
  it->second.complete_queued = true;
  complete_.push_back(ino);
}

void RemoteTier::MarkFetchedFilesResident() {
  std::vector<uint64_t> inos;
  {
    MutexLock lock(&fetch_mu_);
    inos.swap(complete_);
  }
  for (uint64_t ino : inos) {
    auto file = data_->Open(ino, /*create=*/false);
    Status st = file.ok() ? ns_->MarkResident(ino, file->get()) : file.status();
    MutexLock lock(&fetch_mu_);
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
  EnsurePresence(ino, key, size);
  for (int attempt = 0;; attempt++) {
    std::vector<uint64_t> mine;
    size_t queued = 0;
    bool all_present = true;
    bool whole_file = false;
    uint64_t first = 0;
    uint64_t last = 0;
    {
      MutexLock lock(&fetch_mu_);
      auto found = presence_.find(ino);
      if (found == presence_.end()) return Status::Error(EIO, "cached data of " + key + " was dropped during the read");
      Presence& p = found->second;
      const uint64_t chunk = p.unit;
      const uint64_t chunks = p.chunks.size();
      first = offset / chunk;
      last = std::min(chunks - 1, (offset + n - 1) / chunk);
      // Only the whole file can be verified: it is fetched (in parallel)
      // and checked before the first byte is served.
      whole_file = p.verify == Verify::kWholeFile && !p.verified;
      if (whole_file) {
        first = 0;
        last = chunks - 1;
      }
      for (uint64_t c = first; c <= last; c++) {
        if (p.chunks[c] == kAbsent) {
          p.chunks[c] = kFetching;
          mine.push_back(c);
        }
        all_present &= p.chunks[c] == kPresent;
      }
      all_present &= !whole_file;
      if (attempt == 0 && !whole_file) {
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
      // At most fetch_threads at once: a whole file (kWholeFile) may be
      // thousands of chunks.
      std::vector<Status> results(mine.size());
      std::atomic<size_t> next{0};
      std::vector<std::thread> threads;
      const size_t workers = std::min<size_t>(mine.size(), static_cast<size_t>(std::max(1, options_.fetch_threads)));
      for (size_t w = 0; w < workers; w++) {
        threads.emplace_back([&] {
          for (size_t i; (i = next++) < mine.size();) results[i] = FetchChunk(ino, key, size, file, mine[i]);
        });
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
      MutexLock lock(&fetch_mu_);
      auto settled = [&]() REQUIRES(fetch_mu_) {
        auto it = presence_.find(ino);
        if (it == presence_.end()) return true;
        for (uint64_t c = first; c <= last; c++) {
          if (it->second.chunks[c] == kFetching) return false;
        }
        return true;
      };
      while (!settled()) lock.Wait(chunk_cv_);
      auto it = presence_.find(ino);
      if (it == presence_.end()) return Status::Error(EIO, "cached data of " + key + " was dropped during the read");
      for (uint64_t c = first; c <= last; c++) retry |= it->second.chunks[c] != kPresent;
    }
    if (!retry && whole_file) {
      uint32_t got = 0;
      uint32_t expected = 0;
      Status verified = VerifyWholeFile(ino, key, &got, &expected);
      if (verified.err() == EAGAIN) {
        retry = true;  // another reader's fetch of a chunk failed meanwhile
      } else if (verified.err() == EILSEQ) {
        if (attempt >= 1) return ReportMismatch(ino, key, 0, size, expected, got);
        continue;  // fetched whole once more
      } else if (!verified.ok()) {
        return verified;
      }
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
      MutexLock lock(&fetch_mu_);
      while (!fetch_stopping_ && readahead_.empty()) lock.Wait(fetch_cv_);
      if (fetch_stopping_) return;
      job = std::move(readahead_.front());
      readahead_.pop_front();
    }
    auto file = data_->Open(job.ino, /*create=*/true);
    if (!file.ok()) {
      MutexLock lock(&fetch_mu_);
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
    MutexLock lock(&fetch_mu_);
    auto it = presence_.find(ino);
    if (it == presence_.end()) return;
    const uint64_t bytes = it->second.complete_reported ? 0 : it->second.present_bytes;
    cache_used_ -= std::min<uint64_t>(cache_used_.load(), bytes);
    presence_.erase(it);
  }
  chunk_cv_.notify_all();
}

bool RemoteTier::ReleaseForUnload(uint64_t ino, bool* drop_data) {
  *drop_data = false;
  {
    MutexLock lock(&fetch_mu_);
    auto it = presence_.find(ino);
    if (it == presence_.end()) return true;
    // Complete but not yet marked resident: forgetting it now would leave
    // the control thread marking resident a file whose data was dropped.
    if (it->second.complete_queued) return false;
    if (!it->second.complete_reported) {
      // Part of the file: its bytes count as fetched until now, and the
      // chunks map that says which are valid goes, so the data goes too.
      cache_used_ -= std::min<uint64_t>(cache_used_.load(), it->second.present_bytes);
      *drop_data = true;
    }
    presence_.erase(it);
  }
  chunk_cv_.notify_all();
  return true;
}

}  // namespace ckptfs
