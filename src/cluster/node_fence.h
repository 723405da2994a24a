// NodeFence: a node name held by one daemon at a time (SPEC section 9, "node
// names"; docs/cluster.md). A mount with --replace-node takes a name over at
// the next *epoch* (cluster_join.h); the epoch is the name's fencing token,
// and this class enforces it on both sides:
//
//  * the committing node drops, from every gather, a part whose epoch is
//    below its node's highest registered epoch, or whose name no mount
//    registered: whatever a replaced daemon still puts into a step never
//    enters a commit, nor counts towards --nodes (DropFencedParts; one LIST
//    of `.ckptfs-nodes/` per registry_ttl_ns at most, a request per 1,000
//    names);
//  * the replaced daemon, if it still runs, finds out at the first open for
//    writing of a step (one LIST of its own name's registrations, at most
//    every recheck_ns) and from then on refuses with EROFS to write into the
//    cluster's steps, with a message naming what happened (CheckHolder).
//
// The fence is the gather's check; the holder's check only turns a write
// that would be dropped into a clear error. A registry that cannot be
// listed keeps the gather waiting (EAGAIN) and does not fence the holder.
//
// Thread-safe. mu_ is a leaf: no store request is made with it held.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "control/event_log.h"
#include "formats/cluster_records.h"
#include "remote/object_store.h"

namespace ckptfs {

struct NodeFenceOptions {
  std::string node;                         // --node
  uint64_t epoch = 1;                       // the name's epoch this mount holds
  int64_t recheck_ns = 1'000'000'000;       // CheckHolder looks at most this often (--refresh)
  int64_t registry_ttl_ns = 1'000'000'000;  // DropFencedParts lists at most this often (--refresh)
};

class NodeFence {
 public:
  // lists counts the LISTs made (status.json's cluster.requests.lists).
  NodeFence(ObjectStore* store, EventLog* events, const Clock* clock, std::atomic<uint64_t>* lists,
            NodeFenceOptions options);

  // Ok while this mount holds its name; EROFS once another cache took it
  // over (and for good: the holder is fenced until it mounts again).
  Status CheckHolder() EXCLUDES(mu_);
  // EROFS when a check found this mount replaced; never looks.
  Status Fenced() const EXCLUDES(mu_);
  // Removes from parts (another node's, read for a commit of step_path)
  // those whose epoch is below their node's, and those of names never
  // registered, with a cluster_fenced_part warning the first time.
  // EAGAIN when the registry cannot be listed.
  Status DropFencedParts(const std::string& step_path, std::vector<PartRecord>* parts)
      EXCLUDES(mu_);
  // Forgets the warnings given for a step (decided or removed).
  void ForgetStep(const std::string& step_path) EXCLUDES(mu_);

  // status.json's cluster block: "epoch", and "fenced" (the message, or null).
  void AddStatus(nlohmann::json* block) const EXCLUDES(mu_);

 private:
  int64_t Now() const { return clock_->MonotonicNanos(); }

  ObjectStore* const store_;
  EventLog* const events_;
  const Clock* const clock_;
  std::atomic<uint64_t>* const lists_;
  const NodeFenceOptions options_;

  mutable Mutex mu_;
  std::string fenced_ GUARDED_BY(mu_);  // the message; "" while this mount holds its name
  bool checked_ GUARDED_BY(mu_) = false;
  int64_t checked_at_ GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> registry_ GUARDED_BY(mu_);  // node -> highest epoch
  bool listed_ GUARDED_BY(mu_) = false;
  int64_t listed_at_ GUARDED_BY(mu_) = 0;
  // "<step>\n<node>\n<epoch>" of each part dropped and warned about.
  std::set<std::string> reported_ GUARDED_BY(mu_);
};

}  // namespace ckptfs
