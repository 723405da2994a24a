// CRC32C through ISA-L (libisal-dev), whose crc32_iscsi picks the fastest
// code for the CPU at run time; on the machine of docs/benchmarks.md
// ("CRC32C") it is 4 to 6 times the single-stream SSE4.2 loop we had. ISA-L
// has no way to join two CRCs, so Crc32cCombine stays here.
#include "common/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <array>

namespace ckptfs {

namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78;

// crc32_iscsi takes the raw register (neither the seed nor the result is
// inverted) and an int length, so long buffers go in steps.
template <unsigned (*Raw)(unsigned char*, int, unsigned)>
uint32_t Run(uint32_t crc, const void* data, size_t n) {
  // ISA-L only reads the buffer; the missing const is a C API leftover.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  uint32_t reg = ~crc;
  while (n > 0) {
    const size_t step = std::min<size_t>(n, size_t{1} << 30);
    reg = Raw(p, static_cast<int>(step), reg);
    p += step;
    n -= step;
  }
  return ~reg;
}

// Polynomials over GF(2) modulo the CRC polynomial, in the reflected bit
// order the CRC uses (x^0 is the top bit). Appending len_b bytes to a shifts
// a's CRC by x^(8 len_b); the shift is a multiplication by x^(8 len_b) mod P,
// built from the squares x^(2^k) by binary powering.
constexpr uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPolyReflected : b >> 1;
  }
  return product;
}

using PowerTable = std::array<uint32_t, 64>;

constexpr PowerTable MakePowers() {
  PowerTable t{};
  uint32_t p = 1u << 30;  // x^1
  for (size_t k = 0; k < t.size(); k++) {
    t[k] = p;  // x^(2^k)
    p = MultModP(p, p);
  }
  return t;
}

constexpr PowerTable kPowers = MakePowers();

// x^(8 n) mod P.
uint32_t ShiftForBytes(uint64_t n) {
  uint32_t p = 1u << 31;  // x^0
  for (size_t k = 3; n != 0 && k < kPowers.size(); n >>= 1, k++) {
    if (n & 1) p = MultModP(kPowers[k], p);
  }
  return p;
}

}  // namespace

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  return MultModP(ShiftForBytes(len_b), crc_a) ^ crc_b;
}

uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n) {
  return Run<crc32_iscsi_base>(crc, data, n);
}

uint32_t Crc32c(uint32_t crc, const void* data, size_t n) {
  return Run<crc32_iscsi>(crc, data, n);
}

}  // namespace ckptfs
