// CRC32Cs of the fixed-size chunks of one stream, computed in one pass: the
// uploader feeds a file's bytes in order and gets both the whole-file CRC32C
// (joined from the chunks' with Crc32cCombine, so nothing is read or
// checksummed twice) and one CRC32C per chunk, which the commit object
// records so a cold mount can verify each fetched chunk on its own instead
// of waiting for the whole file (docs/formats.md, "chunks").
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ckptfs {

// The chunk size new commit objects record. Independent of the fetch unit
// (--fetch-chunk style options): a fetch verifies whole recorded chunks.
inline constexpr uint64_t kDefaultChecksumChunk = 8ULL << 20;
// Limits a decoder accepts for a recorded chunk size: a tiny one would make
// the list huge, and a fetch unit is a multiple of it.
inline constexpr uint64_t kMinChecksumChunk = 4096;
inline constexpr uint64_t kMaxChecksumChunk = 1ULL << 30;

class ChunkCrc32c {
 public:
  explicit ChunkCrc32c(uint64_t chunk_size) : chunk_size_(chunk_size) {}

  // The next n bytes of the stream.
  void Add(const void* data, size_t n);
  // Starts over (a retried request streams the range again from its start).
  void Reset();

  uint64_t bytes() const { return bytes_; }
  // The CRC32C of everything added.
  uint32_t Whole() const;
  // One CRC32C per chunk, the last one of a partial chunk (none when empty).
  std::vector<uint32_t> Chunks() const;

 private:
  uint64_t chunk_size_;
  std::vector<uint32_t> done_;  // full chunks
  uint32_t current_ = 0;        // the chunk being filled
  uint64_t current_len_ = 0;
  uint64_t bytes_ = 0;
};

// The number of chunks of chunk_size a file of size bytes has.
inline uint64_t ChunkCount(uint64_t size, uint64_t chunk_size) {
  return chunk_size == 0 ? 0 : (size + chunk_size - 1) / chunk_size;
}

}  // namespace ckptfs
