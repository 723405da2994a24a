// The fast path end to end without a mount: a real socket, a real backing
// file, the FileSystem's permission checks and records.
#include "fastpath/fast_path_server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>

#include "common/crc32c.h"
#include "common/temp_dir_for_test.h"
#include "data/posix_data_store.h"
#include "fastpath/wire.h"
#include "namespace/fs_test_env.h"

namespace ckptfs::testing {
namespace {

class FastPathTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }
  void TearDown() override { Stop(); }

  void Start() {
    auto data = OpenPosixDataStore(dir_.path() + "/data");
    ASSERT_TRUE(data.ok());
    auto fs = FileSystem::Open({}, std::make_unique<SharedManifest>(&manifest_, &writes_),
                               std::move(data).value(), &clock_, &events_);
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    fs_ = std::move(fs).value();
    coordinator_ = CommitCoordinator::CreateWithoutThreads(fs_.get());
    auto server = FastPathServer::Start(socket_path(), fs_.get());
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }
  void Stop() {
    server_.reset();
    coordinator_.reset();
    fs_.reset();
  }
  std::string socket_path() const { return dir_.path() + "/writer.sock"; }

  int Connect() {
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, socket_path().c_str());
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
    return fd;
  }

  // OPEN over a fresh connection; returns the connection and the descriptor
  // (or -1 and the error in *st).
  std::pair<int, int> Open(const std::string& path, Status* st, const std::string& version = "1") {
    const int conn = Connect();
    EXPECT_TRUE(wire::Send(conn, {wire::kOpen, version, "420", path}).ok());
    auto reply = wire::Receive(conn);
    EXPECT_TRUE(reply.ok());
    *st = reply.ok() ? wire::ReplyStatus(*reply) : reply.status();
    return {conn, reply.ok() ? reply->fd : -1};
  }

  Status Close(int conn, uint64_t size, uint32_t crc) {
    EXPECT_TRUE(wire::Send(conn, {wire::kClose, std::to_string(size), std::to_string(crc)}).ok());
    auto reply = wire::Receive(conn);
    close(conn);
    return reply.ok() ? wire::ReplyStatus(*reply) : reply.status();
  }

  uint64_t InoOf(uint64_t parent, const std::string& name) {
    auto e = fs_->Lookup(parent, name);
    EXPECT_TRUE(e.ok()) << name;
    if (!e.ok()) return 0;
    fs_->Forget(e->ino, 1);
    return e->ino;
  }

  TempDirForTest dir_;
  MemoryManifestStore manifest_;
  int writes_ = 0;
  ManualClock clock_;
  EventLog events_;
  std::unique_ptr<FileSystem> fs_;
  std::unique_ptr<CommitCoordinator> coordinator_;
  std::unique_ptr<FastPathServer> server_;
};

TEST_F(FastPathTest, WritesThroughTheDescriptorAreRecordedWithTheirChecksum) {
  const uint64_t run = Mkdir(*fs_, kRootIno, "run");
  const uint64_t step = Mkdir(*fs_, run, "step1");
  Status st;
  auto [conn, fd] = Open("run/step1/rank0.bin", &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_GE(fd, 0);
  const std::string data(100000, 'q');
  ASSERT_EQ(pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(fdatasync(fd), 0);
  close(fd);
  const uint32_t crc = Crc32c(0, data.data(), data.size());
  ASSERT_TRUE(Close(conn, data.size(), crc).ok());

  const uint64_t ino = InoOf(step, "rank0.bin");
  EXPECT_EQ(fs_->GetAttr(ino)->attr.st_size, 100000);
  EXPECT_EQ(ReadFile(*fs_, ino), data);
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  EXPECT_EQ(*fs_->GetXattr(ino, "user.ckptfs.crc32c"), hex);
  EXPECT_EQ(fs_->metrics().writer_fastpath_bytes.load(), 100000u);
  // Recorded in the manifest: a restart still knows size and checksum.
  Stop();
  Start();
  EXPECT_EQ(fs_->GetAttr(ino)->attr.st_size, 100000);
  EXPECT_EQ(*fs_->GetXattr(ino, "user.ckptfs.crc32c"), hex);
  // A later write through FUSE makes the checksum stale: no longer shown.
  clock_.Advance(1'000'000'000);
  auto o = fs_->OpenFile(ino, O_WRONLY);
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE(fs_->Write(o->fh, "zz", 2, 100000).ok());
  ASSERT_TRUE(fs_->Release(o->fh).ok());
  EXPECT_EQ(fs_->GetXattr(ino, "user.ckptfs.crc32c").err(), ENODATA);
}

TEST_F(FastPathTest, ExistingFileIsTruncatedAndWrongSizeIsRefused) {
  const uint64_t f = WriteFile(*fs_, kRootIno, "f", "old contents");
  Status st;
  auto [conn, fd] = Open("f", &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(lseek(fd, 0, SEEK_END), 0);  // truncated at open
  ASSERT_EQ(write(fd, "abc", 3), 3);
  close(fd);
  Status closed = Close(conn, 4, 0);
  EXPECT_EQ(closed.err(), EIO);
  EXPECT_NE(closed.message().find("reported 4 bytes but the file holds 3"), std::string::npos) << closed.message();
  EXPECT_EQ(fs_->GetXattr(f, "user.ckptfs.crc32c").err(), ENODATA);
}

TEST_F(FastPathTest, ClientThatVanishesAbandonsItsFile) {
  Status st;
  auto [conn, fd] = Open("partial", &st);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(write(fd, "12345", 5), 5);
  close(fd);
  close(conn);  // no CLOSE: the client died
  const uint64_t ino = InoOf(kRootIno, "partial");
  // The server thread releases the file on its own: wait for it.
  for (int i = 0; i < 500 && fs_->GetAttr(ino)->attr.st_size != 5; i++) usleep(2000);
  EXPECT_EQ(fs_->GetAttr(ino)->attr.st_size, 5);
  EXPECT_EQ(fs_->GetXattr(ino, "user.ckptfs.crc32c").err(), ENODATA);
  EXPECT_EQ(fs_->OpenWriters(), 0);
}

TEST_F(FastPathTest, BadRequestsGetClearErrors) {
  Status st;
  auto r = Open("../etc/passwd", &st);
  EXPECT_EQ(st.err(), EINVAL);
  close(r.first);
  r = Open("/abs", &st);
  EXPECT_EQ(st.err(), EINVAL);
  close(r.first);
  r = Open("missing/dir/f", &st);
  EXPECT_EQ(st.err(), ENOENT);
  close(r.first);
  r = Open(".ckptfs/x", &st);
  EXPECT_EQ(st.err(), EROFS);
  close(r.first);
  Mkdir(*fs_, kRootIno, "d");
  r = Open("d", &st);
  EXPECT_EQ(st.err(), EISDIR);
  close(r.first);
  r = Open("f", &st, "2");
  EXPECT_EQ(st.err(), EPROTONOSUPPORT);
  EXPECT_NE(st.message().find("version 2"), std::string::npos);
  close(r.first);
}

TEST_F(FastPathTest, CommittedStepsAreReadOnly) {
  const uint64_t step = Mkdir(*fs_, kRootIno, "step5");
  WriteFile(*fs_, step, "a", "x");
  clock_.Advance(3'000'000'000);  // quiet for --commit-settle
  fs_->RequestCommit(step);
  coordinator_->DrainForTest();
  ASSERT_EQ(*fs_->GetXattr(step, "user.ckptfs.state"), "committed");
  Status st;
  auto r = Open("step5/a", &st);
  EXPECT_EQ(st.err(), EROFS);
  close(r.first);
  r = Open("step5/new", &st);
  EXPECT_EQ(st.err(), EROFS);
  close(r.first);
}

TEST_F(FastPathTest, PermissionsAreCheckedAsTheKernelWould) {
  const Caller alice{1000, 1000};
  auto home = fs_->Mkdir(alice, kRootIno, "alice", 0750);
  ASSERT_TRUE(home.ok());
  auto shared = fs_->Mkdir(kRoot, kRootIno, "shared", 0775);  // root:root, group writable
  ASSERT_TRUE(shared.ok());
  FileSystem::FastPathCaller a{1000, 1000, {}};
  FileSystem::FastPathCaller bob{1001, 1001, {}};
  FileSystem::FastPathCaller bob_in_root_group{1001, 1001, {0}};
  auto ok = fs_->OpenForFastPath(a, "alice/x", 0644);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  close(ok->fd);
  ASSERT_TRUE(fs_->FinishFastPath(ok->fh, 0, 0).ok());
  ASSERT_TRUE(fs_->Release(ok->fh).ok());
  EXPECT_EQ(fs_->GetAttr(InoOf(home->ino, "x"))->attr.st_uid, 1000u);
  EXPECT_EQ(fs_->OpenForFastPath(bob, "alice/y", 0644).err(), EACCES);  // no search
  EXPECT_EQ(fs_->OpenForFastPath(bob, "alice/x", 0644).err(), EACCES);
  EXPECT_EQ(fs_->OpenForFastPath(bob, "shared/y", 0644).err(), EACCES);  // no write
  auto grp = fs_->OpenForFastPath(bob_in_root_group, "shared/y", 0644);
  ASSERT_TRUE(grp.ok()) << grp.status().ToString();  // supplementary group
  close(grp->fd);
  ASSERT_TRUE(fs_->AbandonFastPath(grp->fh).ok());
  ASSERT_TRUE(fs_->Release(grp->fh).ok());
  // A file alice may not write (0444) even in her own directory.
  auto ro = fs_->OpenForFastPath(a, "alice/ro", 0444);
  ASSERT_TRUE(ro.ok());
  close(ro->fd);
  ASSERT_TRUE(fs_->FinishFastPath(ro->fh, 0, 0).ok());
  ASSERT_TRUE(fs_->Release(ro->fh).ok());
  EXPECT_EQ(fs_->OpenForFastPath(a, "alice/ro", 0644).err(), EACCES);
}

TEST_F(FastPathTest, UploadOfBytesThatDifferFromTheReportedChecksumIsRefused) {
  auto f = fs_->OpenForFastPath({0, 0, {}}, "f", 0644);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(pwrite(f->fd, "abcd", 4, 0), 4);
  close(f->fd);
  const uint32_t crc = Crc32c(0, "abcd", 4);
  ASSERT_TRUE(fs_->FinishFastPath(f->fh, 4, crc).ok());
  ASSERT_TRUE(fs_->Release(f->fh).ok());
  auto attr = fs_->GetAttr(f->ino);
  FileSystem::UploadJob job;
  job.ino = f->ino;
  job.key = "f";
  job.size = 4;
  job.mtime_ns = TimespecToNanos(attr->attr.st_mtim);
  Status bad = fs_->NoteUploaded(job, crc ^ 1);
  EXPECT_EQ(bad.err(), EIO);
  EXPECT_NE(bad.message().find("changed since the writer closed it"), std::string::npos) << bad.message();
  EXPECT_TRUE(fs_->NoteUploaded(job, crc).ok());
}

TEST_F(FastPathTest, SecondDaemonOnTheSameSocketIsRefused) {
  auto again = FastPathServer::Start(socket_path(), fs_.get());
  EXPECT_EQ(again.err(), EADDRINUSE);
  // A stale socket file (no server behind it) is replaced.
  server_.reset();
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, socket_path().c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  close(fd);
  auto fresh = FastPathServer::Start(socket_path(), fs_.get());
  EXPECT_TRUE(fresh.ok()) << fresh.status().ToString();
}

}  // namespace
}  // namespace ckptfs::testing
