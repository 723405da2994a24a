#include "fastpath/fast_path_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "fastpath/wire.h"
#include "namespace/file_handle.h"

namespace ckptfs {

namespace {

// How long a connection's thread waits for a packet: an idle connection is
// closed, one that holds an open file waits for its CLOSE (0 = forever).
void SetReceiveTimeout(int conn, int64_t ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  (void)setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

Result<FileSystem::FastPathCaller> PeerOf(int conn) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Status::FromErrno("writer socket: SO_PEERCRED");
  }
  FileSystem::FastPathCaller who;
  who.uid = cred.uid;
  who.gid = cred.gid;
  std::vector<gid_t> groups(64);
  len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  if (getsockopt(conn, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) != 0 && errno == ERANGE) {
    groups.resize(len / sizeof(gid_t));
    len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(conn, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) != 0) len = 0;
  }
  groups.resize(len / sizeof(gid_t));
  who.groups.assign(groups.begin(), groups.end());
  return who;
}

Result<int> Listen(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return Status::Error(ENAMETOOLONG, "writer socket path longer than " +
                                           std::to_string(sizeof addr.sun_path - 1) + " bytes: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno("writer socket");
  // A socket file left by a daemon that died: nobody answers on it.
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    close(fd);
    return Status::Error(EADDRINUSE, "writer socket " + path + " is in use by another daemon");
  }
  // Only a stale socket is replaced: anything else at the path (a file
  // given by mistake, a directory) is the user's and stays.
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      close(fd);
      return Status::Error(EEXIST, "writer socket " + path +
                                       " exists and is not a socket: refusing to replace it (remove it or "
                                       "choose another --writer-socket)");
    }
    (void)unlink(path.c_str());
  }
  const mode_t old_umask = umask(0);  // clients of every user connect
  const int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  umask(old_umask);
  if (rc != 0) {
    close(fd);
    return Status::FromErrno(bind_errno, "writer socket: bind " + path);
  }
  if (listen(fd, 128) != 0) {
    close(fd);
    return Status::FromErrno("writer socket: listen");
  }
  return fd;
}

}  // namespace

Result<std::unique_ptr<FastPathServer>> FastPathServer::Start(const std::string& socket_path, FileSystem* fs,
                                                              FastPathLimits limits) {
  auto fd = Listen(socket_path);
  if (!fd.ok()) return fd.status();
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(*fd);
    return Status::FromErrno("writer socket: pipe");
  }
  std::unique_ptr<FastPathServer> server(new FastPathServer(socket_path, fs, limits, *fd, wake));
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

FastPathServer::FastPathServer(std::string path, FileSystem* fs, FastPathLimits limits, int listen_fd,
                               int wake_fd[2])
    : path_(std::move(path)),
      fs_(fs),
      limits_(limits),
      listen_fd_(listen_fd),
      wake_read_(wake_fd[0]),
      wake_write_(wake_fd[1]) {}

FastPathServer::~FastPathServer() {
  stopping_ = true;
  (void)!write(wake_write_, "x", 1);
  if (acceptor_.joinable()) acceptor_.join();
  {
    MutexLock lock(&mu_);
    // Wakes every connection thread blocked in recv: they see end of
    // stream and abandon their files.
    for (Connection& c : connections_) shutdown(c.fd, SHUT_RDWR);
  }
  for (Connection& c : connections_) {
    if (c.thread.joinable()) c.thread.join();
    close(c.fd);
  }
  close(listen_fd_);
  close(wake_read_);
  close(wake_write_);
  (void)unlink(path_.c_str());
}

void FastPathServer::AcceptLoop() {
  while (!stopping_) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) continue;  // EINTR
    if (fds[1].revents) break;
    ReapFinished();
    const int conn = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    auto who = PeerOf(conn);
    if (!who.ok()) {
      (void)wire::Send(conn, wire::ErrorFields(who.status()));
      close(conn);
      continue;
    }
    MutexLock lock(&mu_);
    if (const std::string why = RefusalLocked(who->uid); !why.empty()) {
      (void)wire::Send(conn, wire::ErrorFields(Status::Error(EAGAIN, why)));
      close(conn);
      continue;
    }
    per_user_[who->uid]++;
    if (who->uid != 0) others_++;
    Connection& c = connections_.emplace_back();
    c.fd = conn;
    c.uid = who->uid;
    c.thread = std::thread([this, &c, caller = std::move(who).value()] {
      Serve(c.fd, caller);
      // The peer sees the end now, not when the acceptor next reaps.
      shutdown(c.fd, SHUT_RDWR);
      c.done = true;
    });
  }
}

std::string FastPathServer::RefusalLocked(uint32_t uid) const {
  auto it = per_user_.find(uid);
  const size_t mine = it == per_user_.end() ? 0 : it->second;
  if (mine >= limits_.max_per_user) {
    return "too many writer connections from uid " + std::to_string(uid) + " (" + std::to_string(mine) +
           ", the limit per user); write through the mount";
  }
  if (uid != 0 && others_ >= limits_.max_connections) {
    return "too many writer connections (" + std::to_string(others_) + "); write through the mount";
  }
  return "";
}

void FastPathServer::ReapFinished() {
  MutexLock lock(&mu_);
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->done) {
      it->thread.join();
      close(it->fd);
      if (--per_user_[it->uid] == 0) per_user_.erase(it->uid);
      if (it->uid != 0) others_--;
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void FastPathServer::Serve(int conn, const FileSystem::FastPathCaller& who) {
  auto reply_error = [conn](const Status& st) { (void)wire::Send(conn, wire::ErrorFields(st)); };
  if (limits_.idle_timeout_ms > 0) SetReceiveTimeout(conn, limits_.idle_timeout_ms);
  auto open = wire::Receive(conn);
  if (!open.ok()) {
    if (open.err() == EAGAIN || open.err() == EWOULDBLOCK) {
      char why[96];
      std::snprintf(why, sizeof why, "writer connection idle for %.3g s without a request; closed",
                    static_cast<double>(limits_.idle_timeout_ms) / 1000.0);
      reply_error(Status::Error(ETIMEDOUT, why));
    }
    return;
  }
  SetReceiveTimeout(conn, 0);
  if (open->fd >= 0) close(open->fd);
  const auto& f = open->fields;
  if (f.size() != 4 || f[0] != wire::kOpen) {
    return reply_error(Status::Error(EPROTO, "writer socket: expected OPEN"));
  }
  auto version = wire::ParseNumber(f[1]);
  if (!version.ok() || *version != static_cast<uint64_t>(wire::kProtocolVersion)) {
    return reply_error(Status::Error(EPROTONOSUPPORT, "writer protocol version " + f[1] +
                                                          " is not supported by this daemon (expects " +
                                                          std::to_string(wire::kProtocolVersion) + ")"));
  }
  auto mode = wire::ParseNumber(f[2]);
  if (!mode.ok()) return reply_error(mode.status());
  auto file = fs_->OpenForFastPath(who, f[3], static_cast<uint32_t>(*mode & 07777));
  if (!file.ok()) return reply_error(file.status());
  Status sent = wire::Send(conn, {wire::kOk, std::to_string(file->ino)}, file->grant.client_fd);
  close(file->grant.client_fd);
  file->grant.client_fd = -1;
  if (sent.ok()) {
    auto close_msg = wire::Receive(conn);
    if (close_msg.ok() && close_msg->fd >= 0) close(close_msg->fd);
    if (!close_msg.ok()) {
      // The client died or gave up: abandoned below.
    } else if (close_msg->fields.size() != 3 || close_msg->fields[0] != wire::kClose) {
      reply_error(Status::Error(EPROTO, "writer socket: expected CLOSE"));
    } else {
      auto size = wire::ParseNumber(close_msg->fields[1]);
      auto crc = wire::ParseNumber(close_msg->fields[2]);
      Status outcome = !size.ok() ? size.status() : !crc.ok() ? crc.status() : Status::Ok();
      if (outcome.ok() && *crc > UINT32_MAX) outcome = Status::Error(EPROTO, "writer socket: bad CRC32C");
      if (outcome.ok()) {
        outcome = fs_->FinishFastPath(&*file, *size, static_cast<uint32_t>(*crc));
        // The reply waits for Release: a commit marker written through the
        // fast path has asked for its commit when the client's close returns.
        Status released = fs_->Release(file->fh);
        file->fh = nullptr;
        if (outcome.ok()) outcome = released;
      }
      (void)wire::Send(conn, outcome.ok() ? std::vector<std::string>{wire::kOk} : wire::ErrorFields(outcome));
    }
  }
  if (file->fh) {
    // Abandoned: the file keeps what the client wrote, unchecksummed, and
    // the client's descriptor writes it no more.
    (void)fs_->AbandonFastPath(&*file);
    (void)fs_->Release(file->fh);
  }
}

}  // namespace ckptfs
