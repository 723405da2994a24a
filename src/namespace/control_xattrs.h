// The user.ckptfs.* names: which a user may set, and where. ckptfs reads
// these names as instructions (retention rules, pins, scores, commits), so
// a misspelt one (keep_lats) or a run rule set on a step must fail loudly
// instead of being stored and silently ignored.
#pragma once

#include <string>

#include "common/status.h"

namespace ckptfs {

inline constexpr const char* kControlXattrPrefix = "user.ckptfs.";

struct XattrTarget {
  bool is_dir = false;
  bool is_step = false;  // a checkpoint step directory
};

// Ok for a name outside user.ckptfs.*, and for a ckptfs name that may be
// set on target; the value is checked elsewhere. EPERM for names ckptfs
// maintains itself (state, crc32c, ...); EINVAL for unknown names and for
// names set where they mean nothing (a run's retention rule on a step).
// EINVAL rather than ENOTSUP: the attribute name is wrong, not xattr
// support (setfattr then prints "Invalid argument" and our message is in
// the events and the log).
Status CheckControlXattrName(const std::string& name, const XattrTarget& target);

}  // namespace ckptfs
