// write_throughput: checkpoint-shaped write throughput through a ckptfs mount
// compared with the same writes straight into a directory on the same disk.
//
// One round writes `files` files of `file-mib` MiB each, in `write-kib` KiB
// write() calls, fsync()s each file and closes it; the timed span covers
// open..write..fsync..close of all files of the round (CLOCK_MONOTONIC).
// Rounds alternate mount, direct, mount, direct, ... so that drift in the disk
// (page cache pressure, SSD garbage collection, thermal) hits both sides alike.
// Each round writes into a fresh step directory, <dir>/bench/step<k>/, and the
// previous round's files are removed, untimed, before the next round starts so
// disk use stays bounded at one round per side.
//
// The figure that matters is the median of the per-round ratios mount/direct:
// a ratio per round cancels slow phases of the disk, the median drops outliers.
//
// Only the C++ standard library and POSIX: the benchmark must build wherever
// the daemon builds, and must not share code with it.

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
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr double kTargetRatio = 0.80;
constexpr double kBytesPerMB = 1e6;  // MB/s as disks report it: 10^6 bytes.

struct Options {
  std::string mount_dir;
  std::string direct_dir;
  long files = 8;
  long file_mib = 128;
  long write_kib = 1024;
  long rounds = 5;
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
               "usage: write_throughput_bin --mount-dir DIR --direct-dir DIR\n"
               "         [--files 8] [--file-mib 128] [--write-kib 1024] "
               "[--rounds 5]\n"
               "Writes FILES x FILE_MIB MiB in WRITE_KIB KiB write() calls, "
               "fsync per file,\n"
               "alternately under MOUNT_DIR/bench/ and DIRECT_DIR/bench/, for "
               "ROUNDS rounds.\n");
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

Options ParseArgs(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      Usage(stdout);
      std::exit(0);
    }
    // Accept both "--flag value" and "--flag=value".
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
  if (opt.mount_dir.empty() || opt.direct_dir.empty()) {
    Usage(stderr);
    Die("--mount-dir and --direct-dir are required");
  }
  return opt;
}

double NowSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
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

std::string StepDir(const std::string& root, long round) {
  return root + "/bench/step" + std::to_string(round);
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
                  const unsigned char* buf) {
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
    if (fsync(fd) != 0) DieErrno("fsync", path);
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

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = ParseArgs(argc, argv);
  CheckDir(opt.mount_dir);
  CheckDir(opt.direct_dir);
  const std::string roots[2] = {opt.mount_dir, opt.direct_dir};
  for (const auto& root : roots) MakeDir(root + "/bench");

  const size_t chunk = static_cast<size_t>(opt.write_kib) << 10;
  // Page-aligned, rounded up to whole 8-byte words for the filler.
  const size_t alloc = (chunk + 4095) / 4096 * 4096;
  std::unique_ptr<unsigned char, decltype(&std::free)> buf(
      static_cast<unsigned char*>(std::aligned_alloc(4096, alloc)), &std::free);
  if (!buf) Die("out of memory for the write buffer");
  FillPseudoRandom(buf.get(), alloc);

  const double round_bytes =
      static_cast<double>(opt.files) * static_cast<double>(opt.file_mib) *
      1048576.0;
  std::printf("write_throughput: %ld files x %ld MiB, %ld KiB writes, fsync "
              "per file, %ld rounds (MB = 10^6 bytes)\n",
              opt.files, opt.file_mib, opt.write_kib, opt.rounds);
  std::printf("  mount:  %s\n  direct: %s\n", opt.mount_dir.c_str(),
              opt.direct_dir.c_str());
  std::fflush(stdout);

  std::vector<double> mount_mbps, direct_mbps, ratios;
  for (long round = 1; round <= opt.rounds; ++round) {
    double mbps[2] = {0, 0};
    double secs[2] = {0, 0};
    for (int side = 0; side < 2; ++side) {
      const std::string step_dir = StepDir(roots[side], round);
      if (round > 1) RemoveRound(opt, StepDir(roots[side], round - 1));
      MakeDir(step_dir);
      secs[side] = WriteRound(opt, step_dir, buf.get());
      mbps[side] = round_bytes / kBytesPerMB / secs[side];
    }
    mount_mbps.push_back(mbps[0]);
    direct_mbps.push_back(mbps[1]);
    ratios.push_back(mbps[0] / mbps[1]);
    std::printf("round %ld: mount %9.1f MB/s (%6.2f s)   direct %9.1f MB/s "
                "(%6.2f s)   ratio %.2f\n",
                round, mbps[0], secs[0], mbps[1], secs[1], ratios.back());
    std::fflush(stdout);
  }
  for (const auto& root : roots) {
    RemoveRound(opt, StepDir(root, opt.rounds));
    rmdir((root + "/bench").c_str());  // Best effort: may hold other files.
  }

  std::printf("median mount:  %9.1f MB/s\n", Median(mount_mbps));
  std::printf("median direct: %9.1f MB/s\n", Median(direct_mbps));
  std::printf("ratio mount/direct (median): %.2f\n", Median(ratios));
  std::printf("target >= %.2f\n", kTargetRatio);
  return 0;
}
