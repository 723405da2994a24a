// FUSE over io_uring (Linux 6.14+, with the fuse module's enable_uring
// parameter set) for libfuse 3.14, which has no support for it.
//
// Over /dev/fuse every request wakes a daemon thread that may sit on another
// CPU; on a virtual machine whose idle vCPUs halt, that wakeup goes through
// the hypervisor and costs more than the request itself (docs/benchmarks.md,
// "The FUSE floor"). Over io_uring the kernel queues a request on the ring of
// the CPU that made it, so a daemon thread pinned to that CPU answers it
// there: the caller sleeps, the scheduler switches to the daemon thread on
// the same CPU, and no other CPU has to be woken.
//
// The kernel asks for one queue per possible CPU, each with at least one
// registered entry (a header buffer and a payload buffer) before it switches
// from /dev/fuse to the rings; until then, and for FORGET and INTERRUPT
// always, requests still come through /dev/fuse and libfuse's own loop.
// Here every entry has its own thread and ring, so a handler that blocks (a
// commit waiting for its sync, a read from the bucket) holds one entry of
// its CPU's queue, not the queue.
//
// A request is handed to the handler laid out as /dev/fuse would deliver it
// (fuse_in_header, the operation's arguments, the payload), so libfuse's
// fuse_session_process_buf can run it; its reply reaches Reply() through the
// session's custom I/O, on the same thread, and is committed to the kernel
// once the handler has returned (committing fetches the next request into
// the same buffers).
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"

namespace ckptfs {

class UringTransport {
 public:
  // Runs one request: request[0, len) as read from /dev/fuse.
  using Handler = std::function<void(char* request, size_t len)>;

  // FUSE_OVER_IO_URING, in fuse_init_in/out's flags2 (1 << 41 overall).
  static constexpr uint32_t kInitFlags2 = 1u << 9;

  // Sets up the rings and buffers, one queue per possible CPU, without
  // registering anything: a failure here (no io_uring in the kernel, or it
  // is turned off by sysctl) leaves INIT to decline the offer.
  // payload_bytes: the largest request or reply payload the kernel may
  // send (max(8 KiB, max_write, max_pages pages), from the INIT reply).
  static Result<std::unique_ptr<UringTransport>> Create(int dev_fd, size_t payload_bytes,
                                                        Handler handler);
  ~UringTransport();
  UringTransport(const UringTransport&) = delete;
  UringTransport& operator=(const UringTransport&) = delete;

  // Registers every entry and starts serving. Call once, after the INIT
  // reply that accepted io_uring reached the kernel: the kernel holds
  // requests until every queue has an entry.
  void Start();
  // Stops serving and joins the threads. Requests the rings hold stay
  // pending until the connection ends (unmount aborts them).
  void Stop();

  // How many entries were registered and how many requests were served
  // through the rings (for the mount's event log and tests).
  uint64_t registered() const { return registered_.load(); }
  uint64_t served() const { return served_.load(); }
  unsigned queues() const { return queues_; }

  // From the session's reply path: if the calling thread is serving a ring
  // request and this reply (fuse_out_header first) answers it, the reply is
  // copied into the entry, to be committed when the handler returns;
  // returns the bytes taken or -errno. nullopt: not a reply to a ring
  // request (it goes to /dev/fuse).
  static std::optional<ssize_t> Reply(const iovec* iov, int count);
  // Whether the calling thread is serving a ring request not yet answered.
  static bool Serving();

  struct Entry;  // one registered entry, its ring and its thread (the .cc)

 private:
  UringTransport(int dev_fd, size_t payload_bytes, unsigned queues, Handler handler);
  void Serve(Entry& e);
  void Run(Entry& e);

  const int dev_fd_;
  const size_t payload_bytes_;
  const unsigned queues_;
  const Handler handler_;
  std::vector<std::unique_ptr<Entry>> entries_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> registered_{0};
  std::atomic<uint64_t> served_{0};
  bool started_ = false;
};

}  // namespace ckptfs
