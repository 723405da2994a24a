// `ckptfs mount` command line: parsing and the checks that must pass before
// anything is mounted (SPEC section 8: bad options, a missing or unwritable
// cache, a missing or already mounted mountpoint give a clear message and a
// non-zero exit, and nothing is mounted).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "namespace/filesystem.h"

namespace ckptfs {

inline constexpr const char* kDefaultCacheDir = "/var/lib/ckptfs";

struct MountOptions {
  std::string mountpoint;  // absolute
  std::string cache_dir;   // absolute
  bool cache_is_default = false;
  bool foreground = false;
  std::vector<std::string> fuse_options;  // -o values, split at commas
  FileSystemOptions fs;
};

// argv[0] is "mount". EINVAL with a message for anything unknown or malformed.
Result<MountOptions> ParseMountArgs(int argc, char** argv);

// Resolves paths and checks the mountpoint and cache directory; creates the
// default cache directory when it is missing.
Status CheckMountTargets(MountOptions* options);

extern const char* const kMountUsage;

}  // namespace ckptfs
