// One change, one batch (docs/architecture.md, "Inside the namespace"): each
// FUSE operation and each commit writes at most one manifest batch, with
// every owner's changes in it, so a daemon killed between two batches can
// never leave half an operation in the manifest. The counts here are the
// manifest writes each operation makes (FsEnv counts them).
#include <fcntl.h>

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "namespace/fs_test_env.h"

namespace ckptfs::testing {
namespace {

// The manifest batches fn wrote.
int BatchesOf(FsEnv& env, const std::function<void()>& fn) {
  const int before = env.manifest_writes;
  fn();
  return env.manifest_writes - before;
}

FileSystemOptions WithRemote() {
  FileSystemOptions o;
  o.remote = true;  // uploads are queued in the manifest: one more owner in a close
  return o;
}

TEST(BatchCountTest, EachNamespaceOperationIsOneBatch) {
  FsEnv env(WithRemote());
  FileSystem& fs = env.fs();
  uint64_t run = 0;
  EXPECT_EQ(BatchesOf(env, [&] { run = Mkdir(fs, kRootIno, "run"); }), 1);
  uint64_t step = 0;
  EXPECT_EQ(BatchesOf(env, [&] { step = Mkdir(fs, run, "step1"); }), 1);  // a step: inode + record
  Result<std::pair<Entry, FileSystem::Opened>> created = Status::Error(EIO, "not yet");
  EXPECT_EQ(BatchesOf(env, [&] { created = fs.Create(kRoot, step, "a.bin", 0644, O_WRONLY); }), 1);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  FileHandle* fh = created->second.fh;
  const std::string data(4096, 'x');
  // Writes change the image only; the close records them.
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.Write(fh, data.data(), data.size(), 0).ok()); }),
            0);
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.Flush(fh).ok()); }), 1);
  // The RELEASE: the upload queue entry (and anything else) in one batch.
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.Release(fh).ok()); }), 1);
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.SetXattr(step, "user.note", "v", 0).ok()); }), 1);
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.Rename(step, "a.bin", step, "b.bin", 0).ok()); }),
            1);
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.Unlink(step, "b.bin").ok()); }), 1);
}

TEST(BatchCountTest, AClosedMarkerAsksForItsCommitInTheCloseBatches) {
  FsEnv env(WithRemote());
  FileSystem& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  WriteFile(fs, step, "model.pt", "weights");
  auto marker = fs.Create(kRoot, step, ".metadata.json", 0644, O_WRONLY);
  ASSERT_TRUE(marker.ok());
  FileHandle* fh = marker->second.fh;
  ASSERT_TRUE(fs.Write(fh, "{}", 2, 0).ok());
  // FLUSH: the marker's size and the step's pending commit, together.
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.Flush(fh).ok()); }), 1);
  // RELEASE: its upload entry; the commit request is already recorded.
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.Release(fh).ok()); }), 1);
  // The commit: one synced batch (seal, state, latest, retention, uploads).
  EXPECT_EQ(BatchesOf(env, [&] { env.DrainCommits(); }), 1);
  EXPECT_EQ(*fs.GetXattr(step, "user.ckptfs.state"), "committed");
}

TEST(BatchCountTest, TheLastCloseOfAStepWaitingToCommitIsOneBatch) {
  FsEnv env(WithRemote());
  FileSystem& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  auto late = fs.Create(kRoot, step, "rank1.pt", 0644, O_WRONLY);
  ASSERT_TRUE(late.ok());
  FileHandle* fh = late->second.fh;
  // ckptfs commit while a rank still writes: the request waits for it, and
  // the manifest learns of it only once every file is closed.
  fs.RequestCommit(step);
  env.DrainCommits();
  ASSERT_EQ(*fs.GetXattr(step, "user.ckptfs.state"), "writing");
  ASSERT_TRUE(fs.Write(fh, "w", 1, 0).ok());
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.Flush(fh).ok()); }), 1);
  // The last RELEASE: its upload entry and the now recordable commit
  // request in one batch (before: two).
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.Release(fh).ok()); }), 1);
  EXPECT_EQ(BatchesOf(env, [&] { env.DrainCommits(); }), 1);
  EXPECT_EQ(*fs.GetXattr(step, "user.ckptfs.state"), "committed");
}

TEST(BatchCountTest, ARenameIntoAStepNameRecordsItsCommitRequestInItsOwnBatch) {
  FsEnv env;
  FileSystem& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t tmp = Mkdir(fs, run, "step7-tmp");
  WriteFile(fs, tmp, "model.pt", "weights");
  // The rename makes the step and asks for its commit: one batch (before:
  // the rename's, then the request's).
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.Rename(run, "step7-tmp", run, "step7", 0).ok()); }),
            1);
  EXPECT_EQ(BatchesOf(env, [&] { env.DrainCommits(); }), 1);
  EXPECT_EQ(*fs.GetXattr(tmp, "user.ckptfs.state"), "committed");
}

TEST(BatchCountTest, AnExplicitCommitIsTheRequestThenTheCommit) {
  FsEnv env;
  FileSystem& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  WriteFile(fs, step, "model.pt", "weights");
  // setfattr user.ckptfs.commit: the request, recorded so that a daemon
  // killed before the commit still makes it at restart.
  EXPECT_EQ(BatchesOf(env, [&] { fs.RequestCommit(step); }), 1);
  // The coordinator's commit: its one synced batch.
  EXPECT_EQ(BatchesOf(env, [&] { env.DrainCommits(); }), 1);
  EXPECT_EQ(*fs.GetXattr(step, "user.ckptfs.state"), "committed");
}

TEST(BatchCountTest, RemovingACommittedStepIsOneBatch) {
  FsEnv env;
  FileSystem& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t step = Mkdir(fs, run, "step1");
  WriteFile(fs, step, "model.pt", "weights");
  fs.RequestCommit(step);
  env.DrainCommits();
  ASSERT_EQ(*fs.GetXattr(step, "user.ckptfs.state"), "committed");
  // rm -rf: the step turns `deleting` within the first unlink's batch; the
  // step's rmdir, which ends it, is one batch written in the background
  // (step_deletion_test.cc).
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.Unlink(step, "model.pt").ok()); }), 1);
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.Rmdir(run, "step1").ok()); }), 0);
  EXPECT_EQ(BatchesOf(env, [&] { ASSERT_TRUE(fs.WriteDeferredRecords().ok()); }), 1);
}

TEST(BatchCountTest, AnIdleTickIsOneBatchHoweverManyStepsWentIdle) {
  FileSystemOptions o;
  o.commit_idle_ns = 3'000'000'000;
  FsEnv env(o);
  FileSystem& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t a = Mkdir(fs, run, "step1");
  const uint64_t b = Mkdir(fs, run, "step2");
  WriteFile(fs, a, "model.pt", "a");
  WriteFile(fs, b, "model.pt", "b");
  env.clock.Advance(4'000'000'000);
  // Both requests, recorded in the tick's one batch.
  EXPECT_EQ(BatchesOf(env, [&] { fs.RequestIdleCommits(); }), 1);
  EXPECT_EQ(BatchesOf(env, [&] { fs.RequestIdleCommits(); }), 0);  // already asked
  env.DrainCommits();
  EXPECT_EQ(*fs.GetXattr(a, "user.ckptfs.state"), "committed");
  EXPECT_EQ(*fs.GetXattr(b, "user.ckptfs.state"), "committed");
}

// The tier's queries only read; what they used to tidy as they read (queue
// entries with nothing to upload) is RepairUploadQueue's one change.
TEST(BatchCountTest, TheTiersQueriesWriteNothingAndTheRepairIsOneBatch) {
  FsEnv env(WithRemote());
  FileSystem& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t step = Mkdir(fs, run, "step1");
  const uint64_t scratch = Mkdir(fs, kRootIno, "scratch");
  WriteFile(fs, step, "model.pt", "weights");
  WriteFile(fs, step, "moved.pt", "gone elsewhere");
  // Out of every step and run directory: its queued upload has nothing to do.
  ASSERT_TRUE(fs.Rename(step, "moved.pt", scratch, "moved.pt", 0).ok());
  fs.RequestCommit(step);
  env.DrainCommits();
  ASSERT_EQ(*fs.GetXattr(step, "user.ckptfs.state"), "committed");

  std::vector<TierPort::UploadJob> jobs;
  EXPECT_EQ(BatchesOf(env, [&] { jobs = fs.NextUploads(10, {}); }), 0);
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].key, "run/step1/model.pt");
  // Not uploaded yet: nothing to persist, and asking writes nothing.
  EXPECT_EQ(BatchesOf(env, [&] { EXPECT_TRUE(fs.StepsToPersist().empty()); }), 0);
  // The repair drops the dead entry, once.
  EXPECT_EQ(BatchesOf(env, [&] { fs.RepairUploadQueue(); }), 1);
  EXPECT_EQ(BatchesOf(env, [&] { fs.RepairUploadQueue(); }), 0);
  EXPECT_EQ(fs.NextUploads(10, {}).size(), 1u);
}

}  // namespace
}  // namespace ckptfs::testing
