// An open file: what fuse_file_info::fh points to between open and release.
// The kernel never uses a handle after releasing it, so the FUSE glue may
// pass the raw pointer around; FileSystem::Release deletes it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/data_store.h"

namespace ckptfs {

class FileHandle {
 public:
  uint64_t ino = 0;
  bool writable = false;
  std::unique_ptr<BackingFile> file;  // regular files
  std::string content;                // control files: a snapshot taken at open
};

}  // namespace ckptfs
