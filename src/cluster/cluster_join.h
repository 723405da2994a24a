// Joining a cluster at mount (SPEC section 9, docs/design/cluster-mode.md
// sections 1 and 2): what a node with --node does in the shared remote
// before it serves anything.
//
//  1. Probe whether the store honours conditional puts (ProbeConditionalPut,
//     on a scratch key `.ckptfs-probe/<node>-<16 hex>`).
//  2. Pin how the cluster decides (DecideOnce's mode) in
//     `.ckptfs-cluster.json`: the first cluster mount writes it, every mount
//     reads it back and uses what it says, so a node behind a proxy that
//     answers differently cannot split the cluster in two modes. Pinned
//     "conditional-put" on a store this node finds ignoring (or refusing)
//     the condition refuses the mount: deciding by votes there while others
//     use conditional puts would break agreement.
//  3. Register the node: `.ckptfs-nodes/<node>.json` names the cache (its
//     cache id) that uses the name. Another cache under the same name is
//     refused, because two caches publishing parts as one node would
//     overwrite each other's part records.
//
// Bodies are canonical (fixed key order, compact, "\n"), so nodes writing
// the same content write the same bytes, which is safe even on a store whose
// PUT is not atomic (s3rver). Readers retry a body that does not parse for a
// moment (a PUT in progress there) before calling it damaged.
#pragma once

#include <string>

#include "common/status.h"
#include "remote/conditional_put_probe.h"
#include "remote/decide_once.h"
#include "remote/object_store.h"

namespace ckptfs {

inline constexpr const char* kClusterFileKey = ".ckptfs-cluster.json";
inline constexpr const char* kNodeRegistryDir = ".ckptfs-nodes";
inline constexpr const char* kProbeDir = ".ckptfs-probe";

struct ClusterMembership {
  std::string node;
  DecideMode mode = DecideMode::kVotes;                 // pinned in .ckptfs-cluster.json
  ConditionalPut probe = ConditionalPut::kUnsupported;  // what this node found
  std::string cluster_json;                             // the pinned file's bytes
  std::string cache_id;                                 // this node's cache (set by the mount)
};

// "conditional-put" or "votes", as in .ckptfs-cluster.json and status.json.
const char* DecideModeName(DecideMode mode);

// The bytes of .ckptfs-cluster.json pinning mode.
std::string EncodeClusterFile(DecideMode mode);
// EIO "cluster file: <why>" for anything but a body EncodeClusterFile could
// have written (unknown keys are ignored, a newer version is refused).
Result<DecideMode> DecodeClusterFile(const std::string& body);

// `.ckptfs-nodes/<node>.json`, and its body.
std::string NodeRegistrationKey(const std::string& node);
std::string EncodeNodeRegistration(const std::string& node, const std::string& cache_id,
                                   const std::string& host);
struct NodeRegistration {
  std::string node;
  std::string cache_id;
  std::string host;
};
// EIO "node registration: <why>".
Result<NodeRegistration> DecodeNodeRegistration(const std::string& body);

// Steps 1-3 above for this node (a valid node name), whose cache has
// cache_id, on host (for the message another cache gets). Errors:
//  * EOPNOTSUPP: the bucket is pinned to conditional puts and this node's
//    store does not honour them;
//  * EEXIST: another cache is registered under the name;
//  * EIO: a cluster file or registration that does not parse (the key is
//    named);
//  * the store's own errors (unreachable, denied), annotated.
Result<ClusterMembership> JoinCluster(ObjectStore* store, const std::string& node,
                                      const std::string& cache_id, const std::string& host);

}  // namespace ckptfs
