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

// fuse_init_out: flags2 at byte 32, max_stack_depth (7.40) at 36.
constexpr size_t kInitFlagsOffset = 12;
constexpr size_t kInitFlags2Offset = 32;
constexpr size_t kInitStackDepthOffset = 36;
// fuse_open_out {u64 fh; u32 open_flags; s32 backing_id}: the last 16
// bytes of an OPEN reply and of a CREATE reply (after fuse_entry_out).
constexpr size_t kOpenOutSize = 16;

std::atomic<bool> g_offered{false};
std::atomic<bool> g_accepted{false};
std::atomic<bool> g_killpriv_offered{false};
std::atomic<bool> g_killpriv_accepted{false};
std::atomic<uint32_t> g_stack_depth{0};  // 0: not installed

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

ssize_t ReadRequest(int fd, void* buf, size_t len, void* /*userdata*/) {
  const ssize_t n = ::read(fd, buf, len);
  if (n < static_cast<ssize_t>(sizeof(fuse_in_header))) return n;
  fuse_in_header in;
  std::memcpy(&in, buf, sizeof in);
  t_unique = in.unique;
  t_opcode = in.opcode;
  t_backing_id = -1;
  t_kill_suidgid = g_killpriv_accepted &&
                   CarriesKillSuidgid(in.opcode, static_cast<const char*>(buf) + sizeof in, static_cast<size_t>(n) - sizeof in);
  if (in.opcode == FUSE_INIT && static_cast<size_t>(n) >= sizeof in + sizeof(fuse_init_in)) {
    fuse_init_in init;
    std::memcpy(&init, static_cast<const char*>(buf) + sizeof in, sizeof init);
    g_offered = (init.flags & FUSE_INIT_EXT) != 0 && (init.flags2 & kPassthroughFlags2) != 0;
    g_killpriv_offered = (init.flags & FUSE_HANDLE_KILLPRIV_V2) != 0;
  }
  return n;
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
  if (count < 2 || iov[0].iov_len != sizeof(fuse_out_header)) return ::writev(fd, iov, count);
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof out);
  const bool ours = out.unique == t_unique && out.error == 0 && out.unique != 0;
  const bool init = ours && t_opcode == FUSE_INIT && (g_offered || g_killpriv_offered) && g_stack_depth > 0;
  const bool open = ours && (t_opcode == FUSE_OPEN || t_opcode == FUSE_CREATE) && t_backing_id >= 0;
  if (!init && !open) return ::writev(fd, iov, count);
  // Small replies (INIT: 64 bytes; CREATE: 144): amend a copy.
  std::array<char, 256> payload;
  const size_t n = Flatten(iov, count, payload.data(), payload.size());
  if (init && n != SIZE_MAX && n >= kInitStackDepthOffset + 4) {
    if (g_killpriv_offered) {
      // The daemon drops setuid/setgid bits itself, where the kernel marks
      // a request so; in return the kernel sets SB_NOSEC and stops asking
      // for security.capability before every write (one GETXATTR round
      // trip per write(), through passthrough too).
      Store32(&payload[kInitFlagsOffset], Load32(&payload[kInitFlagsOffset]) | FUSE_HANDLE_KILLPRIV_V2);
      g_killpriv_accepted = true;
    }
    if (g_offered) {
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
    return ::writev(fd, iov, count);
  }
  iovec amended[2] = {iov[0], {payload.data(), n}};
  return ::writev(fd, amended, 2);
}

ssize_t SpliceSend(int fdin, off_t* offin, int fdout, off_t* offout, size_t len, unsigned int flags,
                   void* /*userdata*/) {
  // Read replies (data spliced from backing files) pass unchanged; without
  // this hook libfuse would turn splicing off for a custom channel.
  return ::splice(fdin, offin, fdout, offout, len, flags);
}

}  // namespace

Result<std::unique_ptr<PassthroughChannel>> PassthroughChannel::Install(fuse_session* se,
                                                                        uint32_t max_stack_depth) {
  if (g_stack_depth.exchange(max_stack_depth) != 0) {
    return Status::Error(EBUSY, "a passthrough channel is already installed in this process");
  }
  const int fd = fuse_session_fd(se);
  fuse_custom_io io{};
  io.read = ReadRequest;
  io.writev = WriteReply;
  io.splice_send = SpliceSend;
  if (int rc = fuse_session_custom_io(se, &io, fd); rc != 0) {
    g_stack_depth = 0;
    return Status::Error(-rc, "fuse_session_custom_io failed");
  }
  return std::unique_ptr<PassthroughChannel>(new PassthroughChannel(fd));
}

PassthroughChannel::PassthroughChannel(int fd) : fd_(fd) {}

PassthroughChannel::~PassthroughChannel() {
  g_stack_depth = 0;
  g_offered = false;
  g_accepted = false;
  g_killpriv_offered = false;
  g_killpriv_accepted = false;
}

bool PassthroughChannel::kernel_offered() const { return g_offered; }
bool PassthroughChannel::accepted() const { return g_accepted; }
bool PassthroughChannel::handles_killpriv() const { return g_killpriv_accepted; }
bool PassthroughChannel::RequestKillsSuidgid() { return t_kill_suidgid; }

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
