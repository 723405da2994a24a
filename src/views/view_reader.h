// Reads one open file of a `.full/` view: a tensor, a synthesized
// safetensors file, index.json or a bytes item. Tensor bytes are assembled
// from the shards on each read (FullView::Layout plus AssemblyPlanner), so
// memory stays bounded however large the tensor is:
//  * segments of 4 KiB or more are read straight into the caller's buffer;
//  * smaller ones (a non-contiguous chunk is one segment per element) go
//    through a few 1 MiB windows of the shard, so a transposed chunk costs a
//    few large reads instead of one per element;
//  * zstd items are decoded forward, one decoder per item, their memory
//    capped (kMaxDecoderBytes); a read before a decoder's cursor starts it
//    again.
// At most about kMaxWindows MiB of windows plus kMaxDecoderBytes per open
// file, whatever the file's size.
//
// Not thread-safe: one reader per open file; the daemon serializes reads of
// one handle.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>

#include "formats/zstd_stream.h"
#include "views/full_view.h"
#include "views/shard_reader.h"

namespace ckptfs {

class ViewFileReader {
 public:
  static constexpr size_t kWindowBytes = 1 << 20;
  static constexpr size_t kMaxWindows = 16;
  static constexpr size_t kDirectMin = 4096;
  static constexpr size_t kMaxDecoderBytes = size_t{40} << 20;

  ViewFileReader(std::shared_ptr<const FullView> view, uint32_t node, std::unique_ptr<ShardReader> files);

  // Up to n bytes at offset; fewer only at the end. EIO (with the reason)
  // when the shards do not hold what the metadata says.
  Result<size_t> Read(void* buf, size_t n, uint64_t offset);

  const FullView& view() const { return *view_; }
  uint32_t node() const { return node_; }

 private:
  Status ReadTensor(uint32_t t, char* dst, uint64_t offset, uint64_t n);
  Status ReadSafetensors(const ViewSafetensors& st, char* dst, uint64_t offset, uint64_t n);
  Status ReadBytesItem(uint32_t item, char* dst, uint64_t offset, uint64_t n);
  // n bytes at `offset` of a source of a tensor's layout (decoded bytes for
  // zstd items); `key` names the decoder.
  Status ReadSource(const LayoutSource& src, const std::string& key, uint64_t offset, char* dst, size_t n);
  Status ReadWindowed(const std::string& path, uint64_t offset, char* dst, size_t n);
  Result<ZstdStreamReader*> Decoder(const std::string& key, const LayoutSource& src);

  const std::shared_ptr<const FullView> view_;
  const uint32_t node_;
  const std::unique_ptr<ShardReader> files_;

  struct Window {
    std::string path;
    uint64_t offset = 0;
    std::string bytes;
  };
  std::list<Window> windows_;  // most recently used first

  struct DecoderEntry {
    std::unique_ptr<ZstdStreamReader> decoder;
    uint64_t last_use = 0;
  };
  std::map<std::string, DecoderEntry> decoders_;
  uint64_t use_clock_ = 0;
};

}  // namespace ckptfs
