// A cache bound to its cluster node (meta key node_name), its stable id, and
// the mount-time sequence that binds only after joining.
#include "cli/cluster_identity.h"

#include <gtest/gtest.h>

#include "manifest/memory_manifest_store.h"
#include "manifest/schema.h"
#include "remote/memory_object_store.h"

namespace ckptfs {
namespace {

std::optional<std::string> Meta(ManifestStore* m, const char* key) {
  auto v = m->Get(KeySpace::kMeta, key);
  EXPECT_TRUE(v.ok());
  return v.ok() ? *v : std::nullopt;
}

TEST(ClusterIdentityTest, CacheIsBoundToItsFirstNode) {
  MemoryManifestStore manifest;
  // No node: nothing is recorded.
  ASSERT_TRUE(BindCacheToNode(&manifest, "/c", "").ok());
  EXPECT_FALSE(Meta(&manifest, kNodeNameKey).has_value());
  ASSERT_TRUE(BindCacheToNode(&manifest, "/c", "gpu-1").ok());
  EXPECT_EQ(Meta(&manifest, kNodeNameKey), "gpu-1");
  EXPECT_TRUE(BindCacheToNode(&manifest, "/c", "gpu-1").ok());
  EXPECT_TRUE(CheckCacheNode(&manifest, "/c", "gpu-1").ok());

  Status other = BindCacheToNode(&manifest, "/c", "gpu-2");
  EXPECT_EQ(other.err(), EINVAL);
  EXPECT_EQ(other.message(), "cache /c belongs to node gpu-1; mount it with --node gpu-1");
  Status none = CheckCacheNode(&manifest, "/c", "");
  EXPECT_EQ(none.err(), EINVAL);
  EXPECT_EQ(none.message(), "cache /c belongs to cluster node gpu-1; mount it with --node gpu-1");
  EXPECT_EQ(Meta(&manifest, kNodeNameKey), "gpu-1");
}

TEST(ClusterIdentityTest, BindingRefusesAManifestOfAnotherFormat) {
  MemoryManifestStore manifest;
  ManifestBatch b;
  b.Put(KeySpace::kMeta, kFormatVersionKey, "99");
  ASSERT_TRUE(manifest.Write(b, true).ok());
  EXPECT_EQ(BindCacheToNode(&manifest, "/c", "n").err(), EINVAL);
  EXPECT_EQ(EnsureCacheId(&manifest).err(), EINVAL);
  EXPECT_FALSE(Meta(&manifest, kNodeNameKey).has_value());
}

TEST(ClusterIdentityTest, CacheIdIsMadeOnceAndKept) {
  MemoryManifestStore manifest;
  auto id = EnsureCacheId(&manifest);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->size(), 32u);
  EXPECT_EQ(id->find_first_not_of("0123456789abcdef"), std::string::npos) << *id;
  EXPECT_EQ(*EnsureCacheId(&manifest), *id);
  EXPECT_EQ(Meta(&manifest, kCacheIdKey), *id);
  MemoryManifestStore other;
  EXPECT_NE(*EnsureCacheId(&other), *id);
}

TEST(ClusterIdentityTest, JoinAtMountBindsOnlyAfterJoining) {
  MemoryObjectStore store;
  EventLog events;
  MemoryManifestStore first, second;
  auto a = JoinClusterAtMount(&first, &store, "/c1", "a", &events);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(a->has_value());
  EXPECT_EQ((*a)->probe, ConditionalPut::kSupported);
  EXPECT_EQ(Meta(&first, kNodeNameKey), "a");
  EXPECT_NE(events.Render().find("\"event\":\"cluster_join\""), std::string::npos) << events.Render();

  // A second cache asking for the same name is refused, and stays unbound:
  // it can join under another name.
  auto taken = JoinClusterAtMount(&second, &store, "/c2", "a", &events);
  EXPECT_EQ(taken.err(), EEXIST) << taken.status().ToString();
  EXPECT_FALSE(Meta(&second, kNodeNameKey).has_value());
  auto b = JoinClusterAtMount(&second, &store, "/c2", "b", &events);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(Meta(&second, kNodeNameKey), "b");

  // The first cache again, as itself, as another node, and without --node.
  EXPECT_TRUE(JoinClusterAtMount(&first, &store, "/c1", "a", &events).ok());
  EXPECT_EQ(JoinClusterAtMount(&first, &store, "/c1", "c", &events).err(), EINVAL);
  EXPECT_EQ(JoinClusterAtMount(&first, nullptr, "/c1", "", &events).err(), EINVAL);
  EXPECT_FALSE(store.Peek(".ckptfs-nodes/c.json").has_value());

  // A cache never in a cluster mounts without --node as before.
  MemoryManifestStore plain;
  auto none = JoinClusterAtMount(&plain, nullptr, "/c3", "", &events);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_FALSE(Meta(&plain, kCacheIdKey).has_value());
}

}  // namespace
}  // namespace ckptfs
