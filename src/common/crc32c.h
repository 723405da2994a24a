// CRC32C (Castagnoli), the checksum S3 and the commit object use for file
// contents. Computed by ISA-L (libisal), which uses the fastest instructions
// the CPU has (about 40-50 GB/s here, docs/benchmarks.md "CRC32C").
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckptfs {

// The CRC32C of data, continuing from crc (0 for a fresh checksum):
// Crc32c(Crc32c(0, a), b) == Crc32c(0, a + b).
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

// The CRC32C of a + b from crc_a = Crc32c(0, a), crc_b = Crc32c(0, b) and
// len_b = b's length, without the data: lets threads checksum the buffers of
// one stream independently and the results be joined in order.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// For tests: ISA-L's plain table implementation, whatever the CPU.
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n);

}  // namespace ckptfs
