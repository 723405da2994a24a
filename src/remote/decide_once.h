// DecideOnce: of several nodes proposing a body for one key of the shared
// object store (a step's commit decision), exactly one body is ever
// decided, and every proposer that finishes returns that body. The object
// store is the only thing the nodes share: no coordinator, no lease.
//
// It rests on the store's conditional create (`If-None-Match: *`, or GCS's
// `x-goog-if-generation-match: 0`), which cluster mode requires and probes
// at mount (cluster_join.h): a GET of the key, and if there is no body
// yet, a PutIfAbsent of this proposal's. Whoever gets EEXIST reads the
// winner's body back. 2 requests without contention. On a store that
// ignores the condition two proposers could both "win" (the property test
// shows it), which is why the mount refuses such a store. (Until issue 28,
// such stores decided by votes, Disk Paxos over immutable keys: about 7
// requests per decision, and keys s3rver could not hold for long node
// names. It went once the requirement came.)
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "remote/object_store.h"

namespace ckptfs {

struct DecideOptions {
  // This proposer: a node name (node_name.h rules) and a nonce unique to
  // this proposal (random hex); together they name the proposal.
  std::string node;
  std::string nonce;
  // Bodies read back that this rejects (a PUT in progress on a store whose
  // PUT is not atomic) are read again after a back-off. nullptr: any body.
  std::function<bool(const std::string& body)> valid;
  // Waits between rounds (jittered, doubling from backoff_ns); tests pass
  // their own. Gives up with ETIMEDOUT after max_rounds.
  std::function<void(int64_t nanos)> sleep;
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

}  // namespace ckptfs
