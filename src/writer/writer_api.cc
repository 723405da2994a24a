// The C API of libckptfs-writer (include/ckptfs/writer.h) over the pipeline
// (stream_writer.h) and the fast path handshake (fast_path_client.h).
#include "writer/writer_api.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <algorithm>
#include <cstring>
#include <fstream>

namespace ckptfs::writer {

namespace {

thread_local std::string g_last_message;  // per thread, as errno is

constexpr size_t kMinOptionsSize = offsetof(ckptfs_writer_options, staging_buffer_bytes);

// The process's umask without changing it (umask(2) is process-wide and
// racy with other threads); Linux shows it in /proc/self/status.
uint32_t CurrentUmask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) == 0) return static_cast<uint32_t>(std::strtoul(line.c_str() + 6, nullptr, 8));
  }
  return 022;
}

Result<ckptfs_writer_options> Normalize(const ckptfs_writer_options* in) {
  ckptfs_writer_options o;
  ckptfs_writer_options_init(&o, sizeof o);
  if (!in) return o;
  if (in->struct_size < kMinOptionsSize) {
    return Status::Error(EINVAL, "ckptfs_writer_options.struct_size is not set: call ckptfs_writer_options_init");
  }
  // A caller built against an older header passes a shorter struct: the
  // fields it does not know keep their defaults.
  std::memcpy(&o, in, std::min(in->struct_size, sizeof o));
  o.struct_size = sizeof o;
  if (o.source < CKPTFS_WRITER_SOURCE_AUTO || o.source > CKPTFS_WRITER_SOURCE_DEVICE) {
    return Status::Error(EINVAL, "ckptfs_writer_options.source must be AUTO, HOST or DEVICE");
  }
  if (o.flags & ~(CKPTFS_WRITER_NO_FAST_PATH | CKPTFS_WRITER_NO_DIRECT)) {
    return Status::Error(EINVAL, "unknown bits in ckptfs_writer_options.flags");
  }
  return o;
}

void FillInfo(const ckptfs_writer& w, uint32_t crc, ckptfs_writer_info* info) {
  if (!info || info->struct_size < offsetof(ckptfs_writer_info, crc32c)) return;
  ckptfs_writer_info full{};
  full.struct_size = info->struct_size;
  full.bytes = w.stream ? w.stream->bytes() : 0;
  full.crc32c = crc;
  full.fast_path = w.session.has_value();
  full.direct_io = w.stream && w.stream->direct();
  std::memcpy(info, &full, std::min(info->struct_size, sizeof full));
}

}  // namespace

int Fail(const Status& st) {
  g_last_message = st.message();
  return -st.err();
}

int Succeed() {
  g_last_message.clear();
  return 0;
}

Result<ckptfs_writer*> OpenWriter(const char* path, const ckptfs_writer_options* opts) {
  if (!path || !*path) return Status::Error(EINVAL, "empty path");
  auto o = Normalize(opts);
  if (!o.ok()) return o.status();
  auto w = std::make_unique<ckptfs_writer>();
  w->path = path;
  if (!(o->flags & CKPTFS_WRITER_NO_FAST_PATH)) {
    auto session = FastPathSession::Open(w->path, o->mode & ~CurrentUmask() & 07777);
    if (!session.ok()) return session.status().Annotate(w->path);
    if (session->has_value()) w->session.emplace(std::move(**session));
  }
  if (w->session) {
    w->fd = w->session->fd();
  } else {
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, o->mode & 07777);
    if (w->fd < 0) return Status::FromErrno(w->path);
  }
  PipelineOptions p;
  p.buffer_bytes = o->staging_buffer_bytes;
  p.buffer_count = o->staging_buffer_count;
  p.cuda_stream = o->cuda_stream;
  p.source = static_cast<Source>(o->source);
  p.direct = !(o->flags & CKPTFS_WRITER_NO_DIRECT);
  auto stream = StreamWriter::Create(w->fd, p);
  if (!stream.ok()) {
    ckptfs_writer* raw = w.release();
    AbortWriter(raw);
    return stream.status();
  }
  w->stream = std::move(stream).value();
  return w.release();
}

Status WriteTo(ckptfs_writer* w, const void* buf, size_t len, bool wait_for_disk) {
  if (!w) return Status::Error(EBADF, "null writer");
  if (!w->failed.ok()) return w->failed;
  if (!buf && len) return Status::Error(EFAULT, "null buffer");
  Status st = w->stream->Append(buf, len, wait_for_disk);
  // Device errors (no CUDA) leave the file as it was: only an I/O error
  // poisons the writer.
  if (!st.ok() && st.err() != ENOTSUP && st.err() != ENODEV) w->failed = st;
  return st;
}

Status CloseWriter(ckptfs_writer* w, ckptfs_writer_info* info) {
  std::unique_ptr<ckptfs_writer> owned(w);
  Status st = w->failed;
  if (st.ok()) st = w->stream->Finish();
  uint32_t crc = 0;
  if (st.ok()) {
    auto c = w->stream->Crc();
    if (c.ok()) crc = *c;
    st = c.status();
  }
  FillInfo(*w, crc, info);
  const uint64_t size = w->stream->bytes();
  w->stream.reset();
  if (w->session) {
    // Without a verdict (st not ok) the session's destructor hangs up and
    // the daemon abandons the file.
    if (st.ok()) st = w->session->Finish(size, crc);
  } else if (close(w->fd) != 0 && st.ok()) {
    st = Status::FromErrno("close");
  }
  return st.ok() ? st : st.Annotate(w->path);
}

void AbortWriter(ckptfs_writer* w) {
  std::unique_ptr<ckptfs_writer> owned(w);
  w->stream.reset();
  if (w->session) {
    w->session.reset();  // hangs up: the daemon abandons the file
  } else if (w->fd >= 0) {
    close(w->fd);
  }
  (void)unlink(w->path.c_str());
}

}  // namespace ckptfs::writer

using namespace ckptfs::writer;  // NOLINT: the C entry points below

extern "C" {

void ckptfs_writer_options_init(ckptfs_writer_options* opts, size_t size) {
  if (!opts || size < sizeof(size_t)) return;
  ckptfs_writer_options o;
  std::memset(&o, 0, sizeof o);
  o.staging_buffer_bytes = 8u << 20;
  o.staging_buffer_count = 4;
  o.cuda_stream = nullptr;
  o.source = CKPTFS_WRITER_SOURCE_AUTO;
  o.mode = 0666;
  o.flags = 0;
  // Only as much as the caller's struct holds.
  o.struct_size = std::min(size, sizeof o);
  std::memcpy(opts, &o, o.struct_size);
}

int ckptfs_writer_open(const char* path, ckptfs_writer** out) { return ckptfs_writer_open_with(path, nullptr, out); }

int ckptfs_writer_open_with(const char* path, const ckptfs_writer_options* opts, ckptfs_writer** out) {
  if (!out) return Fail(ckptfs::Status::Error(EINVAL, "out is NULL"));
  *out = nullptr;
  auto w = OpenWriter(path, opts);
  if (!w.ok()) return Fail(w.status());
  *out = *w;
  return Succeed();
}

int ckptfs_writer_write(ckptfs_writer* w, const void* buf, size_t len) {
  ckptfs::Status st = WriteTo(w, buf, len, /*wait_for_disk=*/true);
  return st.ok() ? Succeed() : Fail(st);
}

int ckptfs_writer_write_async(ckptfs_writer* w, const void* buf, size_t len) {
  ckptfs::Status st = WriteTo(w, buf, len, /*wait_for_disk=*/false);
  return st.ok() ? Succeed() : Fail(st);
}

int ckptfs_writer_close(ckptfs_writer* w) { return ckptfs_writer_close_info(w, nullptr); }

int ckptfs_writer_close_info(ckptfs_writer* w, ckptfs_writer_info* info) {
  if (!w) return Fail(ckptfs::Status::Error(EBADF, "null writer"));
  ckptfs::Status st = CloseWriter(w, info);
  return st.ok() ? Succeed() : Fail(st);
}

void ckptfs_writer_abort(ckptfs_writer* w) {
  if (w) AbortWriter(w);
}

int ckptfs_writer_get_info(const ckptfs_writer* w, ckptfs_writer_info* info) {
  if (!w) return Fail(ckptfs::Status::Error(EBADF, "null writer"));
  if (!info || info->struct_size < offsetof(ckptfs_writer_info, crc32c)) {
    return Fail(ckptfs::Status::Error(EINVAL, "info.struct_size is not set"));
  }
  auto crc = w->stream->Crc();
  if (!crc.ok()) return Fail(crc.status());
  FillInfo(*w, *crc, info);
  return Succeed();
}

const char* ckptfs_writer_strerror(int err) {
  const int e = err < 0 ? -err : err;
  switch (e) {
    case 0:
      return "success";
    case ENODEV:
      return "the source is CUDA device memory but no CUDA device is present";
    case ENOTSUP:
      return "not supported by this build of libckptfs-writer";
    case EROFS:
      return "read-only: the file belongs to a committed checkpoint step";
    default:
      return strerror(e);
  }
}

const char* ckptfs_writer_last_message(void) { return g_last_message.c_str(); }

int ckptfs_writer_cuda_available(void) { return CudaAvailable() ? 1 : 0; }

const char* ckptfs_writer_build_info(void) {
  static const std::string info = std::string("ckptfs-writer ") + CKPTFS_VERSION + ", " + CudaDescription();
  return info.c_str();
}

}  // extern "C"
