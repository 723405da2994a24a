// PosixDataStore::SyncFiles: making a commit's backing files durable.
//
// fdatasync of each file costs a journal commit and a disk cache flush per
// file: on this VM's ext4 (virtio disk, 64 KiB files written without
// fsync), 0.4-0.6 ms a file, 410-620 ms for 1,000 files. One syncfs(2) of
// the cache filesystem writes back every dirty file of the filesystem, then
// commits the journal and flushes the cache once: 52-60 ms for the same
// 1,000 files, nearly all of it writing their 62.5 MiB (docs/benchmarks.md,
// commit_latency).
//
// syncfs also writes back what other programs dirtied on that filesystem,
// which a per-file sync leaves alone: with 64 MiB of someone else's
// unsynced data beside them, syncfs took 51-78 ms for 1 to 32 files, where
// fdatasync of each took 2 ms for 1 file and 16-22 ms for 8 to 32. Alone,
// syncfs wins at any count. The two cases cannot be told apart cheaply, so
// a commit of fewer than kSyncfsFromFiles files (a marker, a handful of
// shards) syncs one by one, which a stranger's data slows far less, and a
// larger one, where the per-file journal commits cost hundreds of ms, uses
// syncfs and pays for foreign data at most once.
//
// Errors. syncfs reports writeback errors through the superblock's errseq:
// an error on any file of the filesystem since the descriptor was opened
// (Linux 5.8+; older kernels return 0, so there SyncFiles always goes one
// by one). The store's descriptor is held from its opening, so no error is
// missed because another program's fsync saw it first, and an error is
// reported once: to the first syncfs after it, which may belong to a commit
// whose files it does not touch. To name the file, a failed syncfs is
// followed by an fdatasync of each file on fresh descriptors (a file's own
// errseq reports the error to them until someone sees it); if none fails,
// the syncfs error is returned as it is, and the commit fails anyway: the
// error may be one of ours that another program's fsync of the same file
// already consumed.
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>

#include "data/posix_data_store.h"

namespace ckptfs {

bool SyncfsReportsErrors() {
  struct utsname u{};
  if (::uname(&u) != 0) return false;
  int major = 0, minor = 0;
  if (std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return false;
  return major > 5 || (major == 5 && minor >= 8);
}

Status PosixDataStore::SyncFiles(const std::vector<uint64_t>& inos, uint64_t* failed_ino) {
  if (inos.size() < kSyncfsFromFiles || !syncfs_reports_errors_) return SyncOneByOne(this, inos, failed_ino);
  // The same contract as one by one: a file that is not there is an error,
  // not something a filesystem-wide sync quietly covers.
  for (uint64_t ino : inos) {
    struct stat st{};
    const std::string path = PathOf(ino);
    if (::lstat(path.c_str(), &st) != 0) {
      if (failed_ino != nullptr) *failed_ino = ino;
      return Status::FromErrno("stat backing file " + path);
    }
  }
  int rc;
  do {
    rc = ::syncfs(dir_fd_);
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return Status::Ok();
  const int err = errno;  // before anything else can change it
  const Status fs_error = Status::FromErrno(err, "syncfs of the cache filesystem holding " + dir_);
  if (Status one = SyncOneByOne(this, inos, failed_ino); !one.ok()) {
    return Status::Error(one.err(), one.message() + " (after " + fs_error.message() + ")");
  }
  if (failed_ino != nullptr) *failed_ino = 0;
  return Status::Error(fs_error.err(),
                       fs_error.message() +
                           " (a writeback error on the cache filesystem since the last syncfs, "
                           "which no file of this commit reports itself: it may be another "
                           "file's, or one of these whose error something else saw first)");
}

}  // namespace ckptfs
