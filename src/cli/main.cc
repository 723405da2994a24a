// The ckptfs command: mount (foreground or background), commit, retention,
// status, fsck, help, version.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/daemon.h"
#include "cli/fsck_command.h"
#include "cli/mount_options.h"
#include "cli/mount_table.h"
#include "cli/status_command.h"

namespace ckptfs {
namespace {

const char* const kUsage =
    "usage: ckptfs mount MOUNTPOINT [--cache DIR] [--foreground] [options]\n"
    "       ckptfs commit [--timeout SECONDS] STEP_DIR...\n"
    "       ckptfs retention --dry-run RUN_DIR\n"
    "       ckptfs status [MOUNTPOINT] [--json]\n"
    "       ckptfs fsck CACHE_DIR [--repair] [--crc] [--json]\n"
    "       ckptfs --help | --version\n"
    "\n"
    "A FUSE filesystem for training checkpoints: steps land on local disk and are\n"
    "committed atomically. 'ckptfs mount --help' lists the mount options.\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "ckptfs: %s\n", message.c_str());
  return 1;
}

// Background mode: the child mounts and reports "OK" or the error through a
// pipe, so the parent returns only once the mount is ready (as mount-s3 and
// gcsfuse do) and with the child's error message otherwise.
int MountInBackground(const MountOptions& options) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return Fail(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) return Fail(std::string("fork: ") + std::strerror(errno));
  if (pid > 0) {
    close(pipefd[1]);
    std::string reply;
    char buf[512];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof buf)) > 0) reply.append(buf, static_cast<size_t>(n));
    close(pipefd[0]);
    if (reply == "OK") return 0;
    int status = 0;
    waitpid(pid, &status, 0);
    return Fail(reply.empty() ? "the daemon exited before the mount was ready (see " +
                                    options.cache_dir + "/ckptfs.log)"
                              : reply);
  }
  close(pipefd[0]);
  setsid();
  if (chdir("/") != 0) _exit(1);
  const int devnull = open("/dev/null", O_RDWR);
  const std::string log_path = options.cache_dir + "/ckptfs.log";
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log >= 0) (void)fchmod(log, 0600);  // a log left readable by an older version
  dup2(devnull, STDIN_FILENO);
  dup2(log >= 0 ? log : devnull, STDOUT_FILENO);
  dup2(log >= 0 ? log : devnull, STDERR_FILENO);
  auto daemon = Daemon::Start(options);
  if (!daemon.ok()) {
    const std::string msg = daemon.status().message();
    (void)!write(pipefd[1], msg.data(), msg.size());
    _exit(1);
  }
  (void)!write(pipefd[1], "OK", 2);
  close(pipefd[1]);
  const int rc = (*daemon)->Run();
  daemon.value().reset();
  _exit(rc);
}

int Mount(int argc, char** argv) {
  auto parsed = ParseMountArgs(argc, argv);
  if (!parsed.ok()) {
    if (parsed.err() == EAGAIN) {
      std::fputs(kMountUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "ckptfs mount: %s\n%s", parsed.status().message().c_str(), kMountUsage);
    return 2;
  }
  MountOptions options = std::move(parsed).value();
  // Everything the daemon creates is its user's alone, whatever umask it was
  // started with: RocksDB creates the manifest's files 0644 & ~umask and has
  // no working per-database mode, and those files hold every name, symlink
  // target and xattr value of the mount. Files created through the mount
  // are unaffected (the kernel applies the caller's umask, and access goes
  // through FUSE's modes, not the backing files').
  umask(077);
  Status st = CheckMountTargets(&options);
  if (!st.ok()) return Fail(st.message());
  for (const std::string& notice : options.notices) std::fprintf(stderr, "ckptfs: %s\n", notice.c_str());
  if (!options.foreground) return MountInBackground(options);
  auto daemon = Daemon::Start(options);
  if (!daemon.ok()) return Fail(daemon.status().message());
  std::fprintf(stderr, "ckptfs: mounted %s (cache %s)\n", options.mountpoint.c_str(),
               options.cache_dir.c_str());
  return (*daemon)->Run();
}

bool WantsHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) return true;
  }
  return false;
}

// Exit codes of every subcommand: 0 success, 1 the operation failed, 2 the
// command line is wrong (fsck adds 3: problems found and all repaired).
int UsageError(const char* usage) {
  std::fprintf(stderr, "%s\n", usage);
  return 2;
}

// A step xattr as text ("" when absent or unreadable).
std::string StepXattr(const char* path, const char* name) {
  char value[4096];
  const ssize_t n = getxattr(path, name, value, sizeof value - 1);
  return n > 0 ? std::string(value, static_cast<size_t>(n)) : "";
}

// Asks for the commit, then follows the step's state until it is committed
// or broken, the daemon gave the request up, or timeout_s passed. The
// setxattr itself returns after the first attempt: it runs under the
// kernel's lock of the step directory, which the files still to come need.
int CommitOne(const char* path, double timeout_s) {
  if (access(path, F_OK) != 0) return Fail(std::string(path) + ": " + std::strerror(errno));
  if (FsTypeOf(path) != "fuse.ckptfs") return Fail(std::string(path) + ": not on a ckptfs mount");
  if (setxattr(path, "user.ckptfs.commit", "1", 1, 0) != 0) {
    const int err = errno;
    if (err == ENOTSUP || err == EOPNOTSUPP) return Fail(std::string(path) + ": not on a ckptfs mount");
    const std::string detail = StepXattr(path, "user.ckptfs.error");
    return Fail(std::string(path) + ": " + std::strerror(err) + (detail.empty() ? "" : ": " + detail));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string last_reason;
  for (;;) {
    const std::string state = StepXattr(path, "user.ckptfs.state");
    const std::string reason = StepXattr(path, "user.ckptfs.error");
    if (state == "committed") {
      std::printf("%s: committed\n", path);
      return 0;
    }
    if (state == "broken") return Fail(std::string(path) + ": " + std::strerror(EIO) + ": step is broken: " + reason);
    if (state.empty()) return Fail(std::string(path) + ": " + std::strerror(ENOENT) + ": the step was removed");
    if (reason.rfind("commit timed out", 0) == 0) return Fail(std::string(path) + ": " + std::strerror(ETIMEDOUT) + ": " + reason);
    if (std::chrono::steady_clock::now() >= deadline) {
      return Fail(std::string(path) + ": " + std::strerror(ETIMEDOUT) + ": not committed after " +
                  std::to_string(static_cast<long>(timeout_s)) + " s: " + reason);
    }
    if (reason != last_reason && !reason.empty()) std::fprintf(stderr, "%s: %s\n", path, reason.c_str());
    last_reason = reason;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

int Commit(int argc, char** argv) {
  const char* usage =
      "usage: ckptfs commit [--timeout SECONDS] STEP_DIR...\n"
      "Commits each step directory now (as setfattr -n user.ckptfs.commit -v 1 does) and waits\n"
      "for the outcome (default at most 600 s), printing what it waits for; exit 0 when all\n"
      "committed, 1 when a step is broken, was given up or the time ran out.";
  if (WantsHelp(argc, argv)) return std::puts(usage), 0;
  double timeout_s = 600;
  int first = 1;
  if (argc >= 2 && std::string(argv[1]) == "--timeout") {
    if (argc < 3) return UsageError(usage);
    char* end = nullptr;
    timeout_s = std::strtod(argv[2], &end);
    if (end == argv[2] || *end != '\0' || !(timeout_s > 0) || timeout_s > 1e7) return UsageError(usage);
    first = 3;
  }
  if (argc <= first) return UsageError(usage);
  int rc = 0;
  for (int i = first; i < argc; ++i) {
    if (CommitOne(argv[i], timeout_s) != 0) rc = 1;
  }
  return rc;
}

// `ckptfs retention --dry-run RUN_DIR`: what retention would keep and remove
// now, and why, read from the daemon through a computed xattr.
int Retention(int argc, char** argv) {
  const char* usage =
      "usage: ckptfs retention --dry-run RUN_DIR\n"
      "Shows which steps of RUN_DIR retention keeps and removes now, and why (nothing is removed).";
  if (WantsHelp(argc, argv)) return std::puts(usage), 0;
  if (argc != 3 || std::string(argv[1]) != "--dry-run") return UsageError(usage);
  const char* path = argv[2];
  if (access(path, F_OK) != 0) return Fail(std::string(path) + ": " + std::strerror(errno));
  if (FsTypeOf(path) != "fuse.ckptfs") return Fail(std::string(path) + ": not on a ckptfs mount");
  std::string plan(1 << 16, '\0');
  for (;;) {
    const ssize_t n = getxattr(path, "user.ckptfs.retention_plan", plan.data(), plan.size());
    if (n >= 0) {
      plan.resize(static_cast<size_t>(n));
      break;
    }
    if (errno != ERANGE) return Fail(std::string(path) + ": " + std::strerror(errno));
    plan.resize(plan.size() * 4);
  }
  std::printf("%-10s %-24s %-11s %-7s %s\n", "STEP", "NAME", "STATE", "ACTION", "REASON");
  std::istringstream lines(plan);
  std::string line;
  size_t rows = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) return Fail("unreadable plan line: " + line);
    std::printf("%-10lld %-24s %-11s %-7s %s\n", static_cast<long long>(j.value("step", 0LL)),
                j.value("name", "").c_str(), j.value("state", "").c_str(),
                j.value("keep", true) ? "keep" : "remove", j.value("reason", "").c_str());
    ++rows;
  }
  if (rows == 0) std::printf("(no checkpoint steps in %s)\n", path);
  return 0;
}

}  // namespace
}  // namespace ckptfs

int main(int argc, char** argv) {
  using namespace ckptfs;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version" || cmd == "-V") {
    std::printf("ckptfs %s\n", CKPTFS_VERSION);
    return 0;
  }
  if (cmd == "mount") return Mount(argc - 1, argv + 1);
  if (cmd == "commit") return Commit(argc - 1, argv + 1);
  if (cmd == "retention") return Retention(argc - 1, argv + 1);
  if (cmd == "status") return StatusCommand(argc - 1, argv + 1);
  if (cmd == "fsck") return FsckCommand(argc - 1, argv + 1);
  std::fprintf(stderr, "ckptfs: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}
