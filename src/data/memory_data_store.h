// An in-memory DataStore for tests, with crash simulation in the manner of
// RocksDB's FaultInjectionTestFS. Each file has current contents, which reads
// and writes see, and durable contents, which BackingFile::Sync() catches up
// with. A file's existence is durable only through SyncDir(): a creation or a
// removal since the last SyncDir() is undone by a crash. SimulateCrash()
// plays a power loss: every file reverts to its durable contents, files
// created since the last SyncDir() vanish, and files removed since then come
// back with their durable contents.
//
// A handle shares its file's object. After Remove it keeps working on that
// object, as a descriptor of an unlinked POSIX file does (and if a crash
// resurrects the file, what the handle synced is there). Handles opened
// before a crash belong to the process that "died": the crash gives every
// surviving file a fresh object, so old handles keep working without error
// but write into a detached object nobody reads.
//
// Thread safety: every method of the store and of its handles may be called
// from any thread. Handles may outlive the store. Lock order: the store's
// mutex, then a file's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "data/data_store.h"

namespace ckptfs {

class MemoryDataStore final : public DataStore {
 public:
  // Beyond this size writes and truncates fail with EFBIG, so that a stray
  // huge offset in a test fails cleanly instead of exhausting memory.
  static constexpr uint64_t kMaxFileSize = uint64_t{4} << 30;

  MemoryDataStore() = default;
  MemoryDataStore(const MemoryDataStore&) = delete;
  MemoryDataStore& operator=(const MemoryDataStore&) = delete;

  Result<std::unique_ptr<BackingFile>> Open(uint64_t ino, bool create) override;
  Status Remove(uint64_t ino) override;
  Status SyncDir() override;
  // Syncs each file (SyncOneByOne): what a crash keeps must be what a real
  // store would have made durable, so this is no shortcut.
  Status SyncFiles(const std::vector<uint64_t>& inos, uint64_t* failed_ino) override;
  Result<std::vector<uint64_t>> List() override;
  // A 1 TiB device unless SetDeviceBytes says otherwise; free space shrinks
  // by what the files hold and by what OccupyBytes takes.
  Result<Space> Capacity() override;
  // For tests of a full disk: the device's size, and bytes taken by
  // something other than the backing files (another program's data).
  void SetDeviceBytes(uint64_t bytes);
  void OccupyBytes(uint64_t bytes);

  void SimulateCrash();

 private:
  struct File;   // contents, current and durable; shared with handles
  class Handle;  // the BackingFile

  mutable Mutex mu_;
  std::map<uint64_t, std::shared_ptr<File>> files_ GUARDED_BY(mu_);    // visible names
  std::map<uint64_t, std::shared_ptr<File>> durable_ GUARDED_BY(mu_);  // names as of SyncDir
  uint64_t device_bytes_ GUARDED_BY(mu_) = uint64_t{1} << 40;
  uint64_t occupied_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace ckptfs
