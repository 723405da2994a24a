// The values FileSystem's POSIX face takes and returns: what the FUSE glue
// decodes from requests and encodes into replies.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

namespace ckptfs {

class FileHandle;

struct Entry {
  uint64_t ino = 0;
  struct stat attr {};
  double entry_timeout = 0;
  double attr_timeout = 0;
};

struct Attr {
  struct stat attr {};
  double timeout = 0;
};

struct DirEntry {
  std::string name;
  uint64_t ino = 0;
  uint32_t mode = 0;  // type bits
  uint64_t next_offset = 0;
  // READDIRPLUS only: the entry the kernel may keep, its lookup counted
  // (plus->ino == 0: a name without attributes, such as "." or a virtual
  // node, which the kernel looks up itself when it needs it).
  std::optional<Entry> plus;
};

// What a setattr call asks to change (FUSE_SET_ATTR_* flags, decoded).
struct SetAttrRequest {
  std::optional<uint32_t> mode;
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  std::optional<uint64_t> size;
  std::optional<timespec> atime;
  std::optional<timespec> mtime;
  bool atime_now = false;
  bool mtime_now = false;
  // The kernel asks the daemon to drop the setuid and setgid bits with this
  // change (a truncate by a caller without CAP_FSETID, or a chown): with
  // FUSE_HANDLE_KILLPRIV_V2 that is the daemon's job, not the kernel's.
  bool kill_suidgid = false;
};

// The mode a write, truncate or chown leaves (as Linux's
// setattr_should_drop_suidgid): setuid always goes; setgid goes only with
// group execute (without it, setgid marks mandatory locking, not privilege).
inline uint32_t ModeWithoutSetId(uint32_t mode) {
  mode &= ~static_cast<uint32_t>(S_ISUID);
  if (mode & S_IXGRP) mode &= ~static_cast<uint32_t>(S_ISGID);
  return mode;
}

// Who asks. The kernel has already applied the umask to modes (we do not ask
// for FUSE_CAP_DONT_MASK) and checked permissions (default_permissions).
struct Caller {
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t pid = 0;  // 0 = unknown (not a process of this machine's namespace)
  // Supplementary groups: filled only where the daemon checks permissions
  // itself (opening /.ckptfs control files; see FileSystem::NeedsGroups).
  std::vector<uint32_t> groups;
};

// Who an open is for: only the kernel's opens (through the FUSE glue) may
// get a passthrough backing id; the daemon's own (the writer fast path,
// `.full/` views reading shards) read and write through the handle.
enum class OpenFor { kDaemon, kKernel };

// An opened file: the handle the FUSE glue keeps in fuse_file_info.
struct Opened {
  FileHandle* fh = nullptr;
  bool keep_cache = false;  // sealed data never changes: keep the page cache
  bool direct_io = false;   // generated control files
  // Kernel passthrough: the backing id the open reply carries (-1: the
  // daemon serves this open's reads and writes).
  int32_t backing_id = -1;
};

}  // namespace ckptfs
