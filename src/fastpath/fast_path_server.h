// The daemon's end of the writer library's fast path (SPEC section 7): a
// Unix socket on which writer-library clients open files of the mount and
// receive descriptors of their backing files (protocol in wire.h).
//
// One thread accepts; each connection gets a thread of its own for the life
// of one file (a trainer writes a handful of files per rank at a time, and a
// connection's thread mostly sleeps in recv while the client writes). So
// that no local user can take every thread (SPEC section 7), the number of
// connections is bounded per user and in all, root has a quota of its own
// that others cannot fill, and a connection that sends no request within
// the idle timeout is closed. A refused client gets an ERR EAGAIN naming
// the limit, and the library writes through the mount instead.
//
// The peer's credentials come from the socket (SO_PEERCRED, SO_PEERGROUPS), so
// a client cannot claim to be someone else; FileSystem checks them against
// the directory's permissions as the kernel would.
//
// Thread safety: Start and the destructor from one thread; everything else
// runs on the server's own threads.
#pragma once

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "namespace/filesystem.h"

namespace ckptfs {

struct FastPathLimits {
  // Connections of users other than root, all together.
  size_t max_connections = 1024;
  // Connections of one uid (root's count against this, not the above).
  size_t max_per_user = 64;
  // A connection that has not sent its OPEN this long after connecting is
  // closed (an open file's connection waits for its CLOSE as long as the
  // client writes).
  int64_t idle_timeout_ms = 30000;
};

class FastPathServer {
 public:
  // Listens on socket_path (a stale socket file left by a dead daemon is
  // replaced; a live one is EADDRINUSE). The socket is mode 0666: anyone
  // may connect, permissions are checked per request.
  static Result<std::unique_ptr<FastPathServer>> Start(const std::string& socket_path, FileSystem* fs,
                                                       FastPathLimits limits = {});
  // Stops accepting, ends every connection (their files are abandoned as if
  // the clients had died), joins the threads, removes the socket file.
  ~FastPathServer();
  FastPathServer(const FastPathServer&) = delete;
  FastPathServer& operator=(const FastPathServer&) = delete;

  const std::string& path() const { return path_; }

 private:
  FastPathServer(std::string path, FileSystem* fs, FastPathLimits limits, int listen_fd, int wake_fd[2]);
  void AcceptLoop();
  // Why conn from uid may not be served now ("" = it may).
  std::string RefusalLocked(uint32_t uid) const REQUIRES(mu_);
  void Serve(int conn, const FileSystem::FastPathCaller& who);
  // Joins the threads of connections that ended.
  void ReapFinished() EXCLUDES(mu_);

  struct Connection {
    int fd = -1;
    uint32_t uid = 0;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  const std::string path_;
  FileSystem* const fs_;
  const FastPathLimits limits_;
  const int listen_fd_;
  int wake_read_ = -1;   // the destructor writes to wake_write_ to stop AcceptLoop
  int wake_write_ = -1;
  std::atomic<bool> stopping_{false};  // atomic: set by the destructor, read by AcceptLoop
  Mutex mu_;
  // A Connection's fd and uid are set before its thread starts and done is
  // atomic: its thread reads them through its own reference, without mu_.
  std::list<Connection> connections_ GUARDED_BY(mu_);
  std::map<uint32_t, size_t> per_user_ GUARDED_BY(mu_);  // live connections by uid
  size_t others_ GUARDED_BY(mu_) = 0;                    // live connections of uids other than 0
  std::thread acceptor_;
};

}  // namespace ckptfs
