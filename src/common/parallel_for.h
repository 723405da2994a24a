// ParallelFor: fn(i) for every i in [0, n), on up to max_threads threads (the
// caller's among them), each taking the next index as it finishes one. For
// blocking requests to a remote store, where n round trips one after another
// would cost n times the latency. fn must be safe to run concurrently; each
// index is run exactly once, and ParallelFor returns when all have.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace ckptfs {

template <typename Fn>
void ParallelFor(size_t n, size_t max_threads, const Fn& fn) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) fn(i);
  };
  std::vector<std::thread> pool;
  const size_t threads = std::min(n, std::max<size_t>(max_threads, 1));
  for (size_t t = 1; t < threads; t++) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

}  // namespace ckptfs
