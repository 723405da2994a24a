// A cache's place in a cluster (SPEC section 9, --node): the cache is bound
// to the node name of its first cluster mount (meta key node_name), because
// the files in it are that node's part of every step it wrote; mounting it
// under another name, or as a single-node mount, would orphan them or mix
// two nodes' parts. The binding is recorded only once the node has joined
// the cluster, so a name the remote refuses (taken by another cache) does
// not stick to the cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cluster/cluster_join.h"
#include "common/status.h"
#include "control/event_log.h"
#include "manifest/manifest_store.h"
#include "remote/object_store.h"

namespace ckptfs {

// Ok when the cache may be mounted as node (""= not in cluster mode): it is
// bound to no node, or to this one. EINVAL naming the bound node otherwise.
// Reads only.
Status CheckCacheNode(ManifestStore* manifest, const std::string& cache_dir, const std::string& node);

// CheckCacheNode, then records node as the cache's (a synced write) when
// the cache has none yet and node is not "".
Status BindCacheToNode(ManifestStore* manifest, const std::string& cache_dir, const std::string& node);

// The cache's id (meta key cache_id), made (32 random hex digits, synced)
// if it has none yet.
Result<std::string> EnsureCacheId(ManifestStore* manifest);

// What a mount does before the filesystem is loaded: CheckCacheNode always
// (a bound cache needs its --node); with a node, also EnsureCacheId,
// JoinCluster on store (the remote; not null then) as this host (replace:
// --replace-node), and BindCacheToNode, and logs a cluster_join event.
// nullopt without a node.
Result<std::optional<ClusterMembership>> JoinClusterAtMount(ManifestStore* manifest,
                                                            ObjectStore* store,
                                                            const std::string& cache_dir,
                                                            const std::string& node,
                                                            EventLog* events, bool replace = false);

}  // namespace ckptfs
