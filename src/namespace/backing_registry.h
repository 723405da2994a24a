// The seam between FileSystem and the kernel's FUSE passthrough: a backing
// file registered here gets an id; an open reply carrying that id makes the
// kernel read and write the backing file itself, without the daemon
// (docs/architecture.md, "Passthrough"). The FUSE glue implements it with
// the FUSE_DEV_IOC_BACKING_OPEN/CLOSE ioctls; tests use a fake.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace ckptfs {

class BackingRegistry {
 public:
  virtual ~BackingRegistry() = default;
  // Registers the open file `fd` (the kernel keeps its own reference) and
  // returns its backing id.
  virtual Result<int32_t> Register(int fd) = 0;
  // The kernel forgets the id; opens that carry it keep their file.
  virtual void Unregister(int32_t id) = 0;
};

}  // namespace ckptfs
