// JoinCluster: the probe and the requirement, .ckptfs-cluster.json, and the
// node registry, over the memory store (honouring, ignoring and refusing
// conditional puts) and file://.
#include "cluster/cluster_join.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

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

// SPEC section 9: cluster mode requires conditional writes, probed at
// mount; a store that ignores or refuses them is refused with a message that
// says why, before anything is written but the probe's scratch key.
TEST(ClusterJoinTest, AStoreWithoutConditionalWritesIsRefused) {
  MemoryObjectStore ignoring;
  ignoring.IgnoreConditions(true);  // as s3rver 3.7.1
  auto m = JoinCluster(&ignoring, "a", "c0", "h");
  ASSERT_EQ(m.err(), EOPNOTSUPP) << m.status().ToString();
  const std::string& msg = m.status().message();
  EXPECT_NE(msg.find("needs an object store that honours conditional writes"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("overwrote it anyway"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mount without --node"), std::string::npos) << msg;
  EXPECT_TRUE(ignoring.List("")->empty()) << "nothing left behind";

  MemoryObjectStore memory;
  testing::SharedStore refusing(&memory);  // PutIfAbsent: the default EOPNOTSUPP
  m = JoinCluster(&refusing, "a", "c0", "h");
  ASSERT_EQ(m.err(), EOPNOTSUPP) << m.status().ToString();
  EXPECT_NE(m.status().message().find("refused conditional PUTs"), std::string::npos)
      << m.status().message();
  EXPECT_FALSE(memory.Peek(".ckptfs-nodes/a.json").has_value());
}

TEST(ClusterJoinTest, ABucketAnOlderCkptfsPinnedToVotesIsRefused) {
  MemoryObjectStore store;
  const std::string votes = R"({"format":"ckptfs-cluster","version":1,"decide":"votes"})"
                            "\n";
  ASSERT_TRUE(store.Put(".ckptfs-cluster.json", votes).ok());
  auto m = JoinCluster(&store, "b", "cb", "hb");
  ASSERT_EQ(m.err(), EOPNOTSUPP) << m.status().ToString();
  EXPECT_NE(m.status().message().find("says the nodes decide by \"votes\""), std::string::npos)
      << m.status().message();
  EXPECT_FALSE(store.Peek(".ckptfs-nodes/b.json").has_value());
  EXPECT_EQ(Body(&store, ".ckptfs-cluster.json"), votes);
}

// Issue 28, 5: two daemons with one --node name must not both come up, also
// when they register at the same moment (before, a GET then a PUT on a slow
// store let both through). The registration is a conditional create.
TEST(ClusterJoinTest, OfCachesRegisteringOneNameAtOnceExactlyOneGetsIt) {
  for (int round = 0; round < 20; round++) {
    MemoryObjectStore store;
    constexpr int kCaches = 8;
    std::vector<Status> got(kCaches);
    std::vector<std::thread> threads;
    for (int i = 0; i < kCaches; i++) {
      threads.emplace_back([&, i] {
        got[i] = JoinCluster(&store, "gpu-1", "cache-" + std::to_string(i), "host").status();
      });
    }
    for (auto& t : threads) t.join();
    int winners = 0;
    for (const Status& st : got) {
      if (st.ok()) {
        winners++;
      } else {
        EXPECT_EQ(st.err(), EEXIST) << st.ToString();
      }
    }
    EXPECT_EQ(winners, 1) << "round " << round;
  }
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

  ASSERT_TRUE(store.Put(".ckptfs-cluster.json", EncodeClusterFile()).ok());
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
  EXPECT_EQ(*DecodeClusterFile(EncodeClusterFile()), "conditional-put");
  // Unknown keys are ignored; key order does not matter to a reader.
  EXPECT_EQ(*DecodeClusterFile(R"({"decide":"votes","version":1,"format":"ckptfs-cluster","x":2})"),
            "votes");
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
  EXPECT_EQ(JoinCluster(store->get(), "a", "other", "h").err(), EEXIST);
  auto b = JoinCluster(store->get(), "b", "cb", "h");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto listed = (*store)->List("");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 3u);  // the cluster file and two registrations
}

}  // namespace
}  // namespace ckptfs
