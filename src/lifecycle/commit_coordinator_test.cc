// The commit procedure on its own, through a fake CommitPort: the
// coordinator's decisions (settle or not, abort how, ask again when) are
// checked against scripted answers of the namespace, including answers a
// real FileSystem gives only under faults (a failed commit batch, a cluster
// decision that could not be made). The manual clock times the retries.
#include "lifecycle/commit_coordinator.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <deque>
#include <string>
#include <vector>

#include "common/clock.h"
#include "data/memory_data_store.h"

namespace ckptfs {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

class FakeCommitPort final : public CommitPort {
 public:
  struct Abort {
    uint64_t step;
    Status why;
    bool waiting, broken, settling;
  };
  // BeginCommit's answers, in order; an empty script answers EALREADY.
  std::deque<Result<CommitPlan>> begins;
  int begin_calls = 0;
  std::vector<Abort> aborts;
  std::vector<CommitPlan> finished;
  std::vector<uint64_t> dropped;
  Status finish_result = Status::Ok();
  Status decide_result = Status::Ok();

  void SetCommitRequester(CommitRequester) override {}
  void SetIndexRequester(IndexRequester) override {}
  Result<CommitPlan> BeginCommit(uint64_t) override {
    begin_calls++;
    if (begins.empty()) return Status::Error(EALREADY, "nothing scripted");
    Result<CommitPlan> next = std::move(begins.front());
    begins.pop_front();
    return next;
  }
  void AbortCommit(uint64_t step, const Status& why, bool waiting, bool broken,
                   bool settling) override {
    aborts.push_back({step, why, waiting, broken, settling});
  }
  void DropCommitRequest(uint64_t step) override { dropped.push_back(step); }
  Status FinishCommit(const CommitPlan& plan) override {
    finished.push_back(plan);
    return finish_result;
  }
  Status CheckUnchangedSinceClose(uint64_t, BackingFile*) override { return Status::Ok(); }
  void DropPageCache(const std::vector<uint64_t>&) override {}
  void FlushInvalidations() override {}
  Status GatherCluster(CommitPlan*) override { return Status::Ok(); }
  Result<std::string> ReadClusterFile(const CommitPlan&, const std::string& path, uint64_t,
                                      uint64_t) override {
    return Status::Error(ENOENT, path);
  }
  Status DecideCluster(CommitPlan*) override { return decide_result; }
  Status CommitStepsNamedBy(uint64_t, uint64_t) override { return Status::Ok(); }
  bool RetryManifest() override { return true; }
  void RequestIdleCommits() override {}
  void RequestSettledCommits() override {}
  Result<size_t> CollectGarbage(size_t) override { return size_t{0}; }
  Result<size_t> CheckUnloadedSteps(size_t) override { return size_t{0}; }
  Result<size_t> UnloadIdleSteps() override { return size_t{0}; }
  void RequestRecoveredCommits() override {}
};

class CommitCoordinatorTest : public ::testing::Test {
 protected:
  CommitCoordinatorTest()
      : coordinator_(CommitCoordinator::CreateWithoutThreads(&port_, &data_, &clock_)) {}

  // A step of one file with no metadata that lists it (a Hugging Face or
  // unknown layout), quiet for quiet_ns of a 2 s --commit-settle.
  CommitPort::CommitPlan UnlistedStep(int64_t quiet_ns) {
    const std::string bytes = "weights";
    auto file = data_.Open(7, /*create=*/true);
    EXPECT_TRUE(file.ok());
    EXPECT_TRUE((*file)->PWrite(bytes.data(), bytes.size(), 0).ok());
    CommitPort::CommitPlan plan;
    plan.step_ino = 5;
    plan.step_path = "run/step5";
    plan.files.push_back({"model.safetensors", 7, bytes.size(), false});
    plan.settle_ns = 2 * kSecond;
    plan.quiet_ns = quiet_ns;
    return plan;
  }
  void Run() {
    coordinator_->Request(5);
    coordinator_->DrainForTest();
  }

  ManualClock clock_;
  MemoryDataStore data_;
  FakeCommitPort port_;
  std::unique_ptr<CommitCoordinator> coordinator_;
};

TEST_F(CommitCoordinatorTest, AnUnlistedStepSettlesAndIsAskedAgainWhenItsQuietIsDue) {
  port_.begins.push_back(UnlistedStep(/*quiet_ns=*/kSecond / 2));
  Run();
  ASSERT_EQ(port_.aborts.size(), 1u);
  EXPECT_TRUE(port_.aborts[0].settling);
  EXPECT_TRUE(port_.aborts[0].waiting);
  EXPECT_EQ(port_.aborts[0].why.err(), EAGAIN);
  EXPECT_TRUE(port_.finished.empty());
  // Due 1.5 s later: not before.
  clock_.Advance(kSecond + kSecond / 2 - 1);
  coordinator_->DrainForTest();
  EXPECT_EQ(port_.begin_calls, 1);
  port_.begins.push_back(UnlistedStep(/*quiet_ns=*/2 * kSecond));
  clock_.Advance(1);
  coordinator_->DrainForTest();
  EXPECT_EQ(port_.begin_calls, 2);
  ASSERT_EQ(port_.finished.size(), 1u);
  EXPECT_GE(port_.finished[0].sync_ns, 0);
}

TEST_F(CommitCoordinatorTest, AnExplicitCommitDoesNotSettle) {
  CommitPort::CommitPlan plan = UnlistedStep(/*quiet_ns=*/0);
  plan.explicit_commit = true;
  plan.forced = true;
  port_.begins.push_back(plan);
  Run();
  EXPECT_TRUE(port_.aborts.empty());
  ASSERT_EQ(port_.finished.size(), 1u);
}

TEST_F(CommitCoordinatorTest, AFailedCommitBatchIsAbortedAsAnError) {
  port_.begins.push_back(UnlistedStep(/*quiet_ns=*/3 * kSecond));
  port_.finish_result = Status::Error(ENOSPC, "the manifest cannot be written");
  Run();
  ASSERT_EQ(port_.aborts.size(), 1u);
  EXPECT_EQ(port_.aborts[0].why.err(), ENOSPC);
  EXPECT_FALSE(port_.aborts[0].waiting);
  EXPECT_FALSE(port_.aborts[0].broken);
  // EALREADY: the step was committed or removed meanwhile; nothing to undo.
  port_.begins.push_back(UnlistedStep(/*quiet_ns=*/3 * kSecond));
  port_.finish_result = Status::Error(EALREADY, "committed meanwhile");
  Run();
  EXPECT_EQ(port_.aborts.size(), 1u);
}

TEST_F(CommitCoordinatorTest, AClusterDecisionNotMadeWaitsAndAsksAgain) {
  CommitPort::CommitPlan plan = UnlistedStep(/*quiet_ns=*/3 * kSecond);
  plan.cluster = true;
  plan.job_nodes = 1;
  port_.begins.push_back(plan);
  port_.decide_result = Status::Error(EIO, "the bucket did not answer");
  Run();
  ASSERT_EQ(port_.aborts.size(), 1u);
  EXPECT_TRUE(port_.aborts[0].waiting);
  EXPECT_FALSE(port_.aborts[0].broken);
  EXPECT_NE(port_.aborts[0].why.message().find("deciding the cluster's step record"),
            std::string::npos)
      << port_.aborts[0].why.ToString();
  // Asked again by the coordinator itself, 100 ms later.
  port_.decide_result = Status::Ok();
  port_.begins.push_back(plan);
  clock_.Advance(kSecond / 10);
  coordinator_->DrainForTest();
  EXPECT_EQ(port_.begin_calls, 2);
  EXPECT_EQ(port_.finished.size(), 1u);
}

// SPEC section 9: a step whose format lists no files commits for the
// cluster only once every node of the job (--nodes) has published its part
// with nothing open; without --nodes it waits and says so.
TEST_F(CommitCoordinatorTest, AnUnlistedClusterStepWaitsForEveryNodeOfTheJob) {
  CommitPort::CommitPlan plan = UnlistedStep(/*quiet_ns=*/3 * kSecond);
  plan.cluster = true;
  plan.job_nodes = 3;
  PartRecord b;
  b.node = "b";
  plan.other_parts.push_back(b);
  port_.begins.push_back(plan);
  Run();
  ASSERT_EQ(port_.aborts.size(), 1u);
  EXPECT_EQ(port_.aborts[0].why.err(), EAGAIN);
  EXPECT_TRUE(port_.aborts[0].waiting);
  EXPECT_FALSE(port_.aborts[0].broken);
  EXPECT_NE(
      port_.aborts[0].why.message().find("1 more node(s): 2 of --nodes 3 published (this node, b)"),
      std::string::npos)
      << port_.aborts[0].why.ToString();
  EXPECT_TRUE(port_.finished.empty());
  // Asked again by the coordinator itself (other nodes' closes never reach
  // this one); the third node's part is there now.
  PartRecord c;
  c.node = "c";
  plan.other_parts.push_back(c);
  port_.begins.push_back(plan);
  clock_.Advance(kSecond / 10);
  coordinator_->DrainForTest();
  EXPECT_EQ(port_.begin_calls, 2);
  EXPECT_EQ(port_.aborts.size(), 1u);
  EXPECT_EQ(port_.finished.size(), 1u);
}

TEST_F(CommitCoordinatorTest, AnUnlistedClusterStepWithoutTheJobSizeWaitsNamingTheOption) {
  CommitPort::CommitPlan plan = UnlistedStep(/*quiet_ns=*/3 * kSecond);
  plan.cluster = true;
  port_.begins.push_back(plan);
  Run();
  ASSERT_EQ(port_.aborts.size(), 1u);
  EXPECT_TRUE(port_.aborts[0].waiting);
  EXPECT_NE(port_.aborts[0].why.message().find("--nodes N"), std::string::npos)
      << port_.aborts[0].why.ToString();
  // Not asked again on its own: polling would not change the answer.
  clock_.Advance(10 * kSecond);
  coordinator_->DrainForTest();
  EXPECT_EQ(port_.begin_calls, 1);
  // The user's word commits it all the same (SPEC section 3).
  plan.explicit_commit = true;
  port_.begins.push_back(plan);
  Run();
  EXPECT_EQ(port_.finished.size(), 1u);
}

TEST_F(CommitCoordinatorTest, AFileThatCannotBeSyncedAbortsNamingIt) {
  CommitPort::CommitPlan plan = UnlistedStep(/*quiet_ns=*/3 * kSecond);
  plan.files.push_back({"missing.bin", 99, 0, false});  // no backing file
  port_.begins.push_back(plan);
  Run();
  ASSERT_EQ(port_.aborts.size(), 1u);
  EXPECT_FALSE(port_.aborts[0].broken);
  EXPECT_NE(port_.aborts[0].why.message().find("missing.bin"), std::string::npos)
      << port_.aborts[0].why.ToString();
  EXPECT_TRUE(port_.finished.empty());
}

}  // namespace
}  // namespace ckptfs
