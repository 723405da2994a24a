#include "writer/stream_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/crc32c.h"

namespace ckptfs::writer {

namespace {

constexpr size_t kAlign = 4096;
constexpr size_t kMaxIoThreads = 4;

size_t RoundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

bool SetDirect(int fd, bool on) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return false;
  const int want = on ? (flags | O_DIRECT) : (flags & ~O_DIRECT);
  return want == flags || fcntl(fd, F_SETFL, want) == 0;
}

}  // namespace

Result<std::unique_ptr<StreamWriter>> StreamWriter::Create(int fd, const PipelineOptions& options) {
  PipelineOptions o = options;
  if (o.buffer_bytes == 0 || o.buffer_bytes > (1ULL << 31)) {
    return Status::Error(EINVAL, "staging buffer size must be between 1 byte and 2 GiB");
  }
  if (o.buffer_count < 2 || o.buffer_count > 64) {
    return Status::Error(EINVAL, "staging buffer count must be between 2 and 64");
  }
  o.buffer_bytes = RoundUp(o.buffer_bytes, kAlign);
  std::unique_ptr<StreamWriter> w(new StreamWriter(fd, o));
  for (unsigned i = 0; i < o.buffer_count; i++) {
    bool pinned = false;
    auto p = AllocStaging(o.buffer_bytes, &pinned);
    if (!p.ok()) return p.status();
    w->buffers_.push_back(Buffer{static_cast<char*>(*p)});
    w->pinned_.push_back(pinned);
    w->free_.push_back(i);
  }
  w->direct_ = o.direct && SetDirect(fd, true);
  const size_t threads = std::min<size_t>(kMaxIoThreads, o.buffer_count - 1);
  for (size_t i = 0; i < threads; i++) w->io_threads_.emplace_back([p = w.get()] { p->IoLoop(); });
  return w;
}

StreamWriter::StreamWriter(int fd, const PipelineOptions& options) : fd_(fd), options_(options) {}

StreamWriter::~StreamWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : io_threads_) t.join();
  // Copies still queued on the stream write into the buffers: wait for
  // them before the memory goes.
  if (copier_) {
    for (size_t i = 0; i < buffers_.size(); i++) (void)copier_->Wait(i);
  }
  for (size_t i = 0; i < buffers_.size(); i++) FreeStaging(buffers_[i].data, options_.buffer_bytes, pinned_[i]);
}

Result<size_t> StreamWriter::AcquireLocked(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [&] { return !free_.empty() || !error_.ok(); });
  if (!error_.ok()) return error_;
  const size_t i = free_.front();
  free_.pop_front();
  buffers_[i].fill = 0;
  buffers_[i].device = false;
  return i;
}

void StreamWriter::SubmitLocked(size_t index) {
  Buffer& b = buffers_[index];
  b.seq = next_seq_++;
  queued_.push_back(index);
  in_flight_++;
  cv_.notify_all();
}

Status StreamWriter::Append(const void* src, size_t len, bool wait_for_disk) {
  if (len == 0) {
    std::unique_lock<std::mutex> lock(mu_);
    return wait_for_disk ? WaitDrainedLocked(lock) : error_;
  }
  bool device = options_.source == Source::kDevice ||
                (options_.source == Source::kAuto && IsDevicePointer(src));
  if (device && !copier_) {
    auto c = CudaCopier::Create(options_.cuda_stream, buffers_.size());
    if (!c.ok()) return c.status();
    copier_ = std::move(c).value();
  }
  const char* p = static_cast<const char*>(src);
  int last_device_slot = -1;
  std::unique_lock<std::mutex> lock(mu_);
  while (len > 0) {
    if (current_ < 0) {
      auto i = AcquireLocked(lock);
      if (!i.ok()) return i.status();
      current_ = static_cast<int>(*i);
      buffers_[current_].offset = bytes_;
    }
    Buffer& b = buffers_[current_];
    const size_t n = std::min(len, options_.buffer_bytes - b.fill);
    lock.unlock();  // copying does not need the lock; I/O threads do
    if (device) {
      Status st = copier_->CopyToHostAsync(b.data + b.fill, p, n, static_cast<size_t>(current_));
      if (!st.ok()) return st;
      b.device = true;
      last_device_slot = current_;
    } else {
      std::memcpy(b.data + b.fill, p, n);
    }
    lock.lock();
    b.fill += n;
    bytes_ += n;
    p += n;
    len -= n;
    if (b.fill == options_.buffer_bytes) {
      SubmitLocked(static_cast<size_t>(current_));
      current_ = -1;
    }
  }
  if (last_device_slot >= 0) {
    // Copies on one stream finish in order: once the last is done, src may
    // be reused.
    lock.unlock();
    Status st = copier_->Wait(static_cast<size_t>(last_device_slot));
    lock.lock();
    if (!st.ok()) return st;
  }
  if (wait_for_disk) return WaitDrainedLocked(lock);
  return error_;
}

Status StreamWriter::WaitDrainedLocked(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [&] { return in_flight_ == 0; });
  return error_;
}

void StreamWriter::IoLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queued_.empty(); });
    if (queued_.empty()) return;  // stopping
    const size_t index = queued_.front();
    queued_.pop_front();
    Buffer& b = buffers_[index];
    const bool skip = !error_.ok();  // after an error nothing more is written
    lock.unlock();
    Status st;
    uint32_t crc = 0;
    if (!skip) {
      if (b.device) st = copier_->Wait(index);
      if (st.ok()) crc = Crc32c(0, b.data, b.fill);
      if (st.ok()) st = WriteBuffer(b);
    }
    lock.lock();
    if (!st.ok() && error_.ok()) error_ = st;
    done_crcs_[b.seq] = {crc, b.fill};
    for (auto it = done_crcs_.find(joined_seq_); it != done_crcs_.end(); it = done_crcs_.find(joined_seq_)) {
      crc_ = Crc32cCombine(crc_, it->second.first, it->second.second);
      done_crcs_.erase(it);
      joined_seq_++;
    }
    free_.push_back(index);
    in_flight_--;
    cv_.notify_all();
  }
}

Status StreamWriter::WriteBuffer(Buffer& b) {
  size_t len = b.fill;
  if (direct_ && len % kAlign != 0) {
    // The last buffer: pad to the alignment; Finish trims the file.
    const size_t padded = RoundUp(len, kAlign);
    std::memset(b.data + len, 0, padded - len);
    len = padded;
  }
  size_t done = 0;
  bool retried_buffered = false;
  while (done < len) {
    const ssize_t n = pwrite(fd_, b.data + done, len - done, static_cast<off_t>(b.offset + done));
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && direct_ && !retried_buffered) {
      // O_DIRECT accepted at fcntl but refused on write (some FUSE and
      // network filesystems): go on buffered.
      retried_buffered = true;
      if (SetDirect(fd_, false)) {
        direct_ = false;
        len = b.fill;
        done = 0;
        continue;
      }
    }
    if (n == 0) return Status::Error(EIO, "write made no progress");
    return Status::FromErrno("writing the file");
  }
  return Status::Ok();
}

Status StreamWriter::Finish() {
  std::unique_lock<std::mutex> lock(mu_);
  if (current_ >= 0) {
    if (buffers_[current_].fill > 0) {
      SubmitLocked(static_cast<size_t>(current_));
    } else {
      free_.push_back(static_cast<size_t>(current_));
    }
    current_ = -1;
  }
  CKPTFS_RETURN_IF_ERROR(WaitDrainedLocked(lock));
  lock.unlock();
  if (bytes_ % kAlign != 0) {
    // Padding may have been written (O_DIRECT, or a fallback mid-stream).
    struct stat st {};
    if (fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) != bytes_ &&
        ftruncate(fd_, static_cast<off_t>(bytes_)) != 0) {
      return Status::FromErrno("trimming the file to its size");
    }
  }
  if (fdatasync(fd_) != 0) return Status::FromErrno("fdatasync");
  return Status::Ok();
}

Result<uint32_t> StreamWriter::Crc() {
  std::unique_lock<std::mutex> lock(mu_);
  CKPTFS_RETURN_IF_ERROR(WaitDrainedLocked(lock));
  uint32_t crc = crc_;
  if (current_ >= 0) {
    Buffer& b = buffers_[current_];
    if (b.device) CKPTFS_RETURN_IF_ERROR(copier_->Wait(static_cast<size_t>(current_)));
    crc = Crc32cCombine(crc, Crc32c(0, b.data, b.fill), b.fill);
  }
  return crc;
}

}  // namespace ckptfs::writer
