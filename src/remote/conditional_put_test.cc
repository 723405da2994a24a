// PutIfAbsent on every store, and the probe that tells a server honouring
// the condition from one that ignores it.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/temp_dir_for_test.h"
#include "remote/conditional_put_probe.h"
#include "remote/file_object_store.h"
#include "remote/memory_object_store.h"
#include "remote/s3_object_store.h"
#include "remote/s3rver_for_test.h"

namespace ckptfs {
namespace {

std::string Get(ObjectStore* store, const std::string& key) {
  Result<std::string> r = store->GetRange(key, 0, UINT64_MAX);
  EXPECT_TRUE(r.ok()) << key << ": " << r.status().ToString();
  return r.ok() ? *r : std::string();
}

// The stores that keep the promise: memory and file://.
class ConditionalPutTest : public testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      store_ = std::make_unique<MemoryObjectStore>();
    } else {
      Result<std::unique_ptr<ObjectStore>> s = OpenFileObjectStore(dir_.path());
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      store_ = std::move(s).value();
    }
  }
  TempDirForTest dir_;
  std::unique_ptr<ObjectStore> store_;
};

TEST_P(ConditionalPutTest, CreatesOnlyWhenAbsent) {
  ASSERT_TRUE(store_->PutIfAbsent("run/step1/.ckptfs-step.json", "first").ok());
  Status again = store_->PutIfAbsent("run/step1/.ckptfs-step.json", "second");
  EXPECT_EQ(again.err(), EEXIST) << again.ToString();
  EXPECT_EQ(Get(store_.get(), "run/step1/.ckptfs-step.json"), "first");
  // An ordinary put still replaces it, and a conditional put of a new key
  // next to it creates that.
  ASSERT_TRUE(store_->Put("run/step1/.ckptfs-step.json", "third").ok());
  EXPECT_EQ(Get(store_.get(), "run/step1/.ckptfs-step.json"), "third");
  EXPECT_TRUE(store_->PutIfAbsent("run/step1/other", "x").ok());
  EXPECT_EQ(store_->PutIfAbsent("../escape", "x").err(), EINVAL);
}

TEST_P(ConditionalPutTest, OfManyRacingWritersExactlyOneWins) {
  constexpr int kWriters = 8;
  std::atomic<int> won{0}, refused{0};
  std::atomic<int> winner{-1};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; i++) {
    threads.emplace_back([&, i] {
      Status st = store_->PutIfAbsent("race", "writer " + std::to_string(i));
      if (st.ok()) {
        won++;
        winner = i;
      } else if (st.err() == EEXIST) {
        refused++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(refused.load(), kWriters - 1);
  EXPECT_EQ(Get(store_.get(), "race"), "writer " + std::to_string(winner.load()));
  // Nothing but the object is left (no temporary files listed).
  Result<std::vector<ObjectInfo>> all = store_->List("");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].key, "race");
}

TEST_P(ConditionalPutTest, ProbeSaysSupportedAndCleansUp) {
  Result<ConditionalPut> c = ProbeConditionalPut(store_.get(), ".ckptfs-probe/a-0123");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c, ConditionalPut::kSupported);
  // A scratch key left by a probe that died before its delete changes nothing.
  ASSERT_TRUE(store_->Put(".ckptfs-probe/a-0123", "stale").ok());
  c = ProbeConditionalPut(store_.get(), ".ckptfs-probe/a-0123");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, ConditionalPut::kSupported);
  Result<std::vector<ObjectInfo>> all = store_->List("");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
}

INSTANTIATE_TEST_SUITE_P(Stores, ConditionalPutTest, testing::Values(true, false),
                         [](const testing::TestParamInfo<bool>& p) {
                           return p.param ? "Memory" : "File";
                         });

TEST(ConditionalPutProbe, TellsAServerThatIgnoresTheCondition) {
  MemoryObjectStore store;
  store.IgnoreConditions(true);  // as s3rver 3.7.1 does
  Result<ConditionalPut> c = ProbeConditionalPut(&store, "probe");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, ConditionalPut::kIgnored);
  EXPECT_EQ(store.Head("probe").err(), ENOENT);
}

TEST(ConditionalPutProbe, ReturnsTheStoresOwnErrors) {
  MemoryObjectStore store;
  store.SetUnavailable(true);
  Result<ConditionalPut> c = ProbeConditionalPut(&store, "probe");
  EXPECT_EQ(c.status().err(), EHOSTUNREACH);
  store.SetUnavailable(false);
  store.FailNext(1, EACCES);  // the first put
  c = ProbeConditionalPut(&store, "probe");
  EXPECT_EQ(c.status().err(), EACCES);
}

// The claim docs/cluster.md makes about the S3 server the tests use: it
// accepts `If-None-Match: *` on PUT and overwrites anyway.
TEST(ConditionalPutProbe, S3rverIgnoresTheCondition) {
  CKPTFS_REQUIRE_S3RVER();
  S3rverForTest server;
  Status started = server.Start();
  ASSERT_TRUE(started.ok()) << started.ToString();
  Result<std::unique_ptr<ObjectStore>> store = OpenS3ObjectStore(server.Config("probe"));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Result<ConditionalPut> c = ProbeConditionalPut(store->get(), ".ckptfs-probe/node-a");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(*c, ConditionalPut::kIgnored);
  EXPECT_EQ((*store)->Head(".ckptfs-probe/node-a").err(), ENOENT);
}

}  // namespace
}  // namespace ckptfs
