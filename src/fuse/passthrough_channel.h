// Kernel FUSE passthrough (Linux 6.9+) for libfuse 3.14, which has no API
// for it. The session's device reads and writes go through this channel
// (fuse_session_custom_io), which amends two kinds of replies on their way
// to the kernel:
//   INIT        accepts the kernel's FUSE_PASSTHROUGH offer: the flag in
//               flags2 and max_stack_depth (the u32 after flags2); and its
//               FUSE_HANDLE_KILLPRIV_V2 offer (see RequestKillsSuidgid);
//   OPEN/CREATE for an open FileSystem gave a backing id: FOPEN_PASSTHROUGH
//               and the id in fuse_open_out's former padding.
// INIT also accepts the kernel's FUSE_OVER_IO_URING offer when the mount
// wants it (UringTransport): requests then come through per-CPU io_uring
// entries, whose replies this channel routes back to them.
//
// It also registers backing files with the kernel (BackingRegistry, by the
// FUSE_DEV_IOC_BACKING_OPEN/CLOSE ioctls on the session's descriptor).
//
// A reply is matched to its request through the thread: libfuse's worker
// reads a request, runs its handler and writes the reply on one thread, so
// the handler's SetReplyBackingId is consumed by that thread's next reply
// to the same request.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "namespace/backing_registry.h"

struct fuse_session;

namespace ckptfs {

class PassthroughChannel : public BackingRegistry {
 public:
  // Routes the session's device I/O through the channel. Call after
  // fuse_session_mount and before the kernel's INIT is read. One channel
  // per process (libfuse's I/O callbacks carry no pointer of ours).
  // max_stack_depth: 1, or 2 when backing files live on a stacked
  // filesystem (overlayfs); 0 declines passthrough. io_uring: accept FUSE
  // over io_uring where the kernel offers it.
  static Result<std::unique_ptr<PassthroughChannel>> Install(fuse_session* se,
                                                             uint32_t max_stack_depth,
                                                             bool io_uring);
  ~PassthroughChannel() override;
  PassthroughChannel(const PassthroughChannel&) = delete;
  PassthroughChannel& operator=(const PassthroughChannel&) = delete;

  // After INIT was answered: whether the kernel offered passthrough (and so
  // the reply accepted it).
  bool kernel_offered() const;
  bool accepted() const;
  // Whether INIT accepted FUSE_HANDLE_KILLPRIV_V2: the kernel no longer
  // drops setuid/setgid bits itself but marks the requests that should.
  bool handles_killpriv() const;

  // The FUSE glue, while handling a WRITE, SETATTR, OPEN or CREATE: the
  // kernel marked it to drop the file's setuid and setgid bits (the caller
  // lacks CAP_FSETID, or it is a chown).
  static bool RequestKillsSuidgid();

  // After INIT: whether the kernel offered FUSE over io_uring (Linux 6.14+
  // with the fuse module's enable_uring set), whether the rings were set up
  // and INIT accepted it, and why not where it was offered but not set up.
  bool uring_offered() const;
  bool uring_active() const;
  std::string uring_error() const;
  // Entries the kernel took (they served at least one request) and
  // requests served through the rings so far.
  uint64_t uring_entries() const;
  uint64_t uring_requests() const;
  // Stops the ring threads (before the session is destroyed: they run its
  // handlers). Idempotent.
  void StopUring();

  // Registers a file of the cache filesystem and closes the id at once:
  // Ok when opens can be passed through, else why not (EPERM without
  // CAP_SYS_ADMIN, ELOOP for a too deeply stacked cache filesystem).
  Status Probe(const std::string& cache_dir);

  Result<int32_t> Register(int fd) override;
  void Unregister(int32_t id) override;

  // The FUSE glue, just before it replies to the OPEN or CREATE it is
  // handling: the reply carries this backing id.
  static void SetReplyBackingId(int32_t id);

 private:
  explicit PassthroughChannel(int fd);
  const int fd_;  // the session's /dev/fuse descriptor
};

}  // namespace ckptfs
