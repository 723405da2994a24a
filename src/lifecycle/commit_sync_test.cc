// The commit's sync against a data store whose SyncFiles fails or takes
// time: every file of the step is synced in one call; a failure aborts the
// commit with the error and the file (or the step) named, seals nothing and
// counts as a failed commit, and a later request commits; the time spent
// syncing is shown as a part of the commit's duration in /.ckptfs/metrics.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "namespace/fs_test_env.h"

namespace ckptfs::testing {
namespace {

// Forwards to a MemoryDataStore. SyncFiles records what it is asked, and
// either fails with err (pinned on failed_ino, 0 for none) without syncing,
// or takes sync_ns on the test's clock.
class FaultySyncData final : public DataStore {
 public:
  FaultySyncData(DataStore* target, ManualClock* clock) : target_(target), clock_(clock) {}
  Result<std::unique_ptr<BackingFile>> Open(uint64_t ino, bool create) override {
    return target_->Open(ino, create);
  }
  Status Remove(uint64_t ino) override { return target_->Remove(ino); }
  Status SyncDir() override { return target_->SyncDir(); }
  Status SyncFiles(const std::vector<uint64_t>& inos, uint64_t* failed_ino) override {
    calls.push_back(inos);
    if (err != 0) {
      if (failed_ino != nullptr) *failed_ino = this->failed_ino;
      return Status::Error(err, "injected writeback error");
    }
    clock_->Advance(sync_ns);
    return target_->SyncFiles(inos, failed_ino);
  }
  Result<std::vector<uint64_t>> List() override { return target_->List(); }
  Result<Space> Capacity() override { return target_->Capacity(); }

  int err = 0;
  uint64_t failed_ino = 0;
  int64_t sync_ns = 0;
  std::vector<std::vector<uint64_t>> calls;

 private:
  DataStore* target_;
  ManualClock* clock_;
};

class CommitSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FileSystemOptions options;
    options.commit_settle_ns = 0;
    options.boot_id = "boot-1";
    auto data = std::make_unique<FaultySyncData>(&memory_, &clock_);
    data_ = data.get();
    auto fs = FileSystem::Open(options, std::make_unique<MemoryManifestStore>(), std::move(data),
                               &clock_, &events_);
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    fs_ = std::move(fs).value();
    coordinator_ = CommitCoordinator::CreateWithoutThreads(fs_.get(), fs_->data(), fs_->clock());
  }
  void TearDown() override {
    coordinator_.reset();
    fs_.reset();
  }

  std::string Xattr(uint64_t ino, const std::string& name) {
    auto v = fs_->GetXattr(ino, name);
    return v.ok() ? *v : "<" + v.status().ToString() + ">";
  }
  // The value of one sample line of /.ckptfs/metrics, or -1.
  double Metric(const std::string& sample) {
    auto ctl = fs_->Lookup(kRootIno, ".ckptfs");
    auto metrics = ctl.ok() ? fs_->Lookup(ctl->ino, "metrics") : Result<Entry>(ctl.status());
    if (!metrics.ok()) return -1;
    std::istringstream lines(ReadFile(*fs_, metrics->ino));
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind(sample + " ", 0) == 0) {
        return std::strtod(line.c_str() + sample.size() + 1, nullptr);
      }
    }
    return -1;
  }

  MemoryDataStore memory_;
  ManualClock clock_;
  EventLog events_;
  FaultySyncData* data_ = nullptr;  // owned by fs_
  std::unique_ptr<FileSystem> fs_;
  std::unique_ptr<CommitCoordinator> coordinator_;
};

TEST_F(CommitSyncTest, EveryFileOfTheStepIsSyncedInOneCall) {
  const uint64_t step = Mkdir(*fs_, kRootIno, "step1");
  const uint64_t sub = Mkdir(*fs_, step, "model");
  std::vector<uint64_t> files = {WriteFile(*fs_, step, "shard0", "aaaa"),
                                 WriteFile(*fs_, sub, "shard1", "bb")};
  files.push_back(WriteFile(*fs_, step, "metadata.json", "{}"));  // the marker asks for the commit
  coordinator_->DrainForTest();
  EXPECT_EQ(Xattr(step, "user.ckptfs.state"), "committed");
  ASSERT_EQ(data_->calls.size(), 1u);
  std::vector<uint64_t> synced = data_->calls[0];
  std::sort(synced.begin(), synced.end());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(synced, files);
}

TEST_F(CommitSyncTest, AFailedSyncOfOneFileAbortsTheCommitNamingIt) {
  const uint64_t step = Mkdir(*fs_, kRootIno, "step1");
  const uint64_t shard = WriteFile(*fs_, step, "shard0", "aaaa");
  data_->err = EIO;
  data_->failed_ino = shard;
  WriteFile(*fs_, step, "metadata.json", "{}");
  coordinator_->DrainForTest();
  EXPECT_EQ(Xattr(step, "user.ckptfs.state"), "writing");
  const std::string error = Xattr(step, "user.ckptfs.error");
  EXPECT_NE(error.find("fsync of shard0"), std::string::npos) << error;
  EXPECT_NE(error.find("injected writeback error"), std::string::npos) << error;
  EXPECT_NE(events_.Render().find("\"commit_failed\""), std::string::npos);
  EXPECT_EQ(Metric("ckptfs_commit_failures_total"), 1);
  EXPECT_EQ(Metric("ckptfs_commit_sync_duration_seconds_count"), 0);
  // Nothing was sealed: the file can still be rewritten.
  auto reopened = fs_->OpenFile(shard, O_WRONLY);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  ASSERT_TRUE(fs_->Release(reopened->fh).ok());

  // Once the store syncs again, the step commits when asked.
  data_->err = 0;
  fs_->RequestCommit(step);
  coordinator_->DrainForTest();
  EXPECT_EQ(Xattr(step, "user.ckptfs.state"), "committed");
}

TEST_F(CommitSyncTest, AFilesystemWideSyncErrorAbortsTheCommitNamingTheStep) {
  const uint64_t step = Mkdir(*fs_, kRootIno, "step1");
  WriteFile(*fs_, step, "shard0", "aaaa");
  data_->err = EIO;
  data_->failed_ino = 0;  // syncfs failed and no file reports the error itself
  WriteFile(*fs_, step, "metadata.json", "{}");
  coordinator_->DrainForTest();
  EXPECT_EQ(Xattr(step, "user.ckptfs.state"), "writing");
  const std::string error = Xattr(step, "user.ckptfs.error");
  EXPECT_NE(error.find("fsync of the step's 2 files"), std::string::npos) << error;
  EXPECT_NE(error.find("injected writeback error"), std::string::npos) << error;
}

TEST_F(CommitSyncTest, SyncTimeIsShownAsAPartOfTheCommitDuration) {
  data_->sync_ns = 7'000'000;
  const uint64_t step = Mkdir(*fs_, kRootIno, "step1");
  WriteFile(*fs_, step, "shard0", "aaaa");
  WriteFile(*fs_, step, "metadata.json", "{}");
  coordinator_->DrainForTest();
  ASSERT_EQ(Xattr(step, "user.ckptfs.state"), "committed");
  EXPECT_EQ(Metric("ckptfs_commit_sync_duration_seconds_count"), 1);
  EXPECT_DOUBLE_EQ(Metric("ckptfs_commit_sync_duration_seconds_sum"), 0.007);
  EXPECT_EQ(Metric("ckptfs_commit_sync_duration_seconds_bucket{le=\"0.005\"}"), 0);
  EXPECT_EQ(Metric("ckptfs_commit_sync_duration_seconds_bucket{le=\"0.01\"}"), 1);
  EXPECT_GE(Metric("ckptfs_commit_duration_seconds_sum"), 0.007);
}

}  // namespace
}  // namespace ckptfs::testing
