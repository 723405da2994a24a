// Nodes of the namespace that are not in the manifest: the control
// directory `/.ckptfs` and its generated files, the virtual `latest` link
// of each run directory, and the `.full/` views of sharded checkpoints.
// Their inode numbers carry a tag in the high bits; KindOf() tells the kinds
// apart (the `.full/` views also build and split their own tagged numbers,
// filesystem_full.cc), and FileSystem routes every operation on a
// virtual node to the VirtualNodes that serve its kind (read-only: every
// change to one is refused before it reaches them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "namespace/fs_types.h"

namespace ckptfs {

// Inode numbers of things that are not in the manifest.
inline constexpr uint64_t kVirtualBit = 1ULL << 63;
inline constexpr uint64_t kControlDirIno = kVirtualBit | 1;
inline constexpr uint64_t kStatusFileIno = kVirtualBit | 2;
inline constexpr uint64_t kEventsFileIno = kVirtualBit | 3;
inline constexpr uint64_t kMetricsFileIno = kVirtualBit | 4;
inline constexpr uint64_t kLatestBit = 1ULL << 62;  // kLatestBit | run dir ino
// `.full/` views: kFullViewBit | (format root dir ino << 24) | view node
// (filesystem_full.cc). Rebuilding a view gives the same node numbers, so
// these stay valid while the step exists.
inline constexpr uint64_t kFullViewBit = 1ULL << 61;
inline constexpr int kFullNodeBits = 24;
inline constexpr const char* kControlDirName = ".ckptfs";
inline constexpr const char* kLatestName = "latest";
// "off" on a run directory: no virtual `latest` link there (set by `rm
// latest` on the link; "on" or removing the xattr brings it back).
inline constexpr const char* kLatestLinkXattr = "user.ckptfs.latest_link";


enum class NodeKind {
  kReal,        // an inode of the manifest
  kControl,     // /.ckptfs and the files in it
  kLatestLink,  // a run directory's virtual `latest` link
  kFullView,    // a node of a `.full/` view
};

inline NodeKind KindOf(uint64_t ino) {
  if (ino & kVirtualBit) return NodeKind::kControl;
  if (ino & kLatestBit) return NodeKind::kLatestLink;
  if (ino & kFullViewBit) return NodeKind::kFullView;
  return NodeKind::kReal;
}
inline bool IsRealIno(uint64_t ino) { return KindOf(ino) == NodeKind::kReal; }

// The reads a kind of virtual node serves. Each method takes the namespace
// lock itself where it needs it: call them without it.
class VirtualNodes {
 public:
  virtual ~VirtualNodes() = default;
  // name in the virtual directory parent.
  virtual Result<Entry> Lookup(uint64_t parent, const std::string& name) = 0;
  virtual Result<Attr> GetAttr(uint64_t ino) = 0;
  virtual Result<std::vector<DirEntry>> Readdir(uint64_t ino, uint64_t offset, size_t max) = 0;
  virtual Status OpenDir(uint64_t ino) = 0;
  // who: the opener, for what generated files show it (nullptr: everything).
  virtual Result<Opened> Open(uint64_t ino, int flags, const Caller* who) = 0;
  virtual Result<std::string> GetXattr(uint64_t ino, const std::string& name) = 0;
  virtual Result<std::vector<std::string>> ListXattr(uint64_t ino) = 0;
};

}  // namespace ckptfs
