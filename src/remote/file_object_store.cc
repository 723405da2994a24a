// The file:// object store; see file_object_store.h.
#include "remote/file_object_store.h"

#include "common/random_hex.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

namespace ckptfs {

namespace {

constexpr char kTmpDir[] = ".ckptfs-tmp";
constexpr char kMultipartDir[] = ".ckptfs-multipart";
constexpr char kUploadKeyFile[] = "key";
constexpr size_t kIdBytes = 16;  // 128 bits: 32 hex digits
constexpr int kMaxPartNumber = 10000;  // S3's bound
constexpr size_t kCopyBuffer = size_t{1} << 20;

// Closes fd on every path out of a scope.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Closes now, reporting the error a deferred write may surface at close.
  Status Close(const std::string& path) {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0 && errno != EINTR) return Status::FromErrno("close " + path);
    return Status::Ok();
  }

 private:
  int fd_;
};


bool IsUploadId(const std::string& id) {
  return id.size() == 2 * kIdBytes && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t r = ::write(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("write " + path);
    }
    if (r == 0) return Status::Error(EIO, "write " + path + ": wrote nothing");
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

Status FsyncFd(int fd, const std::string& path) {
  while (::fsync(fd) != 0) {
    if (errno != EINTR) return Status::FromErrno("fsync " + path);
  }
  return Status::Ok();
}

// A directory that vanished (pruned by a concurrent Delete) has nothing left
// to make durable, so ENOENT is not an error here.
Status SyncDir(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? Status::Ok() : Status::FromErrno("open directory " + path);
  FdCloser closer(fd);
  return FsyncFd(fd, path);
}

// mkdir that accepts an existing directory; *created says which it was.
Status EnsureDir(const std::string& path, bool* created) {
  *created = false;
  if (::mkdir(path.c_str(), 0755) == 0) {
    *created = true;
    return Status::Ok();
  }
  if (errno != EEXIST) return Status::FromErrno("mkdir " + path);
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno("stat " + path);
  if (!S_ISDIR(st.st_mode)) {
    return Status::Error(ENOTDIR, path + " is an object, so it cannot be a directory of objects");
  }
  return Status::Ok();
}

std::string ParentOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

// A part's ETag: its file's identity. A re-upload of the part is a new file
// (written under a fresh temporary name), so its ETag differs.
std::string PartETag(const struct stat& st) {
  char buf[80];
  std::snprintf(buf, sizeof(buf), "%llx-%llx-%llx.%lx",
                static_cast<unsigned long long>(st.st_ino),
                static_cast<unsigned long long>(st.st_size),
                static_cast<unsigned long long>(st.st_mtim.tv_sec),
                static_cast<long>(st.st_mtim.tv_nsec));
  return buf;
}

// Whether a and b agree on their first min(|a|, |b|) bytes.
bool PrefixCompatible(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  return a.compare(0, n, b, 0, n) == 0;
}

}  // namespace

Result<std::unique_ptr<FileObjectStore>> FileObjectStore::Open(const std::string& dir,
                                                               uint64_t min_part_size) {
  struct stat st{};
  if (dir.empty() || ::stat(dir.c_str(), &st) != 0) {
    const int err = dir.empty() ? ENOENT : errno;
    if (err == ENOENT) {
      return Status::Error(ENOENT, "file:// remote directory \"" + dir +
                                       "\" does not exist; create it first");
    }
    return Status::FromErrno(err, "stat file:// remote directory " + dir);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::Error(ENOTDIR, "file:// remote " + dir + " is not a directory");
  }
  // Absolute, because the daemon may chdir after opening the store.
  std::error_code ec;
  std::string abs = std::filesystem::absolute(dir, ec).lexically_normal().string();
  if (ec) return Status::FromErrno(ec.value(), "resolve file:// remote directory " + dir);
  while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
  return std::unique_ptr<FileObjectStore>(new FileObjectStore(abs, min_part_size));
}

Status FileObjectStore::CheckKey(const std::string& key) {
  CKPTFS_RETURN_IF_ERROR(ValidateObjectKey(key));
  const std::string first = key.substr(0, key.find('/'));
  if (first == kTmpDir || first == kMultipartDir) {
    return Status::Error(EINVAL, "invalid object key \"" + key + "\": " + first +
                                     " is reserved by the file:// store");
  }
  return Status::Ok();
}

Result<std::string> FileObjectStore::WriteTemp(const std::string& data) {
  const std::string tmp_dir = dir_ + "/" + kTmpDir;
  bool created;
  CKPTFS_RETURN_IF_ERROR(EnsureDir(tmp_dir, &created));
  Result<std::string> name = RandomHex(kIdBytes);
  if (!name.ok()) return name.status();
  const std::string path = tmp_dir + "/" + *name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno("create " + path);
  FdCloser closer(fd);
  Status st = WriteAll(fd, data.data(), data.size(), path);
  if (st.ok()) st = FsyncFd(fd, path);
  if (st.ok()) st = closer.Close(path);
  if (!st.ok()) {
    ::unlink(path.c_str());
    return st;
  }
  return path;
}

Status FileObjectStore::Publish(const std::string& tmp, const std::string& key, bool replace) {
  const std::string target = dir_ + "/" + key;
  std::set<std::string> to_sync = {ParentOf(target)};
  {
    MutexLock lock(&tree_mu_);
    std::string path = dir_;
    for (size_t start = 0, slash; (slash = key.find('/', start)) != std::string::npos;
         start = slash + 1) {
      path += "/" + key.substr(start, slash - start);
      bool created;
      Status st = EnsureDir(path, &created);
      if (!st.ok()) {
        ::unlink(tmp.c_str());
        return st.Annotate("put " + key);
      }
      if (created) to_sync.insert(ParentOf(path));
    }
    if (replace && ::rename(tmp.c_str(), target.c_str()) != 0) {
      const Status st = Status::FromErrno("rename " + tmp + " to " + target);
      ::unlink(tmp.c_str());
      return st;
    }
    // Without replacing: link(2) fails with EEXIST when the name exists, so
    // of two writers exactly one creates the object, whole.
    if (!replace) {
      const int rc = ::link(tmp.c_str(), target.c_str());
      const int err = errno;
      ::unlink(tmp.c_str());
      if (rc != 0 && err == EEXIST) return Status::Error(EEXIST, Describe() + ": " + key + " exists");
      if (rc != 0) return Status::Error(err, "link " + tmp + " to " + target);
    }
  }
  for (const std::string& d : to_sync) CKPTFS_RETURN_IF_ERROR(SyncDir(d));
  return Status::Ok();
}

Status FileObjectStore::Put(const std::string& key, const std::string& data) {
  CKPTFS_RETURN_IF_ERROR(CheckKey(key));
  Result<std::string> tmp = WriteTemp(data);
  if (!tmp.ok()) return tmp.status();
  return Publish(*tmp, key, /*replace=*/true);
}

Status FileObjectStore::PutIfAbsent(const std::string& key, const std::string& data) {
  CKPTFS_RETURN_IF_ERROR(CheckKey(key));
  Result<std::string> tmp = WriteTemp(data);
  if (!tmp.ok()) return tmp.status();
  return Publish(*tmp, key, /*replace=*/false);
}

Result<std::string> FileObjectStore::BeginMultipart(const std::string& key) {
  CKPTFS_RETURN_IF_ERROR(CheckKey(key));
  const std::string root = dir_ + "/" + kMultipartDir;
  bool created;
  CKPTFS_RETURN_IF_ERROR(EnsureDir(root, &created));
  Result<std::string> id = RandomHex(kIdBytes);
  if (!id.ok()) return id.status();
  const std::string up_dir = root + "/" + *id;
  if (::mkdir(up_dir.c_str(), 0755) != 0) return Status::FromErrno("mkdir " + up_dir);
  // The key file is written last: an upload without it is unknown, so a crash
  // in between leaves only an ignored directory.
  Result<std::string> tmp = WriteTemp(key);
  Status st = tmp.status();
  const std::string key_path = up_dir + "/" + kUploadKeyFile;
  if (st.ok() && ::rename(tmp->c_str(), key_path.c_str()) != 0) {
    st = Status::FromErrno("rename " + *tmp + " to " + key_path);
    ::unlink(tmp->c_str());
  }
  if (st.ok()) st = SyncDir(up_dir);
  if (st.ok()) st = SyncDir(root);
  if (!st.ok()) {
    std::error_code ec;
    std::filesystem::remove_all(up_dir, ec);
    return st.Annotate("begin multipart upload of " + key);
  }
  return std::move(id).value();
}

Result<std::string> FileObjectStore::UploadDir(const std::string& key,
                                               const std::string& upload_id) {
  const Status unknown = Status::Error(
      ENOENT, Describe() + ": no multipart upload \"" + upload_id + "\" for " + key);
  if (!IsUploadId(upload_id)) return unknown;
  const std::string up_dir = dir_ + "/" + kMultipartDir + "/" + upload_id;
  const std::string key_path = up_dir + "/" + kUploadKeyFile;
  const int fd = ::open(key_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? unknown : Status::FromErrno("open " + key_path);
  FdCloser closer(fd);
  std::string stored(key.size() + 1, '\0');  // one more, to notice a longer key
  size_t got = 0;
  while (got < stored.size()) {
    const ssize_t r = ::read(fd, stored.data() + got, stored.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("read " + key_path);
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  stored.resize(got);
  if (stored != key) return unknown;
  return up_dir;
}

Result<std::string> FileObjectStore::UploadPart(const std::string& key,
                                                const std::string& upload_id, int part_number,
                                                const std::string& data) {
  CKPTFS_RETURN_IF_ERROR(CheckKey(key));
  if (part_number < 1 || part_number > kMaxPartNumber) {
    return Status::Error(EINVAL, "upload part of " + key + ": part number " +
                                     std::to_string(part_number) + " outside 1.." +
                                     std::to_string(kMaxPartNumber));
  }
  Result<std::string> up_dir = UploadDir(key, upload_id);
  if (!up_dir.ok()) return up_dir.status();
  Result<std::string> tmp = WriteTemp(data);
  if (!tmp.ok()) return tmp.status();
  // The identity is taken before the rename (which keeps it), so a
  // concurrent re-upload of the same part cannot lend us its ETag.
  struct stat tmp_st{};
  if (::stat(tmp->c_str(), &tmp_st) != 0) {
    const Status st = Status::FromErrno("stat " + *tmp);
    ::unlink(tmp->c_str());
    return st;
  }
  char name[32];
  std::snprintf(name, sizeof(name), "/part-%05d", part_number);
  const std::string part_path = *up_dir + name;
  if (::rename(tmp->c_str(), part_path.c_str()) != 0) {
    // ENOENT: the upload was aborted or completed meanwhile.
    const Status st = Status::FromErrno("rename " + *tmp + " to " + part_path);
    ::unlink(tmp->c_str());
    return st;
  }
  CKPTFS_RETURN_IF_ERROR(SyncDir(*up_dir));
  return PartETag(tmp_st);
}

Status FileObjectStore::CompleteMultipart(const std::string& key, const std::string& upload_id,
                                          const std::vector<std::string>& part_etags) {
  CKPTFS_RETURN_IF_ERROR(CheckKey(key));
  Result<std::string> up_dir = UploadDir(key, upload_id);
  if (!up_dir.ok()) return up_dir.status();
  const std::string what = "complete upload of " + key;
  if (part_etags.empty() || part_etags.size() > static_cast<size_t>(kMaxPartNumber)) {
    return Status::Error(EINVAL, what + ": part count " + std::to_string(part_etags.size()) +
                                     " outside 1.." + std::to_string(kMaxPartNumber));
  }
  const int part_count = static_cast<int>(part_etags.size());
  std::vector<std::string> parts;
  for (int i = 1; i <= part_count; i++) {
    char name[32];
    std::snprintf(name, sizeof(name), "/part-%05d", i);
    parts.push_back(*up_dir + name);
    struct stat st{};
    if (::stat(parts.back().c_str(), &st) != 0) {
      if (errno == ENOENT) {
        return Status::Error(EINVAL, what + ": part " + std::to_string(i) + " was never uploaded");
      }
      return Status::FromErrno("stat " + parts.back());
    }
    if (PartETag(st) != part_etags[i - 1]) {
      return Status::Error(EINVAL, what + ": part " + std::to_string(i) + ": ETag \"" +
                                       part_etags[i - 1] + "\" is not that of its latest upload");
    }
    if (i < part_count && static_cast<uint64_t>(st.st_size) < min_part_size_) {
      return Status::Error(EINVAL, what + ": part " + std::to_string(i) + " has " +
                                       std::to_string(st.st_size) +
                                       " bytes, less than the minimum " +
                                       std::to_string(min_part_size_));
    }
  }

  Result<std::string> tmp = WriteTemp(std::string());
  if (!tmp.ok()) return tmp.status();
  Status st = [&]() -> Status {
    const int out = ::open(tmp->c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (out < 0) return Status::FromErrno("open " + *tmp);
    FdCloser out_closer(out);
    std::string buf(kCopyBuffer, '\0');
    for (const std::string& part : parts) {
      const int in = ::open(part.c_str(), O_RDONLY | O_CLOEXEC);
      if (in < 0) return Status::FromErrno("open " + part);
      FdCloser in_closer(in);
      for (;;) {
        const ssize_t r = ::read(in, buf.data(), buf.size());
        if (r < 0) {
          if (errno == EINTR) continue;
          return Status::FromErrno("read " + part);
        }
        if (r == 0) break;
        CKPTFS_RETURN_IF_ERROR(WriteAll(out, buf.data(), static_cast<size_t>(r), *tmp));
      }
    }
    CKPTFS_RETURN_IF_ERROR(FsyncFd(out, *tmp));
    return out_closer.Close(*tmp);
  }();
  if (!st.ok()) {
    ::unlink(tmp->c_str());
    return st.Annotate(what);
  }
  CKPTFS_RETURN_IF_ERROR(Publish(*tmp, key, /*replace=*/true));
  // The object is in place: a leftover upload directory is only garbage, and
  // failing here would make the caller retry an upload that succeeded.
  std::error_code ec;
  std::filesystem::remove_all(*up_dir, ec);
  return Status::Ok();
}

Status FileObjectStore::AbortMultipart(const std::string& key, const std::string& upload_id) {
  CKPTFS_RETURN_IF_ERROR(CheckKey(key));
  Result<std::string> up_dir = UploadDir(key, upload_id);
  if (!up_dir.ok()) return up_dir.status();
  std::error_code ec;
  std::filesystem::remove_all(*up_dir, ec);
  if (ec) return Status::FromErrno(ec.value(), "abort upload of " + key + ": remove " + *up_dir);
  return Status::Ok();
}

Result<std::string> FileObjectStore::GetRange(const std::string& key, uint64_t offset,
                                              uint64_t length) {
  std::string out;
  Result<uint64_t> n = ReadRange(key, offset, length, [&out](uint64_t at, std::string_view piece) {
    out.resize(at);
    out.append(piece);
    return Status::Ok();
  });
  if (!n.ok()) return n.status();
  out.resize(*n);
  return out;
}

Result<uint64_t> FileObjectStore::ReadRange(const std::string& key, uint64_t offset,
                                            uint64_t length, const RangeSink& sink) {
  CKPTFS_RETURN_IF_ERROR(CheckKey(key));
  const std::string path = dir_ + "/" + key;
  const Status absent = Status::Error(ENOENT, Describe() + ": no object " + key);
  // O_NOFOLLOW: symlinks are not objects (List skips them too).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return absent;
    return Status::FromErrno("open " + path);
  }
  FdCloser closer(fd);
  struct stat st{};
  if (::fstat(fd, &st) != 0) return Status::FromErrno("fstat " + path);
  if (!S_ISREG(st.st_mode)) return absent;
  const auto size = static_cast<uint64_t>(st.st_size);
  if (offset >= size) return uint64_t{0};
  const uint64_t want = std::min(length, size - offset);
  // Pieces of a bounded buffer: a large range does not need its size in memory.
  std::string buf(static_cast<size_t>(std::min(want, kReadPiece)), '\0');
  uint64_t done = 0;
  while (done < want) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), want - done));
    const ssize_t r = ::pread(fd, buf.data(), n, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("pread " + path);
    }
    if (r == 0) break;  // cannot happen for a renamed-into-place file, unless edited by hand
    CKPTFS_RETURN_IF_ERROR(sink(done, std::string_view(buf.data(), static_cast<size_t>(r))));
    done += static_cast<uint64_t>(r);
  }
  return done;
}

Result<ObjectInfo> FileObjectStore::Head(const std::string& key) {
  CKPTFS_RETURN_IF_ERROR(CheckKey(key));
  const std::string path = dir_ + "/" + key;
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) return Status::FromErrno("stat " + path);
    st.st_mode = 0;
  }
  if (!S_ISREG(st.st_mode)) return Status::Error(ENOENT, Describe() + ": no object " + key);
  return ObjectInfo{.key = key, .size = static_cast<uint64_t>(st.st_size)};
}

namespace {

// Appends the regular files under dir_fd (which is rel, "" for the root)
// whose keys start with prefix. Takes ownership of dir_fd. Entries that
// vanish during the walk were deleted concurrently and are skipped.
Status Walk(int dir_fd, const std::string& rel, const std::string& prefix,
            std::vector<ObjectInfo>* out) {
  DIR* d = ::fdopendir(dir_fd);
  if (d == nullptr) {
    const Status st = Status::FromErrno("fdopendir " + rel);
    ::close(dir_fd);
    return st;
  }
  Status result;
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(d);
    if (entry == nullptr) {
      if (errno != 0) result = Status::FromErrno("readdir " + rel);
      break;
    }
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (rel.empty() && (name == kTmpDir || name == kMultipartDir)) continue;
    const std::string key = rel.empty() ? name : rel + "/" + name;
    struct stat st{};
    if (::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      result = Status::FromErrno("stat " + key);
      break;
    }
    if (S_ISREG(st.st_mode)) {
      if (key.compare(0, prefix.size(), prefix) == 0) {
        // No tag: an object replaced within one timestamp tick can come
        // back with the same size, mtime and (reused) inode number, and a
        // reader trusting such a tag would miss the change for good.
        out->push_back(ObjectInfo{.key = key, .size = static_cast<uint64_t>(st.st_size)});
      }
    } else if (S_ISDIR(st.st_mode) && PrefixCompatible(key + "/", prefix)) {
      const int child =
          ::openat(::dirfd(d), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child < 0) {
        if (errno == ENOENT) continue;
        result = Status::FromErrno("open directory " + key);
        break;
      }
      result = Walk(child, key, prefix, out);
      if (!result.ok()) break;
    }
  }
  ::closedir(d);
  return result;
}

}  // namespace

Result<std::vector<ObjectInfo>> FileObjectStore::List(const std::string& prefix) {
  std::vector<ObjectInfo> out;
  // Start at the deepest directory the prefix names in full. If that is not
  // a valid key, no valid key can start with the prefix.
  const std::string start = ParentOf(prefix);
  if (!start.empty() && !CheckKey(start).ok()) return out;
  const std::string path = start.empty() ? dir_ : dir_ + "/" + start;
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return out;
    return Status::FromErrno("open directory " + path);
  }
  Status st = Walk(fd, start, prefix, &out);
  if (!st.ok()) return st.Annotate("list " + Describe() + " prefix \"" + prefix + "\"");
  std::sort(out.begin(), out.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return out;
}

Status FileObjectStore::Delete(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) CKPTFS_RETURN_IF_ERROR(CheckKey(key));
  std::set<std::string> to_sync;  // the directories that lost an entry and remain
  Status result;
  {
    MutexLock lock(&tree_mu_);
    for (const std::string& key : keys) {
      const std::string path = dir_ + "/" + key;
      if (::unlink(path.c_str()) != 0) {
        // ENOTDIR: a parent is an object; EISDIR: a directory, not an object.
        if (errno == ENOENT || errno == ENOTDIR || errno == EISDIR) continue;
        result = Status::FromErrno("delete " + path);
        break;
      }
      std::string parent = ParentOf(key);
      while (!parent.empty() && ::rmdir((dir_ + "/" + parent).c_str()) == 0) {
        parent = ParentOf(parent);
      }
      to_sync.insert(parent.empty() ? dir_ : dir_ + "/" + parent);
    }
  }
  for (const std::string& d : to_sync) {
    Status st = SyncDir(d);
    if (result.ok()) result = st;
  }
  return result;
}

Result<std::unique_ptr<ObjectStore>> OpenFileObjectStore(const std::string& dir) {
  Result<std::unique_ptr<FileObjectStore>> store = FileObjectStore::Open(dir);
  if (!store.ok()) return store.status();
  return std::unique_ptr<ObjectStore>(std::move(store).value());
}

}  // namespace ckptfs
