#include "cli/passthrough_setup.h"

#include <fuse_lowlevel.h>
#include <linux/magic.h>
#include <sys/vfs.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ckptfs {

namespace {

// The kernel sends INIT first and holds every other request until it is
// answered; answering it here, before the loop starts, lets the mount fail
// cleanly (with --passthrough on) instead of after it was reported ready.
Status AnswerInit(fuse_session* se) {
  fuse_buf buf{};
  const int n = fuse_session_receive_buf(se, &buf);
  if (n <= 0) {
    std::free(buf.mem);
    return Status::Error(n < 0 ? -n : EIO, "reading the kernel's FUSE INIT request");
  }
  fuse_session_process_buf(se, &buf);
  std::free(buf.mem);
  return Status::Ok();
}

// Backing files on overlayfs are one level deeper: the kernel refuses a
// backing file whose stack depth is not below the announced one (ELOOP).
uint32_t StackDepthFor(const std::string& cache_dir) {
  struct statfs st{};
  if (::statfs(cache_dir.c_str(), &st) == 0 && st.f_type == OVERLAYFS_SUPER_MAGIC) return 2;
  return 1;
}

std::string WhyNot(const Status& probe) {
  switch (probe.err()) {
    case EPERM:
      return "registering backing files needs CAP_SYS_ADMIN, which the daemon lacks";
    case ELOOP:
      return "the cache directory's filesystem is stacked too deep for passthrough";
    case ENOTTY:
    case EINVAL:
      return "the kernel has no FUSE passthrough ioctls (Linux 6.9+ needed)";
    default:
      return "registering a backing file failed: " + probe.ToString();
  }
}

}  // namespace

Result<std::unique_ptr<PassthroughChannel>> SetUpPassthrough(fuse_session* se, const MountOptions& options,
                                                            FileSystem* fs, EventLog* events) {
  FileSystem::PassthroughSetting setting;
  setting.mode = PassthroughName(options.passthrough);
  std::unique_ptr<PassthroughChannel> channel;
  if (options.passthrough == MountOptions::Passthrough::kOff) {
    setting.reason = "turned off (--passthrough off)";
  } else {
    auto installed = PassthroughChannel::Install(se, StackDepthFor(options.cache_dir));
    if (!installed.ok()) {
      setting.reason = installed.status().ToString();
    } else {
      channel = std::move(installed).value();
    }
  }
  if (channel) {
    CKPTFS_RETURN_IF_ERROR(AnswerInit(se));
    setting.handles_killpriv = channel->handles_killpriv();
    if (!channel->kernel_offered()) {
      setting.reason = "the kernel does not offer FUSE passthrough (Linux 6.9+ built with CONFIG_FUSE_PASSTHROUGH)";
    } else if (Status probe = channel->Probe(options.cache_dir); !probe.ok()) {
      setting.reason = WhyNot(probe);
    } else {
      setting.active = true;
    }
  }
  if (!setting.active && options.passthrough == MountOptions::Passthrough::kOn) {
    return Status::Error(ENOTSUP, "--passthrough on: " + setting.reason);
  }
  if (!setting.active && options.passthrough == MountOptions::Passthrough::kAuto) {
    std::fprintf(stderr, "ckptfs: passthrough not used: %s; reads and writes go through the daemon\n",
                 setting.reason.c_str());
  }
  events->Append({{"event", "passthrough"},
                  {"mode", setting.mode},
                  {"active", setting.active},
                  {"reason", setting.reason},
                  {"handles_killpriv", setting.handles_killpriv}});
  fs->SetPassthrough(setting.active ? channel.get() : nullptr, setting);
  return channel;
}

}  // namespace ckptfs
