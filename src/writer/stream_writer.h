// The writer library's data pipeline: bytes from host or device memory go
// into a ring of page-aligned (pinned) staging buffers; I/O threads take
// full buffers in order, checksum them (CRC32C) and write them to the file
// with O_DIRECT, while the caller fills the next buffer. With a device
// source the caller only queues device-to-host copies on a CUDA stream; an
// I/O thread waits for a buffer's copy before writing it, so copies and
// disk writes overlap.
//
// O_DIRECT wants aligned offsets and lengths: buffers are multiples of 4 KiB
// and land at multiples of their size, so only the last, partly filled
// buffer is padded with zeros to 4 KiB, and Finish truncates the padding
// away. A filesystem that refuses O_DIRECT gets buffered writes.
//
// Each buffer's CRC32C is computed by whichever I/O thread writes it; the
// checksums are joined in file order (Crc32cCombine), so several threads
// checksum at once and the result equals the CRC32C of the whole stream.
//
// Thread safety: one caller thread at a time (a writer is a file handle).
// The first I/O error is kept and returned by every later call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "writer/cuda_seam.h"

namespace ckptfs::writer {

enum class Source { kAuto = 0, kHost = 1, kDevice = 2 };

struct PipelineOptions {
  size_t buffer_bytes = 8u << 20;
  unsigned buffer_count = 4;
  void* cuda_stream = nullptr;
  Source source = Source::kAuto;
  bool direct = true;  // try O_DIRECT
};

class StreamWriter {
 public:
  // fd: open for writing at offset 0, empty; not owned.
  static Result<std::unique_ptr<StreamWriter>> Create(int fd, const PipelineOptions& options);
  // Stops the I/O threads; data still staged is dropped (call Finish first).
  ~StreamWriter();
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  // Appends len bytes. Returns once src may be reused; with wait_for_disk,
  // once every full buffer is written too (the partly filled one stays).
  Status Append(const void* src, size_t len, bool wait_for_disk);
  // Writes what is staged, trims the padding, fdatasync.
  Status Finish();
  // CRC32C of every byte appended so far (waits for queued buffers).
  Result<uint32_t> Crc();

  uint64_t bytes() const { return bytes_; }
  bool direct() const { return direct_.load(); }

 private:
  struct Buffer {
    char* data = nullptr;
    size_t fill = 0;
    uint64_t offset = 0;  // where it lands in the file
    uint64_t seq = 0;     // order of submission
    bool device = false;  // filled by device-to-host copies
  };

  StreamWriter(int fd, const PipelineOptions& options);
  void IoLoop();
  // The next empty buffer; waits while all are queued or being written.
  Result<size_t> AcquireLocked(std::unique_lock<std::mutex>& lock);
  void SubmitLocked(size_t index);
  Status WriteBuffer(Buffer& b);
  Status WaitDrainedLocked(std::unique_lock<std::mutex>& lock);

  const int fd_;
  const PipelineOptions options_;
  std::atomic<bool> direct_{false};  // I/O threads turn it off if writes refuse it
  std::vector<Buffer> buffers_;
  std::vector<bool> pinned_;
  std::unique_ptr<CudaCopier> copier_;
  uint64_t bytes_ = 0;
  int current_ = -1;  // the buffer being filled, or -1

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> free_;     // GUARDED_BY(mu_)
  std::deque<size_t> queued_;   // GUARDED_BY(mu_)
  size_t in_flight_ = 0;        // GUARDED_BY(mu_) queued or being written
  uint64_t next_seq_ = 0;       // GUARDED_BY(mu_)
  // Checksums of written buffers not yet joined, by seq; crc_ covers every
  // buffer before joined_seq_.
  std::map<uint64_t, std::pair<uint32_t, size_t>> done_crcs_;  // GUARDED_BY(mu_)
  uint64_t joined_seq_ = 0;     // GUARDED_BY(mu_)
  uint32_t crc_ = 0;            // GUARDED_BY(mu_)
  Status error_;                // GUARDED_BY(mu_) the first I/O error
  bool stop_ = false;           // GUARDED_BY(mu_)
  std::vector<std::thread> io_threads_;
};

}  // namespace ckptfs::writer
