// The cache directory's protection (issue 15). It holds the manifest (every
// name, symlink target and xattr value of the mount, whatever the modes of
// the directories they sit in), the event log and every file's data, so no
// other local user may read anything in it:
//  * it must belong to the daemon's user (another owner could read and
//    change the manifest);
//  * its mode becomes 0711: others may not list it, only pass through it to
//    the writer library's socket (CACHE/writer.sock, whose clients the
//    daemon checks itself), which the fast path of trainers running as other
//    users needs;
//  * everything in it is the owner's alone: the daemon runs with umask 077,
//    and `manifest/` and `data/` left 0755 by an older version become 0700.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace ckptfs {

inline constexpr unsigned kCacheDirMode = 0711;

// dir: an existing directory (absolute). Sets the modes above and fills
// *notes with a line for each mode it changed. EPERM when dir belongs to a
// user other than the caller's effective uid.
Status SecureCacheDir(const std::string& dir, std::vector<std::string>* notes);

}  // namespace ckptfs
