#include "fuse/passthrough_channel.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <vector>

#include "fuse/uring_transport.h"

namespace ckptfs {

namespace {

// Protocol 7.40 additions that Debian 12's <linux/fuse.h> (7.38) lacks.
constexpr uint32_t kPassthroughFlags2 = 1u << 5;  // FUSE_PASSTHROUGH (1ULL << 37) in flags2
constexpr uint32_t kOpenPassthrough = 1u << 7;    // FOPEN_PASSTHROUGH
struct BackingMap {
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};
constexpr unsigned long kBackingOpen = _IOW(FUSE_DEV_IOC_MAGIC, 1, BackingMap);
constexpr unsigned long kBackingClose = _IOW(FUSE_DEV_IOC_MAGIC, 2, uint32_t);

// fuse_init_out: flags at byte 12, max_write at 20, max_pages (u16) at 28,
// flags2 at 32, max_stack_depth (7.40) at 36.
constexpr size_t kInitFlagsOffset = 12;
constexpr size_t kInitMaxWriteOffset = 20;
constexpr size_t kInitMaxPagesOffset = 28;
constexpr size_t kInitFlags2Offset = 32;
constexpr size_t kInitStackDepthOffset = 36;
// fuse_open_out {u64 fh; u32 open_flags; s32 backing_id}: the last 16
// bytes of an OPEN reply and of a CREATE reply (after fuse_entry_out).
constexpr size_t kOpenOutSize = 16;

std::atomic<bool> g_offered{false};
std::atomic<bool> g_accepted{false};
std::atomic<bool> g_killpriv_offered{false};
std::atomic<bool> g_killpriv_accepted{false};
std::atomic<bool> g_installed{false};
std::atomic<uint32_t> g_stack_depth{0};  // 0: passthrough not wanted
std::atomic<bool> g_uring_wanted{false};
std::atomic<bool> g_uring_offered{false};
fuse_session* g_session = nullptr;
// Set while INIT is answered, before any ring request can arrive.
std::unique_ptr<UringTransport> g_uring;
std::string g_uring_error;

// The request this thread read last, and the backing id its handler asked
// the reply to carry.
thread_local uint64_t t_unique = 0;
thread_local uint32_t t_opcode = 0;
thread_local int32_t t_backing_id = -1;
// Whether that request carries the kernel's "drop setuid/setgid" mark.
thread_local bool t_kill_suidgid = false;

// Where each request that can carry the mark keeps it, after the header:
// fuse_write_in.write_flags, fuse_setattr_in.valid, fuse_open_in.open_flags,
// fuse_create_in.open_flags.
bool CarriesKillSuidgid(uint32_t opcode, const char* args, size_t len) {
  size_t at = 0;
  uint32_t bit = 0;
  switch (opcode) {
    case FUSE_WRITE: at = 20; bit = FUSE_WRITE_KILL_SUIDGID; break;
    case FUSE_SETATTR: at = 0; bit = FATTR_KILL_SUIDGID; break;
    case FUSE_OPEN: at = 4; bit = FUSE_OPEN_KILL_SUIDGID; break;
    case FUSE_CREATE: at = 12; bit = FUSE_OPEN_KILL_SUIDGID; break;
    default: return false;
  }
  if (len < at + 4) return false;
  uint32_t v;
  std::memcpy(&v, args + at, sizeof v);
  return (v & bit) != 0;
}

uint32_t Load32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void Store32(char* p, uint32_t v) { std::memcpy(p, &v, sizeof v); }

// Notes the request this thread is about to handle (see t_unique).
void NoteRequest(const void* buf, size_t n) {
  fuse_in_header in;
  std::memcpy(&in, buf, sizeof in);
  t_unique = in.unique;
  t_opcode = in.opcode;
  t_backing_id = -1;
  t_kill_suidgid =
      g_killpriv_accepted &&
      CarriesKillSuidgid(in.opcode, static_cast<const char*>(buf) + sizeof in, n - sizeof in);
  if (in.opcode == FUSE_INIT && n >= sizeof in + sizeof(fuse_init_in)) {
    fuse_init_in init;
    std::memcpy(&init, static_cast<const char*>(buf) + sizeof in, sizeof init);
    const bool ext = (init.flags & FUSE_INIT_EXT) != 0;
    g_offered = ext && (init.flags2 & kPassthroughFlags2) != 0;
    g_killpriv_offered = (init.flags & FUSE_HANDLE_KILLPRIV_V2) != 0;
    g_uring_offered = ext && (init.flags2 & UringTransport::kInitFlags2) != 0;
  }
}

ssize_t ReadRequest(int fd, void* buf, size_t len, void* /*userdata*/) {
  const ssize_t n = ::read(fd, buf, len);
  if (n >= static_cast<ssize_t>(sizeof(fuse_in_header))) NoteRequest(buf, static_cast<size_t>(n));
  return n;
}

// A reply goes into the io_uring entry of the request it answers, or to
// /dev/fuse.
ssize_t Send(int fd, iovec* iov, int count) {
  if (auto taken = UringTransport::Reply(iov, count)) return *taken;
  return ::writev(fd, iov, count);
}

// Runs a request that came through an io_uring entry, as libfuse's loop
// runs one read from /dev/fuse.
void HandleRingRequest(char* request, size_t len) {
  NoteRequest(request, len);
  fuse_buf buf{};
  buf.mem = request;
  buf.size = len;
  fuse_session_process_buf(g_session, &buf);
}

// While INIT is answered: sets up the rings when the kernel offers io_uring
// and the mount wants it. payload: fuse_init_out as libfuse filled it.
bool PrepareUring(int fd, const char* payload, size_t n) {
  if (!g_uring_wanted || !g_uring_offered || n < kInitMaxPagesOffset + 2) return false;
  uint16_t max_pages;
  std::memcpy(&max_pages, payload + kInitMaxPagesOffset, sizeof max_pages);
  size_t bytes = 8192;  // FUSE_MIN_READ_BUFFER
  bytes = std::max<size_t>(bytes, Load32(payload + kInitMaxWriteOffset));
  bytes = std::max<size_t>(bytes, static_cast<size_t>(max_pages) * 4096);
  auto transport = UringTransport::Create(fd, bytes, HandleRingRequest);
  if (!transport.ok()) {
    g_uring_error = transport.status().ToString();
    return false;
  }
  g_uring = std::move(transport).value();
  return true;
}

// Copies the payload (everything after the header) into buf when it fits.
size_t Flatten(const iovec* iov, int count, char* buf, size_t cap) {
  size_t n = 0;
  for (int i = 1; i < count; ++i) {
    if (n + iov[i].iov_len > cap) return SIZE_MAX;
    std::memcpy(buf + n, iov[i].iov_base, iov[i].iov_len);
    n += iov[i].iov_len;
  }
  return n;
}

ssize_t WriteReply(int fd, iovec* iov, int count, void* /*userdata*/) {
  if (count < 2 || iov[0].iov_len != sizeof(fuse_out_header)) return Send(fd, iov, count);
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof out);
  const bool ours = out.unique == t_unique && out.error == 0 && out.unique != 0;
  const bool init = ours && t_opcode == FUSE_INIT;
  const bool open = ours && (t_opcode == FUSE_OPEN || t_opcode == FUSE_CREATE) && t_backing_id >= 0;
  if (!init && !open) return Send(fd, iov, count);
  // Small replies (INIT: 64 bytes; CREATE: 144): amend a copy.
  std::array<char, 256> payload;
  const size_t n = Flatten(iov, count, payload.data(), payload.size());
  bool uring = false;
  if (init && n != SIZE_MAX && n >= kInitStackDepthOffset + 4) {
    if (PrepareUring(fd, payload.data(), n)) {
      Store32(&payload[kInitFlagsOffset], Load32(&payload[kInitFlagsOffset]) | FUSE_INIT_EXT);
      Store32(&payload[kInitFlags2Offset],
              Load32(&payload[kInitFlags2Offset]) | UringTransport::kInitFlags2);
      uring = true;
    }
    if (g_killpriv_offered) {
      // The daemon drops setuid/setgid bits itself, where the kernel marks
      // a request so; in return the kernel sets SB_NOSEC and stops asking
      // for security.capability before every write (one GETXATTR round
      // trip per write(), through passthrough too).
      Store32(&payload[kInitFlagsOffset], Load32(&payload[kInitFlagsOffset]) | FUSE_HANDLE_KILLPRIV_V2);
      g_killpriv_accepted = true;
    }
    if (g_offered && g_stack_depth > 0) {
      Store32(&payload[kInitFlagsOffset], Load32(&payload[kInitFlagsOffset]) | FUSE_INIT_EXT);
      Store32(&payload[kInitFlags2Offset], Load32(&payload[kInitFlags2Offset]) | kPassthroughFlags2);
      Store32(&payload[kInitStackDepthOffset], g_stack_depth);
      g_accepted = true;
    }
  } else if (open && n != SIZE_MAX && n >= kOpenOutSize) {
    char* open_out = &payload[n - kOpenOutSize];
    uint32_t flags = Load32(open_out + 8);
    // Only DIRECT_IO, PARALLEL_DIRECT_WRITES and NOFLUSH may go with it.
    flags &= ~static_cast<uint32_t>(FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR);
    Store32(open_out + 8, flags | kOpenPassthrough);
    Store32(open_out + 12, static_cast<uint32_t>(t_backing_id));
    t_backing_id = -1;
  } else {
    return Send(fd, iov, count);
  }
  iovec amended[2] = {iov[0], {payload.data(), n}};
  const ssize_t sent = Send(fd, amended, 2);
  // The kernel now holds every request until each CPU's queue has an
  // entry: register them at once (a failed registration makes the kernel
  // fall back to /dev/fuse).
  if (uring) {
    if (sent >= 0) {
      g_uring->Start();
    } else {
      g_uring.reset();
    }
  }
  return sent;
}

ssize_t SpliceSend(int fdin, off_t* offin, int fdout, off_t* offout, size_t len, unsigned int flags,
                   void* /*userdata*/) {
  // Read replies (data spliced from backing files) pass unchanged; without
  // this hook libfuse would turn splicing off for a custom channel.
  if (!UringTransport::Serving()) return ::splice(fdin, offin, fdout, offout, len, flags);
  // A ring entry takes the reply as bytes: drain the pipe (libfuse put the
  // fuse_out_header and the data in it) and copy it over.
  std::vector<char> bytes(len);
  size_t got = 0;
  while (got < len) {
    const ssize_t r = ::read(fdin, bytes.data() + got, len - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  if (got < sizeof(fuse_out_header)) return -1;
  iovec iov[2] = {{bytes.data(), sizeof(fuse_out_header)},
                  {bytes.data() + sizeof(fuse_out_header), got - sizeof(fuse_out_header)}};
  return Send(fdout, iov, 2);
}

}  // namespace

Result<std::unique_ptr<PassthroughChannel>> PassthroughChannel::Install(fuse_session* se,
                                                                        uint32_t max_stack_depth,
                                                                        bool io_uring) {
  if (g_installed.exchange(true)) {
    return Status::Error(EBUSY, "a passthrough channel is already installed in this process");
  }
  g_stack_depth = max_stack_depth;
  g_session = se;
  g_uring_wanted = io_uring;
  const int fd = fuse_session_fd(se);
  fuse_custom_io io{};
  io.read = ReadRequest;
  io.writev = WriteReply;
  io.splice_send = SpliceSend;
  if (int rc = fuse_session_custom_io(se, &io, fd); rc != 0) {
    g_stack_depth = 0;
    g_installed = false;
    return Status::Error(-rc, "fuse_session_custom_io failed");
  }
  return std::unique_ptr<PassthroughChannel>(new PassthroughChannel(fd));
}

PassthroughChannel::PassthroughChannel(int fd) : fd_(fd) {}

PassthroughChannel::~PassthroughChannel() {
  StopUring();
  g_uring.reset();
  g_uring_error.clear();
  g_uring_wanted = false;
  g_uring_offered = false;
  g_session = nullptr;
  g_stack_depth = 0;
  g_installed = false;
  g_offered = false;
  g_accepted = false;
  g_killpriv_offered = false;
  g_killpriv_accepted = false;
}

bool PassthroughChannel::kernel_offered() const { return g_offered; }
bool PassthroughChannel::accepted() const { return g_accepted; }
bool PassthroughChannel::handles_killpriv() const { return g_killpriv_accepted; }
bool PassthroughChannel::RequestKillsSuidgid() { return t_kill_suidgid; }

bool PassthroughChannel::uring_offered() const { return g_uring_offered; }
bool PassthroughChannel::uring_active() const { return g_uring != nullptr; }
std::string PassthroughChannel::uring_error() const { return g_uring_error; }
uint64_t PassthroughChannel::uring_requests() const { return g_uring ? g_uring->served() : 0; }
uint64_t PassthroughChannel::uring_entries() const { return g_uring ? g_uring->registered() : 0; }
void PassthroughChannel::StopUring() {
  if (g_uring) g_uring->Stop();
}

Result<int32_t> PassthroughChannel::Register(int fd) {
  BackingMap map{fd, 0, 0};
  const int id = ::ioctl(fd_, kBackingOpen, &map);
  if (id < 0) return Status::FromErrno("FUSE_DEV_IOC_BACKING_OPEN");
  return static_cast<int32_t>(id);
}

void PassthroughChannel::Unregister(int32_t id) {
  uint32_t v = static_cast<uint32_t>(id);
  (void)::ioctl(fd_, kBackingClose, &v);
}

Status PassthroughChannel::Probe(const std::string& cache_dir) {
  const int fd = ::open(cache_dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno("a test file in " + cache_dir);
  auto id = Register(fd);
  ::close(fd);
  if (!id.ok()) return id.status();
  Unregister(*id);
  return Status::Ok();
}

void PassthroughChannel::SetReplyBackingId(int32_t id) { t_backing_id = id; }

}  // namespace ckptfs
