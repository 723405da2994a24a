// rm -rf of a committed step (issue 29): the step turns `deleting` with its
// first unlink, in one batch; the unlinks and rmdirs inside it change only
// the image, and the step's own rmdir hands everything they removed to the
// background as one more batch (written by the coordinator's next tick, or
// before the next change). A stop before that batch is written finishes the
// deletion at recovery.
#include <fcntl.h>

#include <gtest/gtest.h>

#include <string>

#include "manifest/records.h"
#include "namespace/fs_test_env.h"

namespace ckptfs::testing {
namespace {

struct CommittedStep {
  uint64_t run = 0;
  uint64_t step = 0;
  uint64_t sub = 0;
};

// run/step1 with files f0..f(n-1) and a subdirectory sub/ with one file,
// committed.
CommittedStep MakeCommittedStep(FsEnv& env, int n) {
  FileSystem& fs = env.fs();
  CommittedStep s;
  s.run = Mkdir(fs, kRootIno, "run");
  s.step = Mkdir(fs, s.run, "step1");
  for (int i = 0; i < n; ++i) WriteFile(fs, s.step, "f" + std::to_string(i), "data");
  s.sub = Mkdir(fs, s.step, "sub");
  WriteFile(fs, s.sub, "g", "more");
  fs.RequestCommit(s.step);
  env.DrainCommits();
  EXPECT_EQ(*fs.GetXattr(s.step, "user.ckptfs.state"), "committed");
  return s;
}

// What rm -rf does: every file, the subdirectory, then the step.
void RemoveAll(FileSystem& fs, const CommittedStep& s, int n) {
  ASSERT_TRUE(fs.Unlink(s.sub, "g").ok());
  ASSERT_TRUE(fs.Rmdir(s.step, "sub").ok());
  for (int i = 0; i < n; ++i) ASSERT_TRUE(fs.Unlink(s.step, "f" + std::to_string(i)).ok());
}

// The whole rm -rf: RemoveAll, then the step's own rmdir, whose batch is
// left for the background.
void RmRf(FileSystem& fs, const CommittedStep& s, int n) {
  RemoveAll(fs, s, n);
  ASSERT_TRUE(fs.Rmdir(s.run, "step1").ok());
}

// The step and every record of it are gone; its n + 1 files wait for the GC.
void ExpectStepGone(FsEnv& env, const CommittedStep& s, int n) {
  EXPECT_EQ(env.fs().Lookup(s.run, "step1").status().err(), ENOENT);
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kSteps), 0u);
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kDentries), 1u);  // run
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kInodes), 2u);    // root, run
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kGc), static_cast<size_t>(n + 1));
}

TEST(StepDeletionTest, RmRfOfACommittedStepIsTwoBatches) {
  FsEnv env;
  FileSystem& fs = env.fs();
  const int n = 50;
  const CommittedStep s = MakeCommittedStep(env, n);
  const size_t inodes_before = KeysIn(env.manifest, KeySpace::kInodes);
  const int before = env.manifest_writes;
  RemoveAll(fs, s, n);
  // The first unlink turned the step `deleting`; the rest wrote nothing.
  EXPECT_EQ(env.manifest_writes - before, 1);
  EXPECT_EQ(*fs.GetXattr(s.step, "user.ckptfs.state"), "deleting");
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kInodes), inodes_before);
  // The image already shows the step empty.
  auto listed = fs.Readdir(s.step, 0, 1000);
  ASSERT_TRUE(listed.ok());
  for (const DirEntry& d : *listed) EXPECT_TRUE(d.name == "." || d.name == "..") << d.name;
  // The step's rmdir writes nothing before its reply: every removal goes
  // in one batch, in the background.
  ASSERT_TRUE(fs.Rmdir(s.run, "step1").ok());
  EXPECT_EQ(env.manifest_writes - before, 1);
  EXPECT_EQ(fs.Lookup(s.run, "step1").status().err(), ENOENT);
  ASSERT_TRUE(fs.WriteDeferredRecords().ok());  // the coordinator's tick
  EXPECT_EQ(env.manifest_writes - before, 2);
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kInodes), inodes_before - (n + 3));
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kSteps), 0u);
  // Every file's data is queued for the GC.
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kGc), static_cast<size_t>(n + 1));
  // A restart finds the namespace as rm left it.
  env.CleanRestart();
  EXPECT_EQ(env.fs().Lookup(s.run, "step1").status().err(), ENOENT);
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kDentries), 1u);  // run
}

TEST(StepDeletionTest, AStopInTheMiddleOfRmRfFinishesTheDeletion) {
  for (bool power_loss : {false, true}) {
    SCOPED_TRACE(power_loss ? "power loss" : "kill -9");
    FsEnv env;
    const int n = 20;
    const CommittedStep s = MakeCommittedStep(env, n);
    // rm -rf got half way: some files gone from the image only.
    ASSERT_TRUE(env.fs().Unlink(s.step, "f0").ok());
    ASSERT_TRUE(env.fs().Unlink(s.step, "f1").ok());
    ASSERT_TRUE(env.fs().Unlink(s.sub, "g").ok());
    if (power_loss) {
      ASSERT_TRUE(env.fs().FsyncDir().ok());  // the `deleting` state reached the disk
      env.CrashAndRestart();
    } else {
      env.KillAndRestart();
    }
    FileSystem& fs = env.fs();
    EXPECT_EQ(fs.Lookup(s.run, "step1").status().err(), ENOENT);
    EXPECT_EQ(KeysIn(env.manifest, KeySpace::kSteps), 0u);
    EXPECT_EQ(KeysIn(env.manifest, KeySpace::kDentries), 1u);  // run
    EXPECT_EQ(KeysIn(env.manifest, KeySpace::kGc), static_cast<size_t>(n + 1));
  }
}

TEST(StepDeletionTest, AStopBeforeTheBackgroundWriteFinishesTheDeletion) {
  for (bool power_loss : {false, true}) {
    SCOPED_TRACE(power_loss ? "power loss" : "kill -9");
    FsEnv env;
    const int n = 20;
    const CommittedStep s = MakeCommittedStep(env, n);
    RmRf(env.fs(), s, n);
    // The rmdir's batch was never written: the step is `deleting` in the
    // manifest, with every file's records.
    if (power_loss) {
      env.CrashAndRestart(/*keep_unsynced_batches=*/SIZE_MAX);
    } else {
      env.KillAndRestart();
    }
    ExpectStepGone(env, s, n);
  }
}

TEST(StepDeletionTest, TheNextChangeWritesTheEndOfAnRmRfFirst) {
  // rm -rf step1 && mkdir step1: the new step's records come after the old
  // one's removal in the manifest, never before (its dentry has the same key).
  FsEnv env;
  const int n = 10;
  const CommittedStep s = MakeCommittedStep(env, n);
  RmRf(env.fs(), s, n);
  const uint64_t again = Mkdir(env.fs(), s.run, "step1");
  WriteFile(env.fs(), again, "model.pt", "new weights");
  env.KillAndRestart();
  FileSystem& fs = env.fs();
  auto step = fs.Lookup(s.run, "step1");
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(step->ino, again);
  auto model = fs.Lookup(again, "model.pt");
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(ReadFile(fs, model->ino), "new weights");
  EXPECT_EQ(fs.Lookup(again, "f0").status().err(), ENOENT);
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kGc), static_cast<size_t>(n + 1));
}

TEST(StepDeletionTest, ACleanStopWritesTheEndOfAnRmRf) {
  FsEnv env;
  const int n = 10;
  const CommittedStep s = MakeCommittedStep(env, n);
  RmRf(env.fs(), s, n);
  env.CleanRestart();
  // Written at the stop: no deletion left for recovery to finish.
  EXPECT_EQ(env.events.Counts().count("prune"), 0u);
  ExpectStepGone(env, s, n);
}

TEST(StepDeletionTest, RenamingAStepBeingDeletedWritesWhatRmRemoved) {
  FsEnv env;
  const int n = 5;
  const CommittedStep s = MakeCommittedStep(env, n);
  ASSERT_TRUE(env.fs().Unlink(s.step, "f0").ok());
  ASSERT_TRUE(env.fs().Unlink(s.step, "f1").ok());
  // No longer a step name: an ordinary directory, whose removed files must
  // not come back at the next mount (no recovery removes it now).
  ASSERT_TRUE(env.fs().Rename(s.run, "step1", s.run, "kept", 0).ok());
  env.KillAndRestart();
  FileSystem& fs = env.fs();
  auto kept = fs.Lookup(s.run, "kept");
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(fs.Lookup(kept->ino, "f0").status().err(), ENOENT);
  EXPECT_EQ(fs.Lookup(kept->ino, "f1").status().err(), ENOENT);
  EXPECT_TRUE(fs.Lookup(kept->ino, "f2").ok());
  EXPECT_TRUE(fs.Lookup(kept->ino, "sub").ok());
}

TEST(StepDeletionTest, FilesOpenOrLinkedElsewhereAreRecordedAtOnce) {
  FsEnv env;
  FileSystem& fs = env.fs();
  const int n = 3;
  const CommittedStep s = MakeCommittedStep(env, n);
  // f0 also linked outside the step, f1 open for reading.
  auto f0 = fs.Lookup(s.step, "f0");
  ASSERT_TRUE(f0.ok());
  ASSERT_TRUE(fs.Link(f0->ino, s.run, "f0-kept").ok());
  auto f1 = fs.Lookup(s.step, "f1");
  ASSERT_TRUE(f1.ok());
  auto opened = fs.OpenFile(f1->ino, O_RDONLY);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ASSERT_TRUE(fs.Unlink(s.step, "f2").ok());  // turns the step `deleting`
  const int before = env.manifest_writes;
  ASSERT_TRUE(fs.Unlink(s.step, "f0").ok());
  ASSERT_TRUE(fs.Unlink(s.step, "f1").ok());
  EXPECT_EQ(env.manifest_writes - before, 2);
  env.KillAndRestart();
  // The other link survives the step's deletion at recovery, with its data.
  auto kept = env.fs().Lookup(s.run, "f0-kept");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(ReadFile(env.fs(), kept->ino), "data");
}

}  // namespace
}  // namespace ckptfs::testing
