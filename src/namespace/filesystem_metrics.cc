// /.ckptfs/metrics (Prometheus text format): the counters FileSystem keeps,
// gauges computed now under mu_ (steps by state, cache bytes by state), the
// events by kind, and the remote tier's own metrics.
#include "namespace/filesystem.h"

namespace ckptfs {

std::string FileSystemCore::RenderMetricsLocked() {
  PrometheusWriter w;
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    w.Family(name, "counter", help);
    w.Sample(name, static_cast<double>(v));
  };
  counter("ckptfs_fuse_write_bytes_total",
          "Bytes written through the daemon (not those of passthrough opens, which the kernel writes itself).",
          metrics_.fuse_bytes_written.load());
  counter("ckptfs_fuse_read_bytes_total",
          "Bytes asked for by reads through the daemon (not those of passthrough opens).",
          metrics_.fuse_bytes_read.load());
  counter("ckptfs_passthrough_opens_total",
          "Opens served by kernel FUSE passthrough: their reads and writes bypass the daemon.",
          passthrough_.opens());
  counter("ckptfs_fuse_getxattr_requests_total",
          "GETXATTR requests (the kernel asks for security.capability before writes unless the daemon "
          "handles setuid/setgid bits itself).",
          metrics_.getxattr_requests.load());
  counter("ckptfs_view_read_bytes_total", "Bytes read from .full/ views (full tensors assembled from shards).",
          metrics_.view_bytes_read.load());
  counter("ckptfs_writer_fastpath_bytes_total",
          "Bytes written by writer-library clients straight into backing files.",
          metrics_.writer_fastpath_bytes.load());
  counter("ckptfs_writer_fastpath_files_total", "Files closed by writer-library clients.",
          metrics_.writer_fastpath_files.load());
  counter("ckptfs_commits_total", "Steps committed.", metrics_.commits.load());
  counter("ckptfs_commit_failures_total", "Commit attempts that failed (timed out waiting, I/O error).",
          metrics_.commits_failed.load());
  counter("ckptfs_steps_broken_total", "Steps found broken by their own metadata.",
          metrics_.steps_broken.load());
  counter("ckptfs_retention_removals_total", "Steps removed by retention or a finished deletion.",
          metrics_.retention_removals.load());
  counter("ckptfs_lazy_step_loads_total",
          "Settled steps whose entries were read from the manifest on first use.",
          metrics_.lazy_step_loads.load());
  counter("ckptfs_lazy_step_unloads_total",
          "Loaded settled steps dropped from memory past --inode-cache (read again on next use).",
          metrics_.lazy_step_unloads.load());
  metrics_.commit_seconds.Render("ckptfs_commit_duration_seconds",
                                 "Time from a commit starting (no writer left) to its synced batch.", &w);
  metrics_.commit_sync_seconds.Render(
      "ckptfs_commit_sync_duration_seconds",
      "Part of each commit's duration spent making its files' data and "
      "names durable (syncfs or fdatasync of each, data directory fsync).",
      &w);

  std::map<std::string, uint64_t> by_state;
  for (StepState s : {StepState::kWriting, StepState::kCommitted, StepState::kIncomplete,
                      StepState::kBroken, StepState::kDeleting}) {
    by_state[StepStateName(s)] = 0;
  }
  uint64_t persisted = 0;
  for (const auto& [ino, rec] : steps_) {
    by_state[StepStateName(rec.state)]++;
    persisted += rec.persisted ? 1 : 0;
  }
  w.Family("ckptfs_steps", "gauge", "Checkpoint steps by state.");
  for (const auto& [state, n] : by_state) w.Sample("ckptfs_steps", static_cast<double>(n), {{"state", state}});
  w.Family("ckptfs_steps_persisted", "gauge", "Committed steps whose remote copy is complete.");
  w.Sample("ckptfs_steps_persisted", static_cast<double>(persisted));
  // Memory: every inode in the namespace plus removed ones the kernel still
  // references (it sends FORGET when it drops them); bench/soak watches it.
  w.Family("ckptfs_inodes", "gauge",
           "Inodes held in memory (named, open or still known to the kernel; committed steps not "
           "looked into since the mount are not loaded).");
  w.Sample("ckptfs_inodes", static_cast<double>(inodes_.size()));
  w.Family("ckptfs_step_runtimes", "gauge", "Steps with in-memory commit bookkeeping (writing or settling).");
  w.Sample("ckptfs_step_runtimes", static_cast<double>(steps_.runtimes().size()));

  // Cache bytes by state: data of persisted steps (evictable), everything
  // else written here (never evicted), and remote-only data (not cached).
  uint64_t evictable = 0, pinned = UnloadedStepBytesLocked(), remote_only = 0;
  for (const auto& [ino, node] : inodes_) {
    const Inode* inode = &node;
    if (!inode->is_reg()) continue;
    if (inode->object && !inode->object->resident) {
      remote_only += inode->rec.size;
      continue;
    }
    auto step = steps_.find(steps_.StepOf(inodes_, ino));
    if (step != steps_.end() && step->second.persisted) {
      evictable += inode->rec.size;
    } else {
      pinned += inode->rec.size;
    }
  }
  w.Family("ckptfs_file_bytes", "gauge",
           "Bytes of regular files: resident and persisted (evictable), resident and not persisted, "
           "or only in the remote.");
  w.Sample("ckptfs_file_bytes", static_cast<double>(evictable), {{"state", "persisted"}});
  w.Sample("ckptfs_file_bytes", static_cast<double>(pinned), {{"state", "unpersisted"}});
  w.Sample("ckptfs_file_bytes", static_cast<double>(remote_only), {{"state", "remote_only"}});
  w.Family("ckptfs_upload_queue_files", "gauge", "Files queued for upload.");
  w.Sample("ckptfs_upload_queue_files", static_cast<double>(ledger_.uploads().size()));

  w.Family("ckptfs_events_total", "counter",
           "Events by kind since start (error, remote_error, commit_failed and broken are the errors).");
  for (const auto& [kind, n] : events_->Counts()) {
    w.Sample("ckptfs_events_total", static_cast<double>(n), {{"event", kind}});
  }
  if (tier_) tier_->AddMetrics(&w);
  return w.text();
}

}  // namespace ckptfs
