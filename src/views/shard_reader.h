// What a `.full/` view reads: the files of the directory holding the
// checkpoint (its format root), by path relative to it. The daemon serves
// them through its own read path, so shards that are only in the remote tier
// are fetched; tests serve them from memory or a directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace ckptfs {

class ShardReader {
 public:
  virtual ~ShardReader() = default;
  // The file's size; ENOENT when it does not exist.
  virtual Result<uint64_t> Size(const std::string& path) = 0;
  // Up to n bytes at offset; fewer only at the end of the file.
  virtual Result<size_t> ReadAt(const std::string& path, uint64_t offset, void* buf, size_t n) = 0;
};

// Reads exactly n bytes, or EIO saying the file is shorter.
Status ReadFully(ShardReader& files, const std::string& path, uint64_t offset, void* buf, size_t n);

}  // namespace ckptfs
