#include "data/writeback_starter.h"

#include <utility>

namespace ckptfs {

WritebackStarter::WritebackStarter(std::function<void(uint64_t)> start)
    : start_(std::move(start)), thread_([this] { Run(); }) {}

WritebackStarter::~WritebackStarter() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void WritebackStarter::Enqueue(uint64_t ino) {
  {
    MutexLock lock(&mu_);
    if (queue_.size() >= kMaxQueued) {
      skipped_++;
      return;
    }
    queue_.push_back(ino);
  }
  cv_.notify_one();
}

uint64_t WritebackStarter::skipped() const {
  MutexLock lock(&mu_);
  return skipped_;
}

void WritebackStarter::Run() {
  MutexLock lock(&mu_);
  while (true) {
    while (!stop_ && queue_.empty()) lock.Wait(cv_);
    if (stop_) return;
    const uint64_t ino = queue_.front();
    queue_.pop_front();
    lock.Unlock();
    start_(ino);
    lock.Lock();
  }
}

}  // namespace ckptfs
