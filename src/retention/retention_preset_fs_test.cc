// Trainer presets inside the filesystem: the mount option (--retention), the
// run-directory xattr user.ckptfs.retention overriding it and removed with
// setfattr -x, refusals (bad presets, a preset mixed with rules on one
// level, on a step), and the plan that `ckptfs retention --dry-run` prints.
#include <gtest/gtest.h>

#include <set>

#include "cli/mount_options.h"
#include "namespace/fs_test_env.h"

namespace ckptfs::testing {
namespace {

uint64_t CommitStep(FsEnv& env, uint64_t run, const std::string& name) {
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, run, name);
  WriteFile(fs, step, "shard", "data of " + name);
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

FileSystemOptions WithRule(const std::string& rule, const std::string& value) {
  FileSystemOptions o;
  Status st = SetPolicyRule(rule, value, &o.retention);
  EXPECT_TRUE(st.ok()) << st.message();
  return o;
}

TEST(RetentionPresetFsTest, MountPresetPrunesAtEachCommit) {
  FsEnv env(WithRule("retention", "torchtitan:keep_latest_k=2"));
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  for (int i = 1; i <= 4; ++i) CommitStep(env, run, "step-" + std::to_string(i * 10));
  EXPECT_EQ(Names(fs, run), (std::set<std::string>{"step-30", "step-40"}));
  auto plan = fs.GetXattr(run, "user.ckptfs.retention_plan");
  ASSERT_TRUE(plan.ok());
  EXPECT_NE(plan->find("torchtitan keep_latest_k=2: among the newest"), std::string::npos) << *plan;
  EXPECT_NE(env.events.Render().find("torchtitan keep_latest_k=2: older than the 2 newest"), std::string::npos);
}

TEST(RetentionPresetFsTest, RunPresetOverridesTheMountsRulesAndGoesWithSetfattrX) {
  FsEnv env(WithRule("keep_last", "1"));
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  ASSERT_TRUE(fs.SetXattr(run, "user.ckptfs.retention", "hf:save_total_limit=2", 0).ok());
  EXPECT_EQ(*fs.GetXattr(run, "user.ckptfs.retention"), "hf:save_total_limit=2");
  for (int i = 1; i <= 3; ++i) CommitStep(env, run, "checkpoint-" + std::to_string(i));
  EXPECT_EQ(Names(fs, run), (std::set<std::string>{"checkpoint-2", "checkpoint-3"}));
  // setfattr -x: the mount's keep_last 1 applies again at the next commit.
  ASSERT_TRUE(fs.RemoveXattr(run, "user.ckptfs.retention").ok());
  CommitStep(env, run, "checkpoint-4");
  EXPECT_EQ(Names(fs, run), (std::set<std::string>{"checkpoint-4"}));
}

TEST(RetentionPresetFsTest, OlmoCoreRemovesNothingWithoutTheTrainersEphemeralMarks) {
  // Steps committed without OLMo-core's .metadata.json carry no ephemeral
  // mark, so no ephemeral save ever supersedes them (the planner tests cover
  // marked steps).
  FsEnv env(WithRule("retention", "olmo-core:save_interval=10,ephemeral=2"));
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  for (const char* name : {"step2", "step4", "step10", "step12"}) CommitStep(env, run, name);
  EXPECT_EQ(Names(fs, run).size(), 4u);
  auto plan = fs.GetXattr(run, "user.ckptfs.retention_plan");
  ASSERT_TRUE(plan.ok());
  EXPECT_NE(plan->find("olmo-core: ephemeral, no newer ephemeral save"), std::string::npos) << *plan;
  EXPECT_NE(plan->find("olmo-core: permanent (multiple of save_interval)"), std::string::npos) << *plan;
}

TEST(RetentionPresetFsTest, RunRulesReplaceAMountPreset) {
  FsEnv env(WithRule("retention", "recis:max_keep=1"));
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  ASSERT_TRUE(fs.SetXattr(run, "user.ckptfs.keep_last", "2", 0).ok());
  for (int i = 1; i <= 3; ++i) CommitStep(env, run, "ckpt_" + std::to_string(i));
  EXPECT_EQ(Names(fs, run), (std::set<std::string>{"ckpt_2", "ckpt_3"}));
  // Another run without xattrs follows the mount's preset. Its steps were
  // committed without a known trainer process (session 0): RecIS's rule
  // then removes nothing.
  const uint64_t other = Mkdir(fs, kRootIno, "other");
  for (int i = 1; i <= 3; ++i) CommitStep(env, other, "ckpt_" + std::to_string(i));
  EXPECT_EQ(Names(fs, other).size(), 3u);
  auto plan = fs.GetXattr(other, "user.ckptfs.retention_plan");
  ASSERT_TRUE(plan.ok());
  EXPECT_NE(plan->find("recis max_keep=1: the newest step's trainer process is unknown"), std::string::npos) << *plan;
}

TEST(RetentionPresetFsTest, BadPresetsAndMixesAreRefusedWithEinval) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  Status st = fs.SetXattr(run, "user.ckptfs.retention", "torchtitan:keep_latest_k=0", 0);
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("keep_latest_k takes a positive integer, not '0'"), std::string::npos) << st.message();
  EXPECT_NE(env.events.Render().find("torchtitan:keep_latest_k=0"), std::string::npos);
  EXPECT_EQ(fs.SetXattr(run, "user.ckptfs.retention", "tensorflow:max_to_keep=2", 0).err(), EINVAL);
  EXPECT_EQ(fs.GetXattr(run, "user.ckptfs.retention").err(), ENODATA);  // nothing stored

  // A preset and rules on the same run directory, whichever comes second.
  ASSERT_TRUE(fs.SetXattr(run, "user.ckptfs.keep_every", "100", 0).ok());
  st = fs.SetXattr(run, "user.ckptfs.retention", "hf:save_total_limit=2", 0);
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("cannot be combined with the rules already set (keep_every)"), std::string::npos)
      << st.message();
  ASSERT_TRUE(fs.SetXattr(run, "user.ckptfs.keep_every", "", 0).ok());  // cleared: now it may
  ASSERT_TRUE(fs.SetXattr(run, "user.ckptfs.retention", "hf:save_total_limit=2", 0).ok());
  st = fs.SetXattr(run, "user.ckptfs.keep_last", "3", 0);
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("cannot be combined with the retention preset 'hf:save_total_limit=2'"),
            std::string::npos)
      << st.message();
  // Replacing the preset is no mix.
  EXPECT_TRUE(fs.SetXattr(run, "user.ckptfs.retention", "hf:save_total_limit=3", 0).ok());

  // Presets belong on run directories, not on files; a committed file's
  // xattrs are frozen with its contents (issue 15).
  const uint64_t notes = WriteFile(fs, run, "notes", "x");
  EXPECT_EQ(fs.SetXattr(notes, "user.ckptfs.retention", "hf:save_total_limit=3", 0).err(), EINVAL);
  const uint64_t step = CommitStep(env, run, "checkpoint-1");
  const uint64_t file = fs.Lookup(step, "shard")->ino;
  EXPECT_EQ(fs.SetXattr(file, "user.ckptfs.retention", "hf:save_total_limit=3", 0).err(), EROFS);
}

TEST(RetentionPresetFsTest, PresetSurvivesARestart) {
  FsEnv env;
  const uint64_t run = Mkdir(env.fs(), kRootIno, "run");
  ASSERT_TRUE(env.fs().SetXattr(run, "user.ckptfs.retention", "torchtitan:keep_latest_k=1", 0).ok());
  CommitStep(env, run, "step-1");
  env.CleanRestart();
  CommitStep(env, run, "step-2");
  EXPECT_EQ(Names(env.fs(), run), (std::set<std::string>{"step-2"}));
}

// ---- ckptfs mount --retention ----

Result<MountOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "mount");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return ParseMountArgs(static_cast<int>(args.size()), argv.data());
}

TEST(RetentionPresetFsTest, MountOptionParsesAndRefusesMixes) {
  auto o = Parse({"/mnt", "--retention", "olmo-core:save_interval=1000,ephemeral=100,fixed=150,2500"});
  ASSERT_TRUE(o.ok()) << o.status().message();
  ASSERT_TRUE(o->fs.retention.preset);
  EXPECT_EQ(o->fs.retention.preset->fixed, (std::vector<int64_t>{150, 2500}));

  auto bad = Parse({"/mnt", "--retention", "hf:save_total_limit=zero"});
  EXPECT_EQ(bad.status().err(), EINVAL);
  EXPECT_NE(bad.status().message().find("--retention: retention preset 'hf:save_total_limit=zero'"),
            std::string::npos)
      << bad.status().message();

  for (const auto& args : std::vector<std::vector<std::string>>{
           {"/mnt", "--keep-last", "3", "--retention", "torchtitan:keep_latest_k=3"},
           {"/mnt", "--retention", "torchtitan:keep_latest_k=3", "--keep-last", "3"},
           {"/mnt", "--retention", "torchtitan:keep_latest_k=3", "--score-mode", "max"}}) {
    auto mixed = Parse(args);
    EXPECT_EQ(mixed.status().err(), EINVAL) << args[1];
    EXPECT_NE(mixed.status().message().find("cannot be combined"), std::string::npos) << mixed.status().message();
  }
  EXPECT_NE(std::string(kMountUsage).find("--retention PRESET"), std::string::npos);
}

}  // namespace
}  // namespace ckptfs::testing
