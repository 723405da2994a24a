// POSIX behaviour of the namespace without a mount.
#include "namespace/filesystem.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/xattr.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "namespace/fs_test_env.h"

namespace ckptfs::testing {
namespace {

void SyncFile(FileSystem& fs, uint64_t ino) {
  auto o = fs.OpenFile(ino, O_WRONLY);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_TRUE(fs.Fsync(o->fh, false).ok());
  ASSERT_TRUE(fs.Release(o->fh).ok());
}

std::set<std::string> List(FileSystem& fs, uint64_t dir) {
  std::set<std::string> names;
  auto r = fs.Readdir(dir, 0, 100000);
  EXPECT_TRUE(r.ok());
  if (r.ok()) {
    for (const auto& d : *r) names.insert(d.name);
  }
  return names;
}

TEST(FileSystemTest, MkdirLookupAndErrors) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t a = Mkdir(fs, kRootIno, "a");
  auto e = fs.Lookup(kRootIno, "a");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->ino, a);
  EXPECT_TRUE(S_ISDIR(e->attr.st_mode));
  EXPECT_EQ(fs.Mkdir(kRoot, kRootIno, "a", 0755).err(), EEXIST);
  EXPECT_EQ(fs.Lookup(kRootIno, "missing").err(), ENOENT);
  EXPECT_EQ(fs.Mkdir(kRoot, kRootIno, std::string(256, 'x'), 0755).err(), ENAMETOOLONG);
  EXPECT_TRUE(fs.Mkdir(kRoot, kRootIno, std::string(255, 'x'), 0755).ok());
  EXPECT_EQ(fs.Mkdir(kRoot, 999999, "x", 0755).err(), ENOENT);
  const uint64_t f = WriteFile(fs, a, "f", "hi");
  EXPECT_EQ(fs.Mkdir(kRoot, f, "x", 0755).err(), ENOTDIR);
  EXPECT_EQ(fs.Rmdir(kRootIno, "a").err(), ENOTEMPTY);
  EXPECT_EQ(fs.Unlink(kRootIno, "a").err(), EISDIR);
  EXPECT_EQ(fs.Rmdir(a, "f").err(), ENOTDIR);
  // Parent link counts follow subdirectories.
  EXPECT_EQ(fs.GetAttr(kRootIno)->attr.st_nlink, 4u);  // ".", "..", a, xxx...
}

TEST(FileSystemTest, RemovedDirectoryTakesNoNewEntries) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t d = Mkdir(fs, kRootIno, "d");
  ASSERT_TRUE(fs.Lookup(kRootIno, "d").ok());  // the kernel still holds it (a cwd)
  ASSERT_TRUE(fs.Rmdir(kRootIno, "d").ok());
  EXPECT_EQ(fs.Mkdir(kRoot, d, "x", 0755).err(), ENOENT);
  EXPECT_EQ(fs.Create(kRoot, d, "f", 0644, O_WRONLY).err(), ENOENT);
  env.CleanRestart();  // and the manifest stays loadable
  EXPECT_EQ(env.fs().Lookup(kRootIno, "d").err(), ENOENT);
}

TEST(FileSystemTest, WriteReadTruncateAndSizePersistence) {
  FsEnv env;
  auto& fs = env.fs();
  auto c = fs.Create(kRoot, kRootIno, "f", 0644, O_RDWR);
  ASSERT_TRUE(c.ok());
  FileHandle* fh = c->second.fh;
  const int writes_before = env.manifest_writes;
  std::string block(4096, 'a');
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(fs.Write(fh, block.data(), block.size(), i * 4096ull).ok());
  // No manifest write per write() call.
  EXPECT_EQ(env.manifest_writes, writes_before);
  EXPECT_EQ(fs.GetAttr(c->first.ino)->attr.st_size, 409600);
  ASSERT_TRUE(fs.Release(fh).ok());
  EXPECT_EQ(env.manifest_writes, writes_before + 1);
  SetAttrRequest trunc;
  trunc.size = 10;
  ASSERT_TRUE(fs.SetAttr(c->first.ino, trunc, nullptr).ok());
  EXPECT_EQ(ReadFile(fs, c->first.ino), std::string(10, 'a'));
  env.CleanRestart();
  EXPECT_EQ(env.fs().GetAttr(c->first.ino)->attr.st_size, 10);
  EXPECT_EQ(ReadFile(env.fs(), c->first.ino), std::string(10, 'a'));
}

TEST(FileSystemTest, ClosingAWriterStartsTheWritebackOfMidSizedFilesOnly) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, Mkdir(fs, kRootIno, "run"), "step1");
  const uint64_t tiny =
      WriteFile(fs, step, "tiny", std::string(FileSystem::kEarlyWritebackMinBytes - 1, 't'));
  const uint64_t small =
      WriteFile(fs, step, "small", std::string(FileSystem::kEarlyWritebackMinBytes, 's'));
  const uint64_t at_limit =
      WriteFile(fs, step, "at_limit", std::string(FileSystem::kEarlyWritebackMaxBytes, 'l'));
  const uint64_t large =
      WriteFile(fs, step, "large", std::string(FileSystem::kEarlyWritebackMaxBytes + 1, 'L'));
  // A reader's close starts nothing.
  auto o = fs.OpenFile(small, O_RDONLY);
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE(fs.Flush(o->fh).ok());
  ASSERT_TRUE(fs.Release(o->fh).ok());
  EXPECT_EQ(env.writeback_started, (std::vector<uint64_t>{small, at_limit}));
  // The tiny and the large file are still made durable by the commit's sync.
  fs.RequestCommit(step);
  env.DrainCommits();
  env.CrashAndRestart();
  ASSERT_TRUE(env.fs().Lookup(step, "tiny").ok());
  EXPECT_EQ(ReadFile(env.fs(), tiny), std::string(FileSystem::kEarlyWritebackMinBytes - 1, 't'));
  ASSERT_TRUE(env.fs().Lookup(step, "large").ok());  // a new mount: the kernel looks it up first
  auto attr = env.fs().GetAttr(large);
  ASSERT_TRUE(attr.ok()) << attr.status().ToString();
  EXPECT_EQ(attr->attr.st_size, static_cast<off_t>(FileSystem::kEarlyWritebackMaxBytes + 1));
  EXPECT_EQ(ReadFile(env.fs(), large), std::string(1 << 20, 'L'));
}

TEST(FileSystemTest, HardLinksCountAndSurviveUnlink) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t f = WriteFile(fs, kRootIno, "f", "data");
  ASSERT_TRUE(fs.Link(f, kRootIno, "g").ok());
  EXPECT_EQ(fs.GetAttr(f)->attr.st_nlink, 2u);
  EXPECT_EQ(fs.Link(f, kRootIno, "g").err(), EEXIST);
  ASSERT_TRUE(fs.Unlink(kRootIno, "f").ok());
  EXPECT_EQ(fs.GetAttr(f)->attr.st_nlink, 1u);
  EXPECT_EQ(ReadFile(fs, f), "data");
  const uint64_t d = Mkdir(fs, kRootIno, "d");
  EXPECT_EQ(fs.Link(d, kRootIno, "d2").err(), EPERM);
  env.CleanRestart();
  EXPECT_EQ(env.fs().GetAttr(f)->attr.st_nlink, 1u);
  EXPECT_EQ(ReadFile(env.fs(), f), "data");
}

TEST(FileSystemTest, RenameRules) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t a = Mkdir(fs, kRootIno, "a");
  const uint64_t b = Mkdir(fs, a, "b");
  WriteFile(fs, kRootIno, "x", "X");
  WriteFile(fs, kRootIno, "y", "Y");
  EXPECT_EQ(fs.Rename(kRootIno, "x", kRootIno, "y", RENAME_NOREPLACE).err(), EEXIST);
  ASSERT_TRUE(fs.Rename(kRootIno, "x", kRootIno, "y", 0).ok());  // replaces y
  EXPECT_EQ(ReadFile(fs, fs.Lookup(kRootIno, "y")->ino), "X");
  EXPECT_EQ(fs.Lookup(kRootIno, "x").err(), ENOENT);
  EXPECT_EQ(fs.Rename(kRootIno, "a", b, "a", 0).err(), EINVAL);  // below itself
  EXPECT_EQ(fs.Rename(kRootIno, "y", kRootIno, "a", 0).err(), EISDIR);
  EXPECT_EQ(fs.Rename(kRootIno, "a", kRootIno, "y", 0).err(), ENOTDIR);
  Mkdir(fs, kRootIno, "c");
  WriteFile(fs, b, "inner", "");
  EXPECT_EQ(fs.Rename(kRootIno, "c", a, "b", 0).err(), ENOTEMPTY);
  ASSERT_TRUE(fs.Rename(a, "b", kRootIno, "b2", 0).ok());  // moving a directory
  EXPECT_EQ(fs.Lookup(kRootIno, "b2")->ino, b);
  EXPECT_EQ(fs.GetAttr(a)->attr.st_nlink, 2u);
  ASSERT_TRUE(fs.Rename(kRootIno, "b2", kRootIno, "y", RENAME_EXCHANGE).ok());
  EXPECT_EQ(fs.Lookup(kRootIno, "y")->ino, b);
  EXPECT_TRUE(S_ISREG(fs.Lookup(kRootIno, "b2")->attr.st_mode));
  env.CleanRestart();
  EXPECT_EQ(env.fs().Lookup(kRootIno, "y")->ino, b);
  EXPECT_EQ(ReadFile(env.fs(), env.fs().Lookup(kRootIno, "b2")->ino), "X");
}

TEST(FileSystemTest, ReaddirOffsetsStayStableWhileEntriesChange) {
  FsEnv env;
  auto& fs = env.fs();
  for (int i = 0; i < 300; ++i) WriteFile(fs, kRootIno, "f" + std::to_string(i), "");
  auto first = fs.Readdir(kRootIno, 0, 100);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 100u);
  std::set<std::string> seen;
  for (const auto& d : *first) seen.insert(d.name);
  // Delete entries both already returned and not yet returned, add new ones.
  for (int i = 0; i < 300; i += 3) {
    const std::string name = "f" + std::to_string(i);
    ASSERT_TRUE(fs.Unlink(kRootIno, name).ok());
  }
  uint64_t off = first->back().next_offset;
  for (;;) {
    auto more = fs.Readdir(kRootIno, off, 37);
    ASSERT_TRUE(more.ok());
    if (more->empty()) break;
    for (const auto& d : *more) {
      EXPECT_TRUE(seen.insert(d.name).second) << "returned twice: " << d.name;
    }
    off = more->back().next_offset;
  }
  for (int i = 0; i < 300; ++i) {
    if (i % 3 != 0) {
      EXPECT_TRUE(seen.count("f" + std::to_string(i))) << i;
    }
  }
}

TEST(FileSystemTest, UnlinkedOpenFileStaysReadableUntilRelease) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t f = WriteFile(fs, kRootIno, "f", "keep");
  auto o = fs.OpenFile(f, O_RDONLY);
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE(fs.Unlink(kRootIno, "f").ok());
  char buf[8] = {};
  auto n = fs.Read(o->fh, buf, sizeof buf, 0);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "keep");
  ASSERT_TRUE(fs.Release(o->fh).ok());
  EXPECT_EQ(env.data.Open(f, false).err(), ENOENT);
}

TEST(FileSystemTest, OrphanIsRemovedByRecovery) {
  FsEnv env;
  const uint64_t f = WriteFile(env.fs(), kRootIno, "f", "orphan");
  auto o = env.fs().OpenFile(f, O_RDONLY);
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE(env.fs().Unlink(kRootIno, "f").ok());
  ASSERT_TRUE(env.fs().FsyncDir().ok());
  ASSERT_TRUE(env.data.SyncDir().ok());
  env.CrashAndRestart();
  EXPECT_EQ(env.fs().GetAttr(f).err(), ENOENT);
  EXPECT_EQ(env.data.Open(f, false).err(), ENOENT);
}

TEST(FileSystemTest, XattrsAndSymlinks) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t f = WriteFile(fs, kRootIno, "f", "");
  ASSERT_TRUE(fs.SetXattr(f, "user.k", "v", 0).ok());
  EXPECT_EQ(fs.SetXattr(f, "user.k", "w", XATTR_CREATE).err(), EEXIST);
  EXPECT_EQ(fs.SetXattr(f, "user.z", "w", XATTR_REPLACE).err(), ENODATA);
  EXPECT_EQ(fs.SetXattr(f, "trusted.k", "w", 0).err(), ENOTSUP);
  EXPECT_EQ(fs.GetXattr(f, "security.capability").err(), ENODATA);
  EXPECT_EQ(*fs.GetXattr(f, "user.k"), "v");
  auto s = fs.Symlink(kRoot, kRootIno, "l", "f");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*fs.Readlink(s->ino), "f");
  EXPECT_EQ(s->attr.st_size, 1);
  env.CleanRestart();
  EXPECT_EQ(*env.fs().GetXattr(f, "user.k"), "v");
  EXPECT_EQ(*env.fs().Readlink(s->ino), "f");
  ASSERT_TRUE(env.fs().RemoveXattr(f, "user.k").ok());
  EXPECT_EQ(env.fs().GetXattr(f, "user.k").err(), ENODATA);
}

TEST(FileSystemTest, SetAttrTimesAndCtime) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t f = WriteFile(fs, kRootIno, "f", "");
  const auto before = fs.GetAttr(f)->attr;
  env.clock.Advance(5'000'000'000);
  SetAttrRequest r;
  r.mtime = timespec{1000, 5};
  auto after = fs.SetAttr(f, r, nullptr);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->attr.st_mtim.tv_sec, 1000);
  EXPECT_EQ(after->attr.st_atim.tv_sec, before.st_atim.tv_sec);  // UTIME_OMIT
  EXPECT_EQ(after->attr.st_ctim.tv_sec, before.st_ctim.tv_sec + 5);
  SetAttrRequest now;
  now.atime_now = true;
  env.clock.Advance(1'000'000'000);
  auto a2 = fs.SetAttr(f, now, nullptr);
  EXPECT_EQ(a2->attr.st_atim.tv_sec, before.st_atim.tv_sec + 6);
  SetAttrRequest chmod;
  chmod.mode = 0600;
  EXPECT_EQ(fs.SetAttr(f, chmod, nullptr)->attr.st_mode, S_IFREG | 0600u);
}

TEST(FileSystemTest, ControlDirectoryIsReadOnly) {
  FsEnv env;
  auto& fs = env.fs();
  auto ctl = fs.Lookup(kRootIno, ".ckptfs");
  ASSERT_TRUE(ctl.ok());
  EXPECT_EQ(fs.Mkdir(kRoot, kRootIno, ".ckptfs", 0755).err(), EEXIST);
  EXPECT_EQ(fs.Create(kRoot, ctl->ino, "x", 0644, O_WRONLY).err(), EROFS);
  auto status = fs.Lookup(ctl->ino, "status.json");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(fs.OpenFile(status->ino, O_WRONLY).err(), EROFS);
  EXPECT_EQ(fs.Rmdir(kRootIno, ".ckptfs").err(), EPERM);
  EXPECT_TRUE(List(fs, kRootIno).count(".ckptfs"));
}

std::string StatusJson(FileSystem& fs) {
  auto ctl = fs.Lookup(kRootIno, ".ckptfs");
  if (!ctl.ok()) return "<no .ckptfs>";
  auto st = fs.Lookup(ctl->ino, "status.json");
  if (!st.ok()) return "<no status.json>";
  return ReadFile(fs, st->ino);
}

size_t CountEvents(EventLog& events, const std::string& kind) {
  return events.Counts()[kind];
}

// A full cache disk (ENOSPC from the manifest) makes the mount read-only,
// not dead: the failing operation reports ENOSPC, later changes are refused
// before they touch the namespace, reads work, and once the manifest takes
// writes again everything resumes without a restart.
TEST(FileSystemTest, ManifestFailureMakesTheMountReadOnlyUntilWritesWorkAgain) {
  FsEnv env;
  FileSystem& fs = env.fs();
  const uint64_t f = WriteFile(fs, kRootIno, "f", "old");
  SyncFile(fs, f);
  env.manifest.FailWritesAfter(0, ENOSPC);
  EXPECT_EQ(fs.Mkdir(kRoot, kRootIno, "d", 0755).err(), ENOSPC);
  EXPECT_EQ(CountEvents(env.events, "manifest_error"), 1u);
  // Refused up front: nothing of these reaches the namespace.
  EXPECT_EQ(fs.Mkdir(kRoot, kRootIno, "e", 0755).err(), ENOSPC);
  EXPECT_EQ(fs.Lookup(kRootIno, "e").err(), ENOENT);
  EXPECT_EQ(fs.SetXattr(f, "user.k", "v", 0).err(), ENOSPC);
  EXPECT_EQ(fs.GetXattr(f, "user.k").err(), ENODATA);
  EXPECT_EQ(fs.Create(kRoot, kRootIno, "g", 0644, O_WRONLY).err(), ENOSPC);
  EXPECT_EQ(fs.OpenFile(f, O_WRONLY).err(), ENOSPC);
  EXPECT_EQ(CountEvents(env.events, "manifest_error"), 1u);  // once per episode
  // Reads need no manifest write.
  EXPECT_EQ(ReadFile(fs, f), "old");
  const auto status = nlohmann::json::parse(StatusJson(fs));
  EXPECT_EQ(status["manifest"]["state"], "error") << status.dump();
  EXPECT_EQ(status["manifest"]["errno"], "ENOSPC") << status.dump();

  // Space is back: the next change (after the retry interval) heals it.
  env.manifest.ClearFailure();
  env.clock.Advance(1'000'000'000);
  EXPECT_TRUE(fs.Mkdir(kRoot, kRootIno, "e", 0755).ok());
  EXPECT_EQ(CountEvents(env.events, "manifest_recovered"), 1u);
  EXPECT_TRUE(fs.SetXattr(f, "user.k", "v", 0).ok());
  EXPECT_EQ(nlohmann::json::parse(StatusJson(fs))["manifest"]["state"], "ok");
  // The failed mkdir's change was kept and written on recovery: the image
  // and the manifest agree across a restart.
  env.CleanRestart();
  EXPECT_TRUE(env.fs().Lookup(kRootIno, "d").ok());
  EXPECT_TRUE(env.fs().Lookup(kRootIno, "e").ok());
  EXPECT_EQ(*env.fs().GetXattr(f, "user.k"), "v");
  EXPECT_EQ(ReadFile(env.fs(), f), "old");
}

TEST(FileSystemTest, ManifestRecoversFromTheIdleRetryWithoutAnyWrite) {
  FsEnv env;
  env.manifest.FailWritesAfter(0, ENOSPC);
  EXPECT_EQ(env.fs().Mkdir(kRoot, kRootIno, "d", 0755).err(), ENOSPC);
  EXPECT_FALSE(env.fs().RetryManifest());
  EXPECT_FALSE(env.fs().ManifestHealthNow().ok);
  EXPECT_EQ(env.fs().ManifestHealthNow().pending_batches, 1u);
  env.manifest.ClearFailure();
  EXPECT_TRUE(env.fs().RetryManifest());
  EXPECT_TRUE(env.fs().ManifestHealthNow().ok);
  EXPECT_EQ(CountEvents(env.events, "manifest_recovered"), 1u);
  // Synced: it survives a power loss.
  env.CrashAndRestart();
  EXPECT_TRUE(env.fs().Lookup(kRootIno, "d").ok());
}

TEST(FileSystemTest, CrashWhileTheManifestFailsLosesNothingCommitted) {
  FsEnv env;
  const uint64_t f = WriteFile(env.fs(), kRootIno, "f", "old");
  SyncFile(env.fs(), f);
  env.manifest.FailWritesAfter(0, EIO);
  EXPECT_EQ(env.fs().Mkdir(kRoot, kRootIno, "d", 0755).err(), EIO);
  EXPECT_EQ(env.fs().Mkdir(kRoot, kRootIno, "e", 0755).err(), EIO);
  env.CrashAndRestart();
  EXPECT_EQ(env.fs().Lookup(kRootIno, "d").err(), ENOENT);
  EXPECT_EQ(ReadFile(env.fs(), f), "old");
  EXPECT_TRUE(env.fs().Mkdir(kRoot, kRootIno, "e", 0755).ok());
}

// File data stops short of the manifest's reserve; metadata goes on.
TEST(FileSystemTest, DataWritesGetEnospcWithinTheMetadataReserve) {
  FileSystemOptions options;
  options.metadata_reserve = {64 << 20, 0};
  FsEnv env(options);
  env.data.SetDeviceBytes(uint64_t{1} << 30);
  env.data.OccupyBytes((uint64_t{1} << 30) - (72 << 20));  // 72 MiB free
  FileSystem& fs = env.fs();
  auto c = fs.Create(kRoot, kRootIno, "big", 0644, O_WRONLY);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::string mib(1 << 20, 'x');
  Status st;
  size_t written = 0;
  for (int i = 0; i < 16 && st.ok(); i++) {
    auto w = fs.Write(c->second.fh, mib.data(), mib.size(), written);
    st = w.status();
    if (w.ok()) written += *w;
  }
  EXPECT_EQ(st.err(), ENOSPC) << st.ToString();
  EXPECT_GE(written, 4u << 20);
  EXPECT_LE(written, 8u << 20);
  EXPECT_TRUE(fs.Release(c->second.fh).ok());
  // Below the reserve (another program took 4 MiB more), new files are
  // refused too, with a message that says so.
  env.data.OccupyBytes((uint64_t{1} << 30) - (68 << 20));
  env.clock.Advance(MetadataReserve::kRecheckNs);
  Status refused = fs.Create(kRoot, kRootIno, "more", 0644, O_WRONLY).status();
  EXPECT_EQ(refused.err(), ENOSPC);
  EXPECT_NE(refused.message().find(" MiB free, within the 64 MiB kept"), std::string::npos)
      << refused.ToString();
  // Growing a file allocates nothing (a hole): no ENOSPC, whatever the
  // size; the data store answers as the cache filesystem would.
  SetAttrRequest grow;
  grow.size = uint64_t{16} << 20;
  auto grown = fs.SetAttr(c->first.ino, grow, nullptr);
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  EXPECT_EQ(grown->attr.st_size, 16 << 20);
  grow.size = uint64_t{999999999999999};
  EXPECT_EQ(fs.SetAttr(c->first.ino, grow, nullptr).err(), EFBIG);
  // Metadata is what the reserve is for.
  EXPECT_TRUE(fs.Mkdir(kRoot, kRootIno, "d", 0755).ok());
  EXPECT_TRUE(fs.SetXattr(kRootIno, "user.k", "v", 0).ok());
  EXPECT_TRUE(fs.Rename(kRootIno, "big", kRootIno, "big2", 0).ok());
  // Freed space is seen at once.
  env.data.OccupyBytes(0);
  auto more = fs.Create(kRoot, kRootIno, "more", 0644, O_WRONLY);
  ASSERT_TRUE(more.ok()) << more.status().ToString();
  EXPECT_TRUE(fs.Release(more->second.fh).ok());
}

}  // namespace
}  // namespace ckptfs::testing
