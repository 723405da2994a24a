// ClusterBook: the I/O side of cluster mode (SPEC section 9,
// docs/cluster.md), the peer of RemoteTier. The bucket is the only thing the
// nodes share; this class keeps the cluster's records in it:
//
//   <step>/.ckptfs-parts/<node>.json   this node's part of a step, put before
//                                      the step's first open for writing
//                                      returns, and again by this thread after
//                                      closes, once durable (one PUT in flight
//                                      per step);
//   <step>/.ckptfs-step.json           the step's one record, decided once
//                                      (DecideOnce: a conditional put);
//   .ckptfs-index/<step>~c.json        committed (body: the step record) and
//   .ckptfs-index/<step>~p.json        persisted: one LIST of the index tells a
//                                      node every step's state; no step key
//                                      is ever overwritten;
//   .ckptfs-index/<path>~f.json        the newest uploaded version of a
//                                      run-level file (RunFileRecord),
//                                      rewritten by each new version, read
//                                      by a refresh when its tag moves.
//
// It sees the namespace only through ClusterPort and implements the
// ClusterHooks FileSystem calls. Its own thread republishes parts when
// uploads end, records persisted steps in the index, and, on the node that
// committed a step, polls the other nodes' parts for their uploads.
//
// Lock order: FileSystem's lock -> mu_ (the signalling hooks are called
// with the namespace lock held and take only mu_). ClusterPort is never
// called with mu_ or refresh_mu_ held... except refresh_mu_, which is taken
// before the namespace lock and only by MaybeRefresh.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/node_fence.h"
#include "common/clock.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "control/event_log.h"
#include "namespace/cluster_hooks.h"
#include "namespace/cluster_port.h"
#include "remote/decide_once.h"
#include "remote/object_store.h"

namespace ckptfs {

struct ClusterBookOptions {
  std::string node;                             // --node
  std::string cache_id;                         // the cache's identity, in part records
  uint64_t epoch = 1;                           // the node name's epoch this cache holds
  int64_t refresh_ns = 1'000'000'000;           // --refresh
  uint32_t job_nodes = 0;                       // --nodes (0 = not given), for status.json
  int64_t publish_timeout_ns = 60'000'000'000;  // a close waits at most this for the bucket
  int64_t upload_wait_ns =
      600'000'000'000;  // a read of another node's file waits at most this (--read-wait)
  int64_t commit_watch_first_ns =
      100'000'000;               // the commit watch's first poll (CommitWatch); tests shorten it
  const Clock* clock = nullptr;  // nullptr: the system clock
  // What the mount's probe found of the store's conditional writes, as
  // status.json names it ("honoured", "ignored", ...; "" = not probed).
  std::string conditional_put;
};

// Keys of the bucket's step index: ".ckptfs-index/<escaped step path>~<state>.json".
inline constexpr const char* kStepIndexDir = ".ckptfs-index/";
std::string StepIndexKey(const std::string& step_path, char state);
// false for keys that are not index keys.
bool ParseStepIndexKey(const std::string& key, std::string* step_path, char* state);

class ClusterBook : public ClusterHooks {
 public:
  ClusterBook(ClusterPort* port, ObjectStore* store, EventLog* events, ClusterBookOptions options);
  ~ClusterBook() override;
  ClusterBook(const ClusterBook&) = delete;
  ClusterBook& operator=(const ClusterBook&) = delete;

  // Starts the background thread (tests may drive RunOnceForTest instead).
  void Start();
  void Stop();
  // One pass of the background work, on the calling thread.
  void RunOnceForTest();
  // What a restarted daemon owes the cluster (parts to sync and put again),
  // queued for the background work. Start calls it; tests that drive
  // RunOnceForTest call it themselves.
  void QueueRestartWork() EXCLUDES(mu_);

  // ClusterHooks.
  const std::string& node() const override { return options_.node; }
  Status PublishPart(const std::string& step_path) override;
  void PublishLater(const std::string& step_path) override;
  Result<std::vector<PartRecord>> GatherParts(const std::string& step_path) override;
  Result<std::string> ReadPartFile(const std::string& step_path, const PartRecord::File& file,
                                   const std::string& owner, uint64_t offset,
                                   uint64_t length) override;
  Result<ClusterStepRecord> DecideStep(const ClusterStepRecord& proposal,
                                       const std::string& follows_removal) override;
  std::string RemovalSeen(const std::string& step_path) override;
  void MaybeRefresh() override;
  void RefreshForNewStep() override;
  void RefreshForRetention() override;
  Result<bool> StepSavedAgain(const std::string& step_path) override;
  Result<PartRecord> AwaitUpload(const std::string& step_path, const std::string& rel_path,
                                 const std::string& owner) override;
  void PartUploadsChanged(const std::string& step_path) override;
  void StepPersisted(const std::string& step_path) override;
  void AwaitingParts() override;
  void StepRemoved(const std::string& step_path) override;
  void RunFileUploaded(const RunFileRecord& record) override;
  void WatchForCommit(const std::string& step_path) override;

  // Requests made to the bucket, by kind (status.json, bench/cluster).
  struct Counters {
    std::atomic<uint64_t> part_puts{0};
    std::atomic<uint64_t> part_gets{0};
    std::atomic<uint64_t> lists{0};
    std::atomic<uint64_t> index_puts{0};
    std::atomic<uint64_t> index_gets{0};
    std::atomic<uint64_t> decisions{0};
    std::atomic<uint64_t> refreshes{0};
    std::atomic<uint64_t> deletes{0};            // DeleteObjects requests
    std::atomic<uint64_t> commit_watch_gets{0};  // GETs of ~c by the commit watch
    std::atomic<uint64_t> run_file_puts{0};      // ~f records written
    std::atomic<uint64_t> run_file_gets{0};      // ~f records read by refreshes
    // Not a request: closes whose publication went to the background
    // (PublishLater), the PUT counted in part_puts when it is made.
    std::atomic<uint64_t> closes_published_later{0};
  };
  const Counters& counters() const { return counters_; }
  void AddStatus(nlohmann::json* status) const override;

 private:
  // One step's publications: tickets handed to callers, the newest one in
  // the bucket, whether a PUT is in flight, and the last failure.
  struct Publication {
    uint64_t requested = 0;
    uint64_t published = 0;
    bool in_flight = false;
    uint64_t failed_through = 0;
    Status failure;
  };

  // PublishPart without the holder's check (the book's own republications).
  Status PublishPartNow(const std::string& step_path) EXCLUDES(mu_);
  // PUTs the part as it is now.
  Status PutPart(const std::string& step_path) EXCLUDES(mu_);
  // MaybeRefresh for a view at most max_age_ns old.
  void RefreshWithin(int64_t max_age_ns) EXCLUDES(mu_);
  // RefreshForNewStep's bound: the kernel's LOOKUP of the new name, just
  // before its MKDIR, usually refreshed already.
  static constexpr int64_t kNewStepViewAgeNs = 50'000'000;
  // One refresh (LIST of the index, then applying it), unless another one
  // ran since the caller read generation `seen`.
  void RefreshNow(uint64_t seen) EXCLUDES(mu_);
  // A step path's entries in the index, as one LIST gives them.
  struct IndexedStep {
    bool committed = false, persisted = false, removed = false;
    std::string tombstone;  // the ~r entry's tag
  };
  // The step record (~c) of a step (one GET).
  Result<std::string> GetStepRecord(const std::string& step_path);
  // The step records a refresh will apply (those committed in the index and
  // not in views, or tombstoned too), kGatherParallel GETs at a time.
  std::map<std::string, Result<std::string>> GetStepRecords(
      const std::map<std::string, IndexedStep>& steps,
      const std::map<std::string, ClusterPort::StepView>& views,
      const std::set<std::string>& removing);
  // The removal of a step for the cluster: a tombstone naming the removed
  // record's proposal, then every object under the step, then its index entries.
  Status RemoveFromBucket(const std::string& step_path) EXCLUDES(mu_);
  // The step's entries in the index (one LIST): state ('c', 'p', 'r') ->
  // tag ("" where the store gives none).
  Result<std::map<char, std::string>> IndexEntriesOf(const std::string& step_path);
  // After a PUT of `key` for a step committed here: whether the step's
  // removal by another node reached the bucket meanwhile (its committed
  // entry is gone), in which case the PUT is undone. The removal deletes
  // the committed entry after writing its tombstone and before it sweeps the
  // step's objects, so either this LIST sees it gone or that sweep (or the
  // entry's deletion, for `key` itself in the index) comes after the PUT.
  bool UndoneAfterRemoval(const std::string& step_path, const std::string& key);
  // A refresh found the name's tombstone `tag`, and this node holds the step
  // uncommitted: a save that follows the tombstone stays; one left over
  // from the removed save goes, with what it put in the bucket.
  bool SettleLeftover(const std::string& step_path, const ClusterPort::StepView& view,
                      const std::string& tag) EXCLUDES(mu_);
  // The proposal a step index entry's body names ("" when unreadable).
  std::string ProposalIn(const std::string& key);
  // The "proposal" of an index entry's or decision's body ("" if none).
  static std::string ProposalOf(const std::string& body);
  // Whether the step's tombstone (~r) names proposal: that decision is a
  // removed step's, not yet deleted by its removal. One GET.
  bool Tombstoned(const std::string& step_path, const std::string& proposal);
  // The error event for an index entry whose body does not decode (or names
  // another path than its key).
  void ReportMalformedIndexEntry(const std::string& path, const char* what, const Status& decoded);
  Result<PartRecord> GetPart(const std::string& step_path, const std::string& node);
  // GetPart of each (step, node), kGatherParallel at a time, in order.
  std::vector<Result<PartRecord>> GetParts(const std::vector<ClusterPort::AwaitedPart>& which);
  // One persist poll over the awaited parts; returns true when one moved.
  bool PollAwaitedParts(const std::vector<ClusterPort::AwaitedPart>& awaited);
  // The commit watch's due polls: a GET of each watched step's ~c key, and
  // the step applied here once it is there. Returns when the next poll is
  // due (0: nothing watched).
  int64_t PollCommitWatch() EXCLUDES(mu_);
  void Loop() EXCLUDES(mu_);
  // The background work; returns true when parts are still awaited.
  bool Pass() EXCLUDES(mu_);
  void Sleep(int64_t ns);
  uint64_t NextSeq() EXCLUDES(mu_);
  int64_t Now() const { return clock_->MonotonicNanos(); }

  ClusterPort* const port_;
  ObjectStore* const store_;
  EventLog* const events_;
  const ClusterBookOptions options_;
  const Clock* const clock_;
  Counters counters_;
  NodeFence fence_;  // the node name's epoch: this mount's writes, and other nodes' parts

  mutable Mutex mu_;
  std::condition_variable cv_;  // publications ending; background work queued; stopping
  std::map<std::string, Publication> publications_ GUARDED_BY(mu_);
  uint64_t last_seq_ GUARDED_BY(mu_) = 0;
  std::set<std::string> republish_ GUARDED_BY(mu_);
  // Steps whose part was put quiet but not durable: synced (SyncPart) and
  // put again by the book's thread; failed syncs retry a second later.
  std::set<std::string> to_sync_ GUARDED_BY(mu_);
  std::set<std::string> sync_retry_;  // the book's thread only
  std::set<std::string> persisted_ GUARDED_BY(mu_);
  std::set<std::string> removed_ GUARDED_BY(mu_);   // to remove from the bucket
  std::set<std::string> removing_ GUARDED_BY(mu_);  // removed here, until the bucket says so
  // The tombstones (~r) of the step index as this node last listed them,
  // path -> tag, and whether that view is fresh (the last refresh worked):
  // what a step created here follows (RemovalSeen).
  std::map<std::string, std::string> tombstone_tags_ GUARDED_BY(mu_);
  bool tombstones_known_ GUARDED_BY(mu_) = false;
  bool flush_invalidations_ GUARDED_BY(mu_) = false;
  bool awaiting_ GUARDED_BY(mu_) = true;  // look once at start: persist duty survives a restart
  // The persist duty's polls of other nodes' parts (the book's thread only):
  // one LIST of each awaited step's part records every kPartsPollNs (every
  // kPartsIdlePollNs once no part has changed for kPartsQuietNs), and a GET
  // only of the awaited records whose tag moved since they were last read
  // (PollAwaitedParts).
  static constexpr int64_t kPartsPollNs = 200'000'000;
  static constexpr int64_t kPartsIdlePollNs = 1'000'000'000;
  static constexpr int64_t kPartsQuietNs = 60'000'000'000;
  int64_t next_parts_poll_ = 0;
  int64_t parts_changed_at_ = 0;                  // when a poll last saw an awaited part move
  std::map<std::string, std::string> part_tags_;  // part record key -> tag when last read
  // The commit watch (WatchForCommit): steps this node published a part of
  // and sees as writing. The first poll comes commit_watch_first_ns after the
  // node's last publication of the step (while its ranks keep closing files
  // nothing is polled), then at doubling intervals, kCommitWatchPolls in
  // all (about 6 s): a commit later than that is learnt at the next lookup,
  // and this node's uploads start at the tier's commit hold anyway. So a
  // node makes at most that many GETs per publication burst, 1 request each.
  struct CommitWatch {
    int64_t next_ns = 0;
    int64_t delay_ns = 0;
    int polls_left = 0;
  };
  static constexpr int kCommitWatchPolls = 6;
  std::map<std::string, CommitWatch> commit_watch_ GUARDED_BY(mu_);
  bool commit_watch_changed_ GUARDED_BY(mu_) = false;
  int64_t next_commit_watch_ = 0;  // the book's thread only: when PollCommitWatch is next due
  // GatherParts' parts of each step not yet decided here, with the tag each
  // was listed with: a gather reads only the parts that moved.
  struct GatheredPart {
    std::string tag;
    PartRecord part;
  };
  static constexpr size_t kGatheredStepsMax = 64;
  std::map<std::string, std::map<std::string, GatheredPart>> gathered_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  bool thread_running_ GUARDED_BY(mu_) = false;
  bool refresh_requested_ GUARDED_BY(mu_) = false;
  bool refresh_running_ GUARDED_BY(mu_) = false;
  int64_t refresh_wait_until_ GUARDED_BY(mu_) = 0;  // lookups wait for the refresh until then
  std::thread thread_;

  // One refresh at a time; callers that waited for it use its result.
  Mutex refresh_mu_;
  std::atomic<int64_t> refreshed_at_{0};
  std::atomic<bool> ever_refreshed_{false};
  std::atomic<uint64_t> refresh_generation_{0};  // refreshes begun after a caller looked
  std::atomic<uint64_t> refresh_errors_{0};
  std::atomic<int64_t> retry_refresh_at_{0};  // after a failed refresh: none before this
  int64_t refresh_backoff_ns_ = 0;            // refresh_mu_ held
  // Run-level file records: the tag of each ~f key as last applied (or
  // found to be this node's own), so a refresh GETs only records that
  // moved (refresh_mu_ held).
  std::map<std::string, std::string> run_file_tags_;
  // Versions this node uploaded, to record in the index (newest per path).
  std::map<std::string, RunFileRecord> run_files_to_record_ GUARDED_BY(mu_);
  std::map<std::string, RunFileRecord> run_files_retry_;  // the book's thread only: failed PUTs

  // The refresh's part for run-level files: applies the ~f records whose
  // tag moved. Returns true when the namespace changed.
  // records: the ~f keys listed, with the path each names.
  bool ApplyRunFileRecords(const std::vector<std::pair<ObjectInfo, std::string>>& records)
      EXCLUDES(mu_);
  // PUTs each version queued by RunFileUploaded; failures stay queued.
  void RecordRunFiles(std::map<std::string, RunFileRecord> files) EXCLUDES(mu_);
};

}  // namespace ckptfs
