// JoinCluster: the probe and the requirement, .ckptfs-cluster.json, and the
// node registry, over the memory store (honouring, ignoring and refusing
// conditional puts) and file://.
#include "cluster/cluster_join.h"

#include <gtest/gtest.h>

#include <map>
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

// SPEC section 9, "node names": --replace-node takes a held name over at
// the next epoch; without it, the message says how.
TEST(ClusterJoinTest, ReplaceNodeTakesTheNameOverAtTheNextEpoch) {
  MemoryObjectStore store;
  auto one = JoinCluster(&store, "gpu-1", "cache-one", "alpha");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->epoch, 1u);
  auto refused = JoinCluster(&store, "gpu-1", "cache-two", "beta");
  ASSERT_EQ(refused.err(), EEXIST);
  EXPECT_NE(refused.status().message().find("mount with --replace-node"), std::string::npos)
      << refused.status().message();
  auto two = JoinCluster(&store, "gpu-1", "cache-two", "beta", /*replace=*/true);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(two->epoch, 2u);
  EXPECT_EQ(two->replaced_cache_id, "cache-one");
  EXPECT_EQ(two->replaced_host, "alpha");
  EXPECT_NE(Body(&store, ".ckptfs-nodes/gpu-1~2.json").find("cache-two"), std::string::npos);
  // The old cache is now the one refused, and the new one mounts again
  // (with or without the flag) at its epoch, writing nothing.
  auto old = JoinCluster(&store, "gpu-1", "cache-one", "alpha");
  ASSERT_EQ(old.err(), EEXIST);
  EXPECT_NE(old.status().message().find("cache-two"), std::string::npos) << old.status().message();
  const size_t puts = store.put_calls();
  for (bool replace : {false, true}) {
    auto again = JoinCluster(&store, "gpu-1", "cache-two", "beta", replace);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->epoch, 2u);
    EXPECT_TRUE(again->replaced_cache_id.empty());
  }
  EXPECT_EQ(store.put_calls(), puts + 4);  // the two probes' puts only
  // Taking it back is a third epoch; a free name with the flag is epoch 1.
  auto back = JoinCluster(&store, "gpu-1", "cache-one", "alpha", true);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->epoch, 3u);
  auto fresh = JoinCluster(&store, "gpu-2", "cache-three", "gamma", true);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(fresh->epoch, 1u);
  EXPECT_TRUE(fresh->replaced_cache_id.empty());
  auto epochs = ListNodeEpochs(&store);
  ASSERT_TRUE(epochs.ok());
  EXPECT_EQ(*epochs, (std::map<std::string, uint64_t>{{"gpu-1", 3}, {"gpu-2", 1}}));
}

// Replacements racing: a replacement replaces the holder it saw, so of
// those that saw the same holder exactly one wins; one that starts after
// another ended replaces it in turn, at the next epoch. No two caches ever
// hold one epoch, and the name ends with the highest winner.
TEST(ClusterJoinTest, RacingReplacementsNeverShareAnEpoch) {
  for (int round = 0; round < 20; round++) {
    MemoryObjectStore store;
    ASSERT_TRUE(JoinCluster(&store, "n", "dead", "h").ok());
    constexpr int kCaches = 6;
    std::vector<Result<ClusterMembership>> got(kCaches, Status::Error(EIO, "not run"));
    std::vector<std::thread> threads;
    for (int i = 0; i < kCaches; i++) {
      threads.emplace_back([&, i] {
        got[i] = JoinCluster(&store, "n", "cache-" + std::to_string(i), "h", /*replace=*/true);
      });
    }
    for (auto& t : threads) t.join();
    std::map<uint64_t, std::string> winners;  // epoch -> cache
    for (int i = 0; i < kCaches; i++) {
      if (got[i].ok()) {
        EXPECT_GE(got[i]->epoch, 2u);
        EXPECT_TRUE(winners.emplace(got[i]->epoch, "cache-" + std::to_string(i)).second)
            << "two caches hold epoch " << got[i]->epoch << " in round " << round;
      } else {
        EXPECT_EQ(got[i].err(), EEXIST) << got[i].status().ToString();
      }
    }
    ASSERT_FALSE(winners.empty()) << "round " << round;
    auto epochs = ListNodeEpochs(&store, "n");
    ASSERT_TRUE(epochs.ok());
    EXPECT_EQ(epochs->at("n"), winners.rbegin()->first);
    EXPECT_NE(Body(&store, NodeRegistrationKey("n", winners.rbegin()->first))
                  .find(winners.rbegin()->second),
              std::string::npos);
  }
}

TEST(ClusterJoinTest, RegistrationKeys) {
  EXPECT_EQ(NodeRegistrationKey("gpu-1"), ".ckptfs-nodes/gpu-1.json");
  EXPECT_EQ(NodeRegistrationKey("gpu-1", 1), ".ckptfs-nodes/gpu-1.json");
  EXPECT_EQ(NodeRegistrationKey("gpu-1", 12), ".ckptfs-nodes/gpu-1~12.json");
  std::string node;
  uint64_t epoch = 0;
  ASSERT_TRUE(ParseNodeRegistrationKey(".ckptfs-nodes/gpu-1~12.json", &node, &epoch));
  EXPECT_EQ(node, "gpu-1");
  EXPECT_EQ(epoch, 12u);
  ASSERT_TRUE(ParseNodeRegistrationKey(".ckptfs-nodes/a.b.json", &node, &epoch));
  EXPECT_EQ(node, "a.b");
  EXPECT_EQ(epoch, 1u);
  for (const char* bad :
       {".ckptfs-nodes/a~1.json", ".ckptfs-nodes/a~01.json", ".ckptfs-nodes/a~.json",
        ".ckptfs-nodes/a~x.json", ".ckptfs-nodes/.json", ".ckptfs-nodes/a", ".ckptfs-probe/a.json",
        ".ckptfs-nodes/a/b.json", ".ckptfs-nodes/~2.json"}) {
    EXPECT_FALSE(ParseNodeRegistrationKey(bad, &node, &epoch)) << bad;
  }
  // A name's own listing does not take a longer name for it.
  MemoryObjectStore store;
  ASSERT_TRUE(store.Put(".ckptfs-nodes/gpu-1.json", "x").ok());
  ASSERT_TRUE(store.Put(".ckptfs-nodes/gpu-10~5.json", "x").ok());
  auto one = ListNodeEpochs(&store, "gpu-1");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, (std::map<std::string, uint64_t>{{"gpu-1", 1}}));
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
