#include "writer/fast_path_client.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fastpath/wire.h"

namespace ckptfs::writer {

namespace {

constexpr const char* kSocketXattr = "user.ckptfs.writer_socket";

std::string ParentOf(const std::string& dir) {
  const size_t slash = dir.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
}

int ConnectTo(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return -1;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A daemon that refuses the fast path (its per-user connection limit, an
// idle timeout) or cannot be reached: the library writes through the mount,
// which is correct and slower, and says so on stderr once per process (a
// training job opens thousands of files; one line is enough to explain
// the speed).
void WarnFallbackOnce(const std::string& why) {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true)) return;
  std::fprintf(stderr, "ckptfs-writer: fast path unavailable (%s); writing through the mount instead\n",
               why.c_str());
}

}  // namespace

std::optional<MountSocket> FindMountSocket(const std::string& absolute_dir) {
  struct stat start {};
  if (stat(absolute_dir.c_str(), &start) != 0) return std::nullopt;
  // Up from dir to the root of its filesystem (where st_dev changes); only
  // a ckptfs mount root answers the xattr.
  std::string dir = absolute_dir;
  for (;;) {
    char value[PATH_MAX];
    const ssize_t n = getxattr(dir.c_str(), kSocketXattr, value, sizeof value - 1);
    if (n > 0) {
      MountSocket found;
      found.socket_path.assign(value, static_cast<size_t>(n));
      found.relative_dir = dir == "/" ? absolute_dir.substr(1)
                           : absolute_dir.size() > dir.size() ? absolute_dir.substr(dir.size() + 1)
                                                              : "";
      return found;
    }
    if (dir == "/") return std::nullopt;
    const std::string parent = ParentOf(dir);
    struct stat up {};
    if (stat(parent.c_str(), &up) != 0 || up.st_dev != start.st_dev) return std::nullopt;
    dir = parent;
  }
}

Result<std::optional<FastPathSession>> FastPathSession::Open(const std::string& path, uint32_t mode) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") return std::optional<FastPathSession>();
  // A symlink as the last name: the kernel follows it when we fall back.
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return std::optional<FastPathSession>();
  char* real = realpath(dir.c_str(), nullptr);
  if (!real) return std::optional<FastPathSession>();  // the fallback open reports the error
  const std::string absolute_dir(real);
  std::free(real);
  auto mount = FindMountSocket(absolute_dir);
  if (!mount) return std::optional<FastPathSession>();
  const int sock = ConnectTo(mount->socket_path);
  if (sock < 0) {
    WarnFallbackOnce("cannot connect to " + mount->socket_path + ": " + std::strerror(errno));
    return std::optional<FastPathSession>();
  }
  const std::string rel = mount->relative_dir.empty() ? name : mount->relative_dir + "/" + name;
  // A daemon that refuses the connection sends its reason and closes at
  // once: the reason is read even when our request could not be sent.
  (void)wire::Send(sock, {wire::kOpen, std::to_string(wire::kProtocolVersion), std::to_string(mode), rel});
  auto reply = wire::Receive(sock);
  if (!reply.ok()) {
    close(sock);
    WarnFallbackOnce("the daemon closed the connection: " + reply.status().message());
    return std::optional<FastPathSession>();
  }
  Status verdict = wire::ReplyStatus(*reply);
  if (verdict.err() == EPROTONOSUPPORT || verdict.err() == EPROTO) {
    close(sock);
    if (reply->fd >= 0) close(reply->fd);
    return std::optional<FastPathSession>();  // another protocol version
  }
  // Refusals about the fast path itself, not about the file.
  if (verdict.err() == EAGAIN || verdict.err() == ETIMEDOUT || verdict.err() == ENOTSUP) {
    close(sock);
    if (reply->fd >= 0) close(reply->fd);
    WarnFallbackOnce(verdict.message());
    return std::optional<FastPathSession>();
  }
  if (!verdict.ok()) {
    close(sock);
    return verdict;
  }
  if (reply->fd < 0) {
    close(sock);
    return Status::Error(EPROTO, "the ckptfs daemon sent no descriptor");
  }
  return std::optional<FastPathSession>(FastPathSession(sock, reply->fd));
}

FastPathSession::FastPathSession(FastPathSession&& o) noexcept : sock_(o.sock_), fd_(o.fd_) {
  o.sock_ = -1;
  o.fd_ = -1;
}

FastPathSession::~FastPathSession() {
  if (fd_ >= 0) close(fd_);
  if (sock_ >= 0) close(sock_);
}

Status FastPathSession::Finish(uint64_t size, uint32_t crc32c) {
  // Our descriptor goes first: the daemon checks the size it sees.
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  Status st = wire::Send(sock_, {wire::kClose, std::to_string(size), std::to_string(crc32c)});
  if (!st.ok()) return st.Annotate("reporting to the ckptfs daemon");
  auto reply = wire::Receive(sock_);
  close(sock_);
  sock_ = -1;
  if (!reply.ok()) return reply.status().Annotate("waiting for the ckptfs daemon");
  if (reply->fd >= 0) close(reply->fd);
  return wire::ReplyStatus(*reply);
}

}  // namespace ckptfs::writer
