#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ckptfs {

namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78;

// tables[k][b]: the CRC of byte b followed by k zero bytes (slicing-by-8).
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; b++) {
    uint32_t c = b;
    for (int i = 0; i < 8; i++) c = (c >> 1) ^ ((c & 1) ? kPolyReflected : 0);
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; b++) {
    for (int k = 1; k < 8; k++) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
  return t;
}

constexpr Tables kTables = MakeTables();

uint32_t PortableRaw(uint32_t crc, const uint8_t* p, size_t n) {
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian hosts only (x86-64, arm64)
    word ^= crc;
    crc = kTables[7][word & 0xFF] ^ kTables[6][(word >> 8) & 0xFF] ^
          kTables[5][(word >> 16) & 0xFF] ^ kTables[4][(word >> 24) & 0xFF] ^
          kTables[3][(word >> 32) & 0xFF] ^ kTables[2][(word >> 40) & 0xFF] ^
          kTables[1][(word >> 48) & 0xFF] ^ kTables[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ kTables[0][(crc ^ *p++) & 0xFF];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t HardwareRaw(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

bool HasHardware() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

// Polynomials over GF(2) modulo the CRC polynomial, in the reflected bit
// order the CRC uses (x^0 is the top bit). Appending len_b bytes to a shifts
// a's CRC by x^(8 len_b); the shift is a multiplication by x^(8 len_b) mod P,
// built from the squares x^(2^k) by binary powering.
uint32_t MultModP(uint32_t a, uint32_t b) {
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
    // p = p * p mod P, as MultModP (constexpr-friendly copy of the loop).
    uint32_t a = p, b = p, product = 0;
    for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
      if (a & m) product ^= b;
      b = (b & 1) ? (b >> 1) ^ kPolyReflected : b >> 1;
    }
    p = product;
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
  return ~PortableRaw(~crc, static_cast<const uint8_t*>(data), n);
}

uint32_t Crc32c(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (HasHardware()) return ~HardwareRaw(~crc, static_cast<const uint8_t*>(data), n);
#endif
  return Crc32cPortable(crc, data, n);
}

}  // namespace ckptfs
