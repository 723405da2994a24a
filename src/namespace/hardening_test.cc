// Issue 15's hardening at the FileSystem level: what committed files let
// change, the user.ckptfs.* names, the virtual `latest` link's metadata, and
// what /.ckptfs control files show a caller who may not see every path.
#include <fcntl.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "namespace/fs_test_env.h"

namespace ckptfs::testing {
namespace {

// run/step100 committed with one file; returns {run, step, file}.
struct Committed {
  uint64_t run = 0, step = 0, file = 0;
};
Committed CommitOneStep(FsEnv& env, const std::string& run_name = "run") {
  auto& fs = env.fs();
  Committed c;
  c.run = Mkdir(fs, kRootIno, run_name);
  c.step = Mkdir(fs, c.run, "step100");
  c.file = WriteFile(fs, c.step, "shard0", "tensor bytes");
  WriteFile(fs, c.step, "metadata.json", "{}");
  env.DrainCommits();
  EXPECT_EQ(*fs.GetXattr(c.step, "user.ckptfs.state"), "committed");
  return c;
}

std::string ReadControl(FileSystem& fs, uint64_t ino, const Caller& who) {
  auto o = fs.OpenFile(ino, O_RDONLY, 0, &who);
  if (!o.ok()) return "<" + o.status().ToString() + ">";
  std::string out(1 << 20, '\0');
  auto n = fs.Read(o->fh, out.data(), out.size(), 0);
  out.resize(n.ok() ? *n : 0);
  EXPECT_TRUE(fs.Release(o->fh).ok());
  return out;
}

TEST(HardeningTest, CommittedFilesKeepTheirTimesAndXattrsButMayChangeOwnerAndMode) {
  FsEnv env;
  auto& fs = env.fs();
  const Committed c = CommitOneStep(env);
  const struct stat before = fs.GetAttr(c.file)->attr;

  SetAttrRequest touch;
  touch.mtime_now = true;
  EXPECT_EQ(fs.SetAttr(c.file, touch, nullptr).err(), EROFS);
  SetAttrRequest older;
  older.mtime = timespec{1000, 0};
  EXPECT_EQ(fs.SetAttr(c.file, older, nullptr).err(), EROFS);
  // The same times again (a second rsync -a) change nothing and succeed.
  SetAttrRequest same;
  same.atime = before.st_atim;
  same.mtime = before.st_mtim;
  EXPECT_TRUE(fs.SetAttr(c.file, same, nullptr).ok());

  EXPECT_EQ(fs.SetXattr(c.file, "user.note", "x", 0).err(), EROFS);
  EXPECT_EQ(fs.RemoveXattr(c.file, "user.note").err(), EROFS);

  // Owner and mode are access control (chown -R, chmod -R of a run).
  SetAttrRequest chown;
  chown.uid = 1000;
  chown.gid = 1000;
  chown.mode = 0600;
  auto a = fs.SetAttr(c.file, chown, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->attr.st_uid, 1000u);
  EXPECT_EQ(a->attr.st_mode & 07777, 0600u);
  EXPECT_EQ(fs.GetAttr(c.file)->attr.st_mtim.tv_sec, before.st_mtim.tv_sec);

  // The step directory keeps its control xattrs.
  EXPECT_TRUE(fs.SetXattr(c.step, "user.ckptfs.pin", "1", 0).ok());
  EXPECT_TRUE(fs.SetXattr(c.step, "user.ckptfs.score", "0.5", 0).ok());
}

TEST(HardeningTest, UnknownCkptfsNamesAndRunRulesOnStepsAreRefused) {
  FsEnv env;
  auto& fs = env.fs();
  const Committed c = CommitOneStep(env);
  EXPECT_EQ(fs.SetXattr(c.run, "user.ckptfs.keep_lats", "3", 0).err(), EINVAL);
  EXPECT_EQ(fs.GetXattr(c.run, "user.ckptfs.keep_lats").err(), ENODATA);
  EXPECT_NE(env.events.Render().find("unknown ckptfs attribute user.ckptfs.keep_lats"), std::string::npos);
  // A run's rule on a step would be stored and ignored.
  EXPECT_EQ(fs.SetXattr(c.step, "user.ckptfs.keep_last", "3", 0).err(), EINVAL);
  EXPECT_TRUE(fs.SetXattr(c.run, "user.ckptfs.keep_last", "3", 0).ok());
  // Names ckptfs maintains.
  EXPECT_EQ(fs.SetXattr(c.run, "user.ckptfs.crc32c", "00000000", 0).err(), EPERM);
  EXPECT_EQ(fs.SetXattr(c.step, "user.ckptfs.state", "committed", 0).err(), EPERM);
  // Other user.* names are the user's own.
  EXPECT_TRUE(fs.SetXattr(c.run, "user.ckptfs_notes", "x", 0).ok());
  EXPECT_TRUE(fs.SetXattr(c.run, "user.note", "x", 0).ok());
}

TEST(HardeningTest, LatestLinkMetadataChangesAreHarmlessNoOps) {
  FsEnv env;
  auto& fs = env.fs();
  const Committed c = CommitOneStep(env);
  SetAttrRequest own;
  own.uid = 1000;
  own.gid = 1000;
  ASSERT_TRUE(fs.SetAttr(c.run, own, nullptr).ok());
  auto link = fs.Lookup(c.run, "latest");
  ASSERT_TRUE(link.ok());
  EXPECT_EQ(link->attr.st_uid, 1000u);  // the run's owner
  SetAttrRequest lchown;
  lchown.uid = 1000;
  lchown.gid = 1000;
  EXPECT_TRUE(fs.SetAttr(link->ino, lchown, nullptr).ok());
  SetAttrRequest touch_h;
  touch_h.mtime_now = true;
  touch_h.atime_now = true;
  EXPECT_TRUE(fs.SetAttr(link->ino, touch_h, nullptr).ok());
  EXPECT_EQ(*fs.Readlink(link->ino), "step100");
  // The control files stay untouchable.
  EXPECT_EQ(fs.SetAttr(kStatusFileIno, lchown, nullptr).err(), EPERM);
}

TEST(HardeningTest, ControlFilesShowACallerOnlyPathsItCouldLookUp) {
  FsEnv env;
  auto& fs = env.fs();
  const Committed open_run = CommitOneStep(env, "public");
  const Committed hidden = CommitOneStep(env, "private");
  SetAttrRequest private_mode;
  private_mode.mode = 0700;
  private_mode.uid = 1000;
  private_mode.gid = 1000;
  ASSERT_TRUE(fs.SetAttr(hidden.run, private_mode, nullptr).ok());
  (void)open_run;

  const Caller other{2000, 2000, 0};
  const std::string status = ReadControl(fs, kStatusFileIno, other);
  EXPECT_NE(status.find("public/step100"), std::string::npos) << status;
  EXPECT_EQ(status.find("private/"), std::string::npos) << status;
  const std::string events = ReadControl(fs, kEventsFileIno, other);
  EXPECT_NE(events.find("public/step100"), std::string::npos) << events;
  EXPECT_EQ(events.find("private/"), std::string::npos) << events;

  // The owner, a member of the directory's group, and root see them.
  const Caller owner{1000, 1000, 0};
  EXPECT_NE(ReadControl(fs, kStatusFileIno, owner).find("private/step100"), std::string::npos);
  private_mode.mode = 0750;
  ASSERT_TRUE(fs.SetAttr(hidden.run, private_mode, nullptr).ok());
  Caller member{3000, 3000, 0};
  member.groups = {1000};
  EXPECT_NE(ReadControl(fs, kEventsFileIno, member).find("private/step100"), std::string::npos);
  EXPECT_NE(ReadControl(fs, kStatusFileIno, kRoot).find("private/step100"), std::string::npos);
}

}  // namespace
}  // namespace ckptfs::testing
