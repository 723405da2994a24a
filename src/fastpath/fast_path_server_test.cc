// The fast path end to end without a mount: a real socket, a real backing
// file, the FileSystem's permission checks and records.
#include "fastpath/fast_path_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

  void Start(std::optional<RevocationMode> mode = std::nullopt, FastPathLimits limits = {}) {
    auto data = PosixDataStore::OpenDir(dir_.path() + "/data", mode);
    ASSERT_TRUE(data.ok());
    mode_ = (*data)->revocation_mode();
    auto fs = FileSystem::Open({}, std::make_unique<SharedManifest>(&manifest_, &writes_),
                               std::move(data).value(), &clock_, &events_);
    ASSERT_TRUE(fs.ok()) << fs.status().ToString();
    fs_ = std::move(fs).value();
    coordinator_ = CommitCoordinator::CreateWithoutThreads(fs_.get(), fs_->data(), fs_->clock());
    auto server = FastPathServer::Start(socket_path(), fs_.get(), limits);
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

  std::string BackingPath(uint64_t ino) const {
    char name[17];
    std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(ino));
    return dir_.path() + "/data/" + name;
  }

  TempDirForTest dir_;
  RevocationMode mode_ = RevocationMode::kUnsupported;
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
  close(ok->grant.client_fd);
  ASSERT_TRUE(fs_->FinishFastPath(&*ok, 0, 0).ok());
  ASSERT_TRUE(fs_->Release(ok->fh).ok());
  EXPECT_EQ(fs_->GetAttr(InoOf(home->ino, "x"))->attr.st_uid, 1000u);
  EXPECT_EQ(fs_->OpenForFastPath(bob, "alice/y", 0644).err(), EACCES);  // no search
  EXPECT_EQ(fs_->OpenForFastPath(bob, "alice/x", 0644).err(), EACCES);
  EXPECT_EQ(fs_->OpenForFastPath(bob, "shared/y", 0644).err(), EACCES);  // no write
  auto grp = fs_->OpenForFastPath(bob_in_root_group, "shared/y", 0644);
  ASSERT_TRUE(grp.ok()) << grp.status().ToString();  // supplementary group
  close(grp->grant.client_fd);
  ASSERT_TRUE(fs_->AbandonFastPath(&*grp).ok());
  ASSERT_TRUE(fs_->Release(grp->fh).ok());
  // A file alice may not write (0444) even in her own directory.
  auto ro = fs_->OpenForFastPath(a, "alice/ro", 0444);
  ASSERT_TRUE(ro.ok());
  close(ro->grant.client_fd);
  ASSERT_TRUE(fs_->FinishFastPath(&*ro, 0, 0).ok());
  ASSERT_TRUE(fs_->Release(ro->fh).ok());
  EXPECT_EQ(fs_->OpenForFastPath(a, "alice/ro", 0644).err(), EACCES);
}

TEST_F(FastPathTest, UploadOfBytesThatDifferFromTheReportedChecksumIsRefused) {
  auto f = fs_->OpenForFastPath({0, 0, {}}, "f", 0644);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(pwrite(f->grant.client_fd, "abcd", 4, 0), 4);
  close(f->grant.client_fd);
  const uint32_t crc = Crc32c(0, "abcd", 4);
  ASSERT_TRUE(fs_->FinishFastPath(&*f, 4, crc).ok());
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


// What a client that kept its descriptor after CLOSE can still do to the
// file: nothing, in either revocation mode.
class FastPathRevocationTest : public FastPathTest, public ::testing::WithParamInterface<RevocationMode> {
 protected:
  void SetUp() override {
    // The immutable mode only where the probe finds the flag enforced
    // (ext4/XFS, as root); the staging copy works everywhere.
    if (GetParam() == RevocationMode::kImmutable && ProbeRevocationMode(dir_.path()) != GetParam()) {
      GTEST_SKIP() << "the immutable flag is not enforced here";
    }
    Start(GetParam());
  }
};

TEST_P(FastPathRevocationTest, DescriptorIsWriteOnlyAndWritesNothingAfterClose) {
  const uint64_t step = Mkdir(*fs_, kRootIno, "step1");
  Status st;
  auto [conn, fd] = Open("step1/rank0.bin", &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(fcntl(fd, F_GETFL) & O_ACCMODE, O_WRONLY);
  char c;
  EXPECT_EQ(pread(fd, &c, 1, 0), -1);  // no reading through it
  EXPECT_EQ(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
  const std::string data(300000, 'w');
  ASSERT_EQ(pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(fdatasync(fd), 0);
  ASSERT_TRUE(Close(conn, data.size(), Crc32c(0, data.data(), data.size())).ok());

  // The client kept fd: every way of changing the file through it fails
  // (sealed) or lands in a file nothing reads (staging copy).
  const ssize_t w = pwrite(fd, "XXXX", 4, 0);
  const int t = ftruncate(fd, 10);
  const int a = fallocate(fd, 0, 0, 1 << 20);
  if (GetParam() == RevocationMode::kImmutable) {
    EXPECT_EQ(w, -1);
    EXPECT_EQ(t, -1);
    EXPECT_EQ(a, -1);
  }
  close(fd);
  const uint64_t ino = InoOf(step, "rank0.bin");
  EXPECT_EQ(ReadFile(*fs_, ino), data);
  struct stat backing {};
  ASSERT_EQ(stat(BackingPath(ino).c_str(), &backing), 0);
  EXPECT_EQ(backing.st_size, static_cast<off_t>(data.size()));

  // The step commits: the file is what the writer closed.
  clock_.Advance(3'000'000'000);
  fs_->RequestCommit(step);
  coordinator_->DrainForTest();
  EXPECT_EQ(*fs_->GetXattr(step, "user.ckptfs.state"), "committed");
}

TEST_P(FastPathRevocationTest, RewritesAfterCloseGetAFreshFileTheOldDescriptorCannotReach) {
  Status st;
  auto [conn, old_fd] = Open("f", &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(pwrite(old_fd, "first", 5, 0), 5);
  ASSERT_TRUE(Close(conn, 5, Crc32c(0, "first", 5)).ok());
  const uint64_t ino = InoOf(kRootIno, "f");

  // Through the fast path again (the file is truncated at open).
  auto [conn2, fd2] = Open("f", &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(pwrite(fd2, "second", 6, 0), 6);
  ASSERT_TRUE(Close(conn2, 6, Crc32c(0, "second", 6)).ok());
  close(fd2);
  // And through the mount, keeping the contents (not truncated).
  clock_.Advance(1'000'000'000);
  auto o = fs_->OpenFile(ino, O_WRONLY);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_TRUE(fs_->Write(o->fh, "!", 1, 6).ok());
  ASSERT_TRUE(fs_->Release(o->fh).ok());
  (void)pwrite(old_fd, "XXXXXXX", 7, 0);  // the first writer tries again
  close(old_fd);
  EXPECT_EQ(ReadFile(*fs_, ino), "second!");
  // Truncation through the mount (setattr) of a sealed file.
  auto [conn3, fd3] = Open("f", &st);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(pwrite(fd3, "third", 5, 0), 5);
  ASSERT_TRUE(Close(conn3, 5, Crc32c(0, "third", 5)).ok());
  SetAttrRequest req;
  req.size = 3;
  ASSERT_TRUE(fs_->SetAttr(ino, req, nullptr).ok());
  (void)pwrite(fd3, "YYYYY", 5, 0);
  close(fd3);
  EXPECT_EQ(ReadFile(*fs_, ino), "thi");
  // Removal of a sealed file works.
  auto [conn4, fd4] = Open("g", &st);
  ASSERT_TRUE(st.ok());
  close(fd4);
  ASSERT_TRUE(Close(conn4, 0, 0).ok());
  const uint64_t g = InoOf(kRootIno, "g");
  ASSERT_TRUE(fs_->Unlink(kRootIno, "g").ok());
  ASSERT_TRUE(fs_->CollectGarbage(100).ok());
  struct stat gone {};
  EXPECT_EQ(stat(BackingPath(g).c_str(), &gone), -1);
}

INSTANTIATE_TEST_SUITE_P(Modes, FastPathRevocationTest,
                         ::testing::Values(RevocationMode::kImmutable, RevocationMode::kStagingCopy),
                         [](const auto& info) { return std::string(RevocationModeName(info.param)) == "immutable"
                                                           ? std::string("Immutable")
                                                           : std::string("StagingCopy"); });

TEST_F(FastPathTest, WrongChecksumIsAnErrorAndTheDaemonsOwnIsRecorded) {
  Status st;
  auto [conn, fd] = Open("f", &st);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const std::string data(70000, 'c');
  ASSERT_EQ(pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  close(fd);
  Status closed = Close(conn, data.size(), 0);
  EXPECT_EQ(closed.err(), EIO);
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", Crc32c(0, data.data(), data.size()));
  EXPECT_NE(closed.message().find(std::string("reported CRC32C 00000000 but the file holds ") + hex),
            std::string::npos)
      << closed.message();
  EXPECT_EQ(*fs_->GetXattr(InoOf(kRootIno, "f"), "user.ckptfs.crc32c"), hex);
  const std::string events = events_.Render();
  EXPECT_NE(events.find("\"kind\":\"checksum_mismatch\""), std::string::npos) << events;
}

TEST_F(FastPathTest, ChangeAroundTheDaemonAfterCloseBreaksTheStep) {
  const uint64_t step = Mkdir(*fs_, kRootIno, "step7");
  Status st;
  auto [conn, fd] = Open("step7/a", &st);
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(pwrite(fd, "abcdef", 6, 0), 6);
  close(fd);
  ASSERT_TRUE(Close(conn, 6, Crc32c(0, "abcdef", 6)).ok());
  // Someone with access to the cache directory edits the backing file.
  const uint64_t ino = InoOf(step, "a");
  const int ro = open(BackingPath(ino).c_str(), O_RDONLY);
  ASSERT_GE(ro, 0);
  (void)SetImmutable(ro, false);
  close(ro);
  const int rw = open(BackingPath(ino).c_str(), O_WRONLY);
  ASSERT_GE(rw, 0);
  ASSERT_EQ(pwrite(rw, "ABC", 3, 0), 3);
  close(rw);
  clock_.Advance(3'000'000'000);
  fs_->RequestCommit(step);
  coordinator_->DrainForTest();
  EXPECT_EQ(*fs_->GetXattr(step, "user.ckptfs.state"), "broken");
  const std::string why = *fs_->GetXattr(step, "user.ckptfs.error");
  EXPECT_NE(why.find("changed outside ckptfs after its writer closed it"), std::string::npos) << why;
}

TEST_F(FastPathTest, IdleConnectionsAreClosedAfterTheTimeout) {
  Stop();
  FastPathLimits limits;
  limits.idle_timeout_ms = 200;
  Start(std::nullopt, limits);
  const int conn = Connect();
  auto reply = wire::Receive(conn);  // nothing sent: the daemon gives up on us
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  Status st = wire::ReplyStatus(*reply);
  EXPECT_EQ(st.err(), ETIMEDOUT);
  EXPECT_NE(st.message().find("idle"), std::string::npos) << st.message();
  EXPECT_EQ(wire::Receive(conn).err(), ECONNRESET);
  close(conn);
}

TEST_F(FastPathTest, ConnectionsAreLimitedPerUserAndRootKeepsItsOwnQuota) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to connect as other users";
  Stop();
  FastPathLimits limits;
  limits.max_per_user = 3;
  limits.max_connections = 5;
  Start(std::nullopt, limits);
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);  // other users reach the socket
  std::vector<pid_t> children;
  auto hold = [&](uid_t uid, int tries, int* accepted, int* refused) {
    int pipefd[2];
    ASSERT_EQ(pipe(pipefd), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(pipefd[0]);
      if (setgid(uid) != 0 || setuid(uid) != 0) _exit(2);
      int counts[2] = {0, 0};
      for (int i = 0; i < tries; i++) {
        const int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strcpy(addr.sun_path, socket_path().c_str());
        if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) _exit(3);
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 300) == 1) {  // a refusal comes at once
          auto r = wire::Receive(fd);
          if (r.ok() && wire::ReplyStatus(*r).err() == EAGAIN) counts[1]++;
          close(fd);
        } else {
          counts[0]++;  // held open, idle, until the test kills us
        }
      }
      (void)!write(pipefd[1], counts, sizeof counts);
      pause();
      _exit(0);
    }
    close(pipefd[1]);
    int counts[2] = {-1, -1};
    EXPECT_EQ(read(pipefd[0], counts, sizeof counts), static_cast<ssize_t>(sizeof counts));
    close(pipefd[0]);
    children.push_back(pid);
    *accepted = counts[0];
    *refused = counts[1];
  };
  int accepted = 0, refused = 0;
  hold(1001, 5, &accepted, &refused);  // one user: its own limit
  EXPECT_EQ(accepted, 3);
  EXPECT_EQ(refused, 2);
  hold(1002, 5, &accepted, &refused);  // a second user: the total limit
  EXPECT_EQ(accepted, 2);
  EXPECT_EQ(refused, 3);
  // Root is not locked out by them, and gets a file through.
  Status st;
  auto [conn, fd] = Open("root-file", &st);
  EXPECT_TRUE(st.ok()) << st.ToString();
  close(fd);
  EXPECT_TRUE(Close(conn, 0, 0).ok());
  for (pid_t pid : children) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  // Their connections are gone: the users may connect again.
  for (int i = 0; i < 100; i++) {
    hold(1001, 1, &accepted, &refused);
    kill(children.back(), SIGKILL);
    waitpid(children.back(), nullptr, 0);
    if (accepted == 1) break;
    usleep(20000);
  }
  EXPECT_EQ(accepted, 1);
}

}  // namespace
}  // namespace ckptfs::testing
