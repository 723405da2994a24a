// The real data store: one backing file per regular-file inode in a data
// directory on the cache disk, named by the ino as 16 lower-case hex digits
// (dir/00000000000000a3), so names sort like inos and List can tell ours
// from anything else left in the directory.
//
// Thread safety: PosixDataStore keeps no mutable state (its one descriptor,
// held for syncfs, is opened and closed with it), and a PosixBackingFile
// only uses positional I/O on its descriptor, so both may be used from any
// number of threads at once. A PosixBackingFile owns its descriptor and
// closes it when destroyed; it stays usable after the store is destroyed.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/data_store.h"
#include "data/writeback_starter.h"

namespace ckptfs {

class PosixBackingFile final : public BackingFile {
 public:
  // Takes ownership of fd; path is only for error messages.
  PosixBackingFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  PosixBackingFile(const PosixBackingFile&) = delete;
  PosixBackingFile& operator=(const PosixBackingFile&) = delete;
  ~PosixBackingFile() override;

  // Short only at end of file; retries short reads and EINTR.
  Result<size_t> PRead(void* buf, size_t n, uint64_t offset) override;
  // Writes all n bytes or fails; retries short writes and EINTR.
  Result<size_t> PWrite(const void* buf, size_t n, uint64_t offset) override;
  Status Truncate(uint64_t size) override;
  Status Sync() override;  // fdatasync
  Result<uint64_t> Size() override;
  Result<Identity> Stat() override;
  int fd() const override { return fd_; }

 private:
  const int fd_;
  const std::string path_;
};

class PosixDataStore final : public DataStore {
 public:
  // Creates dir (and its parents) when missing. mode: how writer grants are
  // revoked; by default what ProbeRevocationMode finds (tests force one).
  static Result<std::unique_ptr<PosixDataStore>> OpenDir(const std::string& dir,
                                                         std::optional<RevocationMode> mode = std::nullopt);

  PosixDataStore(const PosixDataStore&) = delete;
  PosixDataStore& operator=(const PosixDataStore&) = delete;
  ~PosixDataStore() override;

  Result<std::unique_ptr<BackingFile>> Open(uint64_t ino, bool create) override;
  Status Remove(uint64_t ino) override;
  // fstatat in the held data directory: no path walk, no descriptor.
  Result<uint64_t> SizeOf(uint64_t ino) override;
  // Many at once are spread over up to kStatThreads threads: after a reboot
  // the inodes are not cached, and one thread would wait for each read in
  // turn where the disk can serve many together.
  std::vector<Result<uint64_t>> SizesOf(const std::vector<uint64_t>& inos) override;
  static constexpr size_t kStatThreads = 8;
  static constexpr size_t kStatsPerThread = 4096;  // fewer use fewer threads
  Status SyncDir() override;
  // From kSyncfsFromFiles files on, one syncfs of the cache filesystem;
  // below, fdatasync of each (posix_sync_files.cc says why).
  Status SyncFiles(const std::vector<uint64_t>& inos, uint64_t* failed_ino) override;
  static constexpr size_t kSyncfsFromFiles = 16;
  // sync_file_range(SYNC_FILE_RANGE_WRITE) of the file, on the store's
  // WritebackStarter thread (started at the first call).
  void StartWriteback(uint64_t ino) override;
  // Ignores every name that is not exactly 16 lower-case hex digits.
  Result<std::vector<uint64_t>> List() override;
  Result<Space> Capacity() override;

  // Writer grants (posix_write_grant.cc). The mode is chosen once, when the
  // store opens, by trying the immutable flag on a scratch file in dir.
  RevocationMode revocation_mode() const override { return mode_; }
  Result<WriteGrant> GrantWrite(uint64_t ino) override;
  Status RevokeWrite(WriteGrant* grant) override;
  Status Unseal(uint64_t ino, bool keep_contents) override;

  // dir/<ino as 16 lower-case hex digits>.
  std::string PathOf(uint64_t ino) const;

 private:
  PosixDataStore(std::string dir, RevocationMode mode, int dir_fd, bool syncfs_reports_errors)
      : dir_(std::move(dir)), mode_(mode), dir_fd_(dir_fd), syncfs_reports_errors_(syncfs_reports_errors) {}

  const std::string dir_;
  const RevocationMode mode_;
  // dir, opened with the store and held for its life. syncfs reports the
  // writeback errors of the whole filesystem since the descriptor it is
  // given was opened (the superblock's errseq, Linux 5.8+), so this one
  // reports every error since the store opened, each to the first syncfs
  // after it, whoever else saw it first. Capacity asks it too (a new file's
  // create asks for the free space; opening the directory each time cost
  // two system calls).
  const int dir_fd_;
  // False on older kernels, where syncfs does not report errors: then every
  // SyncFiles syncs one file at a time.
  const bool syncfs_reports_errors_;
  std::once_flag writeback_once_;
  std::unique_ptr<WritebackStarter> writeback_;  // set once, under writeback_once_
};

// Whether syncfs(2) on this kernel reports writeback errors (Linux 5.8+).
bool SyncfsReportsErrors();

// Which RevocationMode dir's filesystem supports for this process: sets
// FS_IMMUTABLE_FL on an anonymous file there and checks that a descriptor
// opened before refuses pwrite and ftruncate afterwards.
RevocationMode ProbeRevocationMode(const std::string& dir);

// Removes replacement files a crash left during Unseal (in dir's unsealing/
// subdirectory, made here if missing). At mount: listing the data directory
// itself would cost as much as the backing files it holds.
void RemoveLeftoverReplacements(const std::string& dir);

// Sets or clears FS_IMMUTABLE_FL on the file fd refers to (any access mode).
Status SetImmutable(int fd, bool immutable);

}  // namespace ckptfs
