// Internals shared by the C API's translation units (writer_api.cc,
// safetensors_api.cc): the ckptfs_writer object and error reporting.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "ckptfs/writer.h"
#include "common/status.h"
#include "writer/fast_path_client.h"
#include "writer/stream_writer.h"

struct ckptfs_writer {
  std::string path;
  int fd = -1;  // fallback: our own descriptor; fast path: the session's
  std::optional<ckptfs::writer::FastPathSession> session;
  std::unique_ptr<ckptfs::writer::StreamWriter> stream;
  ckptfs::Status failed;  // a failed write poisons the writer: the file is incomplete
};

namespace ckptfs::writer {

// Records st as this thread's last message; returns -errno (0 when ok).
int Fail(const Status& st);
int Succeed();

// Opens a writer; the C entry points wrap it.
Result<ckptfs_writer*> OpenWriter(const char* path, const ckptfs_writer_options* opts);
// Finishes, reports to the daemon, frees w. Fills info when given.
Status CloseWriter(ckptfs_writer* w, ckptfs_writer_info* info);
void AbortWriter(ckptfs_writer* w);
Status WriteTo(ckptfs_writer* w, const void* buf, size_t len, bool wait_for_disk);

}  // namespace ckptfs::writer
