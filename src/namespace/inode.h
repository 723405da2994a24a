// In-memory state of one inode: its persisted record plus what only lives
// while the daemon runs (kernel lookup count, open handles, the directory's
// children). Owned by FileSystem and guarded by FileSystem::mu_.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/heap_optional.h"
#include "common/sparse_map.h"
#include "data/data_store.h"
#include "manifest/records.h"

namespace ckptfs {

struct Inode {
  InodeRecord rec;
  // The name under rec.parent this inode was last linked as (hard links keep
  // the most recent one); used for commit markers and paths in events.
  std::string name;

  // Directories: name -> entry, and cookie -> name for readdir order. Sparse
  // (a pointer until the first entry), as the xattrs: most inodes are files.
  SparseMap<std::string, DentryRecord> children;
  SparseMap<uint64_t, std::string> by_cookie;
  // A settled step directory whose subtree is still only in the manifest
  // (the lazy namespace, filesystem_lazy.cc): children and by_cookie are
  // empty until InodeTable::EnsureLoaded reads them.
  bool entries_unloaded = false;

  SparseMap<std::string, std::string> xattrs;  // user.* only

  uint64_t lookups = 0;       // kernel references (lookup/create minus forget)
  uint32_t open_handles = 0;  // every open FileHandle
  uint32_t open_writers = 0;  // FileHandles opened for writing
  // Of those, the ones written since their last close() (FLUSH): a crash
  // may leave such a file half written; the others are closed as far as
  // their writer knows, even before the kernel's RELEASE arrives.
  uint32_t unflushed_writers = 0;
  bool dirty = false;         // size/mtime changed since the record was persisted
  bool backing_unsynced = false;  // backing file created since the last SyncDir

  // Remote tier: the object holding this file's contents, when uploaded.
  // On the heap, as the checksum: most inodes of a local cache have neither.
  HeapOptional<ObjectRecord> object;
  // What a fast-path writer reported at close (KeySpace::kChecksums).
  HeapOptional<ChecksumRecord> checksum;
  bool evicting = false;       // its backing file is being removed; opens wait
  int64_t last_access_ns = 0;  // monotonic; least recently used is evicted first

  // Kernel passthrough (filesystem_passthrough.cc): while passthrough_opens
  // > 0 the kernel reads and writes `passthrough_backing` directly, under
  // one backing id shared by every open of the inode. Every open of it is
  // then passthrough: the kernel fails a mix of passthrough and daemon opens.
  int32_t backing_id = -1;
  uint32_t passthrough_opens = 0;
  uint32_t passthrough_writers = 0;
  std::shared_ptr<BackingFile> passthrough_backing;
  // The backing file as last seen (size, change time): the kernel's writes
  // behind the daemon's back show as a change here.
  BackingFile::Identity backing_seen;

  bool is_dir() const { return S_ISDIR(rec.mode); }
  bool is_reg() const { return S_ISREG(rec.mode); }
  bool is_symlink() const { return S_ISLNK(rec.mode); }
};

}  // namespace ckptfs
