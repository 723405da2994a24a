// write_throughput: checkpoint-shaped write throughput through one or more
// ckptfs mounts compared with the same writes straight into a directory on the
// same disk, in the same run.
//
// One round writes `files` files of `file-mib` MiB each, in `write-kib` KiB
// write() calls, and closes each; with fsync, each file is fsync()ed before its
// close. The timed span covers open..write..[fsync..]close of all files of the
// round (CLOCK_MONOTONIC). In a round every side (each mount, then direct)
// writes once; the side that goes first moves on by one each round, so that
// drift in the disk (page cache pressure, SSD garbage collection, thermal)
// and whatever the previous side left behind hit every side alike. Before
// each side's timed span the bench sync()s, untimed: without fsync, the
// previous side's dirty pages would otherwise be written back during it.
// With --drop-caches (root) it also drops the page cache there: on a VM that
// hands free memory back to the host (virtio-balloon free page reporting),
// filling the page cache with memory the host took back costs ~3 s per GiB
// against ~0.2 s with memory the guest freed just before, so without the drop
// whichever side allocates last in a round is slow; the drop gives every side
// the page cache of the side just before it to reuse. (Removing every side's
// files at the start of a round instead left the first side of each round
// nothing recent to reuse: it was slow, whichever it was.)
// Each round writes into a fresh step directory, <dir>/bench/step<k>/; a
// side's previous round is removed, untimed, just before its next one, so disk
// use stays bounded at one round per side. ckptfs deletes a removed file's
// data later, from its GC queue; with a mount's backing directory given, the
// bench waits (untimed) until that directory holds no file before the mount's
// timed span, so that a daemon's deletions (ext4 freeing, and here
// discarding, 1 GiB) never fall into another side's timed span.
//
// The figure that matters is the median of the per-round ratios mount/direct:
// a ratio per round cancels slow phases of the disk, the median drops outliers.
// With a daemon pid for a mount, the daemon's CPU time (utime + stime from
// /proc/<pid>/stat, all its threads) over that mount's timed spans is printed
// per GiB written: with kernel passthrough the daemon should do almost nothing.
//
// Only the C++ standard library and POSIX: the benchmark must build wherever
// the daemon builds, and must not share code with it.

#include "bench_proc.h"
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

// Issue 18: with kernel passthrough a mount keeps 95% of the disk's direct
// write throughput, with fsync and without (0.80 before passthrough).
constexpr double kTargetRatio = 0.95;
constexpr double kBytesPerMB = 1e6;  // MB/s as disks report it: 10^6 bytes.
constexpr double kBytesPerGiB = 1073741824.0;

struct Side {
  std::string name;
  std::string dir;
  long pid = -1;            // the daemon serving dir, or -1 (direct, or not known)
  std::string backing_dir;  // where that daemon keeps its files' data, if known
};

struct Options {
  std::vector<Side> mounts;
  std::string direct_dir;
  long files = 8;
  long file_mib = 128;
  long write_kib = 1024;
  long rounds = 6;  // a multiple of the 3 sides: each goes first equally often
  bool with_fsync = true;
  bool without_fsync = true;
  bool drop_caches = false;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "write_throughput: %s\n", what.c_str());
  std::exit(1);
}

[[noreturn]] void DieErrno(const std::string& what, const std::string& path) {
  Die(what + " " + path + ": " + std::strerror(errno));
}

void Usage(FILE* out) {
  std::fprintf(out,
               "usage: write_throughput_bin --mount NAME=DIR [--mount NAME=DIR]... "
               "--direct-dir DIR\n"
               "         [--daemon-pid NAME=PID]... [--backing-dir NAME=DIR]...\n"
               "         [--fsync both|on|off] [--drop-caches]\n"
               "         [--files 8] [--file-mib 128] [--write-kib 1024] [--rounds 6]\n"
               "Writes FILES x FILE_MIB MiB in WRITE_KIB KiB write() calls, with and\n"
               "without fsync per file, under each DIR/bench/ and DIRECT_DIR/bench/ in\n"
               "turn, for ROUNDS rounds. --mount-dir DIR is --mount mount=DIR.\n");
}

long ParsePositive(std::string_view flag, std::string_view text) {
  long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value <= 0) {
    Die(std::string(flag) + " needs a positive integer, got '" +
        std::string(text) + "'");
  }
  return value;
}

// "NAME=VALUE" -> {NAME, VALUE}; both must be non-empty.
std::pair<std::string, std::string> SplitNamed(std::string_view flag,
                                               std::string_view text) {
  const auto eq = text.find('=');
  if (eq == text.npos || eq == 0 || eq + 1 == text.size()) {
    Die(std::string(flag) + " needs NAME=VALUE, got '" + std::string(text) + "'");
  }
  return {std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
}

Options ParseArgs(int argc, char** argv) {
  Options opt;
  std::vector<std::pair<std::string, long>> pids;
  std::vector<std::pair<std::string, std::string>> backing;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      Usage(stdout);
      std::exit(0);
    }
    // Accept both "--flag value" and "--flag=value" (the first '=' splits,
    // so "--mount=a=/x" is "--mount a=/x").
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
    if (flag == "--mount") {
      auto [name, dir] = SplitNamed(flag, next());
      opt.mounts.push_back({name, dir, -1, {}});
    } else if (flag == "--mount-dir") {
      opt.mounts.push_back({"mount", std::string(next()), -1, {}});
    } else if (flag == "--direct-dir") {
      opt.direct_dir = next();
    } else if (flag == "--daemon-pid") {
      auto [name, pid] = SplitNamed(flag, next());
      pids.emplace_back(name, ParsePositive(flag, pid));
    } else if (flag == "--drop-caches") {
      opt.drop_caches = true;
    } else if (flag == "--backing-dir") {
      backing.push_back(SplitNamed(flag, next()));
    } else if (flag == "--fsync") {
      const std::string_view mode = next();
      if (mode == "both") {
        opt.with_fsync = opt.without_fsync = true;
      } else if (mode == "on") {
        opt.with_fsync = true;
        opt.without_fsync = false;
      } else if (mode == "off") {
        opt.with_fsync = false;
        opt.without_fsync = true;
      } else {
        Die("--fsync needs both, on or off, got '" + std::string(mode) + "'");
      }
    } else if (flag == "--files") {
      opt.files = ParsePositive(flag, next());
    } else if (flag == "--file-mib") {
      opt.file_mib = ParsePositive(flag, next());
    } else if (flag == "--write-kib") {
      opt.write_kib = ParsePositive(flag, next());
    } else if (flag == "--rounds") {
      opt.rounds = ParsePositive(flag, next());
    } else {
      Usage(stderr);
      Die("unknown argument '" + std::string(arg) + "'");
    }
  }
  if (opt.mounts.empty() || opt.direct_dir.empty()) {
    Usage(stderr);
    Die("at least one --mount (or --mount-dir) and --direct-dir are required");
  }
  auto mount_named = [&](std::string_view flag, const std::string& name) -> Side& {
    auto it = std::find_if(opt.mounts.begin(), opt.mounts.end(),
                           [&](const Side& s) { return s.name == name; });
    if (it == opt.mounts.end()) Die(std::string(flag) + " names no mount: " + name);
    return *it;
  };
  for (const auto& [name, pid] : pids) mount_named("--daemon-pid", name).pid = pid;
  for (const auto& [name, dir] : backing) mount_named("--backing-dir", name).backing_dir = dir;
  for (size_t a = 0; a < opt.mounts.size(); ++a) {
    if (opt.mounts[a].name == "direct") Die("'direct' is the baseline's name");
    for (size_t b = 0; b < a; ++b) {
      if (opt.mounts[a].name == opt.mounts[b].name) {
        Die("two mounts named " + opt.mounts[a].name);
      }
    }
  }
  return opt;
}

using bench::NowSeconds;

// A daemon that has gone away is an error: the figures after it would be
// meaningless.
double CpuSeconds(long pid) {
  double seconds = 0;
  std::string why;
  if (!bench::ProcessCpuSeconds(pid, &seconds, &why)) Die(why);
  return seconds;
}

// Pseudo-random bytes (splitmix64), so that neither side can win by
// compressing or deduplicating zeros.
void FillPseudoRandom(unsigned char* buf, size_t len) {
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  for (size_t off = 0; off < len; off += sizeof(uint64_t)) {
    state += 0x9e3779b97f4a7c15ULL;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    std::memcpy(buf + off, &z, std::min(sizeof z, len - off));
  }
}

void DropCaches() {
  int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, "3\n", 2) != 2) {
    DieErrno("--drop-caches: cannot write (run as root)", "/proc/sys/vm/drop_caches");
  }
  close(fd);
}

void MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    DieErrno("mkdir", path);
  }
}

void CheckDir(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) DieErrno("stat", path);
  if (!S_ISDIR(st.st_mode)) Die(path + " is not a directory");
}

std::string StepDir(const std::string& root, long step) {
  return root + "/bench/step" + std::to_string(step);
}

// Names as a 1-rank-per-file DCP checkpoint would have them; there is no
// .metadata, so ckptfs never commits the step.
std::string FileName(const std::string& step_dir, long index) {
  return step_dir + "/__" + std::to_string(index) + "_0.distcp";
}

void WriteAll(int fd, const unsigned char* buf, size_t len,
              const std::string& path) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      DieErrno("write", path);
    }
    buf += n;
    len -= static_cast<size_t>(n);
  }
}

// Writes one round into step_dir and returns the seconds it took.
double WriteRound(const Options& opt, const std::string& step_dir,
                  const unsigned char* buf, bool fsync_each) {
  const uint64_t file_bytes = static_cast<uint64_t>(opt.file_mib) << 20;
  const uint64_t chunk = static_cast<uint64_t>(opt.write_kib) << 10;
  const double start = NowSeconds();
  for (long f = 0; f < opt.files; ++f) {
    const std::string path = FileName(step_dir, f);
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) DieErrno("open", path);
    for (uint64_t done = 0; done < file_bytes;) {
      const uint64_t n = std::min(chunk, file_bytes - done);
      WriteAll(fd, buf, n, path);
      done += n;
    }
    if (fsync_each && fsync(fd) != 0) DieErrno("fsync", path);
    if (close(fd) != 0) DieErrno("close", path);
  }
  return NowSeconds() - start;
}

void RemoveRound(const Options& opt, const std::string& step_dir) {
  for (long f = 0; f < opt.files; ++f) {
    const std::string path = FileName(step_dir, f);
    if (unlink(path.c_str()) != 0 && errno != ENOENT) DieErrno("unlink", path);
  }
  if (rmdir(step_dir.c_str()) != 0 && errno != ENOENT) {
    DieErrno("rmdir", step_dir);
  }
}

long CountFiles(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) DieErrno("opendir", dir);
  long n = 0;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

// Waits until the side's backing directory is empty: the data of the files
// the bench removed is deleted. Returns the seconds waited.
double AwaitDeletions(const Side& side) {
  const double start = NowSeconds();
  if (side.backing_dir.empty()) return 0;
  while (CountFiles(side.backing_dir) > 0) {
    if (NowSeconds() - start > 120) {
      Die(side.name + ": " + side.backing_dir + " still holds " +
          std::to_string(CountFiles(side.backing_dir)) +
          " files 120 s after the bench removed its files");
    }
    usleep(20'000);
  }
  return NowSeconds() - start;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

// What one side did over the rounds of one mode.
struct Tally {
  std::vector<double> mbps;
  std::vector<double> ratios;  // to direct, same round (mounts only)
  double cpu_seconds = 0;      // the daemon's, over the timed spans
  double bytes = 0;
};

// Runs opt.rounds rounds with or without fsync over `sides` (the mounts, then
// direct last) and prints them. `step` numbers step directories across calls.
void RunMode(const Options& opt, const std::vector<Side>& sides, bool fsync_each,
             const unsigned char* buf, long* step, double* deletion_wait) {
  const size_t n = sides.size();
  const size_t direct = n - 1;
  const double round_bytes = static_cast<double>(opt.files) *
                             static_cast<double>(opt.file_mib) * 1048576.0;
  std::printf("\n%s (before each side, untimed: sync%s)\n",
              fsync_each ? "with fsync: open, write, fsync, close of each file"
                         : "without fsync: open, write, close of each file",
              opt.drop_caches ? ", page cache dropped" : "");
  std::vector<Tally> tally(n);
  std::vector<long> last_step(n, 0);
  for (long round = 1; round <= opt.rounds; ++round) {
    ++*step;
    std::vector<double> secs(n), cpu(n);
    for (size_t k = 0; k < n; ++k) {
      const size_t s = (static_cast<size_t>(round - 1) + k) % n;
      if (last_step[s] > 0) RemoveRound(opt, StepDir(sides[s].dir, last_step[s]));
      *deletion_wait += AwaitDeletions(sides[s]);
      const std::string step_dir = StepDir(sides[s].dir, *step);
      MakeDir(step_dir);
      last_step[s] = *step;
      sync();
      if (opt.drop_caches) DropCaches();
      const double cpu0 = sides[s].pid > 0 ? CpuSeconds(sides[s].pid) : 0;
      secs[s] = WriteRound(opt, step_dir, buf, fsync_each);
      cpu[s] = sides[s].pid > 0 ? CpuSeconds(sides[s].pid) - cpu0 : 0;
    }
    std::printf("round %ld:", round);
    for (size_t s = 0; s < n; ++s) {
      const double mbps = round_bytes / kBytesPerMB / secs[s];
      tally[s].mbps.push_back(mbps);
      tally[s].cpu_seconds += cpu[s];
      tally[s].bytes += round_bytes;
      std::printf("  %s %7.1f MB/s (%5.2f s", sides[s].name.c_str(), mbps, secs[s]);
      if (sides[s].pid > 0) std::printf(", daemon %.2f CPU-s", cpu[s]);
      std::printf(")");
    }
    std::printf("  |");
    for (size_t s = 0; s < direct; ++s) {
      tally[s].ratios.push_back(secs[direct] / secs[s]);
      std::printf("  %s/direct %.2f", sides[s].name.c_str(), tally[s].ratios.back());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  for (size_t s = 0; s < n; ++s) {
    if (last_step[s] > 0) RemoveRound(opt, StepDir(sides[s].dir, last_step[s]));
    *deletion_wait += AwaitDeletions(sides[s]);
  }

  std::printf("median MB/s:");
  for (size_t s = 0; s < n; ++s) {
    std::printf("  %s %.1f", sides[s].name.c_str(), Median(tally[s].mbps));
  }
  std::printf("\n");
  for (size_t s = 0; s < direct; ++s) {
    const double ratio = Median(tally[s].ratios);
    std::printf("ratio %s/direct (median of the rounds' ratios): %.2f  "
                "[target >= %.2f: %s]\n",
                sides[s].name.c_str(), ratio, kTargetRatio,
                ratio >= kTargetRatio ? "met" : "missed");
    // Stalls of the VM's disk hit single rounds of any side; the fastest
    // round of each shows the paths' own speeds.
    const double best = *std::max_element(tally[s].mbps.begin(), tally[s].mbps.end());
    const double best_direct =
        *std::max_element(tally[direct].mbps.begin(), tally[direct].mbps.end());
    std::printf("  fastest rounds: %s %.1f MB/s, direct %.1f MB/s, ratio %.2f\n",
                sides[s].name.c_str(), best, best_direct, best / best_direct);
  }
  for (size_t s = 0; s < direct; ++s) {
    if (sides[s].pid <= 0) continue;
    std::printf("daemon CPU-s per GiB written, %s: %.3f\n", sides[s].name.c_str(),
                tally[s].cpu_seconds / (tally[s].bytes / kBytesPerGiB));
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = ParseArgs(argc, argv);
  std::vector<Side> sides = opt.mounts;
  sides.push_back({"direct", opt.direct_dir, -1, {}});
  for (const auto& side : sides) {
    CheckDir(side.dir);
    MakeDir(side.dir + "/bench");
  }

  const size_t chunk = static_cast<size_t>(opt.write_kib) << 10;
  // Page-aligned, rounded up to whole 8-byte words for the filler.
  const size_t alloc = (chunk + 4095) / 4096 * 4096;
  std::unique_ptr<unsigned char, decltype(&std::free)> buf(
      static_cast<unsigned char*>(std::aligned_alloc(4096, alloc)), &std::free);
  if (!buf) Die("out of memory for the write buffer");
  FillPseudoRandom(buf.get(), alloc);

  std::printf("write_throughput: %ld files x %ld MiB, %ld KiB writes, %ld rounds "
              "(MB = 10^6 bytes)\n",
              opt.files, opt.file_mib, opt.write_kib, opt.rounds);
  for (const auto& side : sides) {
    std::printf("  %-8s %s", side.name.c_str(), side.dir.c_str());
    if (side.pid > 0) std::printf(" (daemon pid %ld)", side.pid);
    if (!side.backing_dir.empty()) std::printf(" (data in %s)", side.backing_dir.c_str());
    std::printf("\n");
  }
  std::fflush(stdout);

  long step = 0;
  double deletion_wait = 0;
  if (opt.with_fsync) {
    RunMode(opt, sides, /*fsync_each=*/true, buf.get(), &step, &deletion_wait);
  }
  if (opt.without_fsync) {
    RunMode(opt, sides, /*fsync_each=*/false, buf.get(), &step, &deletion_wait);
  }
  std::printf("\nuntimed waits for the daemons to delete removed files' data: %.1f s\n",
              deletion_wait);

  for (const auto& side : sides) {
    rmdir((side.dir + "/bench").c_str());  // Best effort: may hold other files.
  }
  return 0;
}
