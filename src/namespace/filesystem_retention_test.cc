// Retention inside the namespace: decisions applied in the commit batch,
// removal from the namespace, data deleted later from the GC queue, open
// readers, crashes between the prune and the GC, policies from options and
// run-directory xattrs.
#include <fcntl.h>

#include <gtest/gtest.h>

#include "namespace/fs_test_env.h"

namespace ckptfs::testing {
namespace {

// Creates run/stepN with one file and commits it; returns the step's ino.
uint64_t CommitStep(FsEnv& env, uint64_t run, int64_t n, uint64_t* file = nullptr) {
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, run, "step" + std::to_string(n));
  const uint64_t f = WriteFile(fs, step, "shard", "data of step " + std::to_string(n));
  if (file) *file = f;
  fs.RequestCommit(step);
  env.DrainCommits();
  return step;
}

std::set<std::string> Names(FileSystem& fs, uint64_t dir) {
  std::set<std::string> out;
  auto r = fs.Readdir(dir, 0, 100000);
  EXPECT_TRUE(r.ok());
  if (r.ok()) {
    for (const auto& d : *r) {
      if (d.name != "." && d.name != ".." && d.name != "latest") out.insert(d.name);
    }
  }
  return out;
}

FileSystemOptions KeepLast(int n) {
  FileSystemOptions o;
  EXPECT_TRUE(SetPolicyRule("keep_last", std::to_string(n), &o.retention).ok());
  return o;
}

TEST(RetentionTest, CommitPrunesInTheSameBatchAndGcDeletesDataLater) {
  FsEnv env(KeepLast(2));
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  uint64_t first_file = 0;
  CommitStep(env, run, 1, &first_file);
  CommitStep(env, run, 2);
  EXPECT_EQ(Names(fs, run), (std::set<std::string>{"step1", "step2"}));
  CommitStep(env, run, 3);
  EXPECT_EQ(Names(fs, run), (std::set<std::string>{"step2", "step3"}));
  EXPECT_EQ(fs.Lookup(run, "step1").err(), ENOENT);
  EXPECT_EQ(*fs.Readlink(fs.Lookup(run, "latest")->ino), "step3");
  // The data is still on disk until the GC runs, then it is gone.
  EXPECT_TRUE(env.data.Open(first_file, false).ok());
  auto n = fs.CollectGarbage(100);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(env.data.Open(first_file, false).err(), ENOENT);
  EXPECT_EQ(*fs.CollectGarbage(100), 0u);
  const std::string events = env.events.Render();
  EXPECT_NE(events.find("\"event\":\"prune\""), std::string::npos) << events;
  EXPECT_NE(events.find("\"path\":\"run/step1\""), std::string::npos) << events;
}

// Deleting data cannot be undone, but the rm that queued it is an unsynced
// batch: the GC makes it durable first, so a power loss after the GC never
// brings the step back without its bytes.
TEST(RetentionTest, AnRmIsDurableBeforeTheGcDeletesItsData) {
  FsEnv env;
  const uint64_t run = Mkdir(env.fs(), kRootIno, "run");
  uint64_t f = 0;
  const uint64_t step = CommitStep(env, run, 1, &f);
  ASSERT_TRUE(env.fs().Unlink(step, "shard").ok());
  ASSERT_TRUE(env.fs().Rmdir(run, "step1").ok());
  ASSERT_EQ(*env.fs().CollectGarbage(100), 1u);
  EXPECT_EQ(env.data.Open(f, false).err(), ENOENT);
  env.CrashAndRestart();  // unsynced batches are lost
  EXPECT_EQ(env.fs().Lookup(run, "step1").err(), ENOENT) << env.events.Render();
}

TEST(RetentionTest, OpenReaderKeepsDataOfAPrunedStep) {
  FsEnv env(KeepLast(1));
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  uint64_t f = 0;
  CommitStep(env, run, 1, &f);
  auto reader = fs.OpenFile(f, O_RDONLY);
  ASSERT_TRUE(reader.ok());
  CommitStep(env, run, 2);
  EXPECT_EQ(fs.Lookup(run, "step1").err(), ENOENT);  // gone from the namespace
  ASSERT_TRUE(fs.CollectGarbage(100).ok());
  char buf[64] = {};
  auto n = fs.Read(reader->fh, buf, sizeof buf, 0);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "data of step 1");
  ASSERT_TRUE(fs.Release(reader->fh).ok());
  EXPECT_EQ(env.data.Open(f, false).err(), ENOENT);
}

TEST(RetentionTest, CrashBetweenPruneAndGcFinishesTheGcAfterRestart) {
  FsEnv env(KeepLast(1));
  const uint64_t run = Mkdir(env.fs(), kRootIno, "run");
  uint64_t old_file = 0, new_file = 0;
  CommitStep(env, run, 1, &old_file);
  const uint64_t kept = CommitStep(env, run, 2, &new_file);
  env.CrashAndRestart();  // the commit batch (with the prune) was synced
  auto& fs = env.fs();
  EXPECT_EQ(fs.Lookup(run, "step1").err(), ENOENT);
  EXPECT_TRUE(env.data.Open(old_file, false).ok());  // still queued
  ASSERT_TRUE(fs.CollectGarbage(100).ok());
  EXPECT_EQ(env.data.Open(old_file, false).err(), ENOENT);
  EXPECT_EQ(*fs.GetXattr(kept, "user.ckptfs.state"), "committed");
  ASSERT_TRUE(fs.Lookup(kept, "shard").ok());  // a new mount: the kernel looks it up first
  auto o = fs.OpenFile(new_file, O_RDONLY);
  ASSERT_TRUE(o.ok());
  char buf[64] = {};
  EXPECT_EQ(std::string(buf, *fs.Read(o->fh, buf, sizeof buf, 0)), "data of step 2");
  ASSERT_TRUE(fs.Release(o->fh).ok());
}

TEST(RetentionTest, RunXattrsOverrideDefaultsAndBadValuesAreRefused) {
  FsEnv env;  // default: keep everything
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  EXPECT_EQ(fs.SetXattr(run, "user.ckptfs.keep_last", "-1", 0).err(), EINVAL);
  EXPECT_EQ(fs.SetXattr(run, "user.ckptfs.keep_last", "two", 0).err(), EINVAL);
  EXPECT_NE(env.events.Render().find("keep_last"), std::string::npos);
  for (int i = 1; i <= 3; ++i) CommitStep(env, run, i);
  EXPECT_EQ(Names(fs, run).size(), 3u);  // the refused values changed nothing
  ASSERT_TRUE(fs.SetXattr(run, "user.ckptfs.keep_last", "2", 0).ok());
  const uint64_t s3 = fs.Lookup(run, "step3")->ino;
  EXPECT_EQ(fs.SetXattr(s3, "user.ckptfs.pin", "yes", 0).err(), EINVAL);
  ASSERT_TRUE(fs.SetXattr(fs.Lookup(run, "step1")->ino, "user.ckptfs.pin", "1", 0).ok());
  CommitStep(env, run, 4);
  EXPECT_EQ(Names(fs, run), (std::set<std::string>{"step1", "step3", "step4"}));
  // The plan, as ckptfs retention --dry-run shows it.
  auto plan = fs.GetXattr(run, "user.ckptfs.retention_plan");
  ASSERT_TRUE(plan.ok());
  EXPECT_NE(plan->find("\"reason\":\"pinned\""), std::string::npos) << *plan;
  EXPECT_EQ(fs.SetXattr(run, "user.ckptfs.retention_plan", "x", 0).err(), EPERM);
}

TEST(RetentionTest, IncompleteStepsOlderThanTheNewestCommittedGoAtMount) {
  FsEnv env;
  const uint64_t run = Mkdir(env.fs(), kRootIno, "run");
  const uint64_t s1 = Mkdir(env.fs(), run, "step1");
  WriteFile(env.fs(), s1, "partial", "x");
  ASSERT_TRUE(env.fs().FsyncDir().ok());
  env.CrashAndRestart();  // step1 becomes incomplete; nothing newer is committed: kept
  EXPECT_EQ(*env.fs().GetXattr(s1, "user.ckptfs.state"), "incomplete");
  CommitStep(env, run, 2);  // retention at commit removes the older incomplete step
  EXPECT_EQ(Names(env.fs(), run), (std::set<std::string>{"step2"}));
}

}  // namespace
}  // namespace ckptfs::testing

namespace ckptfs::testing {
namespace {

TEST(RetentionTest, RmRfMarksTheStepDeletingSoLatestMovesBackAtOnce) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  CommitStep(env, run, 1);
  const uint64_t s2 = CommitStep(env, run, 2);
  WriteFile(fs, Mkdir(fs, kRootIno, "elsewhere"), "x", "1");
  EXPECT_EQ(*fs.Readlink(fs.Lookup(run, "latest")->ino), "step2");
  // rm -rf run/step2, first file: the step is no longer a candidate for anything.
  ASSERT_TRUE(fs.Unlink(s2, "shard").ok());
  EXPECT_EQ(*fs.GetXattr(s2, "user.ckptfs.state"), "deleting");
  EXPECT_EQ(*fs.Readlink(fs.Lookup(run, "latest")->ino), "step1");
  EXPECT_EQ(fs.Create(kRoot, s2, "new", 0644, O_WRONLY).err(), EROFS);
  // A crash before the final rmdir: the restart finishes the deletion.
  ASSERT_TRUE(fs.FsyncDir().ok());
  env.CrashAndRestart();
  EXPECT_EQ(env.fs().Lookup(run, "step2").err(), ENOENT);
  EXPECT_EQ(*env.fs().Readlink(env.fs().Lookup(run, "latest")->ino), "step1");
}

TEST(RetentionTest, InodeNumbersInTheGcQueueAreNeverReused) {
  FsEnv env;
  const uint64_t f = WriteFile(env.fs(), kRootIno, "big", "data");
  ASSERT_TRUE(env.fs().Unlink(kRootIno, "big").ok());  // queued for GC
  // The GC deleted the data but the daemon died before it dropped the key.
  ASSERT_TRUE(env.data.Remove(f).ok());
  ASSERT_TRUE(env.data.SyncDir().ok());
  ASSERT_TRUE(env.fs().FsyncDir().ok());
  env.CrashAndRestart();
  const uint64_t fresh = WriteFile(env.fs(), kRootIno, "new", "precious");
  EXPECT_GT(fresh, f);
  ASSERT_TRUE(env.fs().CollectGarbage(100).ok());
  EXPECT_EQ(ReadFile(env.fs(), fresh), "precious");
}

// SPEC section 9: a node that restarts never prunes from what it remembers.
// Recovery runs before the cluster hooks are attached; a single-node mount
// applies its policy there (section 5), a cluster node must not (issue 28:
// node b's restart deleted step1's objects that the whole cluster kept).
TEST(RetentionTest, ARestartPrunesOnASingleNodeButNeverInClusterMode) {
  for (const bool cluster_node : {false, true}) {
    SCOPED_TRACE(cluster_node ? "cluster node b" : "single node");
    FileSystemOptions options;
    if (cluster_node) options.node = "b";
    FsEnv env(options);
    const uint64_t run = Mkdir(env.fs(), kRootIno, "run");
    CommitStep(env, run, 1);
    CommitStep(env, run, 2);
    // The policy is set with every step committed; nothing is due before the
    // restart's pass.
    ASSERT_TRUE(env.fs().SetXattr(run, "user.ckptfs.keep_last", "1", 0).ok());
    EXPECT_EQ(Names(env.fs(), run), (std::set<std::string>{"step1", "step2"}));
    env.KillAndRestart();
    if (cluster_node) {
      EXPECT_EQ(Names(env.fs(), run), (std::set<std::string>{"step1", "step2"}));
    } else {
      EXPECT_EQ(Names(env.fs(), run), (std::set<std::string>{"step2"}));
    }
  }
}

TEST(RetentionTest, DeletingInsideAWritingStepIsOrdinary) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  WriteFile(fs, step, "tmp", "1");
  ASSERT_TRUE(fs.Unlink(step, "tmp").ok());
  EXPECT_EQ(*fs.GetXattr(step, "user.ckptfs.state"), "writing");
}

}  // namespace
}  // namespace ckptfs::testing
