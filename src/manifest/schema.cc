#include "manifest/schema.h"

#include <cerrno>
#include <string>

namespace ckptfs {

Status CheckFormatVersion(ManifestStore& manifest) {
  auto version = manifest.Get(KeySpace::kMeta, kFormatVersionKey);
  if (!version.ok()) return version.status();
  if (version->has_value() && **version != kFormatVersion) {
    return Status::Error(EINVAL, "manifest format version " + **version +
                                     " is not supported by this ckptfs (expects " +
                                     std::string(kFormatVersion) + ")");
  }
  return Status::Ok();
}

}  // namespace ckptfs
