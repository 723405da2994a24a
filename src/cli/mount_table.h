// The kernel's mount table (/proc/self/mountinfo), for the CLI's checks:
// is a directory already a mount point, which filesystem holds a path.
#pragma once

#include <string>
#include <vector>

namespace ckptfs {

struct MountEntry {
  std::string mountpoint;  // unescaped (mountinfo writes ' ' as \040)
  std::string fstype;      // e.g. "fuse.ckptfs", "ext4"
};

std::vector<MountEntry> ReadMountTable();

// The filesystem type of the mount holding path, "" when it cannot be
// resolved. path must exist.
std::string FsTypeOf(const std::string& path);

}  // namespace ckptfs
