#include "cli/cache_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

namespace ckptfs {

namespace {

std::string ModeChange(const std::string& what, mode_t from, mode_t to) {
  char buf[48];
  std::snprintf(buf, sizeof buf, " was mode %04o; now %04o", static_cast<unsigned>(from), static_cast<unsigned>(to));
  return what + buf;
}

// Sets fd's permission bits to want (special bits cleared) unless they are.
Status SetMode(int fd, const struct stat& st, mode_t want, const std::string& what,
               std::vector<std::string>* notes) {
  const mode_t mode = st.st_mode & 07777;
  if (mode == want) return Status::Ok();
  if (fchmod(fd, want) != 0) return Status::FromErrno("cannot make " + what + " private");
  notes->push_back(ModeChange(what, mode, want));
  return Status::Ok();
}

}  // namespace

Status SecureCacheDir(const std::string& dir, std::vector<std::string>* notes) {
  // O_NOFOLLOW | O_DIRECTORY: the checks and the chmod apply to the very
  // directory that is then used, not to what a symlink swapped in points at.
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("cache directory " + dir);
  struct stat st {};
  Status result;
  const uid_t me = geteuid();
  if (fstat(fd, &st) != 0) {
    result = Status::FromErrno("cache directory " + dir);
  } else if (st.st_uid != me) {
    result = Status::Error(EPERM, "cache directory " + dir + " belongs to uid " + std::to_string(st.st_uid) +
                                      ", not to this daemon's user (uid " + std::to_string(me) +
                                      "): that user could read and change the manifest; use a directory "
                                      "owned by uid " + std::to_string(me));
  } else {
    result = SetMode(fd, st, kCacheDirMode, "cache directory " + dir, notes);
  }
  // Left 0755 by an older version: the cache directory's x bits would let
  // others into them.
  for (const char* sub : {"manifest", "data"}) {
    if (!result.ok()) break;
    const int sfd = openat(fd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0) continue;  // not created yet: created 0700 under umask 077
    struct stat sst {};
    if (fstat(sfd, &sst) == 0 && (sst.st_mode & 077) != 0) {
      result = SetMode(sfd, sst, 0700, dir + "/" + sub, notes);
    }
    close(sfd);
  }
  close(fd);
  return result;
}

}  // namespace ckptfs
