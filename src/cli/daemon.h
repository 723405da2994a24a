// The daemon's root object: the only place that owns long-lived state. It
// opens the manifest and data store in the cache directory, loads the
// FileSystem (running recovery), starts the CommitCoordinator, and serves
// the FUSE session until the filesystem is unmounted or a signal arrives.
#pragma once

#include <memory>
#include <optional>

#include "cli/mount_options.h"
#include "cluster/cluster_book.h"
#include "cluster/cluster_join.h"
#include "common/clock.h"
#include "control/event_log.h"
#include "fuse/passthrough_channel.h"
#include "lifecycle/commit_coordinator.h"
#include "namespace/filesystem.h"
#include "tiering/remote_tier.h"

struct fuse_session;

namespace ckptfs {

class FastPathServer;

class Daemon {
 public:
  // Everything up to a ready mount; on error nothing stays mounted.
  static Result<std::unique_ptr<Daemon>> Start(const MountOptions& options);
  ~Daemon();  // unmounts, finishes the commit in flight, closes the manifest
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Serves requests until unmount or SIGTERM/SIGINT/SIGHUP. Returns the exit code.
  int Run();

 private:
  Daemon() = default;

  MountOptions options_;
  SystemClock clock_;
  std::unique_ptr<EventLog> events_;
  std::unique_ptr<FileSystem> fs_;
  std::unique_ptr<CommitCoordinator> coordinator_;
  std::unique_ptr<RemoteTier> tier_;  // with --remote
  std::unique_ptr<ClusterBook> cluster_;  // with --node
  std::unique_ptr<FastPathServer> fast_path_;  // unless --writer-socket none
  std::unique_ptr<PassthroughChannel> passthrough_;  // unless --passthrough off
  // With --node: this node's place in the cluster, as joined at mount.
  std::optional<ClusterMembership> membership_;
  fuse_session* session_ = nullptr;
  bool mounted_ = false;
  bool signals_set_ = false;
};

}  // namespace ckptfs
