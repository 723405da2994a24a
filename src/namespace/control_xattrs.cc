#include "namespace/control_xattrs.h"

#include <algorithm>

#include "retention/retention_planner.h"

namespace ckptfs {

namespace {

// Maintained by ckptfs: step state (SPEC section 3), the retention plan,
// fast-path checksums and socket, `.full/` tensor metadata.
constexpr const char* kReadOnly[] = {"state",     "step",          "bytes",          "files",
                                     "committed_at", "persisted",  "error",          "retention_plan",
                                     "crc32c",    "writer_socket", "dtype",          "shape"};

std::string KnownNames() {
  std::string out = "commit, pin, score, latest_link";
  for (const std::string& rule : PolicyRuleNames()) out += ", " + rule;
  return out;
}

}  // namespace

Status CheckControlXattrName(const std::string& name, const XattrTarget& target) {
  if (name.rfind(kControlXattrPrefix, 0) != 0) return Status::Ok();
  const std::string key = name.substr(std::string(kControlXattrPrefix).size());
  for (const char* ro : kReadOnly) {
    if (key == ro) return Status::Error(EPERM, name + " is maintained by ckptfs");
  }
  if (key == "commit" || key == "pin" || key == "score") return Status::Ok();
  const auto& rules = PolicyRuleNames();
  const bool is_rule = std::find(rules.begin(), rules.end(), key) != rules.end();
  if (is_rule || key == "latest_link") {
    if (target.is_step) {
      return Status::Error(EINVAL, key + " is set on run directories, not on a checkpoint step "
                                         "(set it on the step's parent directory)");
    }
    return Status::Ok();  // on a run directory: the value is checked by retention
  }
  return Status::Error(EINVAL, "unknown ckptfs attribute " + name + " (ckptfs attributes users set: " +
                                   KnownNames() + ")");
}

}  // namespace ckptfs
