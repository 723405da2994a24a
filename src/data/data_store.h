// The data store's seam: one backing file per regular-file inode, in the
// cache directory. PosixDataStore is the real one (cache/data/<ino>);
// MemoryDataStore keeps files in memory and can simulate a crash that drops
// whatever was not made durable (file contents not fsynced, files whose
// creation or removal was not followed by SyncDir), as RocksDB's
// FaultInjectionTestFS does.
#pragma once

#include <cerrno>
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

  // What the file is on disk, to notice a change made around the daemon
  // (SPEC section 7): the inode, the size, and the inode change time, which
  // every write, truncation or flag change moves. ENOTSUP where the store
  // has no such notion (the memory store).
  struct Identity {
    uint64_t inode = 0;
    uint64_t size = 0;
    int64_t ctime_ns = 0;
    int64_t mtime_ns = 0;
    bool operator==(const Identity&) const = default;
  };
  virtual Result<Identity> Stat() { return Status::Error(ENOTSUP, "backing file identity"); }
};

// How a writer-library client's write access to a backing file ends at its
// CLOSE (SPEC section 7), so that no later write can change the file:
//   kImmutable    the client writes the backing file itself; at close the
//                 daemon sets FS_IMMUTABLE_FL, which ext4 and XFS enforce
//                 on descriptors that are already open (EPERM for write,
//                 ftruncate and fallocate; SIGBUS for a shared mapping);
//   kStagingCopy  where the flag is not enforced (tmpfs keeps accepting
//                 writes through open descriptors) or cannot be set (no
//                 CAP_LINUX_IMMUTABLE): the client writes an anonymous
//                 staging file (O_TMPFILE) whose contents the daemon copies
//                 into the backing file at close; the client's descriptor
//                 then points at a file nothing reads.
enum class RevocationMode { kUnsupported, kImmutable, kStagingCopy };
const char* RevocationModeName(RevocationMode mode);

// One client's write access to the backing file of ino.
struct WriteGrant {
  uint64_t ino = 0;
  int client_fd = -1;   // O_WRONLY, for the client; the caller closes it once sent
  int staging_fd = -1;  // kStagingCopy: the daemon's descriptor of the staging file
};

class DataStore {
 public:
  virtual ~DataStore() = default;
  // Opens the backing file of ino for reading and writing; creates an empty
  // one when create is true and none exists. ENOENT when absent and !create.
  virtual Result<std::unique_ptr<BackingFile>> Open(uint64_t ino, bool create) = 0;
  // Removes the backing file; ok when it is already absent.
  virtual Status Remove(uint64_t ino) = 0;
  // The size of ino's backing file, without opening it (recovery checks
  // every committed file's size at each mount: a stat costs a fraction of an
  // open and a close). ENOENT when absent. This default opens the file.
  virtual Result<uint64_t> SizeOf(uint64_t ino) {
    auto file = Open(ino, /*create=*/false);
    if (!file.ok()) return file.status();
    return file.value()->Size();
  }
  // SizeOf of each of inos, in their order (for recovery, which asks for
  // every file of the cache at once). This default asks one at a time.
  virtual std::vector<Result<uint64_t>> SizesOf(const std::vector<uint64_t>& inos) {
    std::vector<Result<uint64_t>> sizes;
    sizes.reserve(inos.size());
    for (uint64_t ino : inos) sizes.push_back(SizeOf(ino));
    return sizes;
  }
  // Makes creations and removals of backing files durable (fsync of the
  // data directory).
  virtual Status SyncDir() = 0;
  // Makes the contents and sizes of the backing files of inos durable, as
  // BackingFile::Sync on each of them would, in the way that is cheapest
  // for the store (PosixDataStore: one syncfs of the cache filesystem when
  // there are many). Creations are SyncDir's. ENOENT when an ino has no
  // backing file. On failure, *failed_ino (failed_ino may be null) is the
  // ino the error belongs to, or 0 when it cannot be pinned on one of them
  // (a writeback error syncfs reports for the filesystem as a whole).
  virtual Status SyncFiles(const std::vector<uint64_t>& inos, uint64_t* failed_ino) = 0;
  // A writer closed ino's backing file: the store may start writing its
  // data back now, without waiting for it, so that a later SyncFiles has
  // less to do. A hint; never fails, never blocks on the disk.
  virtual void StartWriteback(uint64_t /*ino*/) {}
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

  // --- writer grants (SPEC section 7); see RevocationMode.
  virtual RevocationMode revocation_mode() const { return RevocationMode::kUnsupported; }
  // An O_WRONLY descriptor through which a client writes the (empty)
  // backing file of ino. ENOTSUP when the store has no descriptors.
  virtual Result<WriteGrant> GrantWrite(uint64_t /*ino*/) {
    return Status::Error(ENOTSUP, "the data store has no file descriptors to hand out");
  }
  // Ends the grant: afterwards no write through grant->client_fd (or any
  // copy of it) can change the backing file. Closes the staging descriptor.
  virtual Status RevokeWrite(WriteGrant* /*grant*/) { return Status::Ok(); }
  // Before the daemon itself modifies the backing file of ino (a rewrite
  // before commit, a truncation): a file a revoked grant sealed is replaced
  // by a new, writable inode, with the old contents when keep_contents, so
  // a client's stale descriptor never regains access. No-op otherwise.
  virtual Status Unseal(uint64_t /*ino*/, bool /*keep_contents*/) { return Status::Ok(); }
};

// SyncFiles the plain way: opens each ino's backing file and syncs it, in
// order, stopping at the first failure. For stores with nothing cheaper, and
// for the few-files case of those that have.
Status SyncOneByOne(DataStore* store, const std::vector<uint64_t>& inos, uint64_t* failed_ino);

// The real store: backing files live in dir (created if needed).
Result<std::unique_ptr<DataStore>> OpenPosixDataStore(const std::string& dir);

}  // namespace ckptfs
