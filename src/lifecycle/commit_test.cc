// The checkpoint lifecycle without a mount: step recognition, every commit
// trigger, sealing, latest, waiting for writers and for missing files, and
// crash safety with a fault-injecting manifest and data store.
#include <fcntl.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "namespace/fs_test_env.h"

namespace ckptfs::testing {
namespace {

FileHandle* CreateOpen(FileSystem& fs, uint64_t parent, const std::string& name, uint64_t* ino = nullptr) {
  auto c = fs.Create(kRoot, parent, name, 0644, O_WRONLY);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return nullptr;
  if (ino) *ino = c->first.ino;
  return c->second.fh;
}

TEST(StepPatternTest, DefaultNames) {
  auto p = StepPattern::Compile(kDefaultStepPattern);
  ASSERT_TRUE(p.ok());
  for (auto [name, n] : std::vector<std::pair<std::string, int64_t>>{
           {"step100", 100}, {"step-100", 100}, {"step_100", 100}, {"ckpt_100", 100},
           {"checkpoint-100", 100}, {"global_step100", 100}, {"iter_0000100", 100}}) {
    ASSERT_TRUE(p->Match(name).has_value()) << name;
    EXPECT_EQ(*p->Match(name), n) << name;
  }
  for (const char* name : {"step100-tmp", "tmp-checkpoint-100", "step", "latest", "step1x", "Step100"}) {
    EXPECT_FALSE(p->Match(name).has_value()) << name;
  }
  EXPECT_EQ(StepPattern::Compile("(").err(), EINVAL);
  EXPECT_EQ(StepPattern::Compile("step[0-9]+").err(), EINVAL);  // no capture group
}

// The one parser of step paths from the bucket (cluster records, commit
// objects): components, or EINVAL saying what is wrong.
TEST(StepPatternTest, SplitStepPathTakesARelativePathApart) {
  auto parts = SplitStepPath("team/run1/step100");
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  EXPECT_EQ(*parts, (std::vector<std::string>{"team", "run1", "step100"}));
  EXPECT_EQ(*SplitStepPath("step1"), std::vector<std::string>{"step1"});
  for (const std::string& bad : std::vector<std::string>{
           "", "/run/step1", "run/step1/", "run//step1", "run/./step1", "../step1", ".ckptfs/step1",
           std::string("run/st\0ep1", 10), "run/" + std::string(256, 'x')}) {
    auto r = SplitStepPath(bad);
    EXPECT_EQ(r.status().err(), EINVAL) << bad;
    EXPECT_EQ(r.status().message().rfind("invalid step path", 0), 0u) << r.status().ToString();
  }
  EXPECT_TRUE(SplitStepPath("run/" + std::string(255, 'x')).ok());
}

TEST(CommitTest, MarkerCloseCommitsAndSealsAndMovesLatest) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t step = Mkdir(fs, run, "step100");
  EXPECT_EQ(StateOf(fs, step), "writing");
  const uint64_t shard = WriteFile(fs, step, "shard0", "tensor bytes");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "writing");  // no marker yet
  EXPECT_EQ(fs.Lookup(run, "latest").err(), ENOENT);
  WriteFile(fs, step, "metadata.json", "{}");  // unknown format: committed without a check
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "committed");
  EXPECT_EQ(*fs.GetXattr(step, "user.ckptfs.files"), "2");
  EXPECT_EQ(*fs.GetXattr(step, "user.ckptfs.bytes"), "14");
  auto latest = fs.Lookup(run, "latest");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*fs.Readlink(latest->ino), "step100");
  // Sealed: no writing, no truncating, no new files; reading and deleting work.
  EXPECT_EQ(fs.OpenFile(shard, O_WRONLY).err(), EROFS);
  EXPECT_EQ(fs.OpenFile(shard, O_RDWR).err(), EROFS);
  SetAttrRequest trunc;
  trunc.size = 0;
  EXPECT_EQ(fs.SetAttr(shard, trunc, nullptr).err(), EROFS);
  EXPECT_EQ(fs.Create(kRoot, step, "new", 0644, O_WRONLY).err(), EROFS);
  EXPECT_EQ(fs.Rename(step, "shard0", run, "stolen", 0).err(), EROFS);
  EXPECT_EQ(ReadFile(fs, shard), "tensor bytes");
  auto opened = fs.OpenFile(shard, O_RDONLY);
  ASSERT_TRUE(opened.ok());
  EXPECT_TRUE(opened->keep_cache);
  ASSERT_TRUE(fs.Release(opened->fh).ok());

  // The newest committed step wins; an older commit does not move latest back.
  const uint64_t s200 = Mkdir(fs, run, "step200");
  const uint64_t s150 = Mkdir(fs, run, "step150");
  WriteFile(fs, s200, "metadata.json", "{}");
  env.DrainCommits();
  WriteFile(fs, s150, "metadata.json", "{}");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, s150), "committed");
  EXPECT_EQ(*fs.Readlink(fs.Lookup(run, "latest")->ino), "step200");
  bool seen = false;
  auto listing = fs.Readdir(run, 0, 100);
  ASSERT_TRUE(listing.ok());
  for (const auto& e : *listing) seen |= e.name == "latest";
  EXPECT_FALSE(seen);  // reachable by name only (--show-latest lists it)
  EXPECT_NE(env.events.Render().find("\"event\":\"commit\""), std::string::npos);
}

TEST(CommitTest, MarkerRenamedIntoPlaceCommits) {
  // torch DCP writes .metadata.tmp, fsyncs it and renames it to .metadata.
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step5");
  WriteFile(fs, step, "metadata.json.tmp", "{}");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "writing");
  ASSERT_TRUE(fs.Rename(step, "metadata.json.tmp", step, "metadata.json", 0).ok());
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "committed");
}

TEST(CommitTest, RealLatestFileWins) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step5");
  WriteFile(fs, step, "metadata.json", "{}");
  env.DrainCommits();
  ASSERT_TRUE(fs.Lookup(kRootIno, "latest").ok());
  const uint64_t real = WriteFile(fs, kRootIno, "latest", "step5");  // a trainer's own file
  auto e = fs.Lookup(kRootIno, "latest");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->ino, real);
  EXPECT_TRUE(S_ISREG(e->attr.st_mode));
}

TEST(CommitTest, RenameIntoStepNameCommits) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t tmp = Mkdir(fs, run, "step100-tmp");
  WriteFile(fs, tmp, "model.pt", "weights");
  EXPECT_EQ(fs.GetXattr(tmp, "user.ckptfs.state").err(), ENODATA);  // not a step
  ASSERT_TRUE(fs.Rename(run, "step100-tmp", run, "step100", 0).ok());
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, tmp), "committed");
  EXPECT_EQ(*fs.GetXattr(tmp, "user.ckptfs.step"), "100");
  EXPECT_EQ(*fs.Readlink(fs.Lookup(run, "latest")->ino), "step100");
}

TEST(CommitTest, CommitWaitsForWritersThenTheLastCloseCommits) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  FileHandle* straggler = CreateOpen(fs, step, "rank3");
  WriteFile(fs, step, "metadata.json", "{}");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "writing");
  EXPECT_NE(fs.GetXattr(step, "user.ckptfs.error")->find("open for writing"), std::string::npos);
  ASSERT_TRUE(fs.Write(straggler, "x", 1, 0).ok());
  ASSERT_TRUE(fs.Release(straggler).ok());
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "committed");
}

TEST(CommitTest, ExplicitCommitWaitsForTheOutcome) {
  FileSystemOptions options;
  options.commit_wait_ns = 200'000'000;
  FsEnv env(options);
  // A real coordinator thread, as in the daemon.
  CommitCoordinator coordinator(&env.fs(), env.fs().data(), env.fs().clock());
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step7");
  WriteFile(fs, step, "a", "1");
  ASSERT_TRUE(fs.SetXattr(step, "user.ckptfs.commit", "1", 0).ok());
  EXPECT_EQ(StateOf(fs, step), "committed");
  const uint64_t plain = Mkdir(fs, kRootIno, "notastep");
  EXPECT_EQ(fs.SetXattr(plain, "user.ckptfs.commit", "1", 0).err(), EINVAL);
  EXPECT_EQ(fs.SetXattr(step, "user.ckptfs.state", "writing", 0).err(), EPERM);
  // A writer that never closes: the explicit commit gives up after the bound.
  const uint64_t s8 = Mkdir(fs, kRootIno, "step8");
  FileHandle* open_writer = CreateOpen(fs, s8, "x");
  // The waits run on the test's clock: time passes only as the test moves it.
  auto waiting = std::async(std::launch::async, [&] { return fs.CommitAndWait(s8); });
  while (waiting.wait_for(std::chrono::milliseconds(5)) != std::future_status::ready) {
    env.clock.Advance(100'000'000);
  }
  Status st = waiting.get();
  EXPECT_EQ(st.err(), ETIMEDOUT) << st.ToString();
  EXPECT_EQ(StateOf(fs, s8), "writing");
  ASSERT_TRUE(fs.Release(open_writer).ok());
}

TEST(CommitTest, APendingCommitHoldsUploadsBackUntilItEnds) {
  // Uploads (RemoteTier) start only when CommitPendingSinceNs is 0 or old
  // enough: a commit settling for late ranks, or waiting for files, is
  // still the trainer's save.
  FileSystemOptions options;
  options.commit_settle_ns = 2'000'000'000;
  FsEnv env(options, /*keep_settle=*/true);
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  WriteFile(fs, step, "a", "1");
  EXPECT_EQ(fs.CommitPendingSinceNs(), 0);
  const int64_t asked = env.clock.MonotonicNanos();
  WriteFile(fs, step, "trainer_state.json", "{}");  // Hugging Face's marker: settles
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "writing");  // settling
  EXPECT_EQ(fs.CommitPendingSinceNs(), asked);
  env.clock.Advance(2'000'000'000);
  fs.RequestSettledCommits();
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "committed");
  EXPECT_EQ(fs.CommitPendingSinceNs(), 0);
}

TEST(CommitTest, TheCommitOfTheLastWrittenStepEndsTheSavesQuietPeriod) {
  // Uploads wait a quiet period after the last close of a file in a step
  // (a trainer between two files is still saving): LastSaveActivityNs. The
  // commit of that step ends the save, so the wait ends with it.
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t step1 = Mkdir(fs, kRootIno, "step1");
  const uint64_t step2 = Mkdir(fs, kRootIno, "step2");
  EXPECT_EQ(fs.LastSaveActivityNs(), 0);
  WriteFile(fs, step1, "a", "1");
  EXPECT_EQ(fs.LastSaveActivityNs(), env.clock.MonotonicNanos());
  env.clock.Advance(1'000'000);
  WriteFile(fs, step2, "b", "2");
  const int64_t closed2 = env.clock.MonotonicNanos();
  // step1 commits, but the last writer closed was step2's: its trainer may
  // be between files still.
  fs.RequestCommit(step1);
  env.DrainCommits();
  ASSERT_EQ(StateOf(fs, step1), "committed");
  EXPECT_EQ(fs.LastSaveActivityNs(), closed2);
  fs.RequestCommit(step2);
  env.DrainCommits();
  ASSERT_EQ(StateOf(fs, step2), "committed");
  EXPECT_EQ(fs.LastSaveActivityNs(), 0);
}

TEST(CommitTest, ASettlingCommitLandsWhenTheQuietIsDueNotAtTheNextTick) {
  FileSystemOptions options;
  options.commit_settle_ns = 1'500'000'000;
  FsEnv env(options, /*keep_settle=*/true);
  CommitCoordinator coordinator(&env.fs(), env.fs().data(), env.fs().clock());
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  WriteFile(fs, step, "a", "1");
  WriteFile(fs, step, "trainer_state.json", "{}");  // a marker that lists no files: settles
  const int64_t written = env.clock.MonotonicNanos();
  // The coordinator's idle tick comes once a second (here at 1 s and 2 s):
  // the commit must not wait for the one at 2 s.
  for (int i = 0; i < 100 && StateOf(fs, step) != "committed"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (StateOf(fs, step) != "committed") env.clock.Advance(50'000'000);
  }
  ASSERT_EQ(StateOf(fs, step), "committed");
  const int64_t took = env.clock.MonotonicNanos() - written;
  EXPECT_GE(took, 1'500'000'000);
  EXPECT_LT(took, 1'900'000'000);
}

// SPEC section 3: an explicit commit is the user's word that the step is
// complete. It does not settle for quiet, and CommitAndWait (setfattr
// user.ckptfs.commit) returns with the step committed.
TEST(CommitTest, AnExplicitCommitDoesNotSettleAndReturnsCommitted) {
  FileSystemOptions options;
  options.commit_settle_ns = 2'000'000'000;
  FsEnv env(options, /*keep_settle=*/true);
  CommitCoordinator coordinator(&env.fs(), env.fs().data(), env.fs().clock());
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  WriteFile(fs, step, "a", "1");  // just written: no quiet at all
  const int64_t asked = env.clock.MonotonicNanos();
  Status st = fs.CommitAndWait(step);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(StateOf(fs, step), "committed");
  EXPECT_EQ(env.clock.MonotonicNanos(), asked);  // no time had to pass
  EXPECT_EQ(*fs.Readlink(fs.Lookup(kRootIno, "latest")->ino), "step1");
}

// The script: 30 steps committed in a row with the xattr, then a
// count of what retention kept. Each commit lands before the next step, so
// retention keeps exactly its 6.
TEST(CommitTest, ExplicitCommitsInARowLeaveRetentionItsCount) {
  FileSystemOptions options;
  options.commit_settle_ns = 2'000'000'000;
  ASSERT_TRUE(SetPolicyRule("keep_last", "6", &options.retention).ok());
  FsEnv env(options, /*keep_settle=*/true);
  CommitCoordinator coordinator(&env.fs(), env.fs().data(), env.fs().clock());
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  for (int n = 1; n <= 30; n++) {
    const uint64_t step = Mkdir(fs, run, "step" + std::to_string(n));
    WriteFile(fs, step, "model.pt", "weights of step " + std::to_string(n));
    Status st = fs.CommitAndWait(step);
    ASSERT_TRUE(st.ok()) << "step" << n << ": " << st.ToString();
  }
  size_t steps = 0;
  auto entries = fs.Readdir(run, 0, 1000);
  ASSERT_TRUE(entries.ok());
  for (const auto& e : *entries) steps += e.name.rfind("step", 0) == 0;
  EXPECT_EQ(steps, 6u);
  EXPECT_EQ(*fs.Readlink(fs.Lookup(run, "latest")->ino), "step30");
}

TEST(CommitTest, EveryRequestReachesTheWorkerThread) {
  // Regression: the idle thread once shared the worker's condition variable
  // and could swallow the wake-up of a commit request, which then slept.
  FileSystemOptions options;
  options.commit_wait_ns = 3'000'000'000;
  FsEnv env(options);
  CommitCoordinator coordinator(&env.fs(), env.fs().data(), env.fs().clock());
  auto& fs = env.fs();
  for (int i = 1; i <= 30; ++i) {
    const uint64_t step = Mkdir(fs, kRootIno, "step" + std::to_string(i));
    WriteFile(fs, step, "a", "1");
    Status st = fs.CommitAndWait(step);
    ASSERT_TRUE(st.ok()) << "commit " << i << ": " << st.ToString();
  }
}

TEST(CommitTest, IdleCommit) {
  FileSystemOptions options;
  options.commit_idle_ns = 30'000'000'000;
  FsEnv env(options);
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step3");
  WriteFile(fs, step, "a", "1");
  fs.RequestIdleCommits();
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "writing");
  env.clock.Advance(31'000'000'000);
  fs.RequestIdleCommits();
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "committed");
}

TEST(CommitTest, CustomPatternAndMarkers) {
  FileSystemOptions options;
  options.step_pattern = "epoch=([0-9]+)";
  options.commit_markers = {"DONE"};
  FsEnv env(options);
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "epoch=4");
  WriteFile(fs, step, "metadata.json", "{}");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "writing");
  WriteFile(fs, step, "DONE", "");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "committed");
  EXPECT_EQ(fs.GetXattr(Mkdir(fs, kRootIno, "step4"), "user.ckptfs.state").err(), ENODATA);
}

std::string SlurpFixture(const std::string& rel) {
  std::ifstream in(std::string(CKPTFS_SOURCE_DIR) + "/tests/fixtures/" + rel, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(CommitTest, DcpStepWaitsForMissingShardsInAnyFileOrder) {
  const std::string dir = "dcp/torch-1.13/ckpt113/";
  const std::string meta = SlurpFixture(dir + ".metadata");
  ASSERT_FALSE(meta.empty()) << "tests/fixtures/dcp missing";
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step10");
  // cp -r order: the marker first.
  WriteFile(fs, step, ".metadata", meta);
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "writing");
  EXPECT_NE(fs.GetXattr(step, "user.ckptfs.error")->find("waiting for __0_"), std::string::npos)
      << *fs.GetXattr(step, "user.ckptfs.error");
  for (const char* shard : {"__0_0.distcp", "__0_1.distcp", "__0_2.distcp"}) {
    WriteFile(fs, step, shard, SlurpFixture(dir + shard));
    env.DrainCommits();
    EXPECT_EQ(StateOf(fs, step), "writing");
  }
  WriteFile(fs, step, "__0_3.distcp", SlurpFixture(dir + "__0_3.distcp"));
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "committed");
}

// OLMo-core's trainer writes {"ephemeral": true} in .metadata.json for its
// ephemeral checkpoints: with a retention policy, such a step goes as soon as
// a newer step commits; a permanent (non-ephemeral) one stays.
TEST(CommitTest, OlmoEphemeralCheckpointIsPrunedOnceANewerStepCommits) {
  const std::string dcp = "dcp/torch-1.13/ckpt113/";
  const std::string meta = SlurpFixture(dcp + ".metadata");
  ASSERT_FALSE(meta.empty()) << "tests/fixtures/dcp missing";
  FileSystemOptions options;
  ASSERT_TRUE(SetPolicyRule("keep_every", "1000", &options.retention).ok());
  FsEnv env(options);
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  auto save = [&](int64_t n, bool ephemeral) {
    const uint64_t step = Mkdir(fs, run, "step" + std::to_string(n));
    const uint64_t mo = Mkdir(fs, step, "model_and_optim");
    for (const char* shard : {"__0_0.distcp", "__0_1.distcp", "__0_2.distcp", "__0_3.distcp"}) {
      WriteFile(fs, mo, shard, SlurpFixture(dcp + shard));
    }
    WriteFile(fs, mo, ".metadata", meta);
    WriteFile(fs, Mkdir(fs, step, "train"), "rank0.pt", "trainer state");
    WriteFile(fs, step, ".metadata.json",
              std::string("{\"ephemeral\": ") + (ephemeral ? "true" : "false") + ", \"version\": \"2.1.0\"}");
    env.DrainCommits();
    EXPECT_EQ(*fs.GetXattr(step, "user.ckptfs.state"), "committed") << n;
    return step;
  };
  save(1000, false);
  save(1100, true);
  EXPECT_TRUE(fs.Lookup(run, "step1100").ok());  // newest: kept
  save(1200, false);
  EXPECT_EQ(fs.Lookup(run, "step1100").err(), ENOENT);  // ephemeral, superseded
  EXPECT_TRUE(fs.Lookup(run, "step1000").ok());          // keep_every
  EXPECT_TRUE(fs.Lookup(run, "step1200").ok());          // newest
}

TEST(CommitTest, MalformedMetadataMakesTheStepBroken) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t step = Mkdir(fs, run, "step10");
  WriteFile(fs, step, ".metadata", std::string("\x80\x04\x95garbage", 11));
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "broken");
  EXPECT_FALSE(fs.GetXattr(step, "user.ckptfs.error")->empty());
  EXPECT_EQ(fs.Lookup(run, "latest").err(), ENOENT);
  EXPECT_NE(env.events.Render().find("\"event\":\"broken\""), std::string::npos);
}

TEST(CrashTest, WritingStepsBecomeIncompleteAndCommittedOnesSurvive) {
  FsEnv env;
  const uint64_t run = Mkdir(env.fs(), kRootIno, "run");
  const uint64_t done = Mkdir(env.fs(), run, "step1");
  const uint64_t f = WriteFile(env.fs(), done, "w", "committed bytes");
  WriteFile(env.fs(), done, "metadata.json", "{}");
  env.DrainCommits();
  ASSERT_EQ(StateOf(env.fs(), done), "committed");
  const uint64_t busy = Mkdir(env.fs(), run, "step2");
  FileHandle* fh = CreateOpen(env.fs(), busy, "partial");
  ASSERT_TRUE(env.fs().Write(fh, "abc", 3, 0).ok());
  ASSERT_TRUE(env.fs().FsyncDir().ok());  // step2 exists durably, its data not
  env.CrashAndRestart();
  auto& fs = env.fs();
  EXPECT_EQ(StateOf(fs, done), "committed");
  EXPECT_TRUE(fs.Lookup(done, "w").ok());  // a new mount: the kernel looks it up first
  EXPECT_EQ(ReadFile(fs, f), "committed bytes");
  EXPECT_EQ(StateOf(fs, busy), "incomplete");
  EXPECT_TRUE(fs.Lookup(busy, "partial").ok());  // nothing deleted by the restart
  EXPECT_EQ(*fs.Readlink(fs.Lookup(run, "latest")->ino), "step1");
  EXPECT_NE(env.events.Render().find("\"event\":\"recovered\""), std::string::npos);
}

// Random histories of writes, commits and crashes that drop a random part of
// what was not synced. After every crash: every step that was committed is
// still committed with byte-identical files, and no step that was never
// committed looks committed.
TEST(CrashTest, RandomHistoriesNeverLoseCommittedSteps) {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    FsEnv env;
    const uint64_t run = Mkdir(env.fs(), kRootIno, "run");
    ASSERT_TRUE(env.fs().FsyncDir().ok());
    std::map<uint64_t, std::map<std::string, std::string>> committed;  // step -> files
    std::map<uint64_t, std::map<std::string, std::string>> pending;
    int next_step = 1;
    for (int op = 0; op < 60; ++op) {
      auto& fs = env.fs();
      const int choice = static_cast<int>(rng() % 10);
      if (choice < 3 || pending.empty()) {
        const uint64_t s = Mkdir(fs, run, "step" + std::to_string(next_step++));
        pending[s];
      } else if (choice < 7) {
        auto it = std::next(pending.begin(), static_cast<long>(rng() % pending.size()));
        const std::string name = "f" + std::to_string(it->second.size());
        const std::string data(1 + rng() % 5000, static_cast<char>('a' + rng() % 26));
        if (WriteFile(fs, it->first, name, data)) it->second[name] = data;
      } else if (choice < 9) {
        auto it = std::next(pending.begin(), static_cast<long>(rng() % pending.size()));
        fs.RequestCommit(it->first);
        env.DrainCommits();
        if (StateOf(fs, it->first) == "committed") {
          committed[it->first] = it->second;
          pending.erase(it);
        }
      } else {
        if (rng() % 2 && !pending.empty()) {
          // Crash inside a commit: files fsynced, the commit batch never written.
          auto it = std::next(pending.begin(), static_cast<long>(rng() % pending.size()));
          env.manifest.FailWritesAfter(0, EIO);
          fs.RequestCommit(it->first);
          env.DrainCommits();
          env.manifest.ClearFailure();
        }
        env.CrashAndRestart(rng() % 4);
        // Steps that were pending are incomplete or gone; committed ones intact.
        auto& fs2 = env.fs();
        for (const auto& [step, files] : committed) {
          ASSERT_EQ(StateOf(fs2, step), "committed");
          for (const auto& [name, data] : files) {
            auto e = fs2.Lookup(step, name);
            ASSERT_TRUE(e.ok()) << name;
            ASSERT_EQ(ReadFile(fs2, e->ino), data) << name;
          }
        }
        for (const auto& [step, files] : pending) {
          const std::string st = StateOf(fs2, step);
          ASSERT_NE(st, "committed");
          // Present as incomplete, or gone when its creation was never synced.
          if (fs2.GetAttr(step).ok()) {
            ASSERT_EQ(st, "incomplete");
          }
        }
        // Unsynced data of incomplete steps may be gone: leave them alone.
        pending.clear();
      }
    }
  }
}

}  // namespace
}  // namespace ckptfs::testing
