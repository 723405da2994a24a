// `ckptfs fsck CACHE_DIR [--repair] [--crc] [--json]`: checks an unmounted
// cache and, with --repair, fixes what can be fixed without losing committed
// data. The checks themselves are src/maintenance/fsck.h; this is the glue:
// arguments, refusing a cache in use, opening the stores, printing.
#pragma once

#include <string>

namespace ckptfs {

extern const char* const kFsckUsage;

// argv[0] is "fsck". Returns the exit code (maintenance/fsck_report.h).
int FsckCommand(int argc, char** argv);

// Why the manifest of cache_dir cannot be opened: which ckptfs holds it and
// where it is mounted, read from the cache's events log (the daemon logs a
// "mount" event with its mountpoint and pid), and what to do.
std::string DescribeCacheInUse(const std::string& cache_dir);

}  // namespace ckptfs
