// Joining a cluster at mount (SPEC section 9, docs/cluster.md): what a node
// with --node does in the shared remote before it serves anything.
//
//  1. Probe whether the store honours conditional puts (ProbeConditionalPut,
//     on a scratch key `.ckptfs-probe/<node>-<16 hex>`), and refuse cluster
//     mode where it does not: the step decisions and node names rest on it.
//  2. Check `.ckptfs-cluster.json`, which says how the nodes decide: the
//     first cluster mount writes "conditional-put"; a bucket an older
//     ckptfs pinned to "votes" (a store that ignored the condition then) is
//     refused.
//  3. Register the node: `.ckptfs-nodes/<node>.json` names the cache (its
//     cache id) that uses the name, created with a conditional put, so of
//     two caches registering one name at once exactly one gets it. Another
//     cache under the same name is refused, because two caches publishing
//     parts as one node would overwrite each other's part records.
//  4. Or, with --replace-node, take the name over from the cache that holds
//     it: a registration at the next *epoch*, `.ckptfs-nodes/<node>~<E>.json`,
//     again a conditional create, so of two replacements at once exactly one
//     wins. The holder of a name is the cache of its highest epoch, and the
//     epoch is the name's fencing token: every part record carries its
//     node's epoch, and a gather drops a part whose epoch is lower than the
//     name's (ClusterBook::GatherParts), so a replaced daemon that still
//     runs can no longer put anything into a step.
//
// Bodies are canonical (fixed key order, compact, "\n"), so nodes writing
// the same content write the same bytes. Readers retry a body that does not
// parse for a moment (a PUT in progress on a store whose PUT is not atomic)
// before calling it damaged.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "remote/conditional_put_probe.h"
#include "remote/object_store.h"

namespace ckptfs {

inline constexpr const char* kClusterFileKey = ".ckptfs-cluster.json";
inline constexpr const char* kNodeRegistryDir = ".ckptfs-nodes";
inline constexpr const char* kProbeDir = ".ckptfs-probe";

inline constexpr const char* kDecideByConditionalPut = "conditional-put";

struct ClusterMembership {
  std::string node;
  ConditionalPut probe = ConditionalPut::kUnsupported;  // what this node found
  std::string cluster_json;                             // the pinned file's bytes
  std::string cache_id;                                 // this node's cache (set by the mount)
  uint64_t epoch = 1;  // the name's epoch this cache holds (the fencing token)
  // With --replace-node, the cache this one took the name over from ("" =
  // none: the name was free or already this cache's).
  std::string replaced_cache_id;
  std::string replaced_host;
};

// The bytes of .ckptfs-cluster.json this build writes ("conditional-put").
std::string EncodeClusterFile();
// The file's "decide": "conditional-put" or "votes" (what an older ckptfs
// may have pinned); EIO "cluster file: <why>" for anything else (unknown
// keys are ignored, a newer version is refused).
Result<std::string> DecodeClusterFile(const std::string& body);

// `.ckptfs-nodes/<node>.json` (epoch 1) or `.ckptfs-nodes/<node>~<epoch>.json`
// (a replacement; `~` is not in node names), and its body.
std::string NodeRegistrationKey(const std::string& node, uint64_t epoch = 1);
// false for keys that are not registrations (the probe's scratch keys,
// anything else under the directory).
bool ParseNodeRegistrationKey(const std::string& key, std::string* node, uint64_t* epoch);
// Each registered node's highest epoch, from one LIST of `.ckptfs-nodes/`
// (one request per 1,000 names); with node given, of that name only.
Result<std::map<std::string, uint64_t>> ListNodeEpochs(ObjectStore* store,
                                                       const std::string& node = "");
std::string EncodeNodeRegistration(const std::string& node, const std::string& cache_id,
                                   const std::string& host);
struct NodeRegistration {
  std::string node;
  std::string cache_id;
  std::string host;
};
// EIO "node registration: <why>".
Result<NodeRegistration> DecodeNodeRegistration(const std::string& body);

// Steps 1-3 above (1, 2 and 4 with replace) for this node (a valid node
// name), whose cache has cache_id, on host (for the message another cache
// gets). replace is a no-op where the name is free or this cache's already.
// Errors:
//  * EOPNOTSUPP: the store does not honour conditional puts, or the bucket
//    is pinned to votes;
//  * EEXIST: another cache holds the name (without replace), or another
//    replacement took it at the same moment;
//  * EIO: a cluster file or registration that does not parse (the key is
//    named);
//  * the store's own errors (unreachable, denied), annotated.
Result<ClusterMembership> JoinCluster(ObjectStore* store, const std::string& node,
                                      const std::string& cache_id, const std::string& host,
                                      bool replace = false);

}  // namespace ckptfs
