// Test support: a FileSystem over in-memory stores that outlive it, so a test
// can "crash" (drop unsynced manifest batches and file data) and "restart"
// (open a new FileSystem over what survived), as LevelDB's
// fault_injection_test does.
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "control/event_log.h"
#include "data/memory_data_store.h"
#include "lifecycle/commit_coordinator.h"
#include "manifest/memory_manifest_store.h"
#include "namespace/file_handle.h"
#include "namespace/filesystem.h"

namespace ckptfs::testing {

// Forwards to a store the test owns; counts writes.
class SharedManifest final : public ManifestStore {
 public:
  explicit SharedManifest(ManifestStore* target, int* writes) : target_(target), writes_(writes) {}
  Status Write(const ManifestBatch& batch, bool sync) override {
    ++*writes_;
    return target_->Write(batch, sync);
  }
  Result<std::optional<std::string>> Get(KeySpace space, std::string_view key) override {
    return target_->Get(space, key);
  }
  Status Scan(KeySpace space, std::string_view prefix, const ScanFn& fn) override {
    return target_->Scan(space, prefix, fn);
  }

 private:
  ManifestStore* target_;
  int* writes_;
};

class SharedData final : public DataStore {
 public:
  explicit SharedData(DataStore* target) : target_(target) {}
  Result<std::unique_ptr<BackingFile>> Open(uint64_t ino, bool create) override {
    return target_->Open(ino, create);
  }
  Status Remove(uint64_t ino) override { return target_->Remove(ino); }
  Status SyncDir() override { return target_->SyncDir(); }
  Result<std::vector<uint64_t>> List() override { return target_->List(); }
  Result<Space> Capacity() override { return target_->Capacity(); }

 private:
  DataStore* target_;
};

class FsEnv {
 public:
  explicit FsEnv(FileSystemOptions options = {}) : options_(std::move(options)) { Start(); }
  ~FsEnv() { Stop(); }

  void Start() {
    auto fs = FileSystem::Open(options_, std::make_unique<SharedManifest>(&manifest, &manifest_writes),
                               std::make_unique<SharedData>(&data), &clock, &events);
    if (!fs.ok()) throw std::runtime_error(fs.status().ToString());
    fs_ = std::move(fs).value();
    coordinator_ = CommitCoordinator::CreateWithoutThreads(fs_.get());
  }
  void Stop() {
    coordinator_.reset();
    fs_.reset();
  }
  // Power loss: handles and in-memory state vanish without any cleanup.
  void CrashAndRestart(size_t keep_unsynced_batches = 0) {
    coordinator_.reset();
    // Leak nothing but skip the destructor's clean flush: a crash writes no
    // final batch. The FileSystem is released after the stores forget.
    manifest.FailWritesAfter(0, EIO);
    fs_.reset();
    manifest.ClearFailure();
    manifest.SimulateCrash(keep_unsynced_batches);
    data.SimulateCrash();
    Start();
  }
  void CleanRestart() {
    Stop();
    Start();
  }

  FileSystem& fs() { return *fs_; }
  void DrainCommits() { coordinator_->DrainForTest(); }

  MemoryManifestStore manifest;
  MemoryDataStore data;
  ManualClock clock;
  EventLog events;
  int manifest_writes = 0;

 private:
  FileSystemOptions options_;
  std::unique_ptr<FileSystem> fs_;
  std::unique_ptr<CommitCoordinator> coordinator_;
};

}  // namespace ckptfs::testing
