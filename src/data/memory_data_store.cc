// The in-memory DataStore with crash simulation; see memory_data_store.h.
#include "data/memory_data_store.h"

#include <algorithm>
#include <cstring>

namespace ckptfs {

struct MemoryDataStore::File {
  File() = default;
  // A file whose contents are durable (one that survived a crash).
  explicit File(const std::string& contents) : current(contents), durable(contents) {}

  Mutex mu;
  std::string current GUARDED_BY(mu);
  std::string durable GUARDED_BY(mu);  // as of the last Sync
};

class MemoryDataStore::Handle final : public BackingFile {
 public:
  Handle(std::shared_ptr<File> file, uint64_t ino) : file_(std::move(file)), ino_(ino) {}

  Result<size_t> PRead(void* buf, size_t n, uint64_t offset) override {
    MutexLock lock(&file_->mu);
    // file_->current throughout, not a reference to it: the analysis loses
    // track of the mutex through a const reference.
    if (offset >= file_->current.size()) return size_t{0};
    const size_t len = std::min<uint64_t>(n, file_->current.size() - offset);
    std::memcpy(buf, file_->current.data() + offset, len);
    return len;
  }

  Result<size_t> PWrite(const void* buf, size_t n, uint64_t offset) override {
    if (offset > kMaxFileSize || n > kMaxFileSize - offset) return TooBig("pwrite");
    MutexLock lock(&file_->mu);
    std::string& data = file_->current;
    if (data.size() < offset + n) data.resize(offset + n, '\0');
    std::memcpy(data.data() + offset, buf, n);
    return n;
  }

  Status Truncate(uint64_t size) override {
    if (size > kMaxFileSize) return TooBig("truncate");
    MutexLock lock(&file_->mu);
    file_->current.resize(size, '\0');
    return Status::Ok();
  }

  Status Sync() override {
    MutexLock lock(&file_->mu);
    file_->durable = file_->current;
    return Status::Ok();
  }

  Result<uint64_t> Size() override {
    MutexLock lock(&file_->mu);
    return uint64_t{file_->current.size()};
  }

 private:
  Status TooBig(const char* what) const {
    return Status::Error(EFBIG, std::string(what) + " memory backing file " +
                                    std::to_string(ino_) + ": beyond the test size limit");
  }

  const std::shared_ptr<File> file_;
  const uint64_t ino_;
};

Result<std::unique_ptr<BackingFile>> MemoryDataStore::Open(uint64_t ino, bool create) {
  MutexLock lock(&mu_);
  auto it = files_.find(ino);
  if (it == files_.end()) {
    if (!create) {
      return Status::Error(ENOENT, "open memory backing file " + std::to_string(ino) +
                                       ": no such file");
    }
    it = files_.emplace(ino, std::make_shared<File>()).first;
  }
  return std::unique_ptr<BackingFile>(new Handle(it->second, ino));
}

Status MemoryDataStore::Remove(uint64_t ino) {
  MutexLock lock(&mu_);
  files_.erase(ino);
  return Status::Ok();
}

Status MemoryDataStore::SyncDir() {
  MutexLock lock(&mu_);
  durable_ = files_;
  return Status::Ok();
}

Status MemoryDataStore::SyncFiles(const std::vector<uint64_t>& inos, uint64_t* failed_ino) {
  return SyncOneByOne(this, inos, failed_ino);
}

Result<std::vector<uint64_t>> MemoryDataStore::List() {
  MutexLock lock(&mu_);
  std::vector<uint64_t> inos;
  inos.reserve(files_.size());
  for (const auto& entry : files_) inos.push_back(entry.first);
  return inos;
}

Result<DataStore::Space> MemoryDataStore::Capacity() {
  Space space;
  space.block_size = 4096;
  uint64_t used = 0;
  {
    MutexLock lock(&mu_);
    space.blocks = device_bytes_ / space.block_size;
    used = (occupied_bytes_ + space.block_size - 1) / space.block_size;
    for (const auto& entry : files_) {
      MutexLock file_lock(&entry.second->mu);
      used += (entry.second->current.size() + space.block_size - 1) / space.block_size;
    }
  }
  space.blocks_free = space.blocks - std::min(used, space.blocks);
  space.blocks_avail = space.blocks_free;
  return space;
}

void MemoryDataStore::SetDeviceBytes(uint64_t bytes) {
  MutexLock lock(&mu_);
  device_bytes_ = bytes;
}

void MemoryDataStore::OccupyBytes(uint64_t bytes) {
  MutexLock lock(&mu_);
  occupied_bytes_ = bytes;
}

void MemoryDataStore::SimulateCrash() {
  MutexLock lock(&mu_);
  // Fresh objects detach every handle of the "dead" process, so nothing it
  // does later can change what recovery sees.
  std::map<uint64_t, std::shared_ptr<File>> survivors;
  for (const auto& [ino, file] : durable_) {
    MutexLock file_lock(&file->mu);
    survivors.emplace(ino, std::make_shared<File>(file->durable));
  }
  files_ = survivors;
  durable_ = std::move(survivors);
}

}  // namespace ckptfs
