#include "common/clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace ckptfs {
namespace {

TEST(ManualClockTest, WaitEndsWhenAdvancePassesTheDeadlineNotWithRealTime) {
  ManualClock clock;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> returned{false};
  bool result = true;
  std::thread waiter([&] {
    std::unique_lock<std::mutex> lock(mu);
    result = clock.WaitFor(cv, lock, 5'000'000'000, [] { return false; });
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(returned) << "a ManualClock wait ended without the clock moving";
  clock.Advance(4'000'000'000);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned) << "ended before its deadline";
  clock.Advance(1'000'000'000);
  waiter.join();
  EXPECT_TRUE(returned);
  EXPECT_FALSE(result);  // timed out: done() never held
}

TEST(ManualClockTest, WaitEndsWhenDoneHolds) {
  ManualClock clock;
  std::mutex mu;
  std::condition_variable cv;
  bool flag = false;
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(mu);
    flag = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  EXPECT_TRUE(clock.WaitFor(cv, lock, 1'000'000'000'000, [&] { return flag; }));
  lock.unlock();
  setter.join();
}

TEST(SystemClockTest, WaitTimesOutInRealTime) {
  SystemClock clock;
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock<std::mutex> lock(mu);
  const int64_t start = clock.MonotonicNanos();
  EXPECT_FALSE(clock.WaitFor(cv, lock, 20'000'000, [] { return false; }));
  EXPECT_GE(clock.MonotonicNanos() - start, 20'000'000);
}

}  // namespace
}  // namespace ckptfs
