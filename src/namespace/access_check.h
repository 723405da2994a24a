// Permission checks as the kernel's generic_permission makes them, for the
// places where the daemon answers for the kernel: what /.ckptfs control
// files show a caller is filtered by whether that caller could look the
// paths up itself.
#pragma once

#include <cstdint>
#include <vector>

#include "manifest/records.h"

namespace ckptfs {

struct Credentials {
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;  // supplementary groups
};

// mask: R_OK, W_OK, X_OK bits. Owner, else group (primary or
// supplementary), else other bits decide; root may do anything except
// execute a file without any x bit.
bool MayAccess(const InodeRecord& rec, const Credentials& who, int mask);

}  // namespace ckptfs
