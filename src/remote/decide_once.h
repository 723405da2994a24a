// DecideOnce: of several nodes proposing a body for one key of the shared
// object store (a step's commit decision), exactly one body is ever
// decided, and every proposer that finishes returns that body. The object
// store is the only thing the nodes share: no coordinator, no lease.
//
// Two ways, chosen once per bucket from ProbeConditionalPut:
//
//  * kConditionalPut, for stores that honour `If-None-Match: *` (AWS S3,
//    MinIO, file://): PutIfAbsent of the body; whoever gets EEXIST reads the
//    winner's body back. 2 requests at most without contention.
//
//  * kVotes, for any store with read-after-write consistent LIST (s3rver,
//    which ignores the condition): Disk Paxos (Gafni and Lamport, 2003) on
//    one "disk". Each proposer owns a block; a block is an empty object
//    whose key carries (mbal, bal, value), written once and never changed,
//    so a torn or lagging body can never be read. A proposer writes its
//    block with ballot b, then lists every block: a higher mbal anywhere
//    means it lost the round (it backs off and tries a higher ballot);
//    otherwise it adopts the value of the highest bal seen (its own proposal
//    if none), writes it with bal = b, lists again, and is decided if still
//    nobody has a higher mbal. Deciders then put the decided body at key:
//    they all write the same bytes. About 7 requests without contention.
//
// Keys used besides `key` (deleted with it by whoever removes the decision):
// `<key>.paxos/p/<proposal>` (proposal bodies) and `<key>.paxos/v/...`
// (blocks). Safe always; live once one proposer runs both phases without
// interference, which the jittered back-off brings about.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "remote/object_store.h"

namespace ckptfs {

enum class DecideMode { kConditionalPut, kVotes };

struct DecideOptions {
  DecideMode mode = DecideMode::kVotes;
  // This proposer: a node name (node_name.h rules) and a nonce unique to
  // this proposal (random hex); together they name the proposal.
  std::string node;
  std::string nonce;
  // Bodies read back that this rejects (a torn write on a store whose PUT
  // is not atomic) are read again after a back-off. nullptr: any body.
  std::function<bool(const std::string& body)> valid;
  // Waits between rounds (jittered, doubling from backoff_ns); tests pass
  // their own. Gives up with ETIMEDOUT after max_rounds.
  std::function<void(int64_t nanos)> sleep;
  // Runs independent requests (the first round's three, in votes mode) and
  // returns when all are done. nullptr: each on a thread of its own, at
  // once. Tests that schedule every request of a proposer themselves pass
  // their own (in some order on the calling thread).
  std::function<void(const std::vector<std::function<void()>>& requests)> run_together;
  int64_t backoff_ns = 20'000'000;
  int64_t max_backoff_ns = 1'000'000'000;
  int max_rounds = 64;
  uint64_t seed = 0;  // for the jitter; 0: from the nonce
};

// The decided body: `body` when this proposal won, another proposer's
// otherwise. Errors of the store are returned as they are (nothing is
// decided by this call then; calling again is safe).
Result<std::string> DecideOnce(ObjectStore* store, const std::string& key, const std::string& body,
                               const DecideOptions& options);

// The prefix of the helper keys DecideOnce writes for key.
std::string DecisionScratchPrefix(const std::string& key);

}  // namespace ckptfs
