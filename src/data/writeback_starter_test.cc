#include "data/writeback_starter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace ckptfs {
namespace {

TEST(WritebackStarterTest, StartsEveryQueuedFileOffTheCallersThread) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> seen;
  std::thread::id where;
  WritebackStarter starter([&](uint64_t ino) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(ino);
    where = std::this_thread::get_id();
    cv.notify_all();
  });
  for (uint64_t ino = 1; ino <= 3; ++ino) starter.Enqueue(ino);
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return seen.size() == 3; }));
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_NE(where, std::this_thread::get_id());
}

TEST(WritebackStarterTest, AFullQueueStartsNothingMoreAndNeverBlocksTheCloser) {
  std::mutex gate;
  gate.lock();  // the thread's first start waits here: the queue fills up
  WritebackStarter starter([&](uint64_t) {
    std::lock_guard<std::mutex> wait(gate);
  });
  for (size_t i = 0; i < WritebackStarter::kMaxQueued + 10; ++i) starter.Enqueue(i);
  // One was taken by the thread (or not yet): at least 9 had no room.
  EXPECT_GE(starter.skipped(), 9u);
  EXPECT_LE(starter.skipped(), 10u);
  gate.unlock();
}

}  // namespace
}  // namespace ckptfs
