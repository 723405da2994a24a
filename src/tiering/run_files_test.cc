// Run-level files in the remote tier (SPEC section 4): the files a trainer
// keeps in its run directory beside the steps, such as DeepSpeed's `latest`
// (the name of the newest step directory) and RecIS's `checkpoint` index
// (one step name per line, appended). They are uploaded at every close, but
// a version waits until the steps that were unfinished when it was closed
// are persisted, so the remote never holds an index naming a step it does
// not have; renames onto them replace the object without a gap; unlink
// deletes it; a cold mount shows them (fetched on first read, fetched whole
// before a write); they are never evicted. With crashes (kill -9) between
// the steps.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "formats/commit_object.h"
#include "tiering/remote_tier_test_util.h"

namespace ckptfs {
namespace {

using testing::FsEnv;
using testing::kMiB;
using testing::kRoot;
using testing::Mkdir;
using testing::Pattern;
using testing::ReadFile;
using testing::RemoteOptions;
using testing::RemoteTierTest;
using testing::SharedStore;
using testing::WriteFile;

// The inode at a path below the root, or 0.
uint64_t Resolve(FileSystem& fs, const std::string& path) {
  uint64_t ino = kRootIno;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    auto e = fs.Lookup(ino, path.substr(start, end - start));
    if (!e.ok()) return 0;
    ino = e->ino;
    start = end + 1;
  }
  return ino;
}

bool IsRegular(FileSystem& fs, uint64_t dir, const std::string& name) {
  auto e = fs.Lookup(dir, name);
  return e.ok() && S_ISREG(e->attr.st_mode);
}

// Opens an existing file with flags, writes data at offset (-1: at its
// end), closes it.
void WriteExisting(FileSystem& fs, uint64_t ino, int flags, const std::string& data, int64_t offset = 0) {
  auto o = fs.OpenFile(ino, flags);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  uint64_t at = static_cast<uint64_t>(offset);
  if (offset < 0) at = static_cast<uint64_t>(fs.GetAttr(ino)->attr.st_size);
  ASSERT_TRUE(fs.Write(o->fh, data.data(), data.size(), at).ok());
  ASSERT_TRUE(fs.Flush(o->fh).ok());
  ASSERT_TRUE(fs.Release(o->fh).ok());
}

// Another machine: an empty cache on the same remote.
struct ColdMachine {
  explicit ColdMachine(ObjectStore* store) : env(RemoteOptions()) {
    RemoteTierOptions o;
    o.fetch_chunk = kMiB;
    o.min_part_size = kMiB;
    o.retry_min_ns = 0;
    tier = std::make_unique<RemoteTier>(&env.fs(), env.fs().data(), std::make_unique<SharedStore>(store), &env.events, o);
    env.fs().SetTierHooks(tier.get());
  }
  ~ColdMachine() {
    env.fs().SetTierHooks(nullptr);
    tier.reset();
  }
  FileSystem& fs() { return env.fs(); }

  FsEnv env;
  std::unique_ptr<RemoteTier> tier;
};

class RunFilesTest : public RemoteTierTest {
 protected:
  // open(name, "w"): creates the file or truncates the one there, and
  // writes data. Each version gets its own mtime.
  uint64_t Save(uint64_t dir, const std::string& name, const std::string& data) {
    env_.clock.Advance(1000);
    FileSystem& fs = env_.fs();
    auto e = fs.Lookup(dir, name);
    if (!e.ok() || !S_ISREG(e->attr.st_mode)) return WriteFile(fs, dir, name, data);
    WriteExisting(fs, e->ino, O_WRONLY | O_TRUNC, data);
    return e->ino;
  }
  // DeepSpeed's save: global_step<n>/ with its states file.
  uint64_t SaveStep(uint64_t run, int n) {
    const uint64_t step = Mkdir(env_.fs(), run, "global_step" + std::to_string(n));
    WriteFile(env_.fs(), step, "mp_rank_00_model_states.pt", "states" + std::to_string(n));
    return step;
  }
  void Pass() { (void)tier_->RunOnceForTest(); }
};

TEST_F(RunFilesTest, LatestGoesUpOnceTheStepItNamesIsPersisted) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t s1 = SaveStep(run, 1);
  Save(run, "latest", "global_step1");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/global_step1/mp_rank_00_model_states.pt"), "states1");
  // The step it names is still being written: a new machine must not
  // find a `latest` naming a step the remote does not have.
  EXPECT_FALSE(Has("run/latest"));
  Commit(s1);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Xattr(s1, "user.ckptfs.persisted"), "true");
  EXPECT_EQ(Object("run/latest"), "global_step1");
  // Not a step's file: the commit object does not list it.
  auto obj = DecodeCommitObject(Object("run/global_step1/.ckptfs-commit.json"), "run/global_step1");
  ASSERT_TRUE(obj.ok());
  EXPECT_EQ(obj->files.size(), 1u);
}

TEST_F(RunFilesTest, ANewVersionWaitsForItsStepWhileTheRemoteKeepsTheOldOne) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  Commit(SaveStep(run, 1));
  Save(run, "latest", "global_step1");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_EQ(Object("run/latest"), "global_step1");
  const uint64_t s2 = SaveStep(run, 2);
  Save(run, "latest", "global_step2");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/latest"), "global_step1");
  Commit(s2);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/latest"), "global_step2");
  // A step that starts after the close does not hold the version back.
  Save(run, "notes.txt", "resumed from 2");
  Mkdir(fs, run, "global_step3");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/notes.txt"), "resumed from 2");
}

TEST_F(RunFilesTest, ATmpFileRenamedOntoLatestReplacesItWithoutAGap) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  Commit(SaveStep(run, 1));
  Save(run, "latest", "global_step1");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  const uint64_t s2 = SaveStep(run, 2);
  Save(run, "latest.tmp", "global_step2");
  ASSERT_TRUE(fs.Rename(run, "latest.tmp", run, "latest", 0).ok());
  // The old object's deletion is queued by the rename, but the remote keeps
  // the old `latest` until the new one replaces it.
  for (int i = 0; i < 2; i++) {
    ASSERT_TRUE(tier_->RunOnceForTest().ok());
    EXPECT_EQ(Object("run/latest"), "global_step1");
  }
  EXPECT_FALSE(Has("run/latest.tmp"));
  Commit(s2);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/latest"), "global_step2");
  EXPECT_FALSE(Has("run/latest.tmp"));

  // With nothing to wait for, the temporary file goes up first; renamed, it
  // goes up at its new key and the temporary object is deleted.
  Save(run, "latest.tmp", "global_step2 again");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_EQ(Object("run/latest.tmp"), "global_step2 again");
  ASSERT_TRUE(fs.Rename(run, "latest.tmp", run, "latest", 0).ok());
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/latest"), "global_step2 again");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_FALSE(Has("run/latest.tmp"));
}

TEST_F(RunFilesTest, UnlinkDeletesTheObjectAndFilesOutsideRunsStayLocal) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  Commit(SaveStep(run, 1));
  Save(run, "latest", "global_step1");
  const uint64_t other = Mkdir(fs, kRootIno, "logs");
  Save(other, "train.log", "no step beside it");
  Save(kRootIno, "README", "the root holds no step");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_EQ(Object("run/latest"), "global_step1");
  EXPECT_FALSE(Has("logs/train.log"));
  EXPECT_FALSE(Has("README"));
  ASSERT_TRUE(fs.Unlink(run, "latest").ok());
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_FALSE(Has("run/latest"));
  EXPECT_TRUE(Has("run/global_step1/.ckptfs-commit.json"));
}

TEST_F(RunFilesTest, AFileWrittenBeforeTheFirstStepGoesUpWithThatStep) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  Save(run, "config.json", "{}");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_FALSE(Has("run/config.json"));  // not a run directory yet
  const uint64_t s1 = SaveStep(run, 1);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_FALSE(Has("run/config.json"));  // the step in progress may be what it names
  Commit(s1);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/config.json"), "{}");
}

TEST_F(RunFilesTest, RunsAtTheRootAndRenamedRunsUseTheirNaturalKeys) {
  FileSystem& fs = env_.fs();
  Commit(SaveStep(kRootIno, 7));
  Save(kRootIno, "latest", "global_step7");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("latest"), "global_step7");

  const uint64_t run = Mkdir(fs, kRootIno, "a");
  Commit(SaveStep(run, 1));
  Save(run, "latest", "global_step1");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_EQ(Object("a/latest"), "global_step1");
  ASSERT_TRUE(fs.Rename(kRootIno, "a", kRootIno, "b", 0).ok());
  for (int i = 0; i < 3; i++) ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_TRUE(Has("b/global_step1/.ckptfs-commit.json"));
  EXPECT_EQ(Object("b/latest"), "global_step1");
  EXPECT_FALSE(Has("a/latest"));
  EXPECT_FALSE(Has("a/global_step1/.ckptfs-commit.json"));
}

TEST_F(RunFilesTest, TheCommitObjectsNameIsReservedInRunDirectories) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  SaveStep(run, 1);
  EXPECT_EQ(fs.Create(kRoot, run, ".ckptfs-commit.json", 0644, O_WRONLY).err(), EPERM);
  Save(run, "x", "1");
  EXPECT_EQ(fs.Rename(run, "x", run, ".ckptfs-commit.json", 0).err(), EPERM);
}

TEST_F(RunFilesTest, RunFilesAreNeverEvicted) {
  RemoteTierOptions o;
  o.cache_size = 2 * kMiB;
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t s1 = Mkdir(fs, run, "global_step1");
  const uint64_t shard = WriteFile(fs, s1, "shard", Pattern(kMiB, 's'));
  const uint64_t log = Save(run, "train.log", Pattern(kMiB + kMiB / 2, 'l'));
  Commit(s1);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_TRUE(Has("run/train.log"));
  // Now the cache gets smaller than what it holds.
  StopTier();
  StartTier(o);
  for (const auto& c : fs.EvictionCandidates()) EXPECT_NE(c.ino, log);
  EXPECT_EQ(fs.Evict(log).err(), EBUSY);
  // Over the limit: the step's file goes, the run's file stays local.
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(fs.ResidentBytes(), kMiB + kMiB / 2);
  store_.SetUnavailable(true);
  EXPECT_EQ(ReadFile(fs, log), Pattern(kMiB + kMiB / 2, 'l').substr(0, kMiB));
  store_.SetUnavailable(false);
  EXPECT_EQ(ReadFile(fs, shard), Pattern(kMiB, 's'));
}

TEST_F(RunFilesTest, AColdMountShowsTheIndexesAndTheStepsTheyName) {
  FileSystem& fs = env_.fs();
  // DeepSpeed: global_step<N>/ and `latest`.
  const uint64_t ds = Mkdir(fs, kRootIno, "ds");
  Commit(SaveStep(ds, 100));
  Save(ds, "latest", "global_step100");
  // RecIS: ckpt_<N>/ and the `checkpoint` index, appended per save.
  const uint64_t recis = Mkdir(fs, kRootIno, "recis");
  const uint64_t c5 = Mkdir(fs, recis, "ckpt_5");
  WriteFile(fs, c5, "model.pt", "weights5");
  Commit(c5);
  Save(recis, "checkpoint", "ckpt_5\n");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_EQ(Object("ds/latest"), "global_step100");
  ASSERT_EQ(Object("recis/checkpoint"), "ckpt_5\n");
  // Objects that are not run-level files of ours.
  ASSERT_TRUE(store_.Put("ds/.ckptfs-tmp", "ckptfs's own").ok());
  ASSERT_TRUE(store_.Put("elsewhere/file", "no step beside it").ok());

  ColdMachine b(&store_);
  auto imported = b.tier->ImportPersistedSteps();
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(*imported, 2u);
  FileSystem& c = b.fs();
  const uint64_t bds = Resolve(c, "ds");
  ASSERT_TRUE(IsRegular(c, bds, "latest"));
  EXPECT_EQ(c.Lookup(bds, "latest")->attr.st_size, 14);
  const size_t gets = store_.get_calls();
  const uint64_t latest = Resolve(c, "ds/latest");
  EXPECT_EQ(ReadFile(c, latest), "global_step100");
  EXPECT_GT(store_.get_calls(), gets);  // fetched on first read
  EXPECT_EQ(ReadFile(c, Resolve(c, "ds/global_step100/mp_rank_00_model_states.pt")), "states100");
  EXPECT_EQ(c.Lookup(bds, ".ckptfs-tmp").err(), ENOENT);
  EXPECT_EQ(Resolve(c, "elsewhere"), 0u);
  EXPECT_EQ(*c.GetXattr(Resolve(c, "recis/ckpt_5"), "user.ckptfs.persisted"), "true");

  // RecIS's next save appends ("a+") to the index: the old lines are
  // fetched first, so they survive; the new version goes up.
  const uint64_t index = Resolve(c, "recis/checkpoint");
  WriteExisting(c, index, O_RDWR | O_APPEND, "ckpt_6\n", -1);
  EXPECT_EQ(ReadFile(c, index), "ckpt_5\nckpt_6\n");
  // DeepSpeed rewrites `latest` ("w"): what was fetched never comes back.
  b.env.clock.Advance(1000);
  WriteExisting(c, latest, O_WRONLY | O_TRUNC, "global_step200");
  EXPECT_EQ(ReadFile(c, latest), "global_step200");
  ASSERT_TRUE(b.tier->RunOnceForTest().ok());
  EXPECT_EQ(Object("recis/checkpoint"), "ckpt_5\nckpt_6\n");
  EXPECT_EQ(Object("ds/latest"), "global_step200");
  // Importing again shows nothing new; restarted, the files are local.
  EXPECT_EQ(*b.tier->ImportPersistedSteps(), 0u);
  b.env.fs().SetTierHooks(nullptr);
  b.env.CleanRestart();
  EXPECT_EQ(ReadFile(b.fs(), Resolve(b.fs(), "recis/checkpoint")), "ckpt_5\nckpt_6\n");
}

TEST_F(RunFilesTest, AColdMountKeepsLocalFilesAndTruncatesFetchedOnes) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  Commit(SaveStep(run, 1));
  Save(run, "latest", "global_step1");
  Save(run, "trainer_state.json", "{\"step\": 1, \"padding\": \"" + std::string(100, 'x') + "\"}");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());

  // A machine that has its own `latest` already: local wins.
  ColdMachine b(&store_);
  const uint64_t brun = Mkdir(b.fs(), kRootIno, "run");
  WriteFile(b.fs(), brun, "latest", "mine");
  ASSERT_TRUE(b.tier->ImportPersistedSteps().ok());
  EXPECT_EQ(ReadFile(b.fs(), Resolve(b.fs(), "run/latest")), "mine");
  // truncate(2) to a shorter size keeps the head of the remote contents.
  const uint64_t state = Resolve(b.fs(), "run/trainer_state.json");
  ASSERT_NE(state, 0u);
  SetAttrRequest req;
  req.size = 11;
  ASSERT_TRUE(b.fs().SetAttr(state, req, nullptr).ok());
  EXPECT_EQ(ReadFile(b.fs(), state), "{\"step\": 1,");
  // Without a remote the data cannot be fetched: writing fails cleanly.
  ColdMachine c(&store_);
  ASSERT_TRUE(c.tier->ImportPersistedSteps().ok());
  c.fs().SetTierHooks(nullptr);
  EXPECT_EQ(c.fs().OpenFile(Resolve(c.fs(), "run/latest"), O_WRONLY).err(), EIO);
}

TEST_F(RunFilesTest, ADeletionPendingHereIsNotUndoneByTheImport) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  Commit(SaveStep(run, 1));
  Save(run, "latest", "global_step1");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_TRUE(Has("run/latest"));
  ASSERT_TRUE(fs.Unlink(run, "latest").ok());
  KillAndRestart();  // before the remote deletion ran
  ASSERT_TRUE(tier_->ImportPersistedSteps().ok());
  EXPECT_FALSE(IsRegular(env_.fs(), run, "latest"));
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_FALSE(Has("run/latest"));
}

TEST_F(RunFilesTest, ThePrunedStepsCommitObjectOutlivesTheIndexThatNamesIt) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  ASSERT_TRUE(fs.SetXattr(run, "user.ckptfs.keep_last", "1", 0).ok());
  Commit(SaveStep(run, 1));
  Save(run, "latest", "global_step1");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_EQ(Object("run/latest"), "global_step1");
  const uint64_t s2 = SaveStep(run, 2);
  Save(run, "latest", "global_step2");
  Commit(s2);
  // Step 2 is persisted, so retention removes step 1; the new `latest`
  // cannot go up yet: step 1's commit object stays while the remote's
  // `latest` still names it.
  shared_->FailPutsOf("run/latest", true);
  (void)tier_->RunOnceForTest();
  EXPECT_EQ(Xattr(s2, "user.ckptfs.persisted"), "true");
  EXPECT_EQ(fs.Lookup(run, "global_step1").err(), ENOENT);
  EXPECT_EQ(Object("run/latest"), "global_step1");
  EXPECT_TRUE(Has("run/global_step1/.ckptfs-commit.json"));
  EXPECT_TRUE(Has("run/global_step1/mp_rank_00_model_states.pt"));
  shared_->FailPutsOf("run/latest", false);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/latest"), "global_step2");
  EXPECT_FALSE(Has("run/global_step1/.ckptfs-commit.json"));
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_FALSE(Has("run/global_step1/mp_rank_00_model_states.pt"));
}

TEST_F(RunFilesTest, AQueuedVersionSurvivesAKillAndStillWaitsForItsStep) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t s1 = SaveStep(run, 1);
  Commit(s1);
  fs.RepairUploadQueue();               // as the control thread does: `run` is a run now
  Save(run, "latest", "global_step1");  // queued at its close, waits for step 1's upload
  KillAndRestart();
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Xattr(s1, "user.ckptfs.persisted"), "true");
  EXPECT_EQ(Object("run/latest"), "global_step1");
}

TEST_F(RunFilesTest, AfterAKillAStepThatNeverCommittedKeepsTheIndexBack) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  Commit(SaveStep(run, 1));
  Save(run, "latest", "global_step1");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  SaveStep(run, 2);
  Save(run, "latest", "global_step2");  // the daemon dies before step 2 commits
  KillAndRestart();
  EXPECT_EQ(Xattr(Resolve(env_.fs(), "run/global_step2"), "user.ckptfs.state"), "incomplete");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/latest"), "global_step1");
  // The trainer resumes from step 1 and saves step 3: that version goes up
  // once step 3 is persisted (step 2, incomplete before it was written,
  // does not hold it back).
  const uint64_t s3 = SaveStep(Resolve(env_.fs(), "run"), 3);
  Save(Resolve(env_.fs(), "run"), "latest", "global_step3");
  Commit(s3);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/latest"), "global_step3");
}

TEST_F(RunFilesTest, ARenameOntoLatestSurvivesAKillBeforeTheDeletionRan) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  Commit(SaveStep(run, 1));
  Save(run, "latest", "global_step1");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  Commit(SaveStep(run, 2));
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  Save(run, "latest.tmp", "global_step2");
  ASSERT_TRUE(fs.Rename(run, "latest.tmp", run, "latest", 0).ok());
  KillAndRestart();  // the old object's deletion and the new upload both queued
  EXPECT_EQ(Object("run/latest"), "global_step1");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/latest"), "global_step2");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/latest"), "global_step2");
  EXPECT_FALSE(Has("run/latest.tmp"));
}

TEST_F(RunFilesTest, AnIndexMovedToAnotherRunWaitsForThatRunsSteps) {
  FileSystem& fs = env_.fs();
  const uint64_t a = Mkdir(fs, kRootIno, "a");
  Commit(SaveStep(a, 1));
  const uint64_t b = Mkdir(fs, kRootIno, "b");
  const uint64_t s2 = SaveStep(b, 2);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  Save(a, "latest", "global_step2");  // nothing unfinished in a
  ASSERT_TRUE(fs.Rename(a, "latest", b, "latest", 0).ok());
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_FALSE(Has("b/latest"));  // b's step 2 is still being written
  EXPECT_FALSE(Has("a/latest"));
  Commit(s2);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("b/latest"), "global_step2");
}

TEST_F(RunFilesTest, AFileOpenForWritingGoesUpAtItsLastClose) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  Commit(SaveStep(run, 1));
  auto c = fs.Create(kRoot, run, "checkpoint", 0644, O_WRONLY);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs.Write(c->second.fh, "ckpt", 4, 0).ok());
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_FALSE(Has("run/checkpoint"));
  ASSERT_TRUE(fs.Release(c->second.fh).ok());
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/checkpoint"), "ckpt");
}

}  // namespace
}  // namespace ckptfs
