// Parses the `.metadata` file of a PyTorch Distributed Checkpoint (torch 1.13
// `torch.distributed._shard.checkpoint` through 2.x `torch.distributed.
// checkpoint`, and writers that reuse its layout: OLMo-core, torchtitan,
// Megatron torch_dist). FORMATS.md section 1.2 describes the pickle.
//
// Classes are recognised by their attributes, not their module, so renamed
// modules (1.13 vs 2.x, OLMo-core's own _StorageInfo) and unknown subclasses
// parse alike. The storage index (`storage_data`: which bytes of which file hold
// each item) is what commit and unsharding rely on; the tensor shapes and chunk
// geometry (`state_dict_metadata`) are parsed too unless `storage_only` is set,
// so that a checkpoint whose state_dict_metadata this reader does not know can
// still be checked for completeness.
//
// Every malformed input (bad pickle, missing or mistyped field, negative size,
// a relative_path that is absolute or climbs out with "..") returns EIO with a
// message saying what was wrong.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ckptfs {

// One entry of Metadata.storage_data: MetadataIndex -> _StorageInfo.
struct DcpStorageEntry {
  std::string fqn;
  // MetadataIndex.offset: the chunk's offset in the global tensor. nullopt for
  // bytes items, whose MetadataIndex has no offset.
  std::optional<std::vector<int64_t>> chunk_offsets;
  // MetadataIndex.index: a hint (position in the tensor's chunks), may be absent.
  std::optional<int64_t> index_hint;
  std::string relative_path;  // relative to the directory holding .metadata
  uint64_t offset = 0;        // of the item in relative_path
  uint64_t length = 0;        // stored length (compressed length when transformed)
  // e.g. {"stream.zstd/1"}; empty when absent or None.
  std::vector<std::string> transform_descriptors;
};

struct DcpChunk {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
};

// A TensorStorageMetadata entry of state_dict_metadata.
struct DcpTensor {
  std::string fqn;
  std::string dtype;          // the torch dtype name without "torch.", e.g. "bfloat16"
  std::vector<int64_t> size;  // global shape
  std::vector<DcpChunk> chunks;
};

struct DcpMetadata {
  std::vector<DcpStorageEntry> storage;  // in storage_data order
  // Empty when parsed with storage_only.
  std::vector<DcpTensor> tensors;       // in state_dict_metadata order
  std::vector<std::string> byte_items;  // fqns of BytesStorageMetadata entries
  std::optional<std::string> version;   // Metadata.version when a string
};

struct DcpParseOptions {
  bool storage_only = false;
};

Result<DcpMetadata> ParseDcpMetadata(std::string_view bytes, const DcpParseOptions& options = {});

// True when `path` names a file inside a directory: non-empty, not absolute, no
// "." or ".." or empty component, no NUL. Shared by the formats that name files.
bool IsSafeRelativePath(std::string_view path);

}  // namespace ckptfs
