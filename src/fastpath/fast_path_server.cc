#include "fastpath/fast_path_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "fastpath/wire.h"
#include "namespace/file_handle.h"

namespace ckptfs {

namespace {

constexpr size_t kMaxConnections = 1024;

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

Result<std::unique_ptr<FastPathServer>> FastPathServer::Start(const std::string& socket_path, FileSystem* fs) {
  auto fd = Listen(socket_path);
  if (!fd.ok()) return fd.status();
  int wake[2];
  if (pipe2(wake, O_CLOEXEC) != 0) {
    close(*fd);
    return Status::FromErrno("writer socket: pipe");
  }
  std::unique_ptr<FastPathServer> server(new FastPathServer(socket_path, fs, *fd, wake));
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

FastPathServer::FastPathServer(std::string path, FileSystem* fs, int listen_fd, int wake_fd[2])
    : path_(std::move(path)), fs_(fs), listen_fd_(listen_fd), wake_read_(wake_fd[0]), wake_write_(wake_fd[1]) {}

FastPathServer::~FastPathServer() {
  stopping_ = true;
  (void)!write(wake_write_, "x", 1);
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
    if (connections_.size() >= kMaxConnections) {
      (void)wire::Send(conn, wire::ErrorFields(Status::Error(EAGAIN, "too many writer connections; retry")));
      close(conn);
      continue;
    }
    Connection& c = connections_.emplace_back();
    c.fd = conn;
    c.thread = std::thread([this, &c] {
      Serve(c.fd);
      c.done = true;
    });
  }
}

void FastPathServer::ReapFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (it->done) {
      it->thread.join();
      close(it->fd);
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void FastPathServer::Serve(int conn) {
  auto reply_error = [conn](const Status& st) { (void)wire::Send(conn, wire::ErrorFields(st)); };
  auto who = PeerOf(conn);
  if (!who.ok()) return reply_error(who.status());
  auto open = wire::Receive(conn);
  if (!open.ok()) return;
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
  auto file = fs_->OpenForFastPath(*who, f[3], static_cast<uint32_t>(*mode & 07777));
  if (!file.ok()) return reply_error(file.status());
  Status sent = wire::Send(conn, {wire::kOk, std::to_string(file->ino)}, file->fd);
  close(file->fd);
  Status outcome = sent;
  if (sent.ok()) {
    auto close_msg = wire::Receive(conn);
    if (close_msg.ok() && close_msg->fd >= 0) close(close_msg->fd);
    if (!close_msg.ok()) {
      outcome = close_msg.status();  // the client died or gave up
    } else if (close_msg->fields.size() != 3 || close_msg->fields[0] != wire::kClose) {
      outcome = Status::Error(EPROTO, "writer socket: expected CLOSE");
      reply_error(outcome);
    } else {
      auto size = wire::ParseNumber(close_msg->fields[1]);
      auto crc = wire::ParseNumber(close_msg->fields[2]);
      outcome = !size.ok() ? size.status() : !crc.ok() ? crc.status() : Status::Ok();
      if (outcome.ok() && *crc > UINT32_MAX) outcome = Status::Error(EPROTO, "writer socket: bad CRC32C");
      if (outcome.ok()) outcome = fs_->FinishFastPath(file->fh, *size, static_cast<uint32_t>(*crc));
      // The reply waits for Release: a commit marker written through the
      // fast path has asked for its commit when the client's close returns.
      Status released = fs_->Release(file->fh);
      file->fh = nullptr;
      if (outcome.ok()) outcome = released;
      (void)wire::Send(conn, outcome.ok() ? std::vector<std::string>{wire::kOk} : wire::ErrorFields(outcome));
    }
  }
  if (file->fh) {
    // Abandoned: the file keeps what the client wrote, unchecksummed.
    (void)fs_->AbandonFastPath(file->fh);
    (void)fs_->Release(file->fh);
  }
}

}  // namespace ckptfs
