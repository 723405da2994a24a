// Commits whose trigger survived a crash (issue 15): a daemon killed after a
// marker was closed, a rename done, an index file written or an explicit
// commit asked for, with every file of the step closed, finishes that commit
// at restart, with the same completeness check as a live one. A machine
// restart (power loss) does not: unsynced data may be gone. A file open for
// writing at the crash keeps the step incomplete.
#include <fcntl.h>

#include <gtest/gtest.h>

#include <map>

#include "formats/formats_test_util.h"
#include "namespace/fs_test_env.h"

namespace ckptfs::testing {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// A real torch DCP checkpoint (two shards and the .metadata marker).
std::map<std::string, std::string> DcpFiles() {
  std::map<std::string, std::string> files;
  const std::string src = SourceDir() + "/tests/fixtures/torch2/fp8/";
  for (const char* f : {"__0_0.distcp", "__1_0.distcp", ".metadata"}) {
    EXPECT_TRUE(ReadTestFile(src + f, &files[f])) << src + f;
  }
  return files;
}

void WriteShards(FileSystem& fs, uint64_t dir, const std::map<std::string, std::string>& files) {
  for (const auto& [name, data] : files) {
    if (name != ".metadata") WriteFile(fs, dir, name, data);
  }
}

void ExpectFiles(FileSystem& fs, uint64_t dir, const std::map<std::string, std::string>& files) {
  for (const auto& [name, data] : files) {
    auto e = fs.Lookup(dir, name);
    ASSERT_TRUE(e.ok()) << name;
    EXPECT_EQ(ReadFile(fs, e->ino), data) << name;
  }
}

TEST(RecoveryCommitTest, MarkerClosedBeforeAKillCommitsAtRestart) {
  FsEnv env;
  const auto files = DcpFiles();
  uint64_t run = Mkdir(env.fs(), kRootIno, "run");
  uint64_t step = Mkdir(env.fs(), run, "step100");
  WriteShards(env.fs(), step, files);
  WriteFile(env.fs(), step, ".metadata", files.at(".metadata"));
  // The close returned; the commit was queued but never ran.
  env.KillAndRestart();
  auto& fs = env.fs();
  EXPECT_EQ(StateOf(fs, step), "writing");  // being finished
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "committed") << ErrorOf(fs, step);
  EXPECT_EQ(*fs.GetXattr(step, "user.ckptfs.files"), "3");
  EXPECT_EQ(*fs.Readlink(fs.Lookup(run, "latest")->ino), "step100");
  EXPECT_NE(env.events.Render().find("finishing the commit asked for before the daemon stopped"),
            std::string::npos);
  // The recovered commit made the data durable before its batch: a power
  // loss now keeps the step committed and byte-identical.
  env.CrashAndRestart();
  EXPECT_EQ(StateOf(env.fs(), step), "committed");
  ExpectFiles(env.fs(), step, files);
}

// close() returns once FLUSH is answered; the RELEASE that asks for the
// commit may never arrive when the daemon dies right then.
TEST(RecoveryCommitTest, AMarkerWhoseCloseReturnedCommitsEvenWithoutItsRelease) {
  FsEnv env;
  const auto files = DcpFiles();
  uint64_t step = Mkdir(env.fs(), kRootIno, "step100");
  WriteShards(env.fs(), step, files);
  auto c = env.fs().Create(kRoot, step, ".metadata", 0644, O_WRONLY);
  ASSERT_TRUE(c.ok());
  const std::string& meta = files.at(".metadata");
  ASSERT_TRUE(env.fs().Write(c->second.fh, meta.data(), meta.size(), 0).ok());
  ASSERT_TRUE(env.fs().Flush(c->second.fh).ok());  // the trainer's close() returned
  env.KillAndRestart();
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "committed") << ErrorOf(env.fs(), step);
  ExpectFiles(env.fs(), step, files);
}

// torch DCP writes .metadata.tmp, closes it and renames it at once: the
// rename may come before the RELEASE.
TEST(RecoveryCommitTest, AMarkerRenamedIntoPlaceBeforeItsReleaseCommits) {
  FsEnv env;
  const auto files = DcpFiles();
  uint64_t step = Mkdir(env.fs(), kRootIno, "step100");
  WriteShards(env.fs(), step, files);
  auto c = env.fs().Create(kRoot, step, ".metadata.tmp", 0644, O_WRONLY);
  ASSERT_TRUE(c.ok());
  const std::string& meta = files.at(".metadata");
  ASSERT_TRUE(env.fs().Write(c->second.fh, meta.data(), meta.size(), 0).ok());
  ASSERT_TRUE(env.fs().Flush(c->second.fh).ok());
  ASSERT_TRUE(env.fs().Rename(step, ".metadata.tmp", step, ".metadata", 0).ok());
  env.KillAndRestart();
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "committed") << ErrorOf(env.fs(), step);
}

TEST(RecoveryCommitTest, AWriteAfterTheMarkersCloseWithdrawsTheRequest) {
  FsEnv env;
  const auto files = DcpFiles();
  uint64_t step = Mkdir(env.fs(), kRootIno, "step100");
  WriteShards(env.fs(), step, files);
  auto c = env.fs().Create(kRoot, step, ".metadata", 0644, O_WRONLY);
  ASSERT_TRUE(c.ok());
  const std::string& meta = files.at(".metadata");
  ASSERT_TRUE(env.fs().Write(c->second.fh, meta.data(), meta.size(), 0).ok());
  ASSERT_TRUE(env.fs().Flush(c->second.fh).ok());
  // A dup of the descriptor is still open and writes again.
  ASSERT_TRUE(env.fs().Write(c->second.fh, "x", 1, meta.size()).ok());
  env.KillAndRestart();
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "incomplete");
}

// A shard still open (not even closed) when the marker closes: no record.
TEST(RecoveryCommitTest, AMarkerClosedBesideAnOpenShardIsNotRecorded) {
  FsEnv env;
  const auto files = DcpFiles();
  uint64_t step = Mkdir(env.fs(), kRootIno, "step100");
  WriteFile(env.fs(), step, "__0_0.distcp", files.at("__0_0.distcp"));
  auto shard = env.fs().Create(kRoot, step, "__1_0.distcp", 0644, O_WRONLY);
  ASSERT_TRUE(shard.ok());
  const std::string& data = files.at("__1_0.distcp");
  ASSERT_TRUE(env.fs().Write(shard->second.fh, data.data(), data.size(), 0).ok());
  WriteFile(env.fs(), step, ".metadata", files.at(".metadata"));
  env.KillAndRestart();
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "incomplete");
}

TEST(RecoveryCommitTest, AMachineRestartDoesNotFinishTheCommit) {
  FsEnv env;
  const auto files = DcpFiles();
  uint64_t step = Mkdir(env.fs(), kRootIno, "step100");
  WriteShards(env.fs(), step, files);
  WriteFile(env.fs(), step, ".metadata", files.at(".metadata"));
  // Every manifest batch survives, the request included; the file data was
  // never synced, so the sizes are no proof of the bytes.
  env.CrashAndRestart(SIZE_MAX);
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "incomplete");
  EXPECT_NE(ErrorOf(env.fs(), step).find("earlier boot"), std::string::npos) << ErrorOf(env.fs(), step);
  // The request is forgotten for good: another restart changes nothing.
  env.KillAndRestart();
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "incomplete");
}

TEST(RecoveryCommitTest, RenameIntoAStepNameCommitsAtRestart) {
  FsEnv env;
  uint64_t run = Mkdir(env.fs(), kRootIno, "run");
  uint64_t tmp = Mkdir(env.fs(), run, "step7-tmp");
  WriteFile(env.fs(), tmp, "model.pt", "weights");
  WriteFile(env.fs(), tmp, "optim.pt", "adam state");
  ASSERT_TRUE(env.fs().Rename(run, "step7-tmp", run, "step7", 0).ok());
  env.KillAndRestart();
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), tmp), "committed") << ErrorOf(env.fs(), tmp);
  ExpectFiles(env.fs(), tmp, {{"model.pt", "weights"}, {"optim.pt", "adam state"}});
}

// DeepSpeed's `latest` names the step; its layout lists no files, so the
// commit first settles, and the restart comes in the middle of that.
TEST(RecoveryCommitTest, IndexFileNamingTheStepCommitsAfterSettlingAtRestart) {
  FileSystemOptions options;
  options.commit_settle_ns = 2 * kSecond;
  FsEnv env(options, /*keep_settle=*/true);
  uint64_t run = Mkdir(env.fs(), kRootIno, "ds");
  uint64_t step = Mkdir(env.fs(), run, "global_step5");
  WriteFile(env.fs(), step, "mp_rank_00_model_states.pt", "model");
  WriteFile(env.fs(), step, "zero_pp_rank_0_mp_rank_00_optim_states.pt", "optim");
  WriteFile(env.fs(), run, "latest", "global_step5");
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "writing");
  EXPECT_NE(ErrorOf(env.fs(), step).find("settling"), std::string::npos) << ErrorOf(env.fs(), step);
  env.KillAndRestart();
  auto& fs = env.fs();
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "writing");  // settles again: a trainer may be back
  env.clock.Advance(3 * kSecond);
  fs.RequestSettledCommits();
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "committed") << ErrorOf(fs, step);
}

TEST(RecoveryCommitTest, ExplicitCommitOfAHuggingFaceLayoutCommitsAtRestart) {
  FileSystemOptions options;
  options.commit_settle_ns = 2 * kSecond;
  FsEnv env(options, /*keep_settle=*/true);
  uint64_t run = Mkdir(env.fs(), kRootIno, "out");
  uint64_t step = Mkdir(env.fs(), run, "checkpoint-30");
  WriteFile(env.fs(), step, "model.safetensors", "weights");
  WriteFile(env.fs(), step, "optimizer.pt", "adam");
  env.fs().RequestCommit(step);  // ckptfs commit; the daemon dies before it runs
  EXPECT_EQ(StateOf(env.fs(), step), "writing");
  env.KillAndRestart();
  // Still the user's word after the restart: no settling (SPEC section 3).
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "committed") << ErrorOf(env.fs(), step);
}

TEST(RecoveryCommitTest, MissingShardsAtRestartMakeTheStepIncomplete) {
  FsEnv env;
  const auto files = DcpFiles();
  uint64_t step = Mkdir(env.fs(), kRootIno, "step10");
  // cp -r order: the marker first, one shard, then the kill.
  WriteFile(env.fs(), step, ".metadata", files.at(".metadata"));
  WriteFile(env.fs(), step, "__0_0.distcp", files.at("__0_0.distcp"));
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "writing");
  env.KillAndRestart();
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "incomplete");
  EXPECT_NE(ErrorOf(env.fs(), step).find("waiting for __1_0.distcp"), std::string::npos) << ErrorOf(env.fs(), step);
  EXPECT_TRUE(env.fs().Lookup(step, "__0_0.distcp").ok());  // nothing deleted
  // The user may still finish the copy and commit it.
  WriteFile(env.fs(), step, "__1_0.distcp", files.at("__1_0.distcp"));
  env.fs().RequestCommit(step);
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "committed") << ErrorOf(env.fs(), step);
}

TEST(RecoveryCommitTest, ShortShardAtRestartMakesTheStepIncomplete) {
  FsEnv env;
  auto files = DcpFiles();
  uint64_t step = Mkdir(env.fs(), kRootIno, "step10");
  std::string shard = files.at("__1_0.distcp");
  shard.resize(shard.size() / 2);
  WriteFile(env.fs(), step, "__0_0.distcp", files.at("__0_0.distcp"));
  WriteFile(env.fs(), step, "__1_0.distcp", shard);
  WriteFile(env.fs(), step, ".metadata", files.at(".metadata"));
  env.KillAndRestart();
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "incomplete") << ErrorOf(env.fs(), step);
}

// A file open for writing when the daemon died may hold half its bytes: a
// marker closed beside it does not commit the step at restart.
TEST(RecoveryCommitTest, AFileOpenForWritingAtTheCrashKeepsTheStepIncomplete) {
  FsEnv env;
  uint64_t step = Mkdir(env.fs(), kRootIno, "checkpoint-3");
  auto open = env.fs().Create(kRoot, step, "model.safetensors", 0644, O_WRONLY);
  ASSERT_TRUE(open.ok());
  ASSERT_TRUE(env.fs().Write(open->second.fh, "half", 4, 0).ok());
  WriteFile(env.fs(), step, "trainer_state.json", "{}");  // a marker, while a file is open
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "writing");
  env.KillAndRestart();
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "incomplete");
}

// A commit waiting for a shard is recorded; opening a file of the step for
// writing again withdraws that record, since that file may be half written
// when the daemon dies.
TEST(RecoveryCommitTest, ReopeningAFileForWritingWithdrawsTheRecordedRequest) {
  FsEnv env;
  const auto files = DcpFiles();
  uint64_t step = Mkdir(env.fs(), kRootIno, "step10");
  WriteFile(env.fs(), step, ".metadata", files.at(".metadata"));
  WriteFile(env.fs(), step, "__0_0.distcp", files.at("__0_0.distcp"));
  WriteFile(env.fs(), step, "__1_0.distcp", std::string(10, 'x'));  // short
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "writing");
  // The trainer rewrites the short shard and dies (with the daemon) midway.
  auto reopened = env.fs().OpenFile(env.fs().Lookup(step, "__1_0.distcp")->ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(reopened.ok());
  const std::string& full = files.at("__1_0.distcp");
  ASSERT_TRUE(env.fs().Write(reopened->fh, full.data(), full.size(), 0).ok());
  env.KillAndRestart();
  env.DrainCommits();
  // Its bytes happen to be whole here, but nothing said so: not committed.
  EXPECT_EQ(StateOf(env.fs(), step), "incomplete");
}

TEST(RecoveryCommitTest, BadMetadataFoundAtRestartMakesTheStepBroken) {
  FsEnv env;
  uint64_t step = Mkdir(env.fs(), kRootIno, "step10");
  WriteFile(env.fs(), step, ".metadata", std::string("\x80\x04\x95garbage", 11));
  env.KillAndRestart();
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "broken");
}

// A clean unmount with a commit still settling: the next mount finishes it.
TEST(RecoveryCommitTest, ACleanRestartFinishesASettlingCommit) {
  FileSystemOptions options;
  options.commit_settle_ns = 2 * kSecond;
  FsEnv env(options, /*keep_settle=*/true);
  uint64_t step = Mkdir(env.fs(), kRootIno, "checkpoint-9");
  WriteFile(env.fs(), step, "model.safetensors", "weights");
  WriteFile(env.fs(), step, "trainer_state.json", "{}");
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "writing");
  env.CleanRestart();
  env.clock.Advance(3 * kSecond);
  env.fs().RequestSettledCommits();
  env.DrainCommits();
  EXPECT_EQ(StateOf(env.fs(), step), "committed") << ErrorOf(env.fs(), step);
}

// A committed file found cut short at a restart (the disk lost its tail, or
// something truncated it in the cache while the daemon was down, as fsck
// reports) makes its step broken, whatever the boot.
TEST(RecoveryCommitTest, ACommittedFileCutShortMakesItsStepBrokenAtRestart) {
  FsEnv env;
  const auto files = DcpFiles();
  uint64_t step = Mkdir(env.fs(), kRootIno, "step100");
  WriteShards(env.fs(), step, files);
  WriteFile(env.fs(), step, ".metadata", files.at(".metadata"));
  env.DrainCommits();
  ASSERT_EQ(StateOf(env.fs(), step), "committed") << ErrorOf(env.fs(), step);
  const uint64_t shard = env.fs().Lookup(step, "__1_0.distcp")->ino;
  env.CleanRestart();
  EXPECT_EQ(StateOf(env.fs(), step), "committed");
  ExpectFiles(env.fs(), step, files);

  // The shard loses its tail, durably, and the daemon restarts.
  {
    auto backing = env.data.Open(shard, /*create=*/false);
    ASSERT_TRUE(backing.ok());
    ASSERT_TRUE(backing.value()->Truncate(5).ok());
    ASSERT_TRUE(backing.value()->Sync().ok());
  }
  const int before = env.data_looks;
  env.KillAndRestart();
  // The restart leaves the committed step unloaded; the idle thread's pass
  // checks its files (or its first lookup would, before any read).
  env.FinishBackgroundChecks();
  EXPECT_GE(env.data_looks, before + 3);  // each committed file looked at
  EXPECT_EQ(StateOf(env.fs(), step), "broken");
  EXPECT_NE(ErrorOf(env.fs(), step).find("__1_0.distcp lost data: 5 of"), std::string::npos)
      << ErrorOf(env.fs(), step);
}

}  // namespace
}  // namespace ckptfs::testing
