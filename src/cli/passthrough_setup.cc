#include "cli/passthrough_setup.h"

#include <fuse_lowlevel.h>
#include <linux/magic.h>
#include <sys/vfs.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

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
  using Switch = MountOptions::Switch;
  const bool want_passthrough = options.passthrough != Switch::kOff;
  const bool want_uring = options.io_uring != Switch::kOff;
  FileSystem::PassthroughSetting setting;
  setting.mode = SwitchName(options.passthrough);
  if (!want_passthrough) setting.reason = "turned off (--passthrough off)";
  std::string uring_reason = want_uring ? "" : "turned off (--io-uring off)";
  std::unique_ptr<PassthroughChannel> channel;
  if (want_passthrough || want_uring) {
    auto installed = PassthroughChannel::Install(
        se, want_passthrough ? StackDepthFor(options.cache_dir) : 0, want_uring);
    if (!installed.ok()) {
      if (want_passthrough) setting.reason = installed.status().ToString();
      if (want_uring) uring_reason = installed.status().ToString();
    } else {
      channel = std::move(installed).value();
    }
  }
  if (channel) {
    CKPTFS_RETURN_IF_ERROR(AnswerInit(se));
    setting.handles_killpriv = channel->handles_killpriv();
    if (!want_passthrough) {
      // reason set above
    } else if (!channel->kernel_offered()) {
      setting.reason = "the kernel does not offer FUSE passthrough (Linux 6.9+ built with CONFIG_FUSE_PASSTHROUGH)";
    } else if (Status probe = channel->Probe(options.cache_dir); !probe.ok()) {
      setting.reason = WhyNot(probe);
    } else {
      setting.active = true;
    }
    if (!want_uring) {
      // reason set above
    } else if (!channel->uring_offered()) {
      uring_reason =
          "the kernel does not offer FUSE over io_uring (Linux 6.14+ built with "
          "CONFIG_FUSE_IO_URING, "
          "with the fuse module's enable_uring parameter set)";
    } else if (!channel->uring_active()) {
      uring_reason = "setting up io_uring failed: " + channel->uring_error();
    }
  }
  if (!setting.active && options.passthrough == Switch::kOn) {
    return Status::Error(ENOTSUP, "--passthrough on: " + setting.reason);
  }
  if (!setting.active && options.passthrough == Switch::kAuto) {
    std::fprintf(stderr, "ckptfs: passthrough not used: %s; reads and writes go through the daemon\n",
                 setting.reason.c_str());
  }
  const bool uring = channel && channel->uring_active();
  if (!uring && options.io_uring == Switch::kOn) {
    return Status::Error(ENOTSUP, "--io-uring on: " + uring_reason);
  }
  events->Append({{"event", "passthrough"},
                  {"mode", setting.mode},
                  {"active", setting.active},
                  {"reason", setting.reason},
                  {"handles_killpriv", setting.handles_killpriv}});
  nlohmann::json transport = {
      {"transport", uring ? "io_uring" : "/dev/fuse"},
      {"io_uring", {{"mode", SwitchName(options.io_uring)}, {"active", uring}}}};
  if (!uring) transport["io_uring"]["reason"] = uring_reason;
  events->Append({{"event", "fuse_transport"},
                  {"transport", transport["transport"]},
                  {"io_uring", transport["io_uring"]}});
  fs->SetPassthrough(setting.active ? channel.get() : nullptr, setting);
  // status.json's "fuse": the transport, and how many requests came through
  // the rings (the kernel falls back to /dev/fuse if a ring's registration
  // fails, which this count shows).
  PassthroughChannel* ch = uring ? channel.get() : nullptr;
  fs->SetFuseStatus([transport, ch] {
    nlohmann::json j = transport;
    if (ch != nullptr) {
      j["io_uring"]["entries_used"] = ch->uring_entries();
      j["io_uring"]["requests"] = ch->uring_requests();
    }
    return j;
  });
  return channel;
}

}  // namespace ckptfs
