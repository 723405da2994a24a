// ClusterPort: what cluster mode (cluster/ClusterBook) may ask of the
// namespace, and nothing else; ClusterHooks is the other direction.
// FileSystem implements it. Every method takes the namespace lock itself;
// the ClusterBook calls them without its own locks held.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "formats/cluster_records.h"

namespace ckptfs {

class ClusterPort {
 public:
  virtual ~ClusterPort() = default;

  // This node's part of a step as it is now: its own files (not the ones
  // materialised from other nodes' parts), directories and links, with
  // what its uploads recorded. The caller fills node, cache_id, seq and
  // published_at. ENOENT: no such step here.
  virtual Result<PartRecord> PartSnapshot(const std::string& step_path) = 0;
  // Makes this node's part of the step durable as it is now: its files not
  // yet uploaded are fsynced, then the manifest that names them. Answers
  // whether the part is synced now (false: a file is open for writing, or
  // the part changed while it synced; the next quiet publication asks
  // again). ENOENT: no such step here.
  virtual Result<bool> SyncPart(const std::string& step_path) = 0;
  // At start: the steps not yet committed whose part here has files that
  // are neither uploaded nor durable, when the daemon restarted in the same
  // boot (a kill -9: the bytes are intact, only their sync may not have
  // happened). Empty after a machine restart: those files may be torn, so
  // their parts stay not durable and the step cannot commit with them.
  virtual std::vector<std::string> PartsToResync() = 0;
  // At start: the committed steps not yet persisted that hold files of this
  // node. Their parts are put again: what the uploads recorded before a
  // kill -9 may never have reached the bucket, and the committing node
  // waits for it to write the commit object.
  virtual std::vector<std::string> PartsToRepublish() = 0;
  // Removals this node announced (rm, retention) that the ClusterBook has
  // not finished in the bucket: recorded in the batch that removed the step
  // here, so a kill -9 before the book's pass does not lose them.
  virtual std::vector<std::string> PendingClusterRemovals() = 0;
  // The book removed the step from the bucket: no longer owed.
  virtual void ClusterRemovalDone(const std::string& step_path) = 0;

  // What this node knows of each step, by path, for a refresh to skip the
  // steps it has already applied.
  struct StepView {
    bool committed = false;  // committed (here or adopted from the cluster)
    bool persisted = false;
    bool committed_here = false;  // this node's decision won: its persist duty
    std::string follows_removal;  // StepRecord::follows_removal
    std::string decision;         // StepRecord::decision, when committed
  };
  virtual std::map<std::string, StepView> StepViews() = 0;

  // A step committed by the cluster (its decided record): commits the local
  // step with it (sealing this node's files, adding the other nodes' files
  // as remote, dropping local files the record does not list), or creates
  // it. EAGAIN: a local commit of the step is in progress (try later).
  virtual Status ApplyClusterStep(const ClusterStepRecord& record) = 0;
  // The cluster's commit object of a committed step is written.
  virtual Status ApplyClusterPersisted(const std::string& step_path) = 0;
  // Another node removed the step for the cluster: this node drops its copy
  // (without announcing the removal again).
  virtual Status RemoveClusterStep(const std::string& step_path) = 0;
  // The step here is left over from a save of the name that another node
  // removed for the cluster (a tombstone tagged `tombstone`, or any when
  // empty, that the step does not follow): drops it, whatever its state but
  // committed, without announcing a removal.
  // Answers whether it dropped the step: not when the step follows that
  // tombstone after all, is committed or being removed here, or is being
  // committed (its decision then refuses it).
  virtual Result<bool> DropLeftoverStep(const std::string& step_path,
                                        const std::string& tombstone) = 0;
  // The step here follows the tombstone tagged `tombstone` (a save of the
  // name after that removal): recorded, so later refreshes need not ask.
  virtual void FollowRemoval(const std::string& step_path, const std::string& tombstone) = 0;
  // One step's view (nullopt: no such step here), as StepViews gives it.
  virtual std::optional<StepView> StepViewOf(const std::string& step_path) = 0;
  // Sends the kernel the entry invalidations queued by such removals; call
  // from a thread that is not serving a FUSE request.
  virtual void FlushInvalidations() = 0;

  // Steps this node committed for the cluster that are not persisted, and
  // the nodes whose uploads they still wait for.
  struct AwaitedPart {
    std::string step_path;
    std::string owner;
  };
  virtual std::vector<AwaitedPart> PartsAwaited() = 0;
  // What another node's part record says of its uploads: files of that node
  // in the step get their CRC32Cs (reads of them can be verified, and the
  // committing node can write the commit object once all are known).
  virtual Status NoteRemoteUploads(const std::string& step_path, const PartRecord& part) = 0;

  // Another node's version of a run-level file (its record in the step
  // index): shown here as a file read from the bucket, in place of what
  // this node has under the name unless that is its own newer version
  // (the later mtime wins, as the last writer of a shared file would).
  // Returns true when the namespace changed (a kernel entry to drop), false
  // when this node keeps what it has. EAGAIN: not now (no such run
  // directory here yet; the local file is open for writing or its upload
  // is queued or running): the caller tries again at a later refresh.
  virtual Result<bool> ApplyClusterRunFile(const RunFileRecord& record) = 0;
};

}  // namespace ckptfs
