// What the manifest's contents mean beyond single records: the root inode,
// the format version, and the meta keys. The daemon's recovery
// (namespace/filesystem_recovery.cc) and the offline `ckptfs fsck`
// (maintenance/) both read manifests, so they share this one definition.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "manifest/manifest_store.h"

namespace ckptfs {

// The root directory's inode number; the manifest always holds it.
inline constexpr uint64_t kRootIno = 1;

// Meta key holding the manifest's format version, written at first mount.
inline constexpr const char* kFormatVersionKey = "format_version";
inline constexpr const char* kFormatVersion = "1";

// Meta key holding the kernel boot the last mount ran in (CurrentBootId()).
inline constexpr const char* kBootIdKey = "boot_id";

// Ok when the manifest is new (no version yet) or of kFormatVersion;
// EINVAL naming both versions otherwise.
Status CheckFormatVersion(ManifestStore& manifest);

}  // namespace ckptfs
