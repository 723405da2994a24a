// The file sequences of real trainers against FileSystem, without a mount:
// OLMo-core's rename-then-marker and model/ + optim/ saves, run index files
// (DeepSpeed latest, RecIS checkpoint, Megatron's iteration file) as commit
// triggers, the Hugging Face marker with settling for late ranks, and the
// virtual `latest` link staying out of listings and out of a trainer's way.
#include <fcntl.h>

#include <gtest/gtest.h>

#include <algorithm>

#include "formats/formats_test_util.h"
#include "namespace/fs_test_env.h"

namespace ckptfs::testing {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

std::vector<std::string> Names(FileSystem& fs, uint64_t dir) {
  std::vector<std::string> out;
  auto entries = fs.Readdir(dir, 0, 1000);
  EXPECT_TRUE(entries.ok());
  if (entries.ok()) {
    for (const auto& e : *entries) out.push_back(e.name);
  }
  return out;
}

bool Lists(FileSystem& fs, uint64_t dir, const std::string& name) {
  auto names = Names(fs, dir);
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Writes a file opened by process pid (for the commit's session).
uint64_t WriteAs(FileSystem& fs, uint32_t pid, uint64_t parent, const std::string& name, const std::string& data) {
  auto c = fs.Create(Caller{.uid = 0, .gid = 0, .pid = pid}, parent, name, 0644, O_WRONLY);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return 0;
  EXPECT_TRUE(fs.Write(c->second.fh, data.data(), data.size(), 0).ok());
  EXPECT_TRUE(fs.Release(c->second.fh).ok());
  return c->first.ino;
}

// Overwrites an existing file (open O_TRUNC), as open(path, "w") does.
void Rewrite(FileSystem& fs, uint64_t ino, const std::string& data) {
  auto o = fs.OpenFile(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_TRUE(fs.Write(o->fh, data.data(), data.size(), 0).ok());
  ASSERT_TRUE(fs.Release(o->fh).ok());
}

// A real DCP checkpoint (torch 2.14, committed in the repository) into dir.
void WriteDcp(FileSystem& fs, uint64_t dir) {
  const std::string src = SourceDir() + "/tests/fixtures/torch2/fp8/";
  for (const char* f : {"__0_0.distcp", "__1_0.distcp", ".metadata"}) {
    std::string data;
    ASSERT_TRUE(ReadTestFile(src + f, &data)) << src + f;
    WriteFile(fs, dir, f, data);
  }
}

uint64_t Child(FileSystem& fs, uint64_t dir, const std::string& name) {
  auto e = fs.Lookup(dir, name);
  EXPECT_TRUE(e.ok()) << name << ": " << e.status().ToString();
  return e.ok() ? e->ino : 0;
}

TEST(TrainerSemanticsTest, LatestIsReachableButNotListedAndYieldsToTheTrainer) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t step = Mkdir(fs, run, "step-10");
  WriteFile(fs, step, "metadata.json", "{}");
  env.DrainCommits();
  ASSERT_EQ(StateOf(fs, step), "committed");
  // torchtitan parses a step out of every entry of its folder: no `latest`.
  EXPECT_FALSE(Lists(fs, run, "latest"));
  auto link = fs.Lookup(run, "latest");
  ASSERT_TRUE(link.ok());
  EXPECT_EQ(*fs.Readlink(link->ino), "step-10");

  // `rm latest` removes the link for this run, for good (an xattr).
  ASSERT_TRUE(fs.Unlink(run, "latest").ok());
  EXPECT_EQ(fs.Lookup(run, "latest").err(), ENOENT);
  EXPECT_EQ(*fs.GetXattr(run, kLatestLinkXattr), "off");
  env.CleanRestart();
  EXPECT_EQ(env.fs().Lookup(run, "latest").err(), ENOENT);
  // A trainer's own `latest` can be created now, and then replaces the link.
  const uint64_t own = WriteFile(env.fs(), run, "latest", "step-10");
  EXPECT_EQ(ReadFile(env.fs(), own), "step-10");
  ASSERT_TRUE(env.fs().Unlink(run, "latest").ok());
  EXPECT_EQ(env.fs().SetXattr(run, kLatestLinkXattr, "maybe", 0).err(), EINVAL);
  ASSERT_TRUE(env.fs().SetXattr(run, kLatestLinkXattr, "on", 0).ok());
  EXPECT_TRUE(env.fs().Lookup(run, "latest").ok());
}

TEST(TrainerSemanticsTest, ShowLatestListsTheLinkAndRootHidesControlDirOnlyAsARun) {
  FileSystemOptions options;
  options.show_latest = true;
  FsEnv env(options);
  auto& fs = env.fs();
  EXPECT_TRUE(Lists(fs, kRootIno, kControlDirName));
  const uint64_t step = Mkdir(fs, kRootIno, "step5");
  // The root is a run directory now: its listing is the trainer's.
  EXPECT_FALSE(Lists(fs, kRootIno, kControlDirName));
  EXPECT_TRUE(fs.Lookup(kRootIno, kControlDirName).ok());
  WriteFile(fs, step, "metadata.json", "{}");
  env.DrainCommits();
  EXPECT_TRUE(Lists(fs, kRootIno, "latest"));
}

TEST(TrainerSemanticsTest, OlmoCoreRenameWaitsForTheMarkerWrittenAfterIt) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  // save_async: train/ in step100-tmp, rename, then model_and_optim/ and
  // .metadata.json (temporary file + rename) into step100.
  const uint64_t tmp = Mkdir(fs, run, "step100-tmp");
  const uint64_t train = Mkdir(fs, tmp, "train");
  WriteFile(fs, train, "rank0.pt", "trainer state");
  WriteFile(fs, train, "rank1.pt", "trainer state");
  ASSERT_TRUE(fs.Rename(run, "step100-tmp", run, "step100", 0).ok());
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, tmp), "writing");
  EXPECT_EQ(ErrorOf(fs, tmp), "waiting for .metadata.json (OLMo-core writes it last)");
  const uint64_t mo = Mkdir(fs, tmp, "model_and_optim");
  WriteDcp(fs, mo);  // its .metadata is a marker in a subdirectory
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, tmp), "writing");
  EXPECT_EQ(fs.Lookup(run, "latest").err(), ENOENT);
  const uint64_t t = WriteFile(fs, tmp, "tmpk2j3h4", R"({"ephemeral": true, "version": "2.1.0"})");
  ASSERT_NE(t, 0u);
  ASSERT_TRUE(fs.Rename(tmp, "tmpk2j3h4", tmp, ".metadata.json", 0).ok());
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, tmp), "committed") << ErrorOf(fs, tmp);
  // Then OLMo-core's `tmp_path.unlink(missing_ok=True)`.
  EXPECT_EQ(fs.Unlink(tmp, "tmpk2j3h4").err(), ENOENT);
  EXPECT_EQ(*fs.GetXattr(tmp, "user.ckptfs.files"), "6");
  EXPECT_TRUE(fs.Lookup(run, "latest").ok());
}

TEST(TrainerSemanticsTest, OlmoCoreModelThenOptimCommitsOnceOptimIsComplete) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t step = Mkdir(fs, run, "step7");
  const char* meta = R"({"tensors": {"w": {"shape": [4], "dtype": "F32", "shard_spec_per_file": {
      "rank_0.safetensors": {"flattened_offsets": [[0, 4]]}}}}})";
  for (const char* group : {"model", "optim"}) {
    const uint64_t dir = Mkdir(fs, step, group);
    WriteFile(fs, dir, "rank_0.safetensors", MakeSafetensors({{"w", "F32", {4}}}));
    WriteFile(fs, dir, "metadata.json", meta);
    env.DrainCommits();
    if (std::string(group) == "model") {
      EXPECT_EQ(StateOf(fs, step), "writing");
      EXPECT_EQ(ErrorOf(fs, step), "waiting for optim/metadata.json (model/ is complete)");
    }
  }
  EXPECT_EQ(StateOf(fs, step), "committed") << ErrorOf(fs, step);
  // model/.full/model.safetensors holds the model under its own names.
  const uint64_t full = Child(fs, Child(fs, step, "model"), ".full");
  ASSERT_NE(full, 0u);
  auto whole = fs.Lookup(full, "model.safetensors");
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  auto all = fs.Lookup(full, "all.safetensors");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(whole->attr.st_size, all->attr.st_size);
  EXPECT_EQ(fs.Lookup(Child(fs, step, "optim"), ".full").ok(), true);
  EXPECT_TRUE(fs.Lookup(Child(fs, Child(fs, step, "optim"), ".full"), "optim.safetensors").ok());
}

TEST(TrainerSemanticsTest, NestedMarkerOfAnUnknownLayoutDoesNotCommit) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "out");
  const uint64_t step = Mkdir(fs, run, "checkpoint-20");
  // Hugging Face with FSDP's sharded state dict: a DCP inside checkpoint-20/.
  const uint64_t fsdp = Mkdir(fs, step, "pytorch_model_fsdp_0");
  WriteDcp(fs, fsdp);
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "writing");
  EXPECT_EQ(ErrorOf(fs, step), "");
  WriteFile(fs, step, "optimizer.pt", "adam");
  WriteFile(fs, step, "trainer_state.json", R"({"global_step": 20})");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "committed") << ErrorOf(fs, step);
}

TEST(TrainerSemanticsTest, HuggingFaceMarkerSettlesForLateRanks) {
  FileSystemOptions options;
  options.commit_settle_ns = 2 * kSecond;
  FsEnv env(options, /*keep_settle=*/true);
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "out");
  const uint64_t step = Mkdir(fs, run, "checkpoint-30");
  WriteFile(fs, step, "model.safetensors", "weights");
  WriteFile(fs, step, "rng_state_0.pth", "rng");
  WriteFile(fs, step, "trainer_state.json",
            R"({"global_step": 30, "best_model_checkpoint": "/mnt/out/checkpoint-10"})");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "writing");
  EXPECT_EQ(ErrorOf(fs, step).rfind("settling: commits after 2 s without writes", 0), 0u) << ErrorOf(fs, step);
  // Rank 1 is a second late: its file still lands in the step.
  env.clock.Advance(kSecond);
  WriteFile(fs, step, "rng_state_1.pth", "rng");
  env.DrainCommits();
  fs.RequestSettledCommits();
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "writing");
  env.clock.Advance(kSecond + kSecond / 2);
  fs.RequestSettledCommits();
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "writing");  // 1.5 s of quiet
  env.clock.Advance(kSecond);
  fs.RequestSettledCommits();
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "committed") << ErrorOf(fs, step);
  EXPECT_EQ(*fs.GetXattr(step, "user.ckptfs.files"), "4");
  auto steps = fs.Steps();
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].rec.best_ref, "checkpoint-10");
  // A verified format (DCP) commits without settling.
  const uint64_t dcp = Mkdir(fs, run, "step-40");
  WriteDcp(fs, dcp);
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, dcp), "committed");
}

TEST(TrainerSemanticsTest, DeepSpeedLatestFileCommitsTheStepItNames) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "ds");
  const uint64_t s1 = Mkdir(fs, run, "global_step1");
  WriteFile(fs, s1, "mp_rank_00_model_states.pt", "model");
  WriteFile(fs, s1, "zero_pp_rank_0_mp_rank_00_optim_states.pt", "optim");
  WriteFile(fs, s1, "zero_pp_rank_1_mp_rank_00_optim_states.pt", "optim");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, s1), "writing");
  // Nothing committed yet: open("latest", "w") creates the trainer's file.
  EXPECT_EQ(fs.Lookup(run, "latest").err(), ENOENT);
  const uint64_t latest = WriteFile(fs, run, "latest", "global_step1");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, s1), "committed") << ErrorOf(fs, s1);
  // The trainer's file, not a link, from now on.
  auto e = fs.Lookup(run, "latest");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->ino, latest);
  EXPECT_TRUE(Lists(fs, run, "latest"));
  const uint64_t s2 = Mkdir(fs, run, "global_step2");
  WriteFile(fs, s2, "mp_rank_00_model_states.pt", "model");
  Rewrite(fs, latest, "global_step2");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, s2), "committed");
  // Committed some other way first (ckptfs commit, --commit-idle): still no
  // link in a DeepSpeed run, so its open("latest", "w") cannot hit one.
  const uint64_t ds2 = Mkdir(fs, kRootIno, "ds2");
  const uint64_t g5 = Mkdir(fs, ds2, "global_step5");
  WriteFile(fs, g5, "mp_rank_00_model_states.pt", "model");
  fs.RequestCommit(g5);
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, g5), "committed");
  EXPECT_EQ(fs.Lookup(ds2, "latest").err(), ENOENT);
  // Custom tags: DeepSpeed's own files mark the run.
  const uint64_t ds3 = Mkdir(fs, kRootIno, "ds3");
  const uint64_t t7 = Mkdir(fs, ds3, "step7");
  WriteFile(fs, t7, "mp_rank_00_model_states.pt", "model");
  fs.RequestCommit(t7);
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, t7), "committed");
  EXPECT_EQ(fs.Lookup(ds3, "latest").err(), ENOENT);
  const uint64_t ds4 = Mkdir(fs, kRootIno, "ds4");
  const uint64_t t8 = Mkdir(fs, ds4, "step8");
  WriteFile(fs, t8, "weights.pt", "model");
  fs.RequestCommit(t8);
  env.DrainCommits();
  EXPECT_TRUE(fs.Lookup(ds4, "latest").ok());
  WriteFile(fs, ds4, "zero_to_fp32.py", "# script");
  EXPECT_EQ(fs.Lookup(ds4, "latest").err(), ENOENT);
  // A name that is no step, or a committed one: nothing happens.
  const uint64_t s3 = Mkdir(fs, run, "global_step3");
  Rewrite(fs, latest, "global_step33\n");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, s3), "writing");
}

TEST(TrainerSemanticsTest, IndexFilesByNameNumberOrPathAndOnlyBesideSteps) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "megatron");
  const uint64_t it = Mkdir(fs, run, "iter_0000100");
  WriteFile(fs, it, "model_optim_rng.pt", "x");
  WriteFile(fs, run, "latest_checkpointed_iteration.txt", "100");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, it), "committed");
  // TensorFlow's checkpoint file quotes paths.
  const uint64_t tf = Mkdir(fs, kRootIno, "tf");
  const uint64_t c5 = Mkdir(fs, tf, "ckpt_5");
  WriteFile(fs, c5, "data", "x");
  WriteFile(fs, tf, "checkpoint", "model_checkpoint_path: \"/data/tf/ckpt_5\"\n");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, c5), "committed");
  // Inside a step, `latest` is just a file (Hugging Face + DeepSpeed keep one
  // in checkpoint-N/).
  const uint64_t hf = Mkdir(fs, kRootIno, "hf");
  const uint64_t ck = Mkdir(fs, hf, "checkpoint-8");
  const uint64_t gs = Mkdir(fs, ck, "global_step8");
  WriteFile(fs, gs, "mp_rank_00_model_states.pt", "x");
  WriteFile(fs, ck, "latest", "global_step8");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, ck), "writing");
  // Renamed into place: the same trigger.
  const uint64_t s9 = Mkdir(fs, tf, "ckpt_9");
  WriteFile(fs, s9, "data", "x");
  WriteFile(fs, tf, "checkpoint.tmp", "ckpt_9\n");
  ASSERT_TRUE(fs.Rename(tf, "checkpoint.tmp", tf, "checkpoint", 0).ok());
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, s9), "committed");
}

TEST(TrainerSemanticsTest, RecisIndexWaitsForEveryShardAndRecordsTheSession) {
  FileSystemOptions options;
  options.session_of = [](uint32_t pid) { return uint64_t{pid} * 1000 + 7; };
  FsEnv env(options);
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "recis");
  const uint64_t step = Mkdir(fs, run, "ckpt_10");
  WriteAs(fs, 41, step, "io_state_0.pt", "io");
  WriteAs(fs, 41, step, "model.pt", "dense");
  WriteAs(fs, 41, step, "extra.pt", "extra");
  WriteAs(fs, 41, step, "io_state_count", "2");
  WriteAs(fs, 41, run, "checkpoint", "ckpt_10\n");
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "writing");
  EXPECT_EQ(ErrorOf(fs, step), "waiting for io_state_1.pt");
  WriteAs(fs, 42, step, "io_state_1.pt", "io");  // shard 1, another process
  env.DrainCommits();
  EXPECT_EQ(StateOf(fs, step), "committed") << ErrorOf(fs, step);
  auto steps = fs.Steps();
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].rec.session, 41u * 1000 + 7);  // the index writer's
  env.CleanRestart();
  EXPECT_EQ(env.fs().Steps()[0].rec.session, 41u * 1000 + 7);
}

}  // namespace
}  // namespace ckptfs::testing
