// The data store's seam: one backing file per regular-file inode, in the
// cache directory. PosixDataStore is the real one (cache/data/<ino>);
// MemoryDataStore keeps files in memory and can simulate a crash that drops
// whatever was not made durable (file contents not fsynced, files whose
// creation or removal was not followed by SyncDir), as RocksDB's
// FaultInjectionTestFS does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace ckptfs {

class BackingFile {
 public:
  virtual ~BackingFile() = default;
  virtual Result<size_t> PRead(void* buf, size_t n, uint64_t offset) = 0;
  virtual Result<size_t> PWrite(const void* buf, size_t n, uint64_t offset) = 0;
  virtual Status Truncate(uint64_t size) = 0;
  // Makes the contents and size durable (fdatasync).
  virtual Status Sync() = 0;
  virtual Result<uint64_t> Size() = 0;
  // The OS descriptor when there is one (PosixDataStore), else -1. The FUSE
  // glue uses it to move request buffers with splice; everything else goes
  // through the methods above.
  virtual int fd() const { return -1; }
};

class DataStore {
 public:
  virtual ~DataStore() = default;
  // Opens the backing file of ino for reading and writing; creates an empty
  // one when create is true and none exists. ENOENT when absent and !create.
  virtual Result<std::unique_ptr<BackingFile>> Open(uint64_t ino, bool create) = 0;
  // Removes the backing file; ok when it is already absent.
  virtual Status Remove(uint64_t ino) = 0;
  // Makes creations and removals of backing files durable (fsync of the
  // data directory).
  virtual Status SyncDir() = 0;
  // Every ino that has a backing file, for recovery's orphan sweep.
  virtual Result<std::vector<uint64_t>> List() = 0;
  // Bytes free and total on the device holding the data, for statfs.
  struct Space {
    uint64_t block_size = 4096;
    uint64_t blocks = 0;
    uint64_t blocks_free = 0;
    uint64_t blocks_avail = 0;
  };
  virtual Result<Space> Capacity() = 0;
};

// The real store: backing files live in dir (created if needed).
Result<std::unique_ptr<DataStore>> OpenPosixDataStore(const std::string& dir);

}  // namespace ckptfs
