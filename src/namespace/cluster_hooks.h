// The seam between the namespace and cluster mode (SPEC section 9,
// docs/cluster.md): what FileSystem asks of the cluster while it serves
// requests. cluster/ClusterBook implements it over the shared bucket;
// without --node FileSystem has no cluster hooks and never asks.
//
// The blocking calls are made without FileSystem::mu_ (they wait for the
// object store); the signalling ones are called with it held and must only
// queue work for the cluster's own thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "formats/cluster_records.h"

namespace ckptfs {

class ClusterHooks {
 public:
  virtual ~ClusterHooks() = default;

  // This node's name (--node).
  virtual const std::string& node() const = 0;

  // Publishes this node's part of the step (its files as they are now) and
  // returns once a part record at least that new is in the bucket: the first
  // open for writing of the step on this node, and renames, return only
  // after the committing node can see them. Concurrent calls for one step
  // share one PUT. Blocking.
  virtual Status PublishPart(const std::string& step_path) = 0;

  // The same without waiting, for close(): the PUT is made by the book's
  // thread, after it made the part durable when nothing is open. Until that
  // PUT lands the bucket still counts the file open (the first open put it
  // so), and a committing node waits instead of committing without it.
  virtual void PublishLater(const std::string& step_path) = 0;

  // Every node's part record of the step except this node's own (the
  // committing node knows its own files). Malformed records are an EIO
  // naming the key. Blocking.
  virtual Result<std::vector<PartRecord>> GatherParts(const std::string& step_path) = 0;

  // Bytes of a file of another node's part, for the completeness check
  // (metadata the committing node did not write): waits for the owner's
  // upload, then reads the object. Blocking.
  virtual Result<std::string> ReadPartFile(const std::string& step_path, const PartRecord::File& file,
                                           const std::string& owner, uint64_t offset, uint64_t length) = 0;

  // Decides the step's one record for the cluster (a conditional put) and
  // makes it visible to the other
  // nodes: the record decided, which is `proposal` or another node's.
  // Blocking.
  // follows_removal is the step's StepRecord::follows_removal: a step left
  // over here from a save of the name that another node has removed since
  // (the name's tombstone is not the one it follows) is never decided
  // again: ESTALE, after its part record is deleted from the bucket.
  virtual Result<ClusterStepRecord> DecideStep(const ClusterStepRecord& proposal,
                                               const std::string& follows_removal) = 0;

  // What a step created here now follows (StepRecord::follows_removal): the
  // tag of the name's tombstone in this node's view of the step index,
  // kFollowsNoRemoval when it has none, kFollowsNextRemoval while this node's own removal of
  // the name is on its way to the bucket or its view is not fresh (its last
  // refresh failed, or none ran yet). Non-blocking: called with
  // FileSystem::mu_ held.
  virtual std::string RemovalSeen(const std::string& step_path) = 0;

  // Brings the namespace's view of the cluster's steps up to date when it is
  // older than --refresh (one LIST of the bucket's step index, GETs only for
  // steps new here). Concurrent callers share one refresh. Blocking.
  virtual void MaybeRefresh() = 0;
  // The same before a step directory is made here, with a view at most a
  // few milliseconds old (not --refresh): the removal of the name the new
  // step follows (RemovalSeen) must be known. Blocking.
  virtual void RefreshForNewStep() = 0;
  // The same before this node plans the run's retention for the cluster
  // (after its decision won, or its persist duty ended): a view read now,
  // whatever its age, so that no step another node persisted or removed
  // meanwhile is planned on as it was (SPEC section 9). Blocking.
  virtual void RefreshForRetention() = 0;
  // Whether the step's name was saved again after the removal its tombstone
  // records: a decision of the name is in the bucket and it is not the
  // removed one. Blocking (one or two GETs).
  virtual Result<bool> StepSavedAgain(const std::string& step_path) = 0;

  // Waits until the owner node's part record says the file is uploaded, and
  // returns that record (the file's size, CRC32C and chunk CRCs are in it).
  // ETIMEDOUT after the wait bound. Blocking.
  virtual Result<PartRecord> AwaitUpload(const std::string& step_path, const std::string& rel_path,
                                               const std::string& owner) = 0;

  // Signals (called with FileSystem::mu_ held; must only queue):
  // a file of this node's part finished uploading: republish the part.
  virtual void PartUploadsChanged(const std::string& step_path) = 0;
  // a cluster step this node committed became persisted: record it in the index.
  virtual void StepPersisted(const std::string& step_path) = 0;
  // a cluster step this node committed waits for other nodes' uploads.
  virtual void AwaitingParts() = 0;
  // a version of a run-level file was uploaded to its natural key: tell the
  // other nodes (a record in the step index).
  virtual void RunFileUploaded(const RunFileRecord& record) = 0;
  // a committed cluster step was removed here (rm, retention): remove it for
  // the cluster (a tombstone in the step index, then its objects).
  virtual void StepRemoved(const std::string& step_path) = 0;
  // this node published its part of a step it sees as writing: watch the
  // bucket for the step's commit (by whichever node), so that this node
  // learns it, and starts its uploads, without waiting for a lookup.
  virtual void WatchForCommit(const std::string& step_path) = 0;

  // The cluster's part of status.json. Called with FileSystem::mu_ held.
  virtual void AddStatus(nlohmann::json* status) const = 0;
};

}  // namespace ckptfs
