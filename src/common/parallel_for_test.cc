#include "common/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace ckptfs {
namespace {

TEST(ParallelForTest, RunsEveryIndexExactlyOnce) {
  for (size_t n : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> runs(n);
    ParallelFor(n, 8, [&](size_t i) { runs[i]++; });
    for (size_t i = 0; i < n; i++) EXPECT_EQ(runs[i].load(), 1) << "n " << n << " index " << i;
  }
}

TEST(ParallelForTest, UsesAtMostMaxThreadsTheCallersIncluded) {
  std::mutex mu;
  std::set<std::thread::id> seen;
  std::atomic<int> running{0}, most{0};
  ParallelFor(64, 4, [&](size_t) {
    const int now = ++running;
    for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    {
      std::lock_guard<std::mutex> lock(mu);
      seen.insert(std::this_thread::get_id());
    }
    --running;
  });
  EXPECT_LE(most.load(), 4);
  EXPECT_LE(seen.size(), 4u);
  EXPECT_GE(seen.size(), 2u) << "blocking work overlaps";
  // max_threads 0 or 1: the caller's thread alone.
  const std::thread::id caller = std::this_thread::get_id();
  for (size_t max_threads : {0, 1}) {
    ParallelFor(3, max_threads, [&](size_t) { EXPECT_EQ(std::this_thread::get_id(), caller); });
  }
}

}  // namespace
}  // namespace ckptfs
