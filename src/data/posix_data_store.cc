// Backing files on the cache disk; see posix_data_store.h.
#include "data/posix_data_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <thread>

#include "common/time_convert.h"

namespace ckptfs {

namespace {

constexpr size_t kNameDigits = 16;

// A backing file's name: the ino as kNameDigits lower-case hex digits.
struct BackingName {
  explicit BackingName(uint64_t ino) { std::snprintf(text, sizeof(text), "%016" PRIx64, ino); }
  char text[kNameDigits + 1];
};

// Parses a backing file's name; false for anything we did not create.
bool ParseName(const char* name, uint64_t* ino) {
  uint64_t v = 0;
  size_t i = 0;
  for (; name[i] != '\0'; i++) {
    if (i == kNameDigits) return false;
    const char c = name[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uint64_t>(digit);
  }
  if (i != kNameDigits) return false;
  *ino = v;
  return true;
}

// Closes fd on every path out of a scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  int fd_;
};

}  // namespace

PosixBackingFile::~PosixBackingFile() { ::close(fd_); }

Result<size_t> PosixBackingFile::PRead(void* buf, size_t n, uint64_t offset) {
  if (offset > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) return size_t{0};
  auto* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("pread " + path_);
    }
    if (r == 0) break;  // end of file
    done += static_cast<size_t>(r);
  }
  return done;
}

Result<size_t> PosixBackingFile::PWrite(const void* buf, size_t n, uint64_t offset) {
  if (offset > static_cast<uint64_t>(std::numeric_limits<off_t>::max()) - n) {
    return Status::Error(EFBIG, "pwrite " + path_ + ": offset too large");
  }
  const auto* p = static_cast<const char*>(buf);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("pwrite " + path_);
    }
    // pwrite returns 0 for n > 0 only when it cannot make progress; retrying
    // would spin.
    if (r == 0) return Status::Error(EIO, "pwrite " + path_ + ": wrote nothing");
    done += static_cast<size_t>(r);
  }
  return done;
}

Status PosixBackingFile::Truncate(uint64_t size) {
  if (size > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
    return Status::Error(EFBIG, "ftruncate " + path_ + ": size too large");
  }
  while (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
    if (errno != EINTR) return Status::FromErrno("ftruncate " + path_);
  }
  return Status::Ok();
}

Status PosixBackingFile::Sync() {
  while (::fdatasync(fd_) != 0) {
    if (errno != EINTR) return Status::FromErrno("fdatasync " + path_);
  }
  return Status::Ok();
}

Result<uint64_t> PosixBackingFile::Size() {
  struct stat st{};
  if (::fstat(fd_, &st) != 0) return Status::FromErrno("fstat " + path_);
  return static_cast<uint64_t>(st.st_size);
}

Result<BackingFile::Identity> PosixBackingFile::Stat() {
  struct stat st{};
  if (::fstat(fd_, &st) != 0) return Status::FromErrno("fstat " + path_);
  return Identity{static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                  TimespecToNanos(st.st_ctim), TimespecToNanos(st.st_mtim)};
}

Result<std::unique_ptr<PosixDataStore>> PosixDataStore::OpenDir(const std::string& dir,
                                                                std::optional<RevocationMode> mode) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::FromErrno(ec.value(), "create data directory " + dir);
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) return Status::FromErrno("stat data directory " + dir);
  if (!S_ISDIR(st.st_mode)) {
    return Status::Error(ENOTDIR, "data directory " + dir + " is not a directory");
  }
  RemoveLeftoverReplacements(dir);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Status::FromErrno("open data directory " + dir);
  return std::unique_ptr<PosixDataStore>(
      new PosixDataStore(dir, mode ? *mode : ProbeRevocationMode(dir), dir_fd, SyncfsReportsErrors()));
}

PosixDataStore::~PosixDataStore() { ::close(dir_fd_); }

void PosixDataStore::StartWriteback(uint64_t ino) {
  std::call_once(writeback_once_, [this] {
    writeback_ = std::make_unique<WritebackStarter>([this](uint64_t i) {
      const int fd = ::open(PathOf(i).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return;  // removed meanwhile
      (void)::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
      ::close(fd);
    });
  });
  writeback_->Enqueue(ino);
}

std::string PosixDataStore::PathOf(uint64_t ino) const {
  return dir_ + "/" + BackingName(ino).text;
}

Result<std::unique_ptr<BackingFile>> PosixDataStore::Open(uint64_t ino, bool create) {
  const std::string path = PathOf(ino);
  int flags = O_RDWR | O_CLOEXEC;
  if (create) flags |= O_CREAT;
  int fd;
  do {
    fd = ::open(path.c_str(), flags, 0600);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0 && errno == EPERM) {
    // Sealed at the close of a writer grant: readable; the daemon calls
    // Unseal before it writes such a file.
    do {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
  }
  if (fd < 0) return Status::FromErrno("open backing file " + path);
  return std::unique_ptr<BackingFile>(new PosixBackingFile(fd, path));
}

Result<uint64_t> PosixDataStore::SizeOf(uint64_t ino) {
  struct stat st {};
  if (::fstatat(dir_fd_, BackingName(ino).text, &st, AT_SYMLINK_NOFOLLOW) != 0)
    return Status::FromErrno("stat backing file " + PathOf(ino));
  return static_cast<uint64_t>(st.st_size);
}

std::vector<Result<uint64_t>> PosixDataStore::SizesOf(const std::vector<uint64_t>& inos) {
  std::vector<Result<uint64_t>> sizes(inos.size(), Result<uint64_t>(uint64_t{0}));
  const size_t threads = std::min(kStatThreads, inos.size() / kStatsPerThread);
  auto stat_every = [&](size_t first, size_t stride) {
    for (size_t i = first; i < inos.size(); i += stride) sizes[i] = SizeOf(inos[i]);
  };
  if (threads <= 1) {
    stat_every(0, 1);
    return sizes;
  }
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (size_t t = 0; t < threads; t++) workers.emplace_back(stat_every, t, threads);
  for (std::thread& worker : workers) worker.join();
  return sizes;
}

Status PosixDataStore::Remove(uint64_t ino) {
  const std::string path = PathOf(ino);
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return Status::Ok();
  if (errno == EPERM) {
    // A sealed file cannot be unlinked. Whatever a stale client descriptor
    // writes between the unseal and the unlink goes to a file that is gone.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      FdCloser closer(fd);
      CKPTFS_RETURN_IF_ERROR(SetImmutable(fd, false).Annotate("unlink backing file " + path));
      if (::unlink(path.c_str()) == 0 || errno == ENOENT) return Status::Ok();
    }
  }
  return Status::FromErrno("unlink backing file " + path);
}

Status PosixDataStore::SyncDir() {
  const int fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open data directory " + dir_);
  FdCloser closer(fd);
  while (::fsync(fd) != 0) {
    if (errno != EINTR) return Status::FromErrno("fsync data directory " + dir_);
  }
  return Status::Ok();
}

Result<std::vector<uint64_t>> PosixDataStore::List() {
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) return Status::FromErrno("opendir " + dir_);
  std::vector<uint64_t> inos;
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(d);
    if (entry == nullptr) {
      const int err = errno;
      ::closedir(d);
      if (err != 0) return Status::FromErrno(err, "readdir " + dir_);
      break;
    }
    uint64_t ino;
    if (ParseName(entry->d_name, &ino)) inos.push_back(ino);
  }
  return inos;
}

Result<DataStore::Space> PosixDataStore::Capacity() {
  struct statvfs vfs{};
  if (::fstatvfs(dir_fd_, &vfs) != 0) return Status::FromErrno("fstatvfs " + dir_);
  Space space;
  // f_blocks and friends count f_frsize units, not f_bsize ones.
  space.block_size = vfs.f_frsize != 0 ? vfs.f_frsize : vfs.f_bsize;
  space.blocks = vfs.f_blocks;
  space.blocks_free = vfs.f_bfree;
  space.blocks_avail = vfs.f_bavail;
  return space;
}

Result<std::unique_ptr<DataStore>> OpenPosixDataStore(const std::string& dir) {
  Result<std::unique_ptr<PosixDataStore>> store = PosixDataStore::OpenDir(dir);
  if (!store.ok()) return store.status();
  return std::unique_ptr<DataStore>(std::move(store).value());
}

}  // namespace ckptfs
