// Writer grants on the posix data store: how a writer-library client's
// descriptor stops being able to change a backing file at its CLOSE (see
// RevocationMode in data_store.h).
#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "data/posix_data_store.h"

namespace ckptfs {

namespace {

// A replacement for a sealed backing file is written under this suffix and
// renamed over it; one left by a crash is removed when the store opens.
// Replacements being written by Unseal live in this subdirectory of the data
// directory until renamed over the sealed file: a crash's leftovers are then
// found by listing it, not the data directory's million backing files.
constexpr const char* kUnsealDir = "unsealing";

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

int OpenRetrying(const char* path, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = ::open(path, flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// A second, write-only descriptor of the file fd refers to (also of an
// O_TMPFILE file, which has no name to open).
int ReopenWriteOnly(int fd) {
  return OpenRetrying(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_WRONLY);
}

// Copies all of from into the empty file to: a reflink where the
// filesystem shares extents (XFS, btrfs), else copy_file_range (in-kernel,
// no bounce through user memory), else read/write.
Status CopyAll(int from, int to) {
  if (::ioctl(to, FICLONE, from) == 0) return Status::Ok();
  struct stat st{};
  if (::fstat(from, &st) != 0) return Status::FromErrno("fstat");
  const auto size = static_cast<uint64_t>(st.st_size);
  uint64_t done = 0;
  while (done < size) {
    loff_t in = static_cast<loff_t>(done), out = static_cast<loff_t>(done);
    const ssize_t n = ::copy_file_range(from, &in, to, &out, size - done, 0);
    if (n > 0) {
      done += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) break;  // the source shrank
    if (errno == EINTR) continue;
    if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
      return Status::FromErrno("copy_file_range");
    }
    std::vector<char> buf(1 << 20);
    while (done < size) {
      const ssize_t r = ::pread(from, buf.data(), buf.size(), static_cast<off_t>(done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Status::FromErrno("pread");
      if (r == 0) break;
      if (::pwrite(to, buf.data(), static_cast<size_t>(r), static_cast<off_t>(done)) != r) {
        return Status::FromErrno("pwrite");
      }
      done += static_cast<uint64_t>(r);
    }
    break;
  }
  return Status::Ok();
}

bool IsImmutable(int fd) {
  int flags = 0;
  return ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0 && (flags & FS_IMMUTABLE_FL) != 0;
}

}  // namespace

const char* RevocationModeName(RevocationMode mode) {
  switch (mode) {
    case RevocationMode::kImmutable:
      return "immutable";
    case RevocationMode::kStagingCopy:
      return "staging-copy";
    case RevocationMode::kUnsupported:
      break;
  }
  return "unsupported";
}

Status SetImmutable(int fd, bool immutable) {
  int flags = 0;
  if (::ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0) return Status::FromErrno("FS_IOC_GETFLAGS");
  const int want = immutable ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
  if (want == flags) return Status::Ok();
  if (::ioctl(fd, FS_IOC_SETFLAGS, &want) != 0) {
    return Status::FromErrno(immutable ? "setting the immutable flag" : "clearing the immutable flag");
  }
  return Status::Ok();
}

RevocationMode ProbeRevocationMode(const std::string& dir) {
  Fd file(OpenRetrying(dir.c_str(), O_TMPFILE | O_RDWR, 0600));
  if (file.get() < 0) return RevocationMode::kUnsupported;
  Fd writer(ReopenWriteOnly(file.get()));
  if (writer.get() < 0) return RevocationMode::kUnsupported;
  // EOPNOTSUPP/ENOTTY (no flags here) or EPERM (no CAP_LINUX_IMMUTABLE).
  if (!SetImmutable(file.get(), true).ok()) return RevocationMode::kStagingCopy;
  // The flag alone is not enough: tmpfs stores it but still lets
  // descriptors opened before write and truncate.
  const bool write_refused = ::pwrite(writer.get(), "x", 1, 0) < 0 && errno == EPERM;
  const bool truncate_refused = ::ftruncate(writer.get(), 0) < 0 && errno == EPERM;
  (void)SetImmutable(file.get(), false);
  return write_refused && truncate_refused ? RevocationMode::kImmutable : RevocationMode::kStagingCopy;
}

void RemoveLeftoverReplacements(const std::string& dir) {
  const std::string staging = dir + "/" + kUnsealDir;
  if (::mkdir(staging.c_str(), 0700) == 0 || errno != EEXIST) return;  // made now: empty
  DIR* d = ::opendir(staging.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      (void)::unlinkat(::dirfd(d), e->d_name, 0);
  }
  ::closedir(d);
}

Result<WriteGrant> PosixDataStore::GrantWrite(uint64_t ino) {
  WriteGrant grant;
  grant.ino = ino;
  switch (mode_) {
    case RevocationMode::kImmutable: {
      const std::string path = PathOf(ino);
      grant.client_fd = OpenRetrying(path.c_str(), O_WRONLY | O_NOFOLLOW);
      if (grant.client_fd < 0) return Status::FromErrno("open backing file " + path + " for a writer");
      return grant;
    }
    case RevocationMode::kStagingCopy: {
      Fd staging(OpenRetrying(dir_.c_str(), O_TMPFILE | O_RDWR, 0600));
      if (staging.get() < 0) return Status::FromErrno("create a staging file in " + dir_);
      grant.client_fd = ReopenWriteOnly(staging.get());
      if (grant.client_fd < 0) return Status::FromErrno("reopen a staging file write-only");
      grant.staging_fd = staging.release();
      return grant;
    }
    case RevocationMode::kUnsupported:
      break;
  }
  return Status::Error(ENOTSUP, "the cache directory " + dir_ + " supports no way to revoke a writer's access");
}

Status PosixDataStore::RevokeWrite(WriteGrant* grant) {
  const std::string path = PathOf(grant->ino);
  if (grant->staging_fd >= 0) {
    Fd staging(grant->staging_fd);
    grant->staging_fd = -1;
    Fd backing(OpenRetrying(path.c_str(), O_WRONLY | O_TRUNC | O_NOFOLLOW));
    if (backing.get() < 0) return Status::FromErrno("open backing file " + path);
    return CopyAll(staging.get(), backing.get()).Annotate("copying a writer's staging file into " + path);
  }
  Fd file(OpenRetrying(path.c_str(), O_RDONLY | O_NOFOLLOW));
  if (file.get() < 0) return Status::FromErrno("open backing file " + path);
  return SetImmutable(file.get(), true).Annotate("sealing " + path);
}

Status PosixDataStore::Unseal(uint64_t ino, bool keep_contents) {
  if (mode_ != RevocationMode::kImmutable) return Status::Ok();
  const std::string path = PathOf(ino);
  Fd old(OpenRetrying(path.c_str(), O_RDONLY | O_NOFOLLOW));
  if (old.get() < 0) return errno == ENOENT ? Status::Ok() : Status::FromErrno("open backing file " + path);
  if (!IsImmutable(old.get())) return Status::Ok();
  // Clearing the flag would hand write access back to every descriptor a
  // writer kept; a new inode under the same name leaves those pointing at
  // a file nothing reads.
  const std::string fresh_path = dir_ + "/" + kUnsealDir + path.substr(path.rfind('/'));
  Fd fresh(OpenRetrying(fresh_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600));
  if (fresh.get() < 0) return Status::FromErrno("create " + fresh_path);
  Status st = keep_contents ? CopyAll(old.get(), fresh.get()) : Status::Ok();
  // rename cannot replace an immutable file.
  if (st.ok()) st = SetImmutable(old.get(), false);
  if (st.ok() && ::rename(fresh_path.c_str(), path.c_str()) != 0) st = Status::FromErrno("rename");
  if (!st.ok()) {
    (void)::unlink(fresh_path.c_str());
    return st.Annotate("replacing the sealed backing file " + path);
  }
  return Status::Ok();
}

}  // namespace ckptfs
