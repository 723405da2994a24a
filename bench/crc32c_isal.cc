// The hand-written CRC32C that src/common/crc32c.cc had (the SSE4.2 crc32
// instruction, one 8-byte stream; kept below as the reference) against
// ISA-L's crc32_iscsi, which Crc32c now calls, on this CPU in one run
// (issue 16: a Debian library over hand-written code). Both checksum the
// same random buffer; each size runs rounds that alternate the two (so a
// noisy neighbour hits both alike) and the median round of each is reported.
//
//   build/bench/crc32c_isal_bin [--rounds 7] [--seconds 0.2]
//
// Prints, per buffer size, MB/s (10^6 bytes) of the old code and ISA-L's
// and the ratio ISA-L / old. x86-64 with SSE4.2 only.
#include <isa-l/crc.h>
#include <nmmintrin.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/crc32c.h"

namespace {

// The replaced implementation: one dependent chain of crc32 instructions,
// so it runs at the instruction's latency (3 cycles per 8 bytes), not its
// throughput; ISA-L interleaves several streams and joins them.
__attribute__((target("sse4.2"))) uint32_t OldCrc32c(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

// What ckptfs::Crc32c is now, spelled out: crc32_iscsi neither inverts its
// seed nor its result, and takes an int length.
uint32_t IsalCrc32c(uint32_t crc, const void* data, size_t n) {
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  crc = ~crc;
  while (n > 0) {
    const int step = static_cast<int>(std::min<size_t>(n, INT_MAX));
    crc = crc32_iscsi(p, step, crc);
    p += step;
    n -= static_cast<size_t>(step);
  }
  return ~crc;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// MB/s of fn over buf, repeated for at least `seconds`; *sink keeps the
// result alive so the calls are not optimized away.
double Throughput(uint32_t (*fn)(uint32_t, const void*, size_t), const std::vector<uint8_t>& buf, double seconds, uint32_t* sink) {
  size_t reps = 0;
  const double start = Now();
  double elapsed = 0;
  do {
    *sink ^= fn(0, buf.data(), buf.size());
    reps++;
    elapsed = Now() - start;
  } while (elapsed < seconds);
  return static_cast<double>(buf.size()) * static_cast<double>(reps) / elapsed / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7;
  double seconds = 0.2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
    else if (k == "--seconds") seconds = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: crc32c_isal_bin [--rounds R] [--seconds S]\n");
      return 2;
    }
  }

  // Same answers first: the check value and a few odd lengths and seeds.
  const char* check = "123456789";
  const auto* c = reinterpret_cast<const uint8_t*>(check);
  if (!__builtin_cpu_supports("sse4.2")) {
    std::fprintf(stderr, "this CPU has no SSE4.2: the old code cannot run\n");
    return 1;
  }
  if (OldCrc32c(0, c, 9) != 0xE3069283u || IsalCrc32c(0, c, 9) != 0xE3069283u ||
      ckptfs::Crc32c(0, c, 9) != 0xE3069283u) {
    std::fprintf(stderr, "CRC32C(\"123456789\") is not 0xE3069283: old %08x, ISA-L %08x\n",
                 OldCrc32c(0, c, 9), IsalCrc32c(0, c, 9));
    return 1;
  }
  std::mt19937_64 rng(16);
  std::vector<uint8_t> buf(64u << 20);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t n : {0u, 1u, 7u, 63u, 64u, 255u, 4097u, 1000003u}) {
    const uint32_t seed = static_cast<uint32_t>(rng());
    const uint32_t old = OldCrc32c(seed, buf.data(), n);
    if (old != IsalCrc32c(seed, buf.data(), n) || old != ckptfs::Crc32c(seed, buf.data(), n) ||
        old != ckptfs::Crc32cPortable(seed, buf.data(), n)) {
      std::fprintf(stderr, "old and ISA-L differ at length %zu\n", n);
      return 1;
    }
  }

  std::printf("%-8s %12s %12s %8s\n", "buffer", "old MB/s", "ISA-L MB/s", "ratio");
  uint32_t sink = 0;
  for (size_t size : {size_t{4} << 10, size_t{1} << 20, size_t{64} << 20}) {
    const std::vector<uint8_t> data(buf.begin(), buf.begin() + static_cast<ptrdiff_t>(size));
    std::vector<double> old, isal;
    for (int r = 0; r < rounds; r++) {
      old.push_back(Throughput(OldCrc32c, data, seconds, &sink));
      isal.push_back(Throughput(IsalCrc32c, data, seconds, &sink));
    }
    const double o = Median(old), i = Median(isal);
    const std::string label = size >= (1u << 20) ? std::to_string(size >> 20) + " MiB"
                                                 : std::to_string(size >> 10) + " KiB";
    std::printf("%-8s %12.0f %12.0f %8.2f\n", label.c_str(), o, i, i / o);
  }
  std::printf("(sink %08x)\n", sink);
  return 0;
}
