// Parses `metadata.json` of OLMo-core's own safetensors checkpoint format
// (FORMATS.md section 4.1): for every tensor its full shape, safetensors
// dtype code, and which bytes of which `rank_N.safetensors` hold which part
// of it. Both generations are read: `shard_spec_per_file` (flattened_offsets
// with one or more [start, end) ranges, or local_shape + global_offset for
// DTensors) and the older `flattened_offsets_per_file` ({path: [s, e] or
// [[s, e], ...]}).
//
// Every malformed input (invalid JSON, a missing or mistyped field, a range
// with end < start or outside the tensor, a box outside the tensor, an unsafe
// path, sizes that overflow) returns EIO saying what and where. Used by the
// commit-time completeness check and by the `.full/` views.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ckptfs {

// Where one file holds part of a tensor. The file stores, under the tensor's
// key, a 1-D tensor: the concatenation of `ranges` in order, or the
// row-major local box of `local_shape` at `global_offset`.
struct OlmoShardSpec {
  std::string file;  // relative to the directory holding metadata.json
  // Element ranges [start, end) of the flattened full tensor; empty when the
  // spec is a box (or an empty shard).
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  bool is_box = false;
  std::vector<int64_t> local_shape;    // is_box only
  std::vector<int64_t> global_offset;  // is_box only

  // Elements this file holds for the tensor.
  uint64_t numel() const;
};

struct OlmoTensor {
  std::string key;
  std::string dtype;  // safetensors code, e.g. "F32", "BF16"
  std::vector<int64_t> shape;
  std::vector<OlmoShardSpec> shards;  // in file-name order
};

struct OlmoMetadata {
  std::vector<OlmoTensor> tensors;  // in key order
  // Every file named, sorted, without duplicates.
  std::vector<std::string> files;
};

// `text` is the whole metadata.json. EIO for JSON that is not OLMo-core's
// format (no "tensors" object) as for malformed JSON.
Result<OlmoMetadata> ParseOlmoMetadata(std::string_view text);

}  // namespace ckptfs
