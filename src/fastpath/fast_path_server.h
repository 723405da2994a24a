// The daemon's end of the writer library's fast path (SPEC section 7): a
// Unix socket on which writer-library clients open files of the mount and
// receive descriptors of their backing files (protocol in wire.h).
//
// One thread accepts; each connection gets a thread of its own for the life
// of one file (a trainer writes a handful of files per rank at a time, and a
// connection's thread mostly sleeps in recv while the client writes). The
// peer's credentials come from the socket (SO_PEERCRED, SO_PEERGROUPS), so
// a client cannot claim to be someone else; FileSystem checks them against
// the directory's permissions as the kernel would.
//
// Thread safety: Start and the destructor from one thread; everything else
// runs on the server's own threads.
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "namespace/filesystem.h"

namespace ckptfs {

class FastPathServer {
 public:
  // Listens on socket_path (a stale socket file left by a dead daemon is
  // replaced; a live one is EADDRINUSE). The socket is mode 0666: anyone
  // may connect, permissions are checked per request.
  static Result<std::unique_ptr<FastPathServer>> Start(const std::string& socket_path, FileSystem* fs);
  // Stops accepting, ends every connection (their files are abandoned as if
  // the clients had died), joins the threads, removes the socket file.
  ~FastPathServer();
  FastPathServer(const FastPathServer&) = delete;
  FastPathServer& operator=(const FastPathServer&) = delete;

  const std::string& path() const { return path_; }

 private:
  FastPathServer(std::string path, FileSystem* fs, int listen_fd, int wake_fd[2]);
  void AcceptLoop();
  void Serve(int conn);
  // Joins the threads of connections that ended.
  void ReapFinished();

  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  const std::string path_;
  FileSystem* const fs_;
  const int listen_fd_;
  int wake_read_ = -1;   // the destructor writes to wake_write_ to stop AcceptLoop
  int wake_write_ = -1;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::list<Connection> connections_;  // GUARDED_BY(mu_)
  std::thread acceptor_;
};

}  // namespace ckptfs
