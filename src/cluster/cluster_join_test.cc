// JoinCluster: the probe, the mode pinned in .ckptfs-cluster.json, and the
// node registry, over the memory store (honouring, ignoring and refusing
// conditional puts) and file://.
#include "cluster/cluster_join.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/temp_dir_for_test.h"
#include "remote/memory_object_store.h"
#include "tiering/remote_tier_test_util.h"

namespace ckptfs {
namespace {

std::string Body(ObjectStore* store, const std::string& key) {
  auto r = store->GetRange(key, 0, UINT64_MAX);
  return r.ok() ? *r : "<" + r.status().ToString() + ">";
}

TEST(ClusterJoinTest, FirstNodePinsConditionalPutWhereItHolds) {
  MemoryObjectStore store;
  auto m = JoinCluster(&store, "gpu-000", "c0", "host0");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->node, "gpu-000");
  EXPECT_EQ(m->probe, ConditionalPut::kSupported);
  EXPECT_EQ(m->mode, DecideMode::kConditionalPut);
  const std::string pinned = R"({"format":"ckptfs-cluster","version":1,"decide":"conditional-put"})"
                             "\n";
  EXPECT_EQ(m->cluster_json, pinned);
  EXPECT_EQ(Body(&store, ".ckptfs-cluster.json"), pinned);
  EXPECT_EQ(
      Body(&store, ".ckptfs-nodes/gpu-000.json"),
      R"({"format":"ckptfs-node","version":1,"node":"gpu-000","cache_id":"c0","host":"host0"})"
      "\n");
  // The probe's scratch key is gone: only the two records remain.
  auto listed = store.List("");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 2u);
  EXPECT_TRUE(store.List(".ckptfs-probe/")->empty());
}

TEST(ClusterJoinTest, StoreIgnoringConditionsPinsVotes) {
  MemoryObjectStore store;
  store.IgnoreConditions(true);  // as s3rver 3.7.1
  auto m = JoinCluster(&store, "a", "c0", "h");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->probe, ConditionalPut::kIgnored);
  EXPECT_EQ(m->mode, DecideMode::kVotes);
  EXPECT_EQ(Body(&store, ".ckptfs-cluster.json"),
            R"({"format":"ckptfs-cluster","version":1,"decide":"votes"})"
            "\n");
}

TEST(ClusterJoinTest, StoreRefusingConditionsPinsVotesWithPlainPuts) {
  MemoryObjectStore memory;
  testing::SharedStore store(&memory);  // PutIfAbsent: the default EOPNOTSUPP
  auto m = JoinCluster(&store, "a", "c0", "h");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->probe, ConditionalPut::kUnsupported);
  EXPECT_EQ(m->mode, DecideMode::kVotes);
  EXPECT_TRUE(memory.Peek(".ckptfs-nodes/a.json").has_value());
}

TEST(ClusterJoinTest, LaterNodesUseThePinnedMode) {
  MemoryObjectStore store;
  // Pinned to votes by a first node behind an s3rver-like proxy: a node
  // whose store honours the condition still votes.
  store.IgnoreConditions(true);
  ASSERT_TRUE(JoinCluster(&store, "a", "ca", "ha").ok());
  store.IgnoreConditions(false);
  auto b = JoinCluster(&store, "b", "cb", "hb");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->probe, ConditionalPut::kSupported);
  EXPECT_EQ(b->mode, DecideMode::kVotes);
}

TEST(ClusterJoinTest, PinnedConditionalPutRefusesANodeWhoseStoreIgnoresIt) {
  MemoryObjectStore store;
  ASSERT_TRUE(JoinCluster(&store, "a", "ca", "ha").ok());
  store.IgnoreConditions(true);
  auto b = JoinCluster(&store, "b", "cb", "hb");
  ASSERT_EQ(b.err(), EOPNOTSUPP) << b.status().ToString();
  const std::string& msg = b.status().message();
  EXPECT_NE(msg.find("conditional-put"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ignored"), std::string::npos) << msg;
  EXPECT_NE(msg.find(".ckptfs-cluster.json"), std::string::npos) << msg;
  // Refused before registering.
  EXPECT_FALSE(store.Peek(".ckptfs-nodes/b.json").has_value());

  MemoryObjectStore refusing_memory;
  ASSERT_TRUE(JoinCluster(&refusing_memory, "a", "ca", "ha").ok());
  testing::SharedStore refusing(&refusing_memory);
  auto c = JoinCluster(&refusing, "c", "cc", "hc");
  ASSERT_EQ(c.err(), EOPNOTSUPP) << c.status().ToString();
  EXPECT_NE(c.status().message().find("unsupported"), std::string::npos) << c.status().message();
}

TEST(ClusterJoinTest, NodeNameOfAnotherCacheIsRefused) {
  MemoryObjectStore store;
  ASSERT_TRUE(JoinCluster(&store, "gpu-1", "cache-one", "alpha").ok());
  auto again = JoinCluster(&store, "gpu-1", "cache-two", "beta");
  ASSERT_EQ(again.err(), EEXIST) << again.status().ToString();
  const std::string& msg = again.status().message();
  EXPECT_NE(msg.find("node name 'gpu-1' is used by cache cache-one on host 'alpha'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("pick another --node"), std::string::npos) << msg;
  EXPECT_NE(msg.find(".ckptfs-nodes/gpu-1.json"), std::string::npos) << msg;
  // The registration is untouched.
  EXPECT_NE(Body(&store, ".ckptfs-nodes/gpu-1.json").find("cache-one"), std::string::npos);
}

TEST(ClusterJoinTest, SameCacheJoinsAgainAndFollowsAHostChange) {
  MemoryObjectStore store;
  ASSERT_TRUE(JoinCluster(&store, "n", "c", "h1").ok());
  const size_t puts = store.put_calls();
  ASSERT_TRUE(JoinCluster(&store, "n", "c", "h1").ok());
  // The probe's two puts; the records are read, not written again.
  EXPECT_EQ(store.put_calls(), puts + 2);
  ASSERT_TRUE(JoinCluster(&store, "n", "c", "h2").ok());
  EXPECT_EQ(DecodeNodeRegistration(Body(&store, ".ckptfs-nodes/n.json"))->host, "h2");
}

TEST(ClusterJoinTest, DamagedFilesAreEioNamingTheKey) {
  MemoryObjectStore store;
  ASSERT_TRUE(store.Put(".ckptfs-cluster.json", "{\"format\":\"ckptfs-cluster\",\"vers").ok());
  auto m = JoinCluster(&store, "a", "c", "h");
  ASSERT_EQ(m.err(), EIO) << m.status().ToString();
  EXPECT_NE(m.status().message().find(".ckptfs-cluster.json"), std::string::npos)
      << m.status().message();

  ASSERT_TRUE(store.Put(".ckptfs-cluster.json", EncodeClusterFile(DecideMode::kVotes)).ok());
  ASSERT_TRUE(store.Put(".ckptfs-nodes/a.json", "garbage").ok());
  m = JoinCluster(&store, "a", "c", "h");
  ASSERT_EQ(m.err(), EIO) << m.status().ToString();
  EXPECT_NE(m.status().message().find(".ckptfs-nodes/a.json"), std::string::npos)
      << m.status().message();

  // A registration that names another node under this one's key.
  ASSERT_TRUE(store.Put(".ckptfs-nodes/a.json", EncodeNodeRegistration("b", "c", "h")).ok());
  m = JoinCluster(&store, "a", "c", "h");
  EXPECT_EQ(m.err(), EIO) << m.status().ToString();
}

TEST(ClusterJoinTest, StoreErrorsAreReturned) {
  MemoryObjectStore store;
  store.SetUnavailable(true);
  auto m = JoinCluster(&store, "a", "c", "h");
  EXPECT_EQ(m.err(), EHOSTUNREACH) << m.status().ToString();
  EXPECT_NE(m.status().message().find("memory://"), std::string::npos) << m.status().message();
  EXPECT_EQ(JoinCluster(&store, "bad/name", "c", "h").err(), EINVAL);
}

TEST(ClusterJoinTest, ClusterFileDecoding) {
  EXPECT_EQ(*DecodeClusterFile(EncodeClusterFile(DecideMode::kVotes)), DecideMode::kVotes);
  EXPECT_EQ(*DecodeClusterFile(EncodeClusterFile(DecideMode::kConditionalPut)),
            DecideMode::kConditionalPut);
  // Unknown keys are ignored; key order does not matter to a reader.
  EXPECT_EQ(*DecodeClusterFile(R"({"decide":"votes","version":1,"format":"ckptfs-cluster","x":2})"),
            DecideMode::kVotes);
  for (const char* bad :
       {"", "[]", "{}", R"({"format":"ckptfs-cluster","version":2,"decide":"votes"})",
        R"({"format":"ckptfs-node","version":1,"decide":"votes"})",
        R"({"format":"ckptfs-cluster","version":1,"decide":"paxos"})",
        R"({"format":"ckptfs-cluster","version":"1","decide":"votes"})"}) {
    EXPECT_EQ(DecodeClusterFile(bad).err(), EIO) << bad;
  }
}

TEST(ClusterJoinTest, WorksOnFileObjectStore) {
  TempDirForTest dir;
  auto store = OpenFileObjectStore(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto a = JoinCluster(store->get(), "a", "ca", "h");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->probe, ConditionalPut::kSupported);
  EXPECT_EQ(a->mode, DecideMode::kConditionalPut);
  EXPECT_EQ(JoinCluster(store->get(), "a", "other", "h").err(), EEXIST);
  auto b = JoinCluster(store->get(), "b", "cb", "h");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->mode, DecideMode::kConditionalPut);
  auto listed = (*store)->List("");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 3u);  // the cluster file and two registrations
}

}  // namespace
}  // namespace ckptfs
