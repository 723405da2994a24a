// Decodes DCP items written through torch's ZStandard stream extension
// (`transform_descriptors == ["stream.zstd/1"]`, FORMATS.md section 1.3): the
// item's bytes are a zstd stream that decodes to the torch.save zip. A zstd
// stream is not randomly addressable, so ZstdStreamReader decodes forward
// from a cursor and starts again from the beginning when asked for bytes
// before it; sequential readers (a view read front to back) decode each item
// once.
//
// Memory is bounded: the decoder refuses frames whose window is larger than
// kZstdMaxWindowLog (32 MiB), and holds one input buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace ckptfs {

inline constexpr int kZstdMaxWindowLog = 25;

// What a list of transform descriptors asks for: kNone (absent or empty),
// kZstd (exactly one "stream.zstd/1[.x]"), or EIO naming what is unsupported.
enum class ItemTransform { kNone, kZstd };
Result<ItemTransform> ParseItemTransforms(const std::vector<std::string>& descriptors);

class ZstdStreamReader {
 public:
  // Reads up to n bytes of the compressed stream at `offset` (relative to
  // the item); fewer only at its end.
  using ReadCompressed = std::function<Result<size_t>(uint64_t offset, void* buf, size_t n)>;

  static Result<std::unique_ptr<ZstdStreamReader>> Create(uint64_t compressed_length,
                                                          ReadCompressed read);
  ~ZstdStreamReader();
  ZstdStreamReader(const ZstdStreamReader&) = delete;
  ZstdStreamReader& operator=(const ZstdStreamReader&) = delete;

  // Up to n decoded bytes at `offset`; fewer only at the end of the stream.
  // EIO for corrupt data, a truncated stream, or trailing garbage.
  Result<size_t> ReadAt(uint64_t offset, void* buf, size_t n);
  // Decodes to the end (from the cursor) and returns the decoded size,
  // refusing streams that decode to more than max_bytes (EFBIG).
  Result<uint64_t> DecodedSize(uint64_t max_bytes);
  // Bytes decoded so far (the cursor).
  uint64_t position() const { return out_pos_; }
  // Heap memory held (decoder state and buffers).
  size_t MemoryUsage() const;

 private:
  ZstdStreamReader(uint64_t compressed_length, ReadCompressed read);
  Status Restart();
  // Decodes into dst (nullptr: discard) up to n bytes; 0 at the end.
  Result<size_t> Decode(char* dst, size_t n);

  struct State;
  const uint64_t compressed_length_;
  ReadCompressed read_;
  std::unique_ptr<State> state_;
  uint64_t out_pos_ = 0;
  bool finished_ = false;
};

}  // namespace ckptfs
