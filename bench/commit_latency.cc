// commit_latency: how long `ckptfs commit` of a many-file step takes, and
// how much of it is making the data durable, against the two ways of
// syncing the same files measured on the same filesystem in the same run.
//
// One round:
//   mount     creates <mount>/run/step<k> with `files` files of `file-kib`
//             KiB, written without fsync and closed, then times what
//             `ckptfs commit` does: setxattr user.ckptfs.commit (which
//             returns when the daemon's first commit attempt ends) and a
//             read of user.ckptfs.state that must say committed. The
//             daemon's /.ckptfs/metrics, read before and after, give its own
//             commit duration and the part of it spent syncing.
//   per-file  the same files written straight into <direct>/perfile<k>,
//             then timed: open, fdatasync and close of each, fsync of the
//             directory (how ckptfs committed before: every file alone).
//   syncfs    the same into <direct>/syncfs<k>, then timed: one syncfs of
//             the filesystem and fsync of the directory.
// The sides alternate within each round so that drift in the disk hits all
// three alike. Committed steps are kept (removing them would give the daemon
// deletion work during later commits); the wrapper removes everything.
//
// p99 over 20 rounds is the nearest-rank 99th percentile, which for 20
// samples is the slowest of them.
//
// Only the C++ standard library and POSIX: the benchmark must build wherever
// the daemon builds, and must not share code with it.

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr double kTargetP99Ms = 30;

struct Options {
  std::string mount_dir;
  std::string direct_dir;
  long files = 1000;
  long file_kib = 64;
  long rounds = 20;
  long warmup = 1;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "commit_latency: %s\n", what.c_str());
  std::exit(1);
}

[[noreturn]] void DieErrno(const std::string& what, const std::string& path) {
  Die(what + " " + path + ": " + std::strerror(errno));
}

void Usage(FILE* out) {
  std::fprintf(out,
               "usage: commit_latency_bin --mount-dir DIR --direct-dir DIR\n"
               "         [--files 1000] [--file-kib 64] [--rounds 20] [--warmup 1]\n"
               "Per round: a step of FILES x FILE_KIB KiB written without fsync under\n"
               "MOUNT_DIR/run/ and committed (timed), and the same files under DIRECT_DIR\n"
               "synced one by one and with one syncfs (timed). WARMUP untimed rounds first.\n");
}

long ParseCount(std::string_view flag, std::string_view text, long min) {
  long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min) {
    Die(std::string(flag) + " needs an integer >= " + std::to_string(min) + ", got '" +
        std::string(text) + "'");
  }
  return value;
}

Options ParseArgs(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      Usage(stdout);
      std::exit(0);
    }
    // Both "--flag value" and "--flag=value".
    std::string_view flag = arg;
    std::string_view value;
    bool has_value = false;
    if (auto eq = arg.find('='); arg.starts_with("--") && eq != arg.npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto next = [&]() -> std::string_view {
      if (has_value) return value;
      if (i + 1 >= argc) Die(std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (flag == "--mount-dir") {
      opt.mount_dir = next();
    } else if (flag == "--direct-dir") {
      opt.direct_dir = next();
    } else if (flag == "--files") {
      opt.files = ParseCount(flag, next(), 1);
    } else if (flag == "--file-kib") {
      opt.file_kib = ParseCount(flag, next(), 1);
    } else if (flag == "--rounds") {
      opt.rounds = ParseCount(flag, next(), 1);
    } else if (flag == "--warmup") {
      opt.warmup = ParseCount(flag, next(), 0);
    } else {
      Usage(stderr);
      Die("unknown argument '" + std::string(arg) + "'");
    }
  }
  if (opt.mount_dir.empty() || opt.direct_dir.empty()) {
    Usage(stderr);
    Die("--mount-dir and --direct-dir are required");
  }
  return opt;
}

double NowMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// Pseudo-random bytes (splitmix64): nothing below can win by compressing.
void FillPseudoRandom(std::vector<unsigned char>* buf, uint64_t seed) {
  uint64_t state = seed * 0x9e3779b97f4a7c15ULL;
  for (size_t off = 0; off < buf->size(); off += sizeof(uint64_t)) {
    state += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    std::memcpy(buf->data() + off, &z, std::min(sizeof z, buf->size() - off));
  }
}

void MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) DieErrno("mkdir", path);
}

std::string FilePath(const std::string& dir, long index) {
  char name[32];
  std::snprintf(name, sizeof name, "/shard%05ld.bin", index);
  return dir + name;
}

// Creates dir with the round's files, each written in one write() and
// closed without fsync, as torch.save leaves them.
void WriteStep(const Options& opt, const std::string& dir, const std::vector<unsigned char>& buf) {
  MakeDir(dir);
  for (long f = 0; f < opt.files; ++f) {
    const std::string path = FilePath(dir, f);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) DieErrno("create", path);
    for (size_t done = 0; done < buf.size();) {
      const ssize_t n = write(fd, buf.data() + done, buf.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) DieErrno("write", path);
      done += static_cast<size_t>(n);
    }
    if (close(fd) != 0) DieErrno("close", path);
  }
}

void FsyncPath(const std::string& path, bool data_only) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) DieErrno("open", path);
  if ((data_only ? fdatasync(fd) : fsync(fd)) != 0) DieErrno("fsync", path);
  close(fd);
}

// How ckptfs committed before: every file synced on its own, then the
// directory (the daemon opened each backing file and called fdatasync).
double SyncEachFile(const Options& opt, const std::string& dir) {
  const double start = NowMs();
  for (long f = 0; f < opt.files; ++f) FsyncPath(FilePath(dir, f), /*data_only=*/true);
  FsyncPath(dir, /*data_only=*/false);
  return NowMs() - start;
}

// One syncfs of the filesystem, then the directory.
double SyncFilesystem(const std::string& dir) {
  const double start = NowMs();
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) DieErrno("open", dir);
  if (syncfs(fd) != 0) DieErrno("syncfs", dir);
  if (fsync(fd) != 0) DieErrno("fsync", dir);
  close(fd);
  return NowMs() - start;
}

std::string Xattr(const std::string& path, const char* name) {
  char value[4096];
  const ssize_t n = getxattr(path.c_str(), name, value, sizeof value);
  return n < 0 ? std::string() : std::string(value, static_cast<size_t>(n));
}

// What `ckptfs commit STEP` does, without starting a process: ask, then
// read the state (polled like the command, in case the first attempt only
// queued the commit).
double Commit(const std::string& step) {
  const double start = NowMs();
  if (setxattr(step.c_str(), "user.ckptfs.commit", "1", 1, 0) != 0) {
    Die("commit " + step + ": " + std::strerror(errno) + ": " + Xattr(step, "user.ckptfs.error"));
  }
  for (;;) {
    const std::string state = Xattr(step, "user.ckptfs.state");
    if (state == "committed") break;
    if (state != "writing" || NowMs() - start > 600e3) {
      Die("commit " + step + ": state " + state + ": " + Xattr(step, "user.ckptfs.error"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return NowMs() - start;
}

// The _sum of a histogram in the daemon's metrics, in ms; NaN when the
// daemon does not export it (an older build without the sync histogram).
double MetricSumMs(const std::string& metrics_path, const std::string& family) {
  std::ifstream in(metrics_path);
  if (!in) DieErrno("open", metrics_path);
  const std::string prefix = family + "_sum ";
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) return std::strtod(line.c_str() + prefix.size(), nullptr) * 1e3;
  }
  return std::nan("");
}

struct Series {
  const char* name;
  std::vector<double> ms;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::max<size_t>(rank, 1) - 1];
}

double Sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

void PrintRow(const Series& s) {
  std::printf("  %-34s p50 %8.2f ms   p99 %8.2f ms   mean %8.2f ms\n", s.name, Percentile(s.ms, 50),
              Percentile(s.ms, 99), Sum(s.ms) / static_cast<double>(s.ms.size()));
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = ParseArgs(argc, argv);
  const std::string run = opt.mount_dir + "/run";
  const std::string metrics = opt.mount_dir + "/.ckptfs/metrics";
  MakeDir(run);
  MakeDir(opt.direct_dir);
  std::vector<unsigned char> buf(static_cast<size_t>(opt.file_kib) << 10);

  std::printf(
      "commit_latency: steps of %ld files x %ld KiB written without fsync, %ld rounds "
      "(+%ld untimed)\n",
      opt.files, opt.file_kib, opt.rounds, opt.warmup);
  std::fflush(stdout);

  Series commit{"mount: ckptfs commit (client)", {}};
  Series daemon{"mount: commit in the daemon", {}};
  Series syncing{"mount: of which syncing", {}};
  Series per_file{"direct: fdatasync each + dir fsync", {}};
  Series one_syncfs{"direct: one syncfs + dir fsync", {}};
  for (long round = 1 - opt.warmup; round <= opt.rounds; ++round) {
    const bool timed = round >= 1;
    const std::string tag = std::to_string(round + opt.warmup);
    FillPseudoRandom(&buf, static_cast<uint64_t>(round + opt.warmup));

    const std::string step = run + "/step" + tag;
    const double write_start = NowMs();
    WriteStep(opt, step, buf);
    const double write_ms = NowMs() - write_start;
    const double daemon_before = MetricSumMs(metrics, "ckptfs_commit_duration_seconds");
    const double sync_before = MetricSumMs(metrics, "ckptfs_commit_sync_duration_seconds");
    const double commit_ms = Commit(step);
    const double daemon_ms = MetricSumMs(metrics, "ckptfs_commit_duration_seconds") - daemon_before;
    const double sync_ms =
        MetricSumMs(metrics, "ckptfs_commit_sync_duration_seconds") - sync_before;

    const std::string a = opt.direct_dir + "/perfile" + tag;
    WriteStep(opt, a, buf);
    const double per_file_ms = SyncEachFile(opt, a);

    const std::string b = opt.direct_dir + "/syncfs" + tag;
    WriteStep(opt, b, buf);
    const double syncfs_ms = SyncFilesystem(b);

    std::printf(
        "%s %3ld: written in %5.2f s, commit %8.2f ms (daemon %8.2f, syncing %8.2f)   "
        "fdatasync each %8.2f ms   syncfs %8.2f ms\n",
        timed ? "round " : "warmup", timed ? round : round + opt.warmup, write_ms / 1e3, commit_ms,
        daemon_ms, sync_ms, per_file_ms, syncfs_ms);
    std::fflush(stdout);
    if (!timed) continue;
    commit.ms.push_back(commit_ms);
    daemon.ms.push_back(daemon_ms);
    if (!std::isnan(sync_ms)) syncing.ms.push_back(sync_ms);
    per_file.ms.push_back(per_file_ms);
    one_syncfs.ms.push_back(syncfs_ms);
  }

  std::printf(
      "\nover %ld commits of %ld files (%.1f MiB a step; p99 by nearest rank: sample %ld of "
      "%ld, fastest first):\n",
      opt.rounds, opt.files, static_cast<double>(opt.files * opt.file_kib) / 1024.0,
      static_cast<long>(std::ceil(0.99 * static_cast<double>(opt.rounds))), opt.rounds);
  PrintRow(commit);
  PrintRow(daemon);
  if (syncing.ms.empty()) {
    std::printf(
        "  mount: of which syncing              n/a (the daemon exports no "
        "ckptfs_commit_sync_duration_seconds)\n");
  } else {
    PrintRow(syncing);
    std::printf(
        "  share of the daemon's commit time spent syncing: %.0f%% (%.0f%% of the client's)\n",
        100 * Sum(syncing.ms) / Sum(daemon.ms), 100 * Sum(syncing.ms) / Sum(commit.ms));
  }
  PrintRow(per_file);
  PrintRow(one_syncfs);
  std::printf(
      "ratios (p50): fdatasync each / one syncfs %.1fx;  commit / fdatasync each %.2f;  "
      "commit / one syncfs %.2f\n",
      Percentile(per_file.ms, 50) / Percentile(one_syncfs.ms, 50),
      Percentile(commit.ms, 50) / Percentile(per_file.ms, 50),
      Percentile(commit.ms, 50) / Percentile(one_syncfs.ms, 50));
  const double p99 = Percentile(commit.ms, 99);
  std::printf("target: commit p99 < %.0f ms: %s (%.2f ms)\n", kTargetP99Ms,
              p99 < kTargetP99Ms ? "met" : "missed", p99);
  return 0;
}
