// The FUSE low-level glue: one table of fuse_lowlevel_ops that decodes each
// request, calls FileSystem, and sends exactly one reply on every path.
// Nothing here decides filesystem behaviour; errno values come from the
// Status the FileSystem returns (the single place they are turned into
// replies is ReplyError in fuse_ops.cc).
#pragma once

#include <fuse_lowlevel.h>

namespace ckptfs {

class FileSystem;

// The operations table; fuse_session_new's userdata must be the FileSystem*.
const fuse_lowlevel_ops& FuseOperations();

}  // namespace ckptfs
