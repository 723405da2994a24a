// Test support: a FileSystem over in-memory stores that outlive it, so a test
// can "crash" (drop unsynced manifest batches and file data) and "restart"
// (open a new FileSystem over what survived), as LevelDB's
// fault_injection_test does.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

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
  Status ScanRange(KeySpace space, std::string_view begin, std::string_view end,
                   const ScanFn& fn) override {
    return target_->ScanRange(space, begin, end, fn);
  }

 private:
  ManifestStore* target_;
  int* writes_;
};

class SharedData final : public DataStore {
 public:
  // writeback_started (optional) collects the inos StartWriteback was asked
  // for; looks (optional) counts Open and SizeOf calls.
  explicit SharedData(DataStore* target, std::vector<uint64_t>* writeback_started = nullptr,
                      int* looks = nullptr)
      : target_(target), writeback_started_(writeback_started), looks_(looks) {}
  Result<std::unique_ptr<BackingFile>> Open(uint64_t ino, bool create) override {
    if (looks_) ++*looks_;
    return target_->Open(ino, create);
  }
  Result<uint64_t> SizeOf(uint64_t ino) override {
    if (looks_) ++*looks_;
    return target_->SizeOf(ino);
  }
  Status Remove(uint64_t ino) override { return target_->Remove(ino); }
  Status SyncDir() override { return target_->SyncDir(); }
  Status SyncFiles(const std::vector<uint64_t>& inos, uint64_t* failed_ino) override {
    return target_->SyncFiles(inos, failed_ino);
  }
  Result<std::vector<uint64_t>> List() override { return target_->List(); }
  Result<Space> Capacity() override { return target_->Capacity(); }
  void StartWriteback(uint64_t ino) override {
    if (writeback_started_) writeback_started_->push_back(ino);
    target_->StartWriteback(ino);
  }

 private:
  DataStore* target_;
  std::vector<uint64_t>* writeback_started_;
  int* looks_;
};

class FsEnv {
 public:
  // Commits of layouts that list no files wait --commit-settle of quiet on
  // the test's manual clock; tests about settling pass keep_settle, the
  // others commit at once (settle 0).
  explicit FsEnv(FileSystemOptions options = {}, bool keep_settle = false)
      : FsEnv(std::move(options), nullptr, keep_settle) {}
  // Over a data store the test owns (a PosixDataStore in a temporary
  // directory, for code that needs descriptors) instead of `data`.
  FsEnv(FileSystemOptions options, DataStore* data_store, bool keep_settle = false)
      : options_(std::move(options)), data_target_(data_store ? data_store : &data) {
    if (!keep_settle) options_.commit_settle_ns = 0;
    if (options_.boot_id.empty()) options_.boot_id = "boot-1";
    Start();
  }
  ~FsEnv() { Stop(); }

  void Start() {
    auto fs = FileSystem::Open(
        options_, std::make_unique<SharedManifest>(&manifest, &manifest_writes),
        std::make_unique<SharedData>(data_target_, &writeback_started, &data_looks), &clock,
        &events);
    if (!fs.ok()) throw std::runtime_error(fs.status().ToString());
    fs_ = std::move(fs).value();
    coordinator_ = CommitCoordinator::CreateWithoutThreads(fs_.get(), fs_->data(), fs_->clock());
  }
  void Stop() {
    coordinator_.reset();
    fs_.reset();
  }
  // Power loss: handles and in-memory state vanish without any cleanup, and
  // the machine boots again.
  void CrashAndRestart(size_t keep_unsynced_batches = 0) {
    Die();
    manifest.SimulateCrash(keep_unsynced_batches);
    data.SimulateCrash();
    options_.boot_id = "boot-" + std::to_string(++boots_);
    Start();
  }
  // The daemon process dies (kill -9) and starts again in the same boot: what
  // it wrote reached the kernel, synced or not, and survives.
  void KillAndRestart() {
    Die();
    manifest.SimulateCrash(SIZE_MAX);
    Start();
  }
  void CleanRestart() {
    Stop();
    Start();
  }

  FileSystem& fs() { return *fs_; }
  void DrainCommits() { coordinator_->DrainForTest(); }
  // What the idle thread does after a lazy mount, to its end: the size
  // check of every unloaded step, then the removal of unowned backing files.
  void FinishBackgroundChecks() {
    for (;;) {
      auto checked = fs_->CheckUnloadedSteps(1024);
      if (!checked.ok()) throw std::runtime_error(checked.status().ToString());
      if (*checked == 0) return;
    }
  }

  MemoryManifestStore manifest;
  MemoryDataStore data;
  ManualClock clock;
  EventLog events;
  int manifest_writes = 0;
  std::vector<uint64_t> writeback_started;  // DataStore::StartWriteback's inos, in order
  int data_looks = 0;                       // DataStore::Open and SizeOf calls, over every start

 private:
  // Leak nothing but skip the destructor's clean flush: a crash writes no
  // final batch. The FileSystem is released after the stores forget.
  void Die() {
    coordinator_.reset();
    manifest.FailWritesAfter(0, EIO);
    fs_.reset();
    manifest.ClearFailure();
  }

  FileSystemOptions options_;
  DataStore* data_target_;
  int boots_ = 1;
  std::unique_ptr<FileSystem> fs_;
  std::unique_ptr<CommitCoordinator> coordinator_;
};

// Keys of a manifest key space (those starting with prefix), counted.
inline size_t KeysIn(ManifestStore& manifest, KeySpace space, std::string_view prefix = "") {
  size_t n = 0;
  EXPECT_TRUE(manifest
                  .Scan(space, prefix,
                        [&](std::string_view, std::string_view) {
                          ++n;
                          return true;
                        })
                  .ok());
  return n;
}

// Helpers shared by the FileSystem tests; they report failures through
// GoogleTest and return 0 / "<error>" so a test fails where it asserts.
inline const Caller kRoot{.uid = 0, .gid = 0};

inline uint64_t Mkdir(FileSystem& fs, uint64_t parent, const std::string& name) {
  auto e = fs.Mkdir(kRoot, parent, name, 0755);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? e->ino : 0;
}

// Creates a new file, writes data, closes it; returns its ino.
inline uint64_t WriteFile(FileSystem& fs, uint64_t parent, const std::string& name,
                          const std::string& data) {
  auto c = fs.Create(kRoot, parent, name, 0644, O_WRONLY);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return 0;
  if (!data.empty()) {
    EXPECT_TRUE(fs.Write(c->second.fh, data.data(), data.size(), 0).ok());
  }
  EXPECT_TRUE(fs.Flush(c->second.fh).ok());
  EXPECT_TRUE(fs.Release(c->second.fh).ok());
  return c->first.ino;
}

// A step's user.ckptfs.state and user.ckptfs.error, or "<error...>".
inline std::string XattrOrError(FileSystem& fs, uint64_t ino, const std::string& name) {
  auto v = fs.GetXattr(ino, name);
  return v.ok() ? *v : "<" + v.status().ToString() + ">";
}
inline std::string StateOf(FileSystem& fs, uint64_t step) {
  return XattrOrError(fs, step, "user.ckptfs.state");
}
inline std::string ErrorOf(FileSystem& fs, uint64_t step) {
  return XattrOrError(fs, step, "user.ckptfs.error");
}

// The first MiB of a file, or "<error...>".
inline std::string ReadFile(FileSystem& fs, uint64_t ino) {
  auto o = fs.OpenFile(ino, O_RDONLY);
  if (!o.ok()) return "<" + o.status().ToString() + ">";
  std::string out(1 << 20, '\0');
  auto n = fs.Read(o->fh, out.data(), out.size(), 0);
  out.resize(n.ok() ? *n : 0);
  EXPECT_TRUE(fs.Release(o->fh).ok());
  return out;
}

}  // namespace ckptfs::testing
