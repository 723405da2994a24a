// restore: cold sequential reads of a checkpoint step through ckptfs mounts
// against the same bytes read straight from the disk, in the same run.
//
//   restore_bin write DIR [--files 8] [--file-mib 256] [--io-kib 4096]
//     writes the step's files into DIR (fsync each), the same bytes on every
//     call.
//   restore_bin read --side NAME=DIR --direct NAME=DIR [--daemon-pid NAME=PID]
//                    ... [--files 8] [--file-mib 256] [--io-kib 4096] [--rounds 9]
//     times a cold read of every file of each side's step (a mount's step
//     directory) and of its direct twin (the same bytes without the mount:
//     the wrapper hard-links the mount's backing files there, so both read
//     the very same blocks), one read after the other, in IO_KIB read()
//     calls. Before each timed read the page cache is dropped (sync; echo 3 >
//     /proc/sys/vm/drop_caches: root only, and a run that cannot drop it
//     fails, since warm figures would pass for cold ones). The read that goes
//     first moves on by one each round. Each mount's figure is the median of
//     its per-round ratios to its direct twin (time direct / time mount, so
//     higher is better), with its daemon's CPU seconds (utime + stime,
//     /proc/<pid>/stat) per GiB read and the reader's own. After the timed
//     rounds every read's bytes are checked against what `write` wrote,
//     untimed.
//
// The data is counter-based pseudo-random (splitmix64's mix of the file
// number and the word's offset): no two blocks are alike, nothing gains from
// compression or deduplication, and any range can be regenerated to check.
//
// Only the C++ standard library and POSIX, like write_throughput.cc.

#include "bench_proc.h"
#include <fcntl.h>
#include <sys/resource.h>
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

// Issue 18: a cold restore through the mount at >= 95% of a direct read.
constexpr double kTargetRatio = 0.95;
constexpr double kBytesPerMB = 1e6;
constexpr double kBytesPerGiB = 1073741824.0;

struct Side {
  std::string name;
  std::string dir;         // the step through the mount
  std::string direct_dir;  // the same bytes, read without the mount
  long pid = -1;
};

struct Options {
  std::string command;      // write | read
  std::string write_dir;    // write
  std::vector<Side> sides;  // read
  long files = 8;
  long file_mib = 256;
  long io_kib = 4096;
  long rounds = 9;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "restore: %s\n", what.c_str());
  std::exit(1);
}

[[noreturn]] void DieErrno(const std::string& what, const std::string& path) {
  Die(what + " " + path + ": " + std::strerror(errno));
}

void Usage(FILE* out) {
  std::fprintf(out,
               "usage: restore_bin write DIR [--files 8] [--file-mib 256] [--io-kib 4096]\n"
               "       restore_bin read (--side NAME=DIR --direct NAME=DIR\n"
               "                        [--daemon-pid NAME=PID])... [--files 8]\n"
               "                        [--file-mib 256] [--io-kib 4096] [--rounds 9]\n");
}

long ParsePositive(std::string_view flag, std::string_view text) {
  long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value <= 0) {
    Die(std::string(flag) + " needs a positive integer, got '" + std::string(text) + "'");
  }
  return value;
}

std::pair<std::string, std::string> SplitNamed(std::string_view flag, std::string_view text) {
  const auto eq = text.find('=');
  if (eq == text.npos || eq == 0 || eq + 1 == text.size()) {
    Die(std::string(flag) + " needs NAME=VALUE, got '" + std::string(text) + "'");
  }
  return {std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
}

Options ParseArgs(int argc, char** argv) {
  Options opt;
  if (argc < 2) {
    Usage(stderr);
    Die("a command is needed: write or read");
  }
  opt.command = argv[1];
  if (opt.command == "-h" || opt.command == "--help") {
    Usage(stdout);
    std::exit(0);
  }
  if (opt.command != "write" && opt.command != "read") {
    Usage(stderr);
    Die("unknown command '" + opt.command + "'");
  }
  std::vector<std::pair<std::string, long>> pids;
  std::vector<std::pair<std::string, std::string>> directs;
  for (int i = 2; i < argc; ++i) {
    std::string_view arg = argv[i];
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
    if (!arg.starts_with("--") && opt.command == "write" && opt.write_dir.empty()) {
      opt.write_dir = arg;
    } else if (flag == "--side" && opt.command == "read") {
      auto [name, dir] = SplitNamed(flag, next());
      opt.sides.push_back({name, dir, {}, -1});
    } else if (flag == "--daemon-pid" && opt.command == "read") {
      auto [name, pid] = SplitNamed(flag, next());
      pids.emplace_back(name, ParsePositive(flag, pid));
    } else if (flag == "--direct" && opt.command == "read") {
      directs.push_back(SplitNamed(flag, next()));
    } else if (flag == "--rounds" && opt.command == "read") {
      opt.rounds = ParsePositive(flag, next());
    } else if (flag == "--files") {
      opt.files = ParsePositive(flag, next());
    } else if (flag == "--file-mib") {
      opt.file_mib = ParsePositive(flag, next());
    } else if (flag == "--io-kib") {
      opt.io_kib = ParsePositive(flag, next());
    } else {
      Usage(stderr);
      Die("unknown argument '" + std::string(arg) + "' for " + opt.command);
    }
  }
  if (opt.command == "write" && opt.write_dir.empty()) Die("write needs a directory");
  if (opt.command == "read" && opt.sides.empty()) Die("read needs at least one --side");
  auto side_named = [&](std::string_view flag, const std::string& name) -> Side& {
    auto it = std::find_if(opt.sides.begin(), opt.sides.end(),
                           [&](const Side& s) { return s.name == name; });
    if (it == opt.sides.end()) Die(std::string(flag) + " names no side: " + name);
    return *it;
  };
  for (const auto& [name, pid] : pids) side_named("--daemon-pid", name).pid = pid;
  for (const auto& [name, dir] : directs) side_named("--direct", name).direct_dir = dir;
  for (size_t a = 0; a < opt.sides.size(); ++a) {
    if (opt.sides[a].direct_dir.empty()) Die("no --direct for side " + opt.sides[a].name);
    for (size_t b = 0; b < a; ++b) {
      if (opt.sides[a].name == opt.sides[b].name) Die("two sides named " + opt.sides[a].name);
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

// The bytes of file `file` from `offset` (a multiple of 8) on.
void FillData(long file, uint64_t offset, unsigned char* buf, size_t len) {
  const uint64_t key = 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(file + 1);
  for (size_t off = 0; off < len; off += sizeof(uint64_t)) {
    uint64_t z = key + (offset + off) / sizeof(uint64_t) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    std::memcpy(buf + off, &z, std::min(sizeof z, len - off));
  }
}

std::string FileName(const std::string& dir, long index) {
  return dir + "/__" + std::to_string(index) + "_0.distcp";
}

struct Buffer {
  explicit Buffer(size_t len)
      : size((len + 4095) / 4096 * 4096),
        data(static_cast<unsigned char*>(std::aligned_alloc(4096, size)), &std::free) {
    if (!data) Die("out of memory for a buffer");
  }
  size_t size;
  std::unique_ptr<unsigned char, decltype(&std::free)> data;
};

void Write(const Options& opt) {
  const uint64_t file_bytes = static_cast<uint64_t>(opt.file_mib) << 20;
  const size_t io = static_cast<size_t>(opt.io_kib) << 10;
  Buffer buf(io);
  for (long f = 0; f < opt.files; ++f) {
    const std::string path = FileName(opt.write_dir, f);
    int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) DieErrno("open", path);
    for (uint64_t done = 0; done < file_bytes;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(io, file_bytes - done));
      FillData(f, done, buf.data.get(), n);
      for (size_t put = 0; put < n;) {
        ssize_t w = write(fd, buf.data.get() + put, n - put);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) DieErrno("write", path);
        put += static_cast<size_t>(w);
      }
      done += n;
    }
    if (fsync(fd) != 0) DieErrno("fsync", path);
    if (close(fd) != 0) DieErrno("close", path);
  }
}

// Cold means nothing of the step in any page cache, the mount's or the
// backing files'; dentries and inodes go too, so opens look up again.
void DropCaches() {
  sync();
  int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, "3\n", 2) != 2) {
    DieErrno("cannot drop the page cache (run as root):", "/proc/sys/vm/drop_caches");
  }
  close(fd);
}

// Reads every file of dir sequentially (or, with `check`, compares it with
// the data written) and returns the bytes read.
uint64_t ReadStep(const Options& opt, const std::string& dir, Buffer* buf, Buffer* expect) {
  const uint64_t file_bytes = static_cast<uint64_t>(opt.file_mib) << 20;
  const size_t io = static_cast<size_t>(opt.io_kib) << 10;
  uint64_t total = 0;
  for (long f = 0; f < opt.files; ++f) {
    const std::string path = FileName(dir, f);
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) DieErrno("open", path);
    uint64_t got = 0;
    for (;;) {
      ssize_t n = read(fd, buf->data.get(), io);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) DieErrno("read", path);
      if (n == 0) break;
      if (expect) {
        // Reads may come back short; regenerate exactly what should be there.
        const uint64_t aligned = got & ~uint64_t{7};
        const size_t lead = static_cast<size_t>(got - aligned);
        if (lead + static_cast<size_t>(n) + 8 > expect->size) Die("check buffer too small");
        FillData(f, aligned, expect->data.get(), lead + static_cast<size_t>(n));
        if (std::memcmp(buf->data.get(), expect->data.get() + lead, static_cast<size_t>(n)) != 0) {
          Die(path + ": the bytes at offset " + std::to_string(got) + " are not the ones written");
        }
      }
      got += static_cast<uint64_t>(n);
    }
    if (close(fd) != 0) DieErrno("close", path);
    if (got != file_bytes) {
      Die(path + ": read " + std::to_string(got) + " bytes, expected " + std::to_string(file_bytes));
    }
    total += got;
  }
  return total;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

// The reader's own CPU seconds so far (user + system).
double SelfCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
  };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

// One timed read: a side through its mount, or its direct twin.
struct ReadJob {
  std::string label;
  std::string dir;
  long pid;
  std::vector<double> secs, daemon_cpu, self_cpu;
};

void Read(const Options& opt) {
  std::vector<ReadJob> jobs;  // side k: jobs[2k] through the mount, jobs[2k+1] direct
  for (const auto& side : opt.sides) {
    jobs.push_back({side.name, side.dir, side.pid, {}, {}, {}});
    jobs.push_back({side.name + "-direct", side.direct_dir, -1, {}, {}, {}});
  }
  const size_t n = jobs.size();
  const size_t io = static_cast<size_t>(opt.io_kib) << 10;
  Buffer buf(io);
  const double step_bytes =
      static_cast<double>(opt.files) * static_cast<double>(opt.file_mib) * 1048576.0;
  const double step_gib = step_bytes / kBytesPerGiB;

  std::printf("restore: cold sequential read of %ld files x %ld MiB in %ld KiB reads, "
              "%ld rounds (MB = 10^6 bytes)\n",
              opt.files, opt.file_mib, opt.io_kib, opt.rounds);
  for (const auto& job : jobs) {
    std::printf("  %-12s %s", job.label.c_str(), job.dir.c_str());
    if (job.pid > 0) std::printf(" (daemon pid %ld)", job.pid);
    std::printf("\n");
  }
  std::fflush(stdout);

  for (long round = 1; round <= opt.rounds; ++round) {
    for (size_t k = 0; k < n; ++k) {
      ReadJob& job = jobs[(static_cast<size_t>(round - 1) + k) % n];
      DropCaches();
      const double cpu0 = job.pid > 0 ? CpuSeconds(job.pid) : 0;
      const double self0 = SelfCpuSeconds();
      const double t0 = NowSeconds();
      ReadStep(opt, job.dir, &buf, nullptr);
      job.secs.push_back(NowSeconds() - t0);
      job.self_cpu.push_back(SelfCpuSeconds() - self0);
      job.daemon_cpu.push_back(job.pid > 0 ? CpuSeconds(job.pid) - cpu0 : 0);
    }
    std::printf("round %ld:", round);
    for (const auto& job : jobs) {
      std::printf("  %s %6.1f MB/s (%4.2f s", job.label.c_str(),
                  step_bytes / kBytesPerMB / job.secs.back(), job.secs.back());
      if (job.pid > 0) std::printf(", daemon %.2f CPU-s", job.daemon_cpu.back());
      std::printf(")");
    }
    std::printf("  |");
    for (size_t k = 0; k < n; k += 2) {
      std::printf("  %s/direct %.2f", jobs[k].label.c_str(),
                  jobs[k + 1].secs.back() / jobs[k].secs.back());
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  std::printf("median MB/s:");
  for (const auto& job : jobs) {
    std::vector<double> mbps;
    for (double t : job.secs) mbps.push_back(step_bytes / kBytesPerMB / t);
    std::printf("  %s %.1f", job.label.c_str(), Median(mbps));
  }
  std::printf("\n");
  for (size_t k = 0; k < n; k += 2) {
    std::vector<double> ratios;
    for (size_t r = 0; r < jobs[k].secs.size(); ++r) {
      ratios.push_back(jobs[k + 1].secs[r] / jobs[k].secs[r]);
    }
    const double ratio = Median(ratios);
    std::printf("ratio %s/direct (median of the rounds' ratios): %.2f  [target >= %.2f: %s]\n",
                jobs[k].label.c_str(), ratio, kTargetRatio,
                ratio >= kTargetRatio ? "met" : "missed");
    // On a VM some reads stall (the host's own cache, it seems) whichever
    // path makes them; the fastest read of each shows the paths' own speeds.
    const double best = *std::min_element(jobs[k].secs.begin(), jobs[k].secs.end());
    const double best_direct = *std::min_element(jobs[k + 1].secs.begin(), jobs[k + 1].secs.end());
    std::printf("  fastest reads: %s %.2f s, direct %.2f s, ratio %.2f\n", jobs[k].label.c_str(), best,
                best_direct, best_direct / best);
  }
  auto per_gib = [&](const std::vector<double>& cpu) {
    double sum = 0;
    for (double c : cpu) sum += c;
    return sum / (step_gib * static_cast<double>(cpu.size()));
  };
  for (size_t k = 0; k < n; k += 2) {
    std::printf("CPU-s per GiB read, %s: daemon %.3f, reader %.3f (reader direct: %.3f)\n",
                jobs[k].label.c_str(), per_gib(jobs[k].daemon_cpu), per_gib(jobs[k].self_cpu),
                per_gib(jobs[k + 1].self_cpu));
  }
  std::fflush(stdout);

  // Untimed: every read saw the bytes that were written.
  Buffer expect(io + 16);
  for (const auto& job : jobs) ReadStep(opt, job.dir, &buf, &expect);
  std::printf("checked: every read's files hold the bytes written\n");
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = ParseArgs(argc, argv);
  if (opt.command == "write") {
    Write(opt);
  } else {
    Read(opt);
  }
  return 0;
}
