// What the manifest's contents mean beyond single records: the root inode,
// the format version, and the meta keys. The daemon's recovery
// (namespace/filesystem_recovery.cc) and the offline `ckptfs fsck`
// (maintenance/) both read manifests, so they share this one definition.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "manifest/manifest_store.h"

namespace ckptfs {

// The root directory's inode number; the manifest always holds it.
inline constexpr uint64_t kRootIno = 1;

// Meta key holding the manifest's format version, written at first mount.
// Version 2 adds the inode-number reservation and the orphan index below,
// which let a mount load the namespace lazily; a version 1 manifest is read
// whole once and becomes version 2 in that mount's recovery batch.
inline constexpr const char* kFormatVersionKey = "format_version";
inline constexpr const char* kFormatVersion = "2";
inline constexpr const char* kLegacyFormatVersion = "1";

// Meta key holding the highest inode number that may have been handed out
// (decimal): new numbers are reserved in blocks, durably, before any of
// them names a backing file, so a mount starts above it without listing
// the data directory or reading every inode.
inline constexpr const char* kInoReservedKey = "ino_reserved";

// Meta keys kOrphanPrefix + InoKey(ino): an inode whose record has nlink 0
// (unlinked while open). Recovery deletes these without a scan of every
// inode; InodeTable keeps the index in step with the records.
inline constexpr const char* kOrphanPrefix = "orphan/";

// Meta key holding the kernel boot the last mount ran in (CurrentBootId()).
inline constexpr const char* kBootIdKey = "boot_id";

// Meta key holding this cache's identity: 32 random hex digits, made the
// first time something needs it (cluster mode names the cache by it in the
// remote's node registry) and never changed.
inline constexpr const char* kCacheIdKey = "cache_id";

// Meta keys kClusterRemovalPrefix + step path: a removal of a committed
// cluster step this node announced and its ClusterBook has not finished in
// the bucket yet (so a kill -9 does not lose it).
inline constexpr const char* kClusterRemovalPrefix = "cluster_removal/";

// Meta key holding the cluster node this cache belongs to (SPEC section 9,
// --node), written at its first cluster mount: the cache's parts are that
// node's, so it is mounted with that name or not at all.
inline constexpr const char* kNodeNameKey = "node_name";

// Ok when the manifest is new (no version yet), of kFormatVersion or of
// kLegacyFormatVersion; EINVAL naming both versions otherwise.
Status CheckFormatVersion(ManifestStore& manifest);

// The orphan index's key for ino.
std::string OrphanKey(uint64_t ino);

}  // namespace ckptfs
