#include "fuse/uring_transport.h"

#include <liburing.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

namespace ckptfs {

namespace {

// The FUSE-over-io_uring ABI (protocol 7.42), which Debian 12's
// <linux/fuse.h> (7.38) lacks.
constexpr uint32_t kCmdRegister = 1;
constexpr uint32_t kCmdCommitAndFetch = 2;
constexpr size_t kInOutBytes = 128;
constexpr size_t kOpInBytes = 128;
struct EntInOut {
  uint64_t flags;
  uint64_t commit_id;
  uint32_t payload_sz;
  uint32_t padding;
  uint64_t reserved;
};
struct ReqHeader {
  char in_out[kInOutBytes];  // fuse_in_header in, fuse_out_header back
  char op_in[kOpInBytes];    // the operation's own argument struct
  EntInOut ent;
};
static_assert(sizeof(ReqHeader) == 288, "fuse_uring_req_header");
struct CmdReq {  // in the SQE's 80-byte command area (SQE128 rings)
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;
  uint8_t padding[6];
};

constexpr size_t kHeadroom = sizeof(fuse_in_header) + kOpInBytes;

constexpr uint64_t kCmdTag = 1;   // user_data of REGISTER and COMMIT_AND_FETCH
constexpr uint64_t kWakeTag = 2;  // user_data of Stop's wake-up NOP

// num_possible_cpus(): the kernel makes one queue per possible CPU and
// files a request under the CPU its caller runs on.
unsigned PossibleCpus() {
  std::ifstream in("/sys/devices/system/cpu/possible");
  std::string spec;
  if (!(in >> spec)) return 0;
  unsigned count = 0;
  size_t at = 0;
  while (at < spec.size()) {
    size_t comma = spec.find(',', at);
    if (comma == std::string::npos) comma = spec.size();
    const std::string range = spec.substr(at, comma - at);
    const size_t dash = range.find('-');
    const unsigned lo = static_cast<unsigned>(std::strtoul(range.c_str(), nullptr, 10));
    const unsigned hi =
        dash == std::string::npos
            ? lo
            : static_cast<unsigned>(std::strtoul(range.c_str() + dash + 1, nullptr, 10));
    count += hi >= lo ? hi - lo + 1 : 0;
    at = comma + 1;
  }
  return count;
}

}  // namespace

struct UringTransport::Entry {
  unsigned qid = 0;
  int dev_fd = -1;
  io_uring ring{};
  bool ring_up = false;
  std::unique_ptr<ReqHeader> header = std::make_unique<ReqHeader>();
  // kHeadroom bytes, then the payload buffer the kernel fills: the headers
  // are copied into the headroom, right before the payload, so libfuse gets
  // the request in one piece without the payload being copied.
  // Not zeroed: a page costs memory only once a request reaches it.
  std::unique_ptr<char[]> buffer;
  size_t buffer_size = 0;
  char* payload() { return buffer.get() + kHeadroom; }
  size_t payload_size() const { return buffer_size - kHeadroom; }
  iovec iov[2]{};
  std::mutex sq_mu;  // the SQ: this entry's thread, and Stop's wake-up
  // The request being served (its unique, which the kernel also uses as
  // the commit id); 0 between requests.
  uint64_t serving = 0;
  bool replied = false;
  std::thread thread;

  // REGISTER or COMMIT_AND_FETCH of this entry.
  bool Submit(uint32_t op, uint64_t commit_id) {
    std::lock_guard<std::mutex> lock(sq_mu);
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (sqe == nullptr) return false;
    std::memset(sqe, 0, 2 * sizeof(io_uring_sqe));  // SQE128
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = dev_fd;
    sqe->cmd_op = op;
    sqe->addr = reinterpret_cast<uint64_t>(iov);
    sqe->len = 2;
    sqe->user_data = kCmdTag;
    CmdReq cmd{};
    cmd.commit_id = commit_id;
    cmd.qid = static_cast<uint16_t>(qid);
    std::memcpy(sqe->cmd, &cmd, sizeof cmd);
    return io_uring_submit(&ring) == 1;
  }

  void Wake() {
    std::lock_guard<std::mutex> lock(sq_mu);
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (sqe == nullptr) return;
    io_uring_prep_nop(sqe);
    sqe->user_data = kWakeTag;
    (void)io_uring_submit(&ring);
  }

  // Puts an error reply for the request being served in the entry.
  void SetError(int err) {
    fuse_out_header out{};
    out.len = sizeof out;
    out.error = -err;
    out.unique = serving;
    std::memcpy(header->in_out, &out, sizeof out);
    header->ent.payload_sz = 0;
    replied = true;
  }
};

namespace {
thread_local UringTransport::Entry* t_entry = nullptr;
}  // namespace

UringTransport::UringTransport(int dev_fd, size_t payload_bytes, unsigned queues, Handler handler)
    : dev_fd_(dev_fd),
      payload_bytes_(payload_bytes),
      queues_(queues),
      handler_(std::move(handler)) {}

Result<std::unique_ptr<UringTransport>> UringTransport::Create(int dev_fd, size_t payload_bytes,
                                                               Handler handler) {
  const unsigned queues = PossibleCpus();
  if (queues == 0) return Status::Error(ENOENT, "cannot read /sys/devices/system/cpu/possible");
  // Two entries per CPU at least; on small machines as many entries in all
  // as libfuse's loop keeps threads (16), so blocking handlers leave room.
  const unsigned per_queue = std::max(2u, 16u / queues);
  std::unique_ptr<UringTransport> t(
      new UringTransport(dev_fd, payload_bytes, queues, std::move(handler)));
  for (unsigned q = 0; q < queues; ++q) {
    for (unsigned i = 0; i < per_queue; ++i) {
      auto e = std::make_unique<Entry>();
      e->qid = q;
      e->dev_fd = dev_fd;
      if (int rc = io_uring_queue_init(4, &e->ring, IORING_SETUP_SQE128); rc < 0) {
        return Status::Error(-rc, "io_uring_queue_init");
      }
      e->ring_up = true;
      e->buffer_size = kHeadroom + payload_bytes;
      e->buffer.reset(new char[e->buffer_size]);
      e->iov[0] = {e->header.get(), sizeof(ReqHeader)};
      e->iov[1] = {e->payload(), payload_bytes};
      t->entries_.push_back(std::move(e));
    }
  }
  return t;
}

UringTransport::~UringTransport() {
  Stop();
  for (auto& e : entries_) {
    if (e->ring_up) io_uring_queue_exit(&e->ring);
  }
}

void UringTransport::Start() {
  if (started_) return;
  started_ = true;
  // Signals (SIGTERM, SIGINT: libfuse's way to end the session) must reach
  // the thread waiting in libfuse's loop, as libfuse keeps them off its own
  // workers: the threads start with every signal blocked.
  sigset_t all, was;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &was);
  for (auto& e : entries_) {
    Entry* entry = e.get();
    entry->thread = std::thread([this, entry] { Run(*entry); });
  }
  pthread_sigmask(SIG_SETMASK, &was, nullptr);
}

void UringTransport::Stop() {
  if (stop_.exchange(true)) return;
  for (auto& e : entries_) {
    if (e->thread.joinable()) e->Wake();
  }
  for (auto& e : entries_) {
    if (e->thread.joinable()) e->thread.join();
  }
}

void UringTransport::Run(Entry& e) {
  t_entry = &e;
  const std::string name = "ckptfs-uring" + std::to_string(e.qid);
  (void)pthread_setname_np(pthread_self(), name.c_str());
  // Answer requests on the CPU that made them. Where the daemon may not
  // run on that CPU (a cpuset), the entry still serves, from elsewhere.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(e.qid, &cpus);
  (void)pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus);
  if (!e.Submit(kCmdRegister, 0)) {
    std::fprintf(stderr, "ckptfs: io_uring: cannot submit the registration of queue %u\n", e.qid);
    return;
  }
  bool first = true;
  while (!stop_.load()) {
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(&e.ring, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) break;
    const int res = cqe->res;
    const uint64_t tag = cqe->user_data;
    io_uring_cqe_seen(&e.ring, cqe);
    if (tag == kWakeTag) continue;
    if (res < 0) {
      // ENOTCONN: the connection ended (unmount). Anything else is a
      // kernel refusal worth a line; the rest of the entries still serve.
      if (res != -ENOTCONN && res != -ECANCELED && res != -ECONNABORTED) {
        std::fprintf(stderr, "ckptfs: io_uring queue %u: %s\n", e.qid, std::strerror(-res));
      }
      break;
    }
    if (first) {
      first = false;
      registered_.fetch_add(1);
    }
    Serve(e);
  }
  t_entry = nullptr;
}

void UringTransport::Serve(Entry& e) {
  fuse_in_header in;
  std::memcpy(&in, e.header->in_out, sizeof in);
  const size_t payload = e.header->ent.payload_sz;
  e.serving = e.header->ent.commit_id;
  e.replied = false;
  // The kernel put the operation's argument struct in op_in and the rest
  // (names, write data) in the payload; in.len counts all three.
  if (in.len < sizeof in + payload || in.len - sizeof in - payload > kOpInBytes ||
      payload > e.payload_size()) {
    e.SetError(EIO);
  } else {
    const size_t op = in.len - sizeof in - payload;
    char* out = e.payload() - op - sizeof in;
    std::memcpy(out, &in, sizeof in);
    std::memcpy(out + sizeof in, e.header->op_in, op);
    served_.fetch_add(1, std::memory_order_relaxed);
    handler_(out, in.len);
    // Every request but FORGET (which never comes this way) is answered;
    // one that was not would hold the caller and the entry for good.
    if (!e.replied) e.SetError(EIO);
  }
  // Committed only now, after the handler returned: committing fetches the
  // next request into this entry's buffers, which the request just served
  // occupies until then.
  if (!e.Submit(kCmdCommitAndFetch, e.serving)) {
    std::fprintf(stderr, "ckptfs: io_uring queue %u: cannot submit a reply\n", e.qid);
  }
  e.serving = 0;
}

std::optional<ssize_t> UringTransport::Reply(const iovec* iov, int count) {
  Entry* e = t_entry;
  if (e == nullptr || e->serving == 0 || e->replied) return std::nullopt;
  if (count < 1 || iov[0].iov_len != sizeof(fuse_out_header)) return std::nullopt;
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof out);
  if (out.unique != e->serving) return std::nullopt;
  size_t n = 0;
  for (int i = 1; i < count; ++i) {
    if (n + iov[i].iov_len > e->payload_size()) return -EINVAL;
    // A reply may point into the request (libfuse hands some back as they
    // came); memmove, as they share the buffer.
    std::memmove(e->payload() + n, iov[i].iov_base, iov[i].iov_len);
    n += iov[i].iov_len;
  }
  std::memcpy(e->header->in_out, &out, sizeof out);
  e->header->ent.payload_sz = static_cast<uint32_t>(n);
  e->replied = true;  // committed when the handler returns (Serve)
  return static_cast<ssize_t>(sizeof out + n);
}

bool UringTransport::Serving() {
  return t_entry != nullptr && t_entry->serving != 0 && !t_entry->replied;
}

}  // namespace ckptfs
