// An open file: what fuse_file_info::fh points to between open and release.
// The kernel never uses a handle after releasing it, so the FUSE glue may
// pass the raw pointer around; FileSystem::Release deletes it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "data/data_store.h"
#include "views/view_reader.h"

namespace ckptfs {

class FileHandle {
 public:
  uint64_t ino = 0;
  bool writable = false;
  bool saving = false;  // open for writing inside a step: counted in OpenWriters()
  uint64_t saving_step = 0;  // that step's ino (while saving)
  uint32_t pid = 0;     // the opening process (0 = unknown): a trigger's session
  // Writable handles: a close() of it was answered (FLUSH) and nothing was
  // written through it since. GUARDED_BY(FileSystem::mu_).
  bool flushed = false;
  // Opened with a kernel passthrough backing id: reads and writes go to the
  // backing file without the daemon (filesystem_passthrough.cc).
  bool passthrough = false;
  std::unique_ptr<BackingFile> file;  // regular files
  std::string content;                // control files: a snapshot taken at open
  // Set when the file's data was not resident at open: reads fetch missing
  // ranges of this object first (RemoteTier keeps what was fetched).
  std::string remote_key;
  uint64_t remote_size = 0;
  // `.full/` view files: assembled from the checkpoint's shards on each
  // read; view_mu serializes reads (the kernel may send several at once).
  // The pointer is set once at open, before the handle is shared.
  Mutex view_mu;
  std::unique_ptr<ViewFileReader> view PT_GUARDED_BY(view_mu);
};

}  // namespace ckptfs
