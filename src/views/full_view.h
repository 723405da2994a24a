// FullView: the contents of one `.full/` directory (SPEC section 6), built
// from the checkpoint metadata of the directory holding it, without reading
// any tensor data.
//
//   .full/<file name of fqn>   one file per tensor: the full tensor, row-major
//   .full/index.json           every tensor's dtype, shape, size and shards
//   .full/all.safetensors      every tensor under its FQN
//   .full/<group>.safetensors  one per top-level group, names relative to it
//   .full/bytes/<fqn>          DCP non-tensor items, as stored
//
// Formats: PyTorch DCP (`.metadata`, any torch from 1.13 on) and OLMo-core's
// safetensors format (`metadata.json` with "tensors"). Sizes come from the
// metadata (so `stat` is exact and cheap); where each tensor's bytes lie in
// the shards (zip records of DCP items, safetensors data offsets) is found
// when the tensor is first read (Layout), and cached: the view of a committed
// step never changes.
//
// Building fails (EIO, with the reason) when the metadata cannot be parsed;
// a tensor whose own description is inconsistent (a chunk with no storage
// entry, a shard holding the wrong dtype) does not fail the view: reading it
// fails, with the reason, and every other file still reads.
//
// Thread safety: a built view is immutable except for the layout cache,
// which is guarded by its own mutex; share it freely (std::shared_ptr).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "formats/assembly_planner.h"
#include "formats/dcp_metadata.h"
#include "formats/olmo_metadata.h"
#include "formats/safetensors_header.h"
#include "views/shard_reader.h"

namespace ckptfs {

enum class ViewFormat { kDcp, kOlmoSafetensors };

// Where a tensor's bytes come from: the planner's file ids index `sources`.
struct LayoutSource {
  std::string path;  // relative to the format root
  // A zstd item of `path`: planner offsets are into its decoded bytes.
  bool zstd = false;
  uint64_t item_offset = 0;
  uint64_t item_length = 0;  // compressed length
};

struct TensorLayout {
  AssemblyPlanner planner;
  std::vector<LayoutSource> sources;
};

struct ViewTensor {
  std::string fqn;
  std::string dtype;          // torch name, e.g. "bfloat16"
  std::optional<std::string> code;  // safetensors code, when it has one
  uint32_t element_size = 0;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  uint32_t node = 0;  // its file in nodes(), 0 when it has none
  // Index of the tensor in the metadata (DcpMetadata::tensors or
  // OlmoMetadata::tensors).
  size_t meta_index = 0;
  // DCP: the storage entry of each chunk, in the metadata's chunk order.
  std::vector<size_t> storage;
  std::string error;  // why it cannot be read, found while building
};

struct ViewBytesItem {
  std::string fqn;
  size_t storage = 0;  // index into the DCP storage entries
  uint64_t bytes = 0;  // decoded size
  std::string error;
};

// A synthesized safetensors file: `header` (length prefix, JSON, padding),
// then each tensor's bytes at its offset.
struct ViewSafetensors {
  std::string header;
  struct Part {
    uint64_t offset = 0;  // in the file
    uint32_t tensor = 0;  // index into tensors()
  };
  std::vector<Part> parts;  // by offset
  uint64_t size = 0;
  std::vector<std::string> names;  // as written in the header, in part order
};

struct ViewNode {
  enum class Kind { kDir, kIndexJson, kSafetensors, kTensor, kBytesItem };
  Kind kind = Kind::kDir;
  std::string name;
  uint32_t parent = 0;  // node of the directory holding it (the root's is 0)
  uint32_t ref = 0;     // index into tensors(), bytes_items(), safetensors()
  uint64_t size = 0;
};

class FullView {
 public:
  // Node 0 is `.full` itself, node 1 its `bytes/` directory.
  static constexpr uint32_t kRootNode = 0;
  static constexpr uint32_t kBytesDirNode = 1;
  // Node numbers must fit in the daemon's virtual inode numbers.
  static constexpr uint32_t kMaxNodes = 1u << 24;
  // Metadata files larger than this are refused.
  static constexpr uint64_t kMaxMetadataBytes = uint64_t{512} << 20;
  // Decoded size above which a zstd bytes item is refused.
  static constexpr uint64_t kMaxBytesItem = uint64_t{4} << 30;

  // nullopt when the directory holds no checkpoint this view knows (no
  // `.metadata`, no OLMo-core metadata.json); EIO when it does but the
  // metadata is malformed. dir_name: the checkpoint directory's own name;
  // an OLMo-core safetensors directory holds one group of the state dict
  // (model/ or optim/), so its view also has `<dir_name>.safetensors` with
  // every tensor under its own name (model/.full/model.safetensors has the
  // model's parameter names, for Hugging Face-style loading).
  static Result<std::optional<std::shared_ptr<FullView>>> Build(ShardReader& files,
                                                               const std::string& dir_name = "");

  ViewFormat format() const { return format_; }
  const std::vector<ViewNode>& nodes() const { return nodes_; }
  const std::vector<ViewTensor>& tensors() const { return tensors_; }
  const std::vector<ViewBytesItem>& bytes_items() const { return bytes_items_; }
  const std::vector<ViewSafetensors>& safetensors() const { return safetensors_; }
  const std::string& index_json() const { return index_json_; }

  std::optional<uint32_t> Lookup(uint32_t dir, const std::string& name) const;
  // Children of a directory node, in name order.
  const std::vector<uint32_t>& Children(uint32_t dir) const;
  // user.ckptfs.dtype and user.ckptfs.shape of tensor files.
  std::optional<std::string> Xattr(uint32_t node, const std::string& name) const;
  std::vector<std::string> XattrNames(uint32_t node) const;

  // Where tensor `t`'s bytes are (reads zip directories and safetensors
  // headers of its shards the first time). Errors are cached too.
  Result<std::shared_ptr<const TensorLayout>> Layout(uint32_t t, ShardReader& files) const
      EXCLUDES(layout_mu_);
  // The storage entry of a bytes item.
  const DcpStorageEntry& BytesSource(uint32_t item) const;

 private:
  FullView() = default;
  Status BuildDcp(ShardReader& files, std::string metadata);
  Status BuildOlmo(std::string metadata);
  Status AddFiles();
  void RenderIndex();

  Result<std::shared_ptr<const TensorLayout>> ResolveDcp(const ViewTensor& t, ShardReader& files) const;
  Result<std::shared_ptr<const TensorLayout>> ResolveOlmo(const ViewTensor& t, ShardReader& files) const;
  Result<std::shared_ptr<const SafetensorsHeader>> ShardHeader(const std::string& path,
                                                               ShardReader& files) const
      EXCLUDES(layout_mu_);

  ViewFormat format_ = ViewFormat::kDcp;
  std::string whole_group_;  // OLMo-core: the directory's name, for <name>.safetensors
  DcpMetadata dcp_;
  OlmoMetadata olmo_;
  std::vector<ViewTensor> tensors_;
  std::vector<ViewBytesItem> bytes_items_;
  std::vector<ViewSafetensors> safetensors_;
  std::vector<ViewNode> nodes_;
  std::vector<std::vector<uint32_t>> children_;  // per node; empty for files
  std::map<std::pair<uint32_t, std::string>, uint32_t> by_name_;
  std::string index_json_;

  mutable Mutex layout_mu_;
  mutable std::map<uint32_t, Result<std::shared_ptr<const TensorLayout>>> layouts_
      GUARDED_BY(layout_mu_);
  // OLMo-core shards' parsed headers, shared by the tensors they hold.
  mutable std::map<std::string, std::shared_ptr<const SafetensorsHeader>> headers_
      GUARDED_BY(layout_mu_);
};

}  // namespace ckptfs
