#include "manifest/schema.h"

#include <cerrno>
#include <string>

#include "manifest/records.h"

namespace ckptfs {

Status CheckFormatVersion(ManifestStore& manifest) {
  auto version = manifest.Get(KeySpace::kMeta, kFormatVersionKey);
  if (!version.ok()) return version.status();
  if (version->has_value() && **version != kFormatVersion && **version != kLegacyFormatVersion) {
    return Status::Error(EINVAL, "manifest format version " + **version +
                                     " is not supported by this ckptfs (expects " +
                                     std::string(kFormatVersion) + ")");
  }
  return Status::Ok();
}

std::string OrphanKey(uint64_t ino) { return kOrphanPrefix + InoKey(ino); }

}  // namespace ckptfs
