// What the upload checksums (issue 15: x-amz-checksum-crc32c, Content-MD5,
// the answer's check) cost: PutObject of the same objects to the same S3
// server with checksums on and off, interleaved in one run, plus the bare
// CPU cost of the digests. Run by bench/object_store against its s3rver;
// by hand:
//
//   build/bench/upload_checksums_bin --endpoint http://127.0.0.1:4568 --bucket bench
//       [--mib 16] [--objects 8] [--rounds 5]   (one command line)
//
// Prints per mode the median wall time and client CPU time of a round, and
// the ratios with/without (target: <= 1.05).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "remote/s3_object_store.h"
#include "remote/upload_checksums.h"

namespace {

using ckptfs::S3Config;

double CpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int Usage() {
  std::fprintf(stderr, "usage: upload_checksums_bin --endpoint URL --bucket B [--mib M] [--objects N] [--rounds R]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint, bucket;
  int mib = 16, objects = 8, rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--endpoint") endpoint = v;
    else if (k == "--bucket") bucket = v;
    else if (k == "--mib") mib = std::atoi(v.c_str());
    else if (k == "--objects") objects = std::atoi(v.c_str());
    else if (k == "--rounds") rounds = std::atoi(v.c_str());
    else return Usage();
  }
  if (endpoint.empty() || bucket.empty() || mib < 1 || objects < 1 || rounds < 1) return Usage();

  std::vector<std::string> data(static_cast<size_t>(objects));
  std::mt19937_64 rng(15);
  for (std::string& d : data) {
    d.resize(static_cast<size_t>(mib) << 20);
    for (size_t i = 0; i + 8 <= d.size(); i += 8) {
      const uint64_t x = rng();
      std::memcpy(d.data() + i, &x, 8);
    }
  }
  const double total_mib = static_cast<double>(mib) * objects;

  // The digests alone, on this CPU.
  {
    double t0 = Now();
    for (const std::string& d : data) (void)ckptfs::DigestBody(d, /*with_md5=*/false);
    const double crc_s = Now() - t0;
    t0 = Now();
    for (const std::string& d : data) (void)ckptfs::DigestBody(d, /*with_md5=*/true);
    const double both_s = Now() - t0;
    std::printf("digests alone: CRC32C %.0f MiB/s, CRC32C+MD5 %.0f MiB/s (%.2f s of CPU per GiB)\n",
                total_mib / crc_s, total_mib / both_s, both_s / (total_mib / 1024));
  }

  auto open = [&](bool checksums) {
    S3Config c;
    c.bucket = bucket;
    c.prefix = checksums ? "checksums-on" : "checksums-off";
    c.endpoint = endpoint;
    c.credentials = ckptfs::AwsCredentials{"S3RVER", "S3RVER", ""};
    c.upload_checksums = checksums;
    auto s = ckptfs::S3ObjectStore::Open(c);
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.status().ToString().c_str());
      std::exit(1);
    }
    return std::move(s).value();
  };
  auto on = open(true);
  auto off = open(false);
  std::vector<double> wall[2], cpu[2];  // [0] off, [1] on
  for (int r = 0; r < rounds; r++) {
    // The order alternates so neither mode always runs on a warmer server.
    for (int k = 0; k < 2; k++) {
      const bool checksums = (r + k) % 2 == 1;
      auto& store = checksums ? on : off;
      const double c0 = CpuSeconds(), t0 = Now();
      for (int i = 0; i < objects; i++) {
        ckptfs::Status st = store->Put("r" + std::to_string(r) + "/o" + std::to_string(i), data[static_cast<size_t>(i)]);
        if (!st.ok()) {
          std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
          return 1;
        }
      }
      wall[checksums].push_back(Now() - t0);
      cpu[checksums].push_back(CpuSeconds() - c0);
    }
  }
  const double w0 = Median(wall[0]), w1 = Median(wall[1]), c0 = Median(cpu[0]), c1 = Median(cpu[1]);
  std::printf("upload of %d x %d MiB, median of %d rounds:\n", objects, mib, rounds);
  std::printf("  without checksums  %7.3f s (%6.1f MiB/s), client CPU %.3f s\n", w0, total_mib / w0, c0);
  std::printf("  with checksums     %7.3f s (%6.1f MiB/s), client CPU %.3f s\n", w1, total_mib / w1, c1);
  std::printf("  ratio with/without: wall %.3f [target <= 1.05] %s, client CPU %.3f\n", w1 / w0,
              w1 / w0 <= 1.05 ? "met" : "MISSED", c1 / c0);
  return 0;
}
