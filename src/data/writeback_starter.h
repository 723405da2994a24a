// Starts the kernel's writeback of backing files as their writers close
// them, on a thread of its own, so that a step's commit finds most of the
// step's data on the disk already.
//
// Trainers rarely fsync (torch.save does not): a step's data is still in the
// page cache when its commit syncs it, and writing it back is nearly all of
// a commit's time (52-60 ms of 75 for 1,000 files of 64 KiB on this VM's
// ext4; docs/benchmarks.md, commit_latency). sync_file_range(WRITE) on
// close starts that writeback at once and waits for none of it, so the
// disk works while the trainer writes its next files, and the commit's sync
// is left with what is still in flight and the journal commit. It is only
// a hint: the commit still syncs every file as before.
//
// It runs off the closing thread because sync_file_range(WRITE) blocks
// while the block layer's queue is full (a large file's close would wait
// for the disk). The queue is bounded: past kMaxQueued files a close starts
// nothing (the commit's sync writes those files back, as without this).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace ckptfs {

class WritebackStarter {
 public:
  // start(ino) starts the writeback of ino's backing file (errors ignored:
  // the file may be gone already).
  explicit WritebackStarter(std::function<void(uint64_t)> start);
  // Stops the thread; what is queued is left to the commits' syncs.
  ~WritebackStarter();
  WritebackStarter(const WritebackStarter&) = delete;
  WritebackStarter& operator=(const WritebackStarter&) = delete;

  // Never blocks on the disk.
  void Enqueue(uint64_t ino) EXCLUDES(mu_);

  static constexpr size_t kMaxQueued = 4096;

  // Closes that started no writeback because the queue was full.
  uint64_t skipped() const EXCLUDES(mu_);

 private:
  void Run() EXCLUDES(mu_);

  const std::function<void(uint64_t)> start_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::deque<uint64_t> queue_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  uint64_t skipped_ GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace ckptfs
