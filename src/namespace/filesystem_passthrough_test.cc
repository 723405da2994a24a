// FileSystem's side of kernel passthrough, without a mount: a fake registry
// stands in for the kernel. It keeps a copy of every registered descriptor,
// and the tests write through it as the kernel would, behind the daemon's
// back.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <string>

#include "common/temp_dir_for_test.h"
#include "data/posix_data_store.h"
#include "namespace/fs_test_env.h"

namespace ckptfs {
namespace {

using testing::FsEnv;
using testing::kRoot;
using testing::Mkdir;

class FakeKernel final : public BackingRegistry {
 public:
  ~FakeKernel() override {
    for (const auto& [id, fd] : files_) ::close(fd);
  }
  Result<int32_t> Register(int fd) override {
    if (refuse_) return Status::Error(EPERM, "FUSE_DEV_IOC_BACKING_OPEN");
    const int copy = ::dup(fd);
    if (copy < 0) return Status::FromErrno("dup");
    const int32_t id = next_id_++;
    files_[id] = copy;
    live_[id] = true;
    registrations_++;
    return id;
  }
  void Unregister(int32_t id) override {
    EXPECT_TRUE(live_[id]) << "backing id " << id << " closed twice";
    live_[id] = false;
  }
  // A write the kernel makes on behalf of a passthrough open.
  void Write(int32_t id, const std::string& data, off_t offset) {
    ASSERT_TRUE(files_.count(id)) << "no backing file " << id;
    ASSERT_EQ(::pwrite(files_[id], data.data(), data.size(), offset), static_cast<ssize_t>(data.size()));
  }
  bool Live(int32_t id) { return live_[id]; }
  int registrations() const { return registrations_; }
  void Refuse(bool refuse) { refuse_ = refuse; }

 private:
  std::map<int32_t, int> files_;  // id -> our copy of the registered descriptor
  std::map<int32_t, bool> live_;
  int32_t next_id_ = 1;
  int registrations_ = 0;
  bool refuse_ = false;
};

class PassthroughTest : public ::testing::Test {
 protected:
  PassthroughTest() : store_(Store(dir_.path())), env_(FileSystemOptions{}, store_.get()) {
    env_.fs().SetPassthrough(&kernel_, {"auto", true, ""});
    run_ = Mkdir(fs(), kRootIno, "run");
    step_ = Mkdir(fs(), run_, "step1");
  }
  static std::unique_ptr<DataStore> Store(const std::string& dir) {
    auto s = OpenPosixDataStore(dir + "/data");
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return std::move(s).value();
  }
  FileSystem& fs() { return env_.fs(); }
  std::string Xattr(uint64_t ino, const std::string& name) {
    auto v = fs().GetXattr(ino, name);
    return v.ok() ? *v : "<" + v.status().ToString() + ">";
  }
  nlohmann::json Status() {
    auto o = fs().OpenFile(kStatusFileIno, O_RDONLY, 0, nullptr, OpenFor::kKernel);
    EXPECT_TRUE(o.ok());
    std::string body(1 << 20, '\0');
    auto n = fs().Read(o->fh, body.data(), body.size(), 0);
    body.resize(n.ok() ? *n : 0);
    (void)fs().Release(o->fh);
    return nlohmann::json::parse(body)["passthrough"];
  }

  TempDirForTest dir_;
  FakeKernel kernel_;
  std::unique_ptr<DataStore> store_;
  FsEnv env_;
  uint64_t run_ = 0;
  uint64_t step_ = 0;
};

TEST_F(PassthroughTest, EveryOpenOfAnInodeSharesOneBackingIdUntilTheLastRelease) {
  auto c = fs().Create(kRoot, step_, "x", 0644, O_WRONLY, OpenFor::kKernel);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const int32_t id = c->second.backing_id;
  ASSERT_GE(id, 0);
  EXPECT_TRUE(c->second.fh->passthrough);
  auto r = fs().OpenFile(c->first.ino, O_RDONLY, 0, nullptr, OpenFor::kKernel);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->backing_id, id);
  EXPECT_FALSE(r->keep_cache) << "the kernel refuses keep_cache next to a backing id";
  EXPECT_EQ(kernel_.registrations(), 1);
  ASSERT_TRUE(fs().Flush(c->second.fh).ok());
  ASSERT_TRUE(fs().Release(c->second.fh).ok());
  EXPECT_TRUE(kernel_.Live(id)) << "closed while another open still uses it";
  ASSERT_TRUE(fs().Release(r->fh).ok());
  EXPECT_FALSE(kernel_.Live(id));
  // The next open registers the file again.
  auto again = fs().OpenFile(c->first.ino, O_RDONLY, 0, nullptr, OpenFor::kKernel);
  ASSERT_TRUE(again.ok());
  EXPECT_GE(again->backing_id, 0);
  EXPECT_NE(again->backing_id, id);
  EXPECT_EQ(kernel_.registrations(), 2);
  ASSERT_TRUE(fs().Release(again->fh).ok());
}

TEST_F(PassthroughTest, WhatTheKernelWritesShowsInSizesAndTheStepBytes) {
  auto c = fs().Create(kRoot, step_, "x", 0644, O_WRONLY, OpenFor::kKernel);
  ASSERT_TRUE(c.ok());
  const int32_t id = c->second.backing_id;
  kernel_.Write(id, std::string(1000, 'a'), 0);
  // While the writer is open: getattr and the step's xattrs ask the file.
  auto attr = fs().GetAttr(c->first.ino);
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->attr.st_size, 1000);
  kernel_.Write(id, std::string(500, 'b'), 1000);
  EXPECT_EQ(Xattr(step_, "user.ckptfs.bytes"), "1500");
  ASSERT_TRUE(fs().Flush(c->second.fh).ok());
  ASSERT_TRUE(fs().Release(c->second.fh).ok());
  attr = fs().GetAttr(c->first.ino);
  EXPECT_EQ(attr->attr.st_size, 1500);
  // The size reached the manifest: it survives a restart.
  env_.CleanRestart();
  auto l = fs().Lookup(step_, "x");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->attr.st_size, 1500);
}

TEST_F(PassthroughTest, ACommitRecordsWhatTheKernelWrote) {
  auto c = fs().Create(kRoot, step_, "x", 0644, O_WRONLY, OpenFor::kKernel);
  ASSERT_TRUE(c.ok());
  kernel_.Write(c->second.backing_id, "0123456789", 0);
  ASSERT_TRUE(fs().Flush(c->second.fh).ok());  // close() returned: a commit may come before RELEASE
  fs().RequestCommit(step_);
  env_.DrainCommits();
  ASSERT_TRUE(fs().Release(c->second.fh).ok());
  env_.DrainCommits();
  EXPECT_EQ(Xattr(step_, "user.ckptfs.state"), "committed");
  EXPECT_EQ(Xattr(step_, "user.ckptfs.bytes"), "10");
  EXPECT_EQ(testing::ReadFile(fs(), c->first.ino), "0123456789");
}

TEST_F(PassthroughTest, AnInodeOpenThroughTheDaemonKeepsLaterOpensThere) {
  auto c = fs().Create(kRoot, step_, "x", 0644, O_WRONLY, OpenFor::kKernel);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs().Release(c->second.fh).ok());
  kernel_.Refuse(true);  // e.g. EPERM: this open goes through the daemon
  auto daemon = fs().OpenFile(c->first.ino, O_RDWR, 0, nullptr, OpenFor::kKernel);
  ASSERT_TRUE(daemon.ok());
  EXPECT_EQ(daemon->backing_id, -1);
  kernel_.Refuse(false);
  // The kernel fails a passthrough open next to a daemon one (EIO).
  auto second = fs().OpenFile(c->first.ino, O_RDONLY, 0, nullptr, OpenFor::kKernel);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->backing_id, -1);
  ASSERT_TRUE(fs().Release(daemon->fh).ok());
  ASSERT_TRUE(fs().Release(second->fh).ok());
  auto third = fs().OpenFile(c->first.ino, O_RDONLY, 0, nullptr, OpenFor::kKernel);
  ASSERT_TRUE(third.ok());
  EXPECT_GE(third->backing_id, 0);
  ASSERT_TRUE(fs().Release(third->fh).ok());
  nlohmann::json st = Status();
  EXPECT_EQ(st["daemon_opens"]["register_failed"], 1);
  EXPECT_EQ(st["daemon_opens"]["daemon_open"], 1);
  EXPECT_EQ(st["active"], true);
  EXPECT_EQ(st["files_open"], 0);
}

TEST_F(PassthroughTest, AWriteAfterCloseThroughTheKernelIsSeenAtRelease) {
  auto c = fs().Create(kRoot, step_, "x", 0644, O_WRONLY, OpenFor::kKernel);
  ASSERT_TRUE(c.ok());
  kernel_.Write(c->second.backing_id, "AAA", 0);
  ASSERT_TRUE(fs().Flush(c->second.fh).ok());
  // The trainer wrote again through a dup of the closed descriptor.
  kernel_.Write(c->second.backing_id, "BBBB", 3);
  ASSERT_TRUE(fs().Release(c->second.fh).ok());
  auto attr = fs().GetAttr(c->first.ino);
  EXPECT_EQ(attr->attr.st_size, 7);
}

TEST_F(PassthroughTest, TheDaemonsOwnOpensGetNoIds) {
  // The writer fast path and `.full/` views open files for the daemon's own
  // reads and writes: a backing id there would hold a kernel reference for
  // nothing, and their writes must stay the daemon's to record.
  auto c = fs().Create(kRoot, step_, "x", 0644, O_WRONLY);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->second.backing_id, -1);
  ASSERT_TRUE(fs().Release(c->second.fh).ok());
  auto o = fs().OpenFile(c->first.ino, O_RDONLY);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->backing_id, -1);
  ASSERT_TRUE(fs().Release(o->fh).ok());
  EXPECT_EQ(kernel_.registrations(), 0);
}

TEST_F(PassthroughTest, InactivePassthroughGivesNoIds) {
  fs().SetPassthrough(&kernel_, {"auto", false, "the kernel does not offer FUSE passthrough"});
  auto c = fs().Create(kRoot, step_, "x", 0644, O_WRONLY, OpenFor::kKernel);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->second.backing_id, -1);
  ASSERT_TRUE(fs().Release(c->second.fh).ok());
  EXPECT_EQ(kernel_.registrations(), 0);
  nlohmann::json st = Status();
  EXPECT_EQ(st["active"], false);
  EXPECT_EQ(st["reason"], "the kernel does not offer FUSE passthrough");
}

TEST_F(PassthroughTest, AWriteOpenOfASetIdFileGoesThroughTheDaemonWhichDropsTheBits) {
  // The kernel's passthrough writes never ask the daemon to drop setuid or
  // setgid bits (FUSE_HANDLE_KILLPRIV_V2 leaves that to the daemon), so a
  // writer of such a file is served by the daemon, whose writes can.
  auto c = fs().Create(kRoot, step_, "tool", 0755, O_WRONLY, OpenFor::kKernel);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs().Release(c->second.fh).ok());
  SetAttrRequest chmod;
  chmod.mode = 06775;
  ASSERT_TRUE(fs().SetAttr(c->first.ino, chmod, nullptr).ok());
  auto reader = fs().OpenFile(c->first.ino, O_RDONLY, 0, nullptr, OpenFor::kKernel);
  ASSERT_TRUE(reader.ok());
  EXPECT_GE(reader->backing_id, 0) << "reading a set-id file changes no bits: passed through";
  ASSERT_TRUE(fs().Release(reader->fh).ok());
  auto writer = fs().OpenFile(c->first.ino, O_WRONLY, 0, nullptr, OpenFor::kKernel);
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ(writer->backing_id, -1);
  ASSERT_TRUE(fs().Write(writer->fh, "x", 1, 0).ok());  // root's write: CAP_FSETID, no mark
  EXPECT_EQ(fs().GetAttr(c->first.ino)->attr.st_mode & 07777, 06775u);
  // The kernel marked this one FUSE_WRITE_KILL_SUIDGID.
  ASSERT_TRUE(fs().Write(writer->fh, "y", 1, 1, /*kill_suidgid=*/true).ok());
  EXPECT_EQ(fs().GetAttr(c->first.ino)->attr.st_mode & 07777, 0775u);
  ASSERT_TRUE(fs().Flush(writer->fh).ok());
  ASSERT_TRUE(fs().Release(writer->fh).ok());
  EXPECT_EQ(Status()["daemon_opens"]["setid_bits"], 1);
  // The bits are gone from the record, not just from memory.
  env_.CleanRestart();
  EXPECT_EQ(fs().Lookup(step_, "tool")->attr.st_mode & 07777, 0775u);
}

TEST_F(PassthroughTest, SetAttrMarkedToKillDropsSetuidAndSetgidWithGroupExecuteOnly) {
  auto c = fs().Create(kRoot, step_, "f", 0644, O_WRONLY, OpenFor::kKernel);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs().Release(c->second.fh).ok());
  SetAttrRequest chmod;
  chmod.mode = 06764;  // setgid without group execute: mandatory locking, kept
  ASSERT_TRUE(fs().SetAttr(c->first.ino, chmod, nullptr).ok());
  SetAttrRequest chown;  // a chown: the kernel marks it to kill
  chown.uid = 65534;
  chown.kill_suidgid = true;
  auto a = fs().SetAttr(c->first.ino, chown, nullptr);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->attr.st_mode & 07777, 02764u);
  EXPECT_EQ(a->attr.st_uid, 65534u);
  // A directory keeps its setgid bit (the kernel never marks one, but a
  // mark must not turn inheritance off).
  SetAttrRequest dir_mark;
  dir_mark.kill_suidgid = true;
  chmod.mode = 02775;
  ASSERT_TRUE(fs().SetAttr(step_, chmod, nullptr).ok());
  EXPECT_EQ(fs().SetAttr(step_, dir_mark, nullptr)->attr.st_mode & 07777, 02775u);
}

}  // namespace
}  // namespace ckptfs
