// The library's side of the fast path handshake (protocol in
// src/fastpath/wire.h): find the ckptfs mount a path is in, ask its daemon
// to create the file, receive the backing file's descriptor; at the end,
// report size and CRC32C and wait for the daemon to record them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace ckptfs::writer {

class FastPathSession {
 public:
  // The daemon's descriptor of the backing file of path, opened for
  // writing and truncated; std::nullopt when there is no fast path (not a
  // ckptfs mount, socket gone, old daemon): the caller writes the path
  // itself. An error is the daemon's answer (EACCES, EROFS, ...) and final.
  static Result<std::optional<FastPathSession>> Open(const std::string& path, uint32_t mode);

  FastPathSession(FastPathSession&& o) noexcept;
  FastPathSession& operator=(FastPathSession&&) = delete;
  FastPathSession(const FastPathSession&) = delete;
  // Without Finish: the connection closes and the daemon abandons the file.
  ~FastPathSession();

  // The backing file's descriptor; owned by the session until TakeFd.
  int fd() const { return fd_; }
  // Closes our descriptor (the data must be synced first), sends size and
  // CRC32C, waits for the daemon's verdict.
  Status Finish(uint64_t size, uint32_t crc32c);

 private:
  FastPathSession(int sock, int fd) : sock_(sock), fd_(fd) {}
  int sock_ = -1;
  int fd_ = -1;
};

// Where the daemon serving the mount that contains dir listens: the mount
// root's user.ckptfs.writer_socket xattr, and path of dir under the root.
struct MountSocket {
  std::string socket_path;
  std::string relative_dir;  // "" for the root itself
};
std::optional<MountSocket> FindMountSocket(const std::string& absolute_dir);

}  // namespace ckptfs::writer
