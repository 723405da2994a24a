// Test-only ShardReaders: a directory on disk (the real checkpoints in
// tests/fixtures/dcp) and files in memory (hand-made and damaged ones).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "views/shard_reader.h"

namespace ckptfs::testing {

class DirShardReader final : public ShardReader {
 public:
  explicit DirShardReader(std::string dir) : dir_(std::move(dir)) {}
  Result<uint64_t> Size(const std::string& path) override {
    struct stat st {};
    if (::stat((dir_ + "/" + path).c_str(), &st) != 0) return Status::FromErrno(errno, path);
    return static_cast<uint64_t>(st.st_size);
  }
  Result<size_t> ReadAt(const std::string& path, uint64_t offset, void* buf, size_t n) override {
    ++reads;
    const int fd = ::open((dir_ + "/" + path).c_str(), O_RDONLY);
    if (fd < 0) return Status::FromErrno(errno, path);
    const ssize_t got = ::pread(fd, buf, n, static_cast<off_t>(offset));
    ::close(fd);
    if (got < 0) return Status::FromErrno(errno, path);
    return static_cast<size_t>(got);
  }
  size_t reads = 0;

 private:
  std::string dir_;
};

class MemShardReader final : public ShardReader {
 public:
  Result<uint64_t> Size(const std::string& path) override {
    auto it = files.find(path);
    if (it == files.end()) return Status::Error(ENOENT, path + " does not exist");
    return static_cast<uint64_t>(it->second.size());
  }
  Result<size_t> ReadAt(const std::string& path, uint64_t offset, void* buf, size_t n) override {
    auto it = files.find(path);
    if (it == files.end()) return Status::Error(ENOENT, path + " does not exist");
    if (offset >= it->second.size()) return size_t{0};
    n = std::min<size_t>(n, it->second.size() - offset);
    std::memcpy(buf, it->second.data() + offset, n);
    return n;
  }
  std::map<std::string, std::string> files;
};

// A reader sharing another's files (views take ownership of theirs).
class BorrowedShardReader final : public ShardReader {
 public:
  explicit BorrowedShardReader(ShardReader* r) : r_(r) {}
  Result<uint64_t> Size(const std::string& path) override { return r_->Size(path); }
  Result<size_t> ReadAt(const std::string& path, uint64_t offset, void* buf, size_t n) override {
    return r_->ReadAt(path, offset, buf, n);
  }

 private:
  ShardReader* r_;
};

}  // namespace ckptfs::testing
