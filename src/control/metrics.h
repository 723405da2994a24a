// /.ckptfs/metrics in the Prometheus text exposition format (version 0.0.4):
// counters and histograms updated lock-free on the hot paths, rendered on
// read together with gauges computed at that moment (steps by state, cache
// bytes by state) and the remote tier's counters.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace ckptfs {

// Appends metric families in the text format: one HELP and TYPE line per
// family, then its samples. Label values are escaped.
class PrometheusWriter {
 public:
  void Family(const std::string& name, const std::string& type, const std::string& help);
  void Sample(const std::string& name, double value,
              const std::vector<std::pair<std::string, std::string>>& labels = {});
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

// A latency histogram with fixed buckets (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double seconds);
  void Render(const std::string& name, const std::string& help, PrometheusWriter* w) const;

 private:
  const std::vector<double> bounds_;
  mutable Mutex mu_;
  std::vector<uint64_t> counts_ GUARDED_BY(mu_);  // one per bound, plus +Inf
  double sum_ GUARDED_BY(mu_) = 0;
  uint64_t count_ GUARDED_BY(mu_) = 0;
};

// The counters the namespace and the commit path keep. Owned by FileSystem.
// Atomics, read and bumped without a lock; the histograms lock their own.
struct FsMetrics {
  std::atomic<uint64_t> fuse_bytes_written{0};
  std::atomic<uint64_t> fuse_bytes_read{0};
  // Bytes read from `.full/` views (also counted in fuse_bytes_read).
  std::atomic<uint64_t> view_bytes_read{0};
  std::atomic<uint64_t> commits{0};
  std::atomic<uint64_t> commits_failed{0};
  std::atomic<uint64_t> steps_broken{0};
  std::atomic<uint64_t> retention_removals{0};
  // Settled steps read from the manifest on first use (the lazy namespace).
  std::atomic<uint64_t> lazy_step_loads{0};
  // And dropped from memory again past the inode budget.
  std::atomic<uint64_t> lazy_step_unloads{0};
  // Files and bytes written by writer-library clients around FUSE.
  std::atomic<uint64_t> writer_fastpath_bytes{0};
  std::atomic<uint64_t> writer_fastpath_files{0};
  // GETXATTR requests of every name. Before each write() the kernel asks for
  // security.capability unless the daemon handles setuid/setgid bits itself
  // (FUSE_HANDLE_KILLPRIV_V2): this shows whether writes still pay that trip.
  std::atomic<uint64_t> getxattr_requests{0};
  // Commit latency: from the coordinator taking the step to the synced batch.
  Histogram commit_seconds{{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60}};
  // The part of it spent making the step's data durable (file contents and
  // the data directory), with the same buckets so the two compare.
  Histogram commit_sync_seconds{{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60}};
};

}  // namespace ckptfs
