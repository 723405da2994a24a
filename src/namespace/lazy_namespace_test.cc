// The lazy namespace (issue 29): a restart reads committed steps' subtrees
// only when something looks inside them, inode numbers stay stable and are
// never reused, and what a full load used to do at mount (the size check of
// committed files, the removal of unowned backing files, orphans) still
// happens.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "manifest/records.h"
#include "manifest/schema.h"
#include "namespace/fs_test_env.h"

namespace ckptfs::testing {
namespace {

// run/stepN for each n, each with files f0..f(files-1) and sub/g, committed.
struct CommittedRun {
  uint64_t run = 0;
  std::vector<uint64_t> steps;
  std::map<std::string, uint64_t> inos;  // "stepN/f0" -> ino
};

CommittedRun MakeRun(FsEnv& env, int steps, int files) {
  FileSystem& fs = env.fs();
  CommittedRun r;
  r.run = Mkdir(fs, kRootIno, "run");
  for (int s = 1; s <= steps; ++s) {
    const std::string step = "step" + std::to_string(s);
    const uint64_t dir = Mkdir(fs, r.run, step);
    for (int i = 0; i < files; ++i) {
      const std::string name = "f" + std::to_string(i);
      r.inos[step + "/" + name] = WriteFile(fs, dir, name, step + "/" + name);
    }
    const uint64_t sub = Mkdir(fs, dir, "sub");
    r.inos[step + "/sub/g"] = WriteFile(fs, sub, "g", "deep in " + step);
    fs.RequestCommit(dir);
    env.DrainCommits();
    EXPECT_EQ(StateOf(fs, dir), "committed");
    r.steps.push_back(dir);
  }
  return r;
}

TEST(LazyNamespaceTest, ARestartLoadsACommittedStepOnlyWhenLookedInto) {
  FsEnv env;
  const CommittedRun r = MakeRun(env, 3, 20);
  const uint64_t writing = Mkdir(env.fs(), r.run, "step4");
  WriteFile(env.fs(), writing, "partial", "not committed");
  env.KillAndRestart();
  FileSystem& fs = env.fs();
  // The root, the run, three unloaded steps, the writing step and its file.
  EXPECT_EQ(fs.InodeCountForTest(), 7u);
  // Step records answer what `ls` of the run and its xattrs ask.
  EXPECT_EQ(StateOf(fs, r.steps[0]), "committed");
  auto listed = fs.Readdir(r.run, 0, 100);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(fs.InodeCountForTest(), 7u) << "ls of the run reads no step";

  // A lookup inside an older step reads that step, with the same numbers.
  auto f = fs.Lookup(r.steps[0], "f7");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->ino, r.inos.at("step1/f7"));
  EXPECT_EQ(ReadFile(fs, f->ino), "step1/f7");
  EXPECT_EQ(fs.InodeCountForTest(), 7u + 22u);
  auto sub = fs.Lookup(r.steps[0], "sub");
  ASSERT_TRUE(sub.ok());
  auto g = fs.Lookup(sub->ino, "g");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->ino, r.inos.at("step1/sub/g"));
  EXPECT_EQ(ReadFile(fs, g->ino), "deep in step1");
  EXPECT_EQ(fs.metrics().lazy_step_loads.load(), 1u);

  // Readdir of a step lists every entry, in the order they were made.
  auto entries = fs.Readdir(r.steps[1], 0, 100);
  ASSERT_TRUE(entries.ok());
  std::vector<std::string> names;
  for (const auto& e : *entries) {
    if (e.name != "." && e.name != ".." && e.name != ".full") names.push_back(e.name);
  }
  ASSERT_EQ(names.size(), 21u);
  EXPECT_EQ(names.front(), "f0");
  EXPECT_EQ(names.back(), "sub");
  EXPECT_EQ(fs.metrics().lazy_step_loads.load(), 2u);
  EXPECT_EQ(fs.InodeCountForTest(), 7u + 2 * 22u);
}

TEST(LazyNamespaceTest, WhatTheCacheHoldsCountsUnloadedSteps) {
  FsEnv env;
  MakeRun(env, 3, 10);
  const uint64_t before = env.fs().ResidentBytes();
  EXPECT_GT(before, 3u * 10 * 8);
  env.KillAndRestart();
  EXPECT_EQ(env.fs().InodeCountForTest(), 5u);
  EXPECT_EQ(env.fs().ResidentBytes(), before);
}

TEST(LazyNamespaceTest, InodeNumbersAreNeverReusedAcrossRestartsAndCrashes) {
  FsEnv env;
  const CommittedRun r = MakeRun(env, 2, 5);
  uint64_t highest = 0;
  for (const auto& [path, ino] : r.inos) highest = std::max(highest, ino);
  // A file made just before a power loss: its batch is lost, its number is
  // not handed out again (its backing file may have survived).
  const uint64_t lost = WriteFile(env.fs(), r.run, "scratch", "x");
  EXPECT_GT(lost, highest);
  env.CrashAndRestart();
  const uint64_t next = WriteFile(env.fs(), r.run, "after_crash", "y");
  EXPECT_GT(next, lost);
  env.KillAndRestart();
  const uint64_t again = WriteFile(env.fs(), r.run, "after_kill", "z");
  EXPECT_GT(again, next);
  // The reservation in the manifest covers every number handed out.
  auto reserved = env.manifest.Get(KeySpace::kMeta, kInoReservedKey);
  ASSERT_TRUE(reserved.ok() && reserved->has_value());
  EXPECT_GE(std::stoull(**reserved), again);
}

TEST(LazyNamespaceTest, AnUnloadedStepIsNotEmptyAndItsRemovalDeletesEveryRecord) {
  FsEnv env;
  const CommittedRun r = MakeRun(env, 2, 10);
  const size_t inodes_before = KeysIn(env.manifest, KeySpace::kInodes);
  env.KillAndRestart();
  FileSystem& fs = env.fs();
  EXPECT_EQ(fs.Rmdir(r.run, "step1").err(), ENOTEMPTY);
  // Rename over a committed step that is not empty fails the same way.
  Mkdir(fs, r.run, "empty");
  EXPECT_EQ(fs.Rename(r.run, "empty", r.run, "step2", 0).err(), ENOTEMPTY);
  ASSERT_TRUE(fs.Rmdir(r.run, "empty").ok());

  // rm -rf after a restart: the step is read, then every record goes.
  env.KillAndRestart();
  auto sub = env.fs().Lookup(r.steps[0], "sub");
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE(env.fs().Unlink(sub->ino, "g").ok());
  ASSERT_TRUE(env.fs().Rmdir(r.steps[0], "sub").ok());
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(env.fs().Unlink(r.steps[0], "f" + std::to_string(i)).ok());
  ASSERT_TRUE(env.fs().Rmdir(r.run, "step1").ok());
  ASSERT_TRUE(env.fs().WriteDeferredRecords().ok());  // the coordinator's tick
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kInodes), inodes_before - 13);
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kDentries, DentryPrefix(r.steps[0])), 0u);
}

TEST(LazyNamespaceTest, RetentionRemovesAnUnloadedStepWhole) {
  FileSystemOptions options;
  ASSERT_TRUE(SetPolicyRule("keep_last", "2", &options.retention).ok());
  FsEnv env(options);
  const CommittedRun r = MakeRun(env, 2, 10);
  const size_t inodes_before = KeysIn(env.manifest, KeySpace::kInodes);
  env.KillAndRestart();
  // A third step commits; retention removes step1, which nobody looked at.
  const uint64_t step3 = Mkdir(env.fs(), r.run, "step3");
  WriteFile(env.fs(), step3, "f", "3");
  env.fs().RequestCommit(step3);
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step3), "committed");
  EXPECT_EQ(env.fs().Lookup(r.run, "step1").err(), ENOENT);
  // step1's 13 inodes went, step3's 2 came.
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kInodes), inodes_before - 13 + 2);
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kGc), 11u);  // its 11 files' data, queued
}

TEST(LazyNamespaceTest, AFileUnlinkedWhileOpenIsRemovedAtRestartThroughTheOrphanIndex) {
  FsEnv env;
  MakeRun(env, 1, 2);
  const uint64_t ino = WriteFile(env.fs(), kRootIno, "scratch", "bytes");
  auto open = env.fs().OpenFile(ino, O_RDONLY);
  ASSERT_TRUE(open.ok());
  ASSERT_TRUE(env.fs().Unlink(kRootIno, "scratch").ok());
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kMeta, kOrphanPrefix), 1u);
  env.KillAndRestart();
  EXPECT_FALSE(env.manifest.Get(KeySpace::kInodes, InoKey(ino))->has_value());
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kMeta, kOrphanPrefix), 0u);
  EXPECT_EQ(env.data.Open(ino, false).err(), ENOENT);

  // Its last close removes an orphan's index key with its record.
  const uint64_t other = WriteFile(env.fs(), kRootIno, "other", "more");
  auto h = env.fs().OpenFile(other, O_RDONLY);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(env.fs().Unlink(kRootIno, "other").ok());
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kMeta, kOrphanPrefix), 1u);
  ASSERT_TRUE(env.fs().Release(h->fh).ok());
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kMeta, kOrphanPrefix), 0u);
  EXPECT_FALSE(env.manifest.Get(KeySpace::kInodes, InoKey(other))->has_value());
}

TEST(LazyNamespaceTest, TheBackgroundPassFindsACutFileWithoutLoadingItsStep) {
  FsEnv env;
  const CommittedRun r = MakeRun(env, 2, 4);
  const uint64_t cut = r.inos.at("step1/sub/g");
  {
    auto backing = env.data.Open(cut, /*create=*/false);
    ASSERT_TRUE(backing.ok());
    ASSERT_TRUE(backing.value()->Truncate(3).ok());
  }
  // A backing file no inode owns (made just before a crash).
  const uint64_t stray = r.inos.at("step2/sub/g") + 1000;
  ASSERT_TRUE((*env.data.Open(stray, true))->PWrite("left", 4, 0).ok());
  env.KillAndRestart();
  const size_t loaded = env.fs().InodeCountForTest();
  EXPECT_EQ(env.data.Open(stray, false).ok(), true)
      << "a lazy mount does not list the data directory";
  env.FinishBackgroundChecks();
  EXPECT_EQ(StateOf(env.fs(), r.steps[0]), "broken");
  auto why = env.fs().GetXattr(r.steps[0], "user.ckptfs.error");
  ASSERT_TRUE(why.ok());
  EXPECT_NE(why->find("run/step1/sub/g lost data: 3 of 13 bytes"), std::string::npos) << *why;
  EXPECT_EQ(StateOf(env.fs(), r.steps[1]), "committed");
  EXPECT_EQ(env.fs().InodeCountForTest(), loaded) << "the check read records, not the steps";
  EXPECT_EQ(env.data.Open(stray, false).err(), ENOENT);
  // Files still there stay readable in the broken step.
  auto f = env.fs().Lookup(r.steps[0], "f1");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(ReadFile(env.fs(), f->ino), "step1/f1");
}

TEST(LazyNamespaceTest, AVersionOneManifestIsLoadedWholeOnceAndUpgraded) {
  FsEnv env;
  const CommittedRun r = MakeRun(env, 2, 3);
  env.Stop();
  // As an earlier ckptfs left it: no reservation, version 1.
  ManifestBatch old;
  old.Put(KeySpace::kMeta, kFormatVersionKey, kLegacyFormatVersion);
  old.Delete(KeySpace::kMeta, kInoReservedKey);
  ASSERT_TRUE(env.manifest.Write(old, true).ok());
  // A backing file above every inode: a full mount reserves past it.
  const uint64_t high = r.inos.at("step2/sub/g") + 100;
  ASSERT_TRUE((*env.data.Open(high, true))->PWrite("x", 1, 0).ok());
  env.Start();
  EXPECT_EQ(env.fs().InodeCountForTest(), 2u + 2 * 6u) << "loaded whole";
  EXPECT_EQ(env.data.Open(high, false).err(), ENOENT) << "removed at mount, as before";
  EXPECT_EQ(**env.manifest.Get(KeySpace::kMeta, kFormatVersionKey), kFormatVersion);
  EXPECT_GE(std::stoull(**env.manifest.Get(KeySpace::kMeta, kInoReservedKey)), high);
  env.KillAndRestart();
  EXPECT_EQ(env.fs().InodeCountForTest(), 4u) << "lazy from the next mount on";
  EXPECT_GT(WriteFile(env.fs(), r.run, "new", "n"), high);
}

TEST(LazyNamespaceTest, AManifestOfALaterVersionIsRefused) {
  FsEnv env;
  env.Stop();
  ManifestBatch later;
  later.Put(KeySpace::kMeta, kFormatVersionKey, "3");
  ASSERT_TRUE(env.manifest.Write(later, true).ok());
  EXPECT_THROW(env.Start(), std::runtime_error);
}

// Past the inode budget, settled steps nobody uses go back to the manifest,
// least recently used first: the kernel is first asked to drop the step's
// entry, and the step is unloaded at a later pass, once the kernel has
// forgotten its inodes. Read again, it has the same numbers and contents.
class UnloadTest : public ::testing::Test {
 protected:
  static FileSystemOptions Budget(size_t inodes) {
    FileSystemOptions o;
    o.max_cached_inodes = inodes;
    return o;
  }

  // The kernel's side: what it looked up, and the entries it was asked to
  // drop (parent, name).
  void WatchInvalidations(FileSystem& fs) {
    fs.SetInvalidateEntry(
        [this](uint64_t parent, const std::string& name) { asked_.emplace_back(parent, name); });
  }
  uint64_t LookUp(FileSystem& fs, uint64_t dir, const std::string& name) {
    auto e = fs.Lookup(dir, name);
    EXPECT_TRUE(e.ok()) << name << ": " << e.status().ToString();
    return e.ok() ? e->ino : 0;
  }
  // Four committed steps of 20 files and sub/g each, after a restart with
  // budget inodes, nothing loaded; the kernel's side watched.
  FileSystem& RestartWithFourSteps(size_t budget) {
    env_ = std::make_unique<FsEnv>(Budget(budget));
    run_ = MakeRun(*env_, 4, 20);
    env_->KillAndRestart();
    WatchInvalidations(env_->fs());
    return env_->fs();
  }
  size_t Unload(FileSystem& fs) {
    auto n = fs.UnloadIdleSteps();
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return n.ok() ? *n : 0;
  }

  std::unique_ptr<FsEnv> env_;
  CommittedRun run_;
  std::vector<std::pair<uint64_t, std::string>> asked_;
};

TEST_F(UnloadTest, LeastRecentlyUsedIdleStepsGoPastTheBudgetAndComeBackTheSame) {
  FileSystem& fs = RestartWithFourSteps(60);
  const CommittedRun& r = run_;
  EXPECT_EQ(fs.InodeCountForTest(), 6u);  // root, run, four unloaded steps
  const uint64_t f1 = LookUp(fs, r.steps[0], "f0");
  LookUp(fs, r.steps[1], "f0");
  LookUp(fs, r.steps[2], "f0");
  EXPECT_EQ(fs.InodeCountForTest(), 6u + 3 * 22u);

  // step1 is the least recently used, but the kernel holds its f0: the
  // first pass only asks the kernel to drop step1.
  EXPECT_EQ(Unload(fs), 0u);
  ASSERT_EQ(asked_.size(), 1u);
  EXPECT_EQ(asked_[0], std::make_pair(r.steps[0], std::string("f0")))
      << "the entries the kernel holds in the step, not the step's own";
  EXPECT_EQ(fs.InodeCountForTest(), 6u + 3 * 22u);
  fs.Forget(f1, 1);  // what the kernel does once the entry is dropped
  EXPECT_EQ(Unload(fs), 1u);
  EXPECT_EQ(fs.InodeCountForTest(), 6u + 2 * 22u);
  EXPECT_EQ(fs.metrics().lazy_step_unloads.load(), 1u);
  EXPECT_EQ(Unload(fs), 0u) << "under the budget now";

  // Read again on next use: the same numbers, the same bytes, every entry.
  auto f7 = fs.Lookup(r.steps[0], "f7");
  ASSERT_TRUE(f7.ok());
  EXPECT_EQ(f7->ino, r.inos.at("step1/f7"));
  EXPECT_EQ(ReadFile(fs, f7->ino), "step1/f7");
  const uint64_t sub = LookUp(fs, r.steps[0], "sub");
  EXPECT_EQ(LookUp(fs, sub, "g"), r.inos.at("step1/sub/g"));
  auto entries = fs.Readdir(r.steps[0], 0, 100);
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(entries->size(), 2u + 21u);  // ".", "..", 21 entries
  EXPECT_EQ(StateOf(fs, r.steps[0]), "committed");
  EXPECT_EQ(fs.metrics().lazy_step_loads.load(), 4u);
}

TEST_F(UnloadTest, AStepWithAnOpenFileStaysAndTheNextOneGoes) {
  FileSystem& fs = RestartWithFourSteps(60);
  const CommittedRun& r = run_;
  const uint64_t f1 = LookUp(fs, r.steps[0], "f3");
  auto open = fs.OpenFile(f1, O_RDONLY);  // the kernel holds f3 while it is open
  ASSERT_TRUE(open.ok());
  fs.Forget(LookUp(fs, r.steps[1], "f0"), 1);
  fs.Forget(LookUp(fs, r.steps[2], "f0"), 1);

  // step1 is asked for first (f3 is all the kernel holds of it); it is
  // still open at the next pass, so it counts as used and step2 goes.
  EXPECT_EQ(Unload(fs), 0u);
  EXPECT_EQ(Unload(fs), 1u);
  ASSERT_EQ(asked_.size(), 1u);
  EXPECT_EQ(asked_[0], std::make_pair(r.steps[0], std::string("f3")));
  EXPECT_EQ(fs.InodeCountForTest(), 6u + 2 * 22u);
  char buf[16] = {};
  auto n = fs.Read(open->fh, buf, sizeof buf, 0);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "step1/f3");
  EXPECT_TRUE(fs.Release(open->fh).ok());
  auto listed = fs.Readdir(r.steps[1], 0, 100);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 2u + 21u);
  EXPECT_EQ(fs.metrics().lazy_step_loads.load(), 4u) << "step2 read again";
}

TEST_F(UnloadTest, StepsCommittedDuringTheMountAndUnloadedStepsStillGoAway) {
  // Nothing loaded lazily: the steps were written and committed by this
  // mount. They are unloaded all the same, and rm -rf of an unloaded step
  // deletes every record.
  FsEnv env(Budget(40));
  const CommittedRun r = MakeRun(env, 3, 20);
  FileSystem& fs = env.fs();
  WatchInvalidations(fs);
  fs.ForgetEverythingForTest();
  EXPECT_EQ(Unload(fs), 2u);
  EXPECT_EQ(fs.InodeCountForTest(), 5u + 22u);
  EXPECT_TRUE(asked_.empty()) << "the kernel held nothing";
  const uint64_t sub = LookUp(fs, r.steps[0], "sub");  // rm -rf step1
  ASSERT_TRUE(fs.Unlink(sub, "g").ok());
  ASSERT_TRUE(fs.Rmdir(r.steps[0], "sub").ok());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(fs.Unlink(r.steps[0], "f" + std::to_string(i)).ok());
  ASSERT_TRUE(fs.Rmdir(r.run, "step1").ok());
  ASSERT_TRUE(fs.WriteDeferredRecords().ok());  // the coordinator's tick
  EXPECT_EQ(KeysIn(env.manifest, KeySpace::kDentries, DentryPrefix(r.steps[0])), 0u);
  EXPECT_FALSE(fs.Lookup(r.run, "step1").ok());
  env.KillAndRestart();
  EXPECT_EQ(ReadFile(env.fs(), LookUp(env.fs(), r.steps[1], "f5")), "step2/f5");
}

}  // namespace
}  // namespace ckptfs::testing
