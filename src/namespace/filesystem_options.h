// FileSystemOptions: everything a namespace is configured with, given to
// FileSystem::Open (as leveldb::Options to DB::Open). The daemon fills it from
// the mount options (cli/mount_options.h); tests from defaults.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/metadata_reserve.h"
#include "namespace/step_pattern.h"
#include "retention/retention_planner.h"

namespace ckptfs {

struct FileSystemOptions {
  std::string step_pattern = kDefaultStepPattern;
  std::vector<std::string> commit_markers = kDefaultCommitMarkers;
  // How long a commit request waits for files of the step to be closed.
  int64_t commit_wait_ns = 600LL * 1'000'000'000;
  // 0 = off; else commit a writing step after this long without activity.
  int64_t commit_idle_ns = 0;
  // A commit whose format names no files (Hugging Face, DeepSpeed, unknown
  // layouts, idle commits) first waits until nothing in the
  // step was created, opened for writing, written or closed for this long,
  // so a rank that finishes its file shortly after rank 0's marker is still
  // in the step (--commit-settle; 0 = off). Formats whose metadata lists
  // every file (DCP, OLMo-core), directory renames and explicit commits
  // (the user's word that the step is complete) commit at once.
  int64_t commit_settle_ns = 2LL * 1'000'000'000;
  // A lazy mount keeps about this many inodes in memory (--inode-cache):
  // past it, settled steps nobody uses are unloaded, least recently used
  // first, and read again from the manifest on next use. What is open,
  // being written or not committed stays whatever the count.
  size_t max_cached_inodes = 250000;
  // Kernel cache timeouts for ordinary entries and attributes.
  double entry_timeout = 1.0;
  double attr_timeout = 1.0;
  // Retention defaults for every run directory (--keep-last ...); run
  // directories override rules with user.ckptfs.<rule> xattrs.
  RetentionPolicy retention;
  // A remote tier is configured (--remote): closed files of steps are
  // queued for upload and steps become persisted (SPEC section 4).
  bool remote = false;
  // List the hidden `.full/` directories in readdir (--show-full); they are
  // reachable by name either way.
  bool show_full = false;
  // List the virtual `latest` links in readdir (--show-latest). Hidden by
  // default: trainers such as torchtitan parse a step number out of every
  // entry of their folder. Reachable by name either way.
  bool show_latest = false;
  // The daemon's user: like root, it sees every step and event in the
  // control files (it can read the cache directory anyway).
  uint32_t owner_uid = 0;
  // Free space on the cache filesystem kept for the manifest: new file data
  // gets ENOSPC below it (--metadata-reserve).
  MetadataReserveSpec metadata_reserve;
  // The kernel boot this mount runs in (CurrentBootId()); "" = unknown.
  // After a daemon crash in the same boot, recovery finishes commits whose
  // trigger survived; after a machine restart (or an unknown boot) it does
  // not, as unsynced data may be lost (filesystem_recovery.cc).
  std::string boot_id;
  // Shown in status.json.
  std::string mountpoint;
  std::string cache_dir;
  // Cluster mode (SPEC section 9, docs/cluster.md): this node's name
  // (--node; "" = a single-node mount, sections 1-8), and how old a run
  // directory's view of the cluster's steps may get before a lookup or
  // listing reads the remote again (--refresh).
  std::string node;
  int64_t refresh_ns = 1'000'000'000;
  // The job's node count (--nodes, as torchrun's --nnodes; 0 = not given).
  // A step whose format lists no files commits for the cluster only once
  // this many nodes have published their parts with nothing open.
  uint32_t job_nodes = 0;
  // Maps a process id to a session identity (pid and start time), so that a
  // restarted trainer is a new session; the daemon's reads /proc. Unset: the
  // pid itself is the session.
  std::function<uint64_t(uint32_t pid)> session_of;
};

}  // namespace ckptfs
