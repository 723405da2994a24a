// `ckptfs mount` command line: parsing and the checks that must pass before
// anything is mounted (SPEC section 8: bad options, a missing or unwritable
// cache, a missing or already mounted mountpoint give a clear message and a
// non-zero exit, and nothing is mounted).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "control/event_log.h"
#include "namespace/filesystem.h"
#include "tiering/open_remote.h"
#include "tiering/remote_tier.h"

namespace ckptfs {

inline constexpr const char* kDefaultCacheDir = "/var/lib/ckptfs";

struct MountOptions {
  std::string mountpoint;  // absolute
  std::string cache_dir;   // absolute
  bool cache_is_default = false;
  bool foreground = false;
  // --nonempty: mount over a mountpoint that has entries (refused otherwise).
  bool nonempty = false;
  // Things CheckMountTargets changed that the operator should hear of (a
  // cache directory made private): printed and recorded as events.
  std::vector<std::string> notices;
  std::vector<std::string> fuse_options;  // -o values, split at commas
  FileSystemOptions fs;
  RemoteSpec remote;  // url empty: local only
  RemoteTierOptions tier;
  // The writer library's socket (--writer-socket); "" = the default,
  // <cache>/writer.sock. writer_socket_off: --writer-socket none.
  std::string writer_socket;
  bool writer_socket_off = false;
  // A writer connection that sends no request this long is closed
  // (--writer-idle-timeout).
  double writer_idle_timeout_s = 30;
  // Events at or above this level also go to stderr (--log-level).
  LogLevel log_level = LogLevel::kInfo;
  // A kernel feature the mount uses when it can (kAuto), must use (kOn:
  // the mount fails otherwise) or leaves alone (kOff).
  enum class Switch { kAuto, kOn, kOff };
  // Kernel FUSE passthrough (--passthrough): kAuto uses it when the kernel
  // offers it and the daemon may register backing files.
  using Passthrough = Switch;
  Passthrough passthrough = Passthrough::kAuto;
  // FUSE over io_uring (--io-uring): kAuto uses it when the kernel offers
  // it (Linux 6.14+, the fuse module's enable_uring set) and io_uring rings
  // can be set up.
  Switch io_uring = Switch::kAuto;
  // Cluster mode (--publish-timeout): how long a close(), fsync() or
  // rename() in a step waits for the bucket to take this node's part record
  // before it fails with EIO.
  int64_t publish_timeout_ns = 60'000'000'000;
  // Cluster mode (--replace-node): take the --node name over from the cache
  // that holds it, at the name's next epoch (cluster_join.h).
  bool replace_node = false;
  // Cluster mode (--read-wait): how long a read of another node's file waits
  // for that node to upload it before it fails with EIO.
  int64_t read_wait_ns = 600'000'000'000;
};

const char* SwitchName(MountOptions::Switch p);

// "100G", "512MiB", "1.5T", "4096": binary units (K = 1024).
Result<uint64_t> ParseByteSize(const std::string& flag, const std::string& text);

// --metadata-reserve: "0" (off), "N%" of the cache filesystem, or a size.
Result<MetadataReserveSpec> ParseMetadataReserve(const std::string& text);

// argv[0] is "mount". EINVAL with a message for anything unknown or malformed.
Result<MountOptions> ParseMountArgs(int argc, char** argv);

// Resolves paths and checks the mountpoint (a directory, not mounted, empty
// unless --nonempty) and the cache directory (owned by this user, made
// private: see cache_dir.h); creates the default cache directory when it
// is missing.
Status CheckMountTargets(MountOptions* options);

extern const char* const kMountUsage;

}  // namespace ckptfs
