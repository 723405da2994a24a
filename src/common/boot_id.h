// The identity of the running kernel's boot. Recovery compares the boot the
// previous mount ran in with this one: when they are the same, only the
// daemon process died (kill -9, OOM, abort) and the kernel still holds every
// byte it wrote, synced or not; when they differ, the machine restarted and
// unsynced data may be gone or zero-filled.
#pragma once

#include <string>

namespace ckptfs {

// /proc/sys/kernel/random/boot_id (a UUID, new at every boot), or "" when it
// cannot be read: then no two mounts count as the same boot.
std::string CurrentBootId();

}  // namespace ckptfs
