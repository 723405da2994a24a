// CommitPort: what the commit procedure (lifecycle/CommitCoordinator) may
// ask of the namespace, and nothing else. FileSystem implements it; the
// coordinator never sees the rest of FileSystem. The order of a commit:
//
//   BeginCommit  reserves the step (frozen: no new entries, no writes) and
//                hands out its files;
//   (the coordinator checks completeness, syncs the files and the data
//    directory, DropPageCache)
//   FinishCommit writes the one synced manifest batch that commits it, or
//   AbortCommit  leaves it writing (to be asked again) or broken, or
//   DropCommitRequest ends a request a layout cannot complete.
//
// Every method takes the namespace lock itself; call none of them with it
// held. The requesters are called with it held (they must only queue).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "formats/cluster_records.h"
#include "formats/step_completeness.h"

namespace ckptfs {

class BackingFile;

class CommitPort {
 public:
  virtual ~CommitPort() = default;

  struct CommitPlan {
    uint64_t step_ino = 0;
    std::string step_path;
    struct File {
      std::string path;  // relative to the step directory
      uint64_t ino = 0;
      uint64_t size = 0;
      // Closed by a writer-library client, which writes around the daemon:
      // CheckUnchangedSinceClose has something to compare. Other files'
      // bytes all came through the kernel, so there is nothing to check.
      bool closed_around_daemon = false;
    };
    std::vector<File> files;
    // How the commit was asked for (accumulated over the pending request).
    bool renamed = false;       // a directory rename: commit without settling
    bool forced = false;        // explicit or idle: layout-only waits do not hold it
    bool explicit_commit = false;  // the user's word (ckptfs commit, setfattr): no settling
    bool nested_only = false;   // only subdirectory markers asked: recognised formats only
    uint64_t session = 0;       // the trainer process that triggered it (0 = unknown)
    int64_t quiet_ns = 0;       // how long nothing happened in the step
    // How long a layout whose metadata names no files waits for quiet
    // (--commit-settle; 0 = off).
    int64_t settle_ns = 0;
    // When BeginCommit reserved the step (the clock's monotonic ns): the
    // commit's latency is measured from here to FinishCommit.
    int64_t began_ns = 0;
    // Set by the coordinator from the step's own metadata.
    bool ephemeral = false;
    std::string best_ref;
    // Set by the coordinator: how long making the files and their names
    // durable took (the clock's ns), part of the latency above.
    int64_t sync_ns = 0;

    // Cluster mode (SPEC section 9): the step is committed for every node.
    // GatherCluster fills other_parts with the other nodes' part records;
    // the completeness check runs on the union; DecideCluster fills decided
    // with the one record of the step (this node's proposal or another's),
    // which FinishCommit applies.
    bool cluster = false;
    // The job's node count (--nodes; 0 = not given): a step whose format
    // lists no files waits for that many nodes' parts.
    uint32_t job_nodes = 0;
    std::vector<PartRecord> other_parts;
    // Set by the coordinator from the completeness check: the shards the
    // step's metadata names. A shard of the same family it does not name is
    // another save's, and DecideCluster leaves it out (SPEC section 9, "one
    // save, one step").
    std::vector<ListedShards> listed_shards;
    std::optional<ClusterStepRecord> decided;
  };

  // The coordinator's entry points, set once before serving requests (and
  // reset to nullptr when it goes): a step wants a commit; a run index file
  // (DeepSpeed `latest`, RecIS `checkpoint`) was closed and is to be read
  // on the coordinator's thread, not under the namespace lock.
  using CommitRequester = std::function<void(uint64_t step_ino)>;
  using IndexRequester = std::function<void(uint64_t file_ino, uint64_t session)>;
  virtual void SetCommitRequester(CommitRequester fn) = 0;
  virtual void SetIndexRequester(IndexRequester fn) = 0;

  // Reserves the step for committing when it wants a commit and has no file
  // open for writing. EAGAIN: files still open (the last close asks again);
  // EALREADY: committed already (or no longer a step); ETIMEDOUT: the
  // request waited longer than commit_wait.
  virtual Result<CommitPlan> BeginCommit(uint64_t step_ino) = 0;
  // Leaves the step writing (waiting = true keeps the request alive until the
  // next close in the step, settling = true also until the step is quiet)
  // or broken, with the reason.
  virtual void AbortCommit(uint64_t step_ino, const Status& why, bool waiting, bool broken,
                           bool settling = false) = 0;
  // Ends a commit request that a subdirectory marker made for a layout the
  // completeness check does not know: no error, the step stays writing.
  virtual void DropCommitRequest(uint64_t step_ino) = 0;
  // Writes the one synced batch that commits the step, and records the
  // commit's latency and the part of it spent syncing data.
  virtual Status FinishCommit(const CommitPlan& plan) = 0;
  // EIO when the backing file of ino is no longer what its writer-library
  // client closed (changed around the daemon); Ok otherwise.
  virtual Status CheckUnchangedSinceClose(uint64_t ino, BackingFile* file) = 0;
  // Drops the kernel page cache of these (sealed) files now.
  virtual void DropPageCache(const std::vector<uint64_t>& inos) = 0;
  // Sends the kernel the entry invalidations queued by removals the daemon
  // made by itself (retention after a commit); call without the lock.
  virtual void FlushInvalidations() = 0;

  // Cluster mode. GatherCluster reads the other nodes' parts of the step
  // into plan->other_parts (EIO: a malformed record, named; other errors:
  // the bucket is unreachable, the commit waits and is asked again).
  // ReadClusterFile reads a file of another node's part for the
  // completeness check. DecideCluster decides the step's record for the
  // cluster (plan->decided). Without --node: no-ops. Call without the lock.
  virtual Status GatherCluster(CommitPlan* plan) = 0;
  virtual Result<std::string> ReadClusterFile(const CommitPlan& plan, const std::string& path,
                                              uint64_t offset, uint64_t length) = 0;
  virtual Status DecideCluster(CommitPlan* plan) = 0;

  // Reads a run index file and asks for the commit of every writing step of
  // its run that it names (by directory name, or by step number).
  virtual Status CommitStepsNamedBy(uint64_t file_ino, uint64_t session) = 0;

  // The idle thread's once-a-second work: retry manifest batches kept after
  // a write failure (true when healthy); ask for idle commits (--commit-idle)
  // and for commits that waited for quiet and have it now; delete up to max
  // backing files of removed steps (returns how many).
  virtual bool RetryManifest() = 0;
  virtual void RequestIdleCommits() = 0;
  virtual void RequestSettledCommits() = 0;
  virtual Result<size_t> CollectGarbage(size_t max) = 0;
  // After a mount that left settled steps unloaded: checks the committed
  // files' sizes of up to max of them (returns how many), and once all are
  // checked removes backing files no inode owns, as a full mount would.
  virtual Result<size_t> CheckUnloadedSteps(size_t max) = 0;
  // A lazy mount over its --inode-cache budget: unloads settled steps
  // nothing uses, least recently used first, and asks the kernel to drop
  // the next ones (they unload at a later call). Returns how many unloaded.
  virtual Result<size_t> UnloadIdleSteps() = 0;
  // Commits recovery found pending (their trigger survived a daemon crash
  // in the same boot); asked for once the requester is set.
  virtual void RequestRecoveredCommits() = 0;
};

}  // namespace ckptfs
