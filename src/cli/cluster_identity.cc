#include "cli/cluster_identity.h"

#include <unistd.h>

#include <climits>

#include "common/random_hex.h"
#include "manifest/schema.h"

namespace ckptfs {

namespace {

Result<std::optional<std::string>> BoundNode(ManifestStore* manifest) {
  auto bound = manifest->Get(KeySpace::kMeta, kNodeNameKey);
  if (!bound.ok()) return bound.status().Annotate("reading the cache's node name");
  if (bound->has_value() && (*bound)->empty()) return std::optional<std::string>();
  return *bound;
}

std::string HostName() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

Status CheckCacheNode(ManifestStore* manifest, const std::string& cache_dir, const std::string& node) {
  auto bound = BoundNode(manifest);
  if (!bound.ok()) return bound.status();
  if (!bound->has_value() || **bound == node) return Status::Ok();
  const std::string& name = **bound;
  if (node.empty()) {
    return Status::Error(EINVAL, "cache " + cache_dir + " belongs to cluster node " + name +
                                     "; mount it with --node " + name);
  }
  return Status::Error(EINVAL, "cache " + cache_dir + " belongs to node " + name + "; mount it with --node " + name);
}

Status BindCacheToNode(ManifestStore* manifest, const std::string& cache_dir, const std::string& node) {
  CKPTFS_RETURN_IF_ERROR(CheckCacheNode(manifest, cache_dir, node));
  if (node.empty()) return Status::Ok();
  auto bound = BoundNode(manifest);
  if (!bound.ok()) return bound.status();
  if (bound->has_value()) return Status::Ok();
  // Nothing goes into a manifest this ckptfs cannot read.
  CKPTFS_RETURN_IF_ERROR(CheckFormatVersion(*manifest));
  ManifestBatch batch;
  batch.Put(KeySpace::kMeta, kNodeNameKey, node);
  return manifest->Write(batch, /*sync=*/true).Annotate("recording the cache's node name");
}

Result<std::string> EnsureCacheId(ManifestStore* manifest) {
  auto id = manifest->Get(KeySpace::kMeta, kCacheIdKey);
  if (!id.ok()) return id.status().Annotate("reading the cache id");
  if (id->has_value() && !(*id)->empty()) return **id;
  CKPTFS_RETURN_IF_ERROR(CheckFormatVersion(*manifest));
  auto made = RandomHex(16);
  if (!made.ok()) return made.status();
  ManifestBatch batch;
  batch.Put(KeySpace::kMeta, kCacheIdKey, *made);
  CKPTFS_RETURN_IF_ERROR(manifest->Write(batch, /*sync=*/true).Annotate("recording the cache id"));
  return made;
}

Result<std::optional<ClusterMembership>> JoinClusterAtMount(ManifestStore* manifest,
                                                            ObjectStore* store,
                                                            const std::string& cache_dir,
                                                            const std::string& node,
                                                            EventLog* events, bool replace) {
  CKPTFS_RETURN_IF_ERROR(CheckCacheNode(manifest, cache_dir, node));
  if (node.empty()) return std::optional<ClusterMembership>();
  if (store == nullptr) return Status::Error(EINVAL, "--node needs --remote: the bucket is what the nodes share");
  auto cache_id = EnsureCacheId(manifest);
  if (!cache_id.ok()) return cache_id.status();
  auto joined = JoinCluster(store, node, *cache_id, HostName(), replace);
  if (!joined.ok()) return joined.status();
  CKPTFS_RETURN_IF_ERROR(BindCacheToNode(manifest, cache_dir, node));
  joined->cache_id = *cache_id;
  nlohmann::json event = {
      {"event", "cluster_join"},     {"node", node},
      {"cache_id", *cache_id},       {"epoch", joined->epoch},
      {"remote", store->Describe()}, {"conditional_put", ConditionalPutName(joined->probe)}};
  if (!joined->replaced_cache_id.empty()) {
    // --replace-node took the name over: whose it was, for the operator.
    event["replaced_cache_id"] = joined->replaced_cache_id;
    event["replaced_host"] = joined->replaced_host;
  }
  events->Append(std::move(event));
  return std::optional<ClusterMembership>(std::move(joined).value());
}

}  // namespace ckptfs
