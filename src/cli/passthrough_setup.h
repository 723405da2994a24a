// Kernel FUSE passthrough and FUSE over io_uring at mount (--passthrough,
// --io-uring): installs the channel, answers the kernel's INIT (the only
// place the offers are seen), probes whether this daemon may register
// backing files, and tells FileSystem, status.json and the event log what
// is in force and why.
#pragma once

#include <memory>

#include "cli/mount_options.h"
#include "common/status.h"
#include "control/event_log.h"
#include "fuse/passthrough_channel.h"
#include "namespace/filesystem.h"

struct fuse_session;

namespace ckptfs {

// Call right after fuse_session_mount, before the session loop: it reads
// and answers INIT itself. Returns the channel to keep for the session's
// life (null with both off); an error only with --passthrough on or
// --io-uring on when that cannot be used, or when INIT could not be
// answered.
Result<std::unique_ptr<PassthroughChannel>> SetUpPassthrough(fuse_session* se, const MountOptions& options,
                                                            FileSystem* fs, EventLog* events);

}  // namespace ckptfs
