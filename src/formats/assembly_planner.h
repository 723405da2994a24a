// Plans reads of a full (unsharded) tensor out of its shards: for a byte range
// of the tensor's row-major contiguous bytes, the ordered file ranges to copy
// (FORMATS.md section 6, item 6). Pure arithmetic: it reads nothing.
//
// Two descriptions of where shards lie, both common in checkpoints:
//  * BoxSource: an N-D box of the full tensor (a DCP chunk, a DTensor local
//    shard, DCP_SHARDING_INFO of HF safetensors) stored with its own strides,
//    row-major normally, possibly not (torch.save keeps a transposed view's
//    strides).
//  * FlatSource: a range of the flattened tensor stored contiguously
//    (OLMo-core's flattened_offsets: one FlatSource per [start, end) pair, the
//    pairs of one file placed one after another in it).
// Both are lowered to one internal form, a lattice of equal "runs": maximal
// stretches that are contiguous both in the tensor and in the file (a box that
// spans the full trailing dimensions is a single run; a dim-1 split is one run
// per row; a box whose innermost stride is not 1 is one run per element). A
// read touches only the runs it intersects, found by arithmetic, so planning
// costs O(sources + runs touched), never O(elements): an 8 MiB read of a 1 GiB
// tensor split 8 ways on dim 1 yields about 8 segments per row it touches.
//
// Create validates everything (ranks, negative values, boxes outside the
// tensor, overlapping sources, sizes that overflow) and returns EIO with a
// message. Gaps are not an error at creation: a tensor whose shards do not
// cover it still plans, with kHole segments the caller must refuse (EIO) or
// fill; fully_covered() says up front whether any exist.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"

namespace ckptfs {

struct BoxSource {
  std::vector<int64_t> offsets;  // of the box in the full tensor, per dimension
  std::vector<int64_t> sizes;    // per dimension; a 0 makes an empty box
  // The box's own layout in elements (TorchTensorInfo::stride); empty means
  // row-major contiguous.
  std::vector<int64_t> strides;
  uint32_t file = 0;         // the caller's id for the file holding the bytes
  uint64_t file_offset = 0;  // of the box's element (0, ..., 0), in bytes
};

struct FlatSource {
  uint64_t begin = 0;  // element index in the flattened full tensor
  uint64_t end = 0;    // exclusive
  uint32_t file = 0;
  uint64_t file_offset = 0;  // of element `begin`, in bytes
};

struct AssemblySegment {
  enum class Kind { kFile, kHole };
  Kind kind = Kind::kFile;
  uint64_t tensor_offset = 0;  // byte offset in the full tensor
  uint64_t length = 0;         // bytes, > 0
  uint32_t file = 0;           // kFile only
  uint64_t file_offset = 0;    // kFile only
};

namespace assembly_internal {
struct RunFamily;  // a source lowered to a lattice of runs (assembly_planner.cc)
}  // namespace assembly_internal

class AssemblyPlanner {
 public:
  AssemblyPlanner(const AssemblyPlanner&);
  AssemblyPlanner(AssemblyPlanner&&) noexcept;
  AssemblyPlanner& operator=(const AssemblyPlanner&);
  AssemblyPlanner& operator=(AssemblyPlanner&&) noexcept;
  ~AssemblyPlanner();

  // Plans larger than this fail with E2BIG (a caller reading huge ranges of a
  // tensor stored one element per run should read less at once, or gather).
  static constexpr size_t kDefaultMaxSegments = size_t{1} << 20;

  static Result<AssemblyPlanner> Create(std::vector<int64_t> shape, uint32_t element_size,
                                        const std::vector<BoxSource>& boxes,
                                        const std::vector<FlatSource>& flats = {});

  // The segments covering [offset, offset + length) clipped to size_bytes(),
  // in tensor order, each starting where the previous ended; kFile segments
  // are merged when they continue in the same file. Empty past the end.
  Result<std::vector<AssemblySegment>> Plan(uint64_t offset, uint64_t length,
                                            size_t max_segments = kDefaultMaxSegments) const;

  const std::vector<int64_t>& shape() const { return shape_; }
  uint32_t element_size() const { return element_size_; }
  uint64_t size_bytes() const { return size_bytes_; }
  uint64_t covered_bytes() const { return covered_bytes_; }
  bool fully_covered() const { return covered_bytes_ == size_bytes_; }

 private:
  AssemblyPlanner() = default;

  std::vector<int64_t> shape_;
  uint32_t element_size_ = 0;
  uint64_t size_bytes_ = 0;
  uint64_t covered_bytes_ = 0;
  std::vector<assembly_internal::RunFamily> families_;  // non-empty sources only
};

}  // namespace ckptfs
