#include "common/crc32c_chunks.h"

#include <algorithm>

#include "common/crc32c.h"

namespace ckptfs {

void ChunkCrc32c::Add(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  bytes_ += n;
  while (n > 0) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(n, chunk_size_ - current_len_));
    current_ = Crc32c(current_, p, take);
    current_len_ += take;
    p += take;
    n -= take;
    if (current_len_ == chunk_size_) {
      done_.push_back(current_);
      current_ = 0;
      current_len_ = 0;
    }
  }
}

void ChunkCrc32c::Reset() {
  done_.clear();
  current_ = 0;
  current_len_ = 0;
  bytes_ = 0;
}

uint32_t ChunkCrc32c::Whole() const {
  uint32_t crc = 0;
  for (uint32_t c : done_) crc = Crc32cCombine(crc, c, chunk_size_);
  if (current_len_ > 0) crc = Crc32cCombine(crc, current_, current_len_);
  return crc;
}

std::vector<uint32_t> ChunkCrc32c::Chunks() const {
  std::vector<uint32_t> out = done_;
  if (current_len_ > 0) out.push_back(current_);
  return out;
}

}  // namespace ckptfs
