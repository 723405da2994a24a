// Building a FullView from checkpoint metadata (see full_view.h).
#include "views/full_view.h"

#include <algorithm>
#include <exception>
#include <nlohmann/json.hpp>

#include "formats/torch_zip.h"
#include "formats/zstd_stream.h"
#include "views/view_names.h"

namespace ckptfs {
namespace {

Result<std::string> ReadSmallFile(ShardReader& files, const std::string& path, uint64_t max_bytes) {
  Result<uint64_t> size = files.Size(path);
  if (!size.ok()) return size.status();
  if (*size > max_bytes) {
    return Status::Error(EIO, path + " is " + std::to_string(*size) + " bytes, more than the limit of " +
                                  std::to_string(max_bytes));
  }
  std::string bytes(static_cast<size_t>(*size), '\0');
  CKPTFS_RETURN_IF_ERROR(ReadFully(files, path, 0, bytes.data(), bytes.size()));
  return bytes;
}

// Bytes of a tensor of this shape, or nullopt when it overflows 2^62.
std::optional<uint64_t> TensorBytes(const std::vector<int64_t>& shape, uint32_t element_size) {
  uint64_t n = element_size;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > (uint64_t{1} << 62))
      return std::nullopt;
  }
  return n;
}

std::string OffsetsText(const std::vector<int64_t>& v) { return nlohmann::json(v).dump(); }

}  // namespace

Status ReadFully(ShardReader& files, const std::string& path, uint64_t offset, void* buf, size_t n) {
  char* out = static_cast<char*>(buf);
  size_t done = 0;
  while (done < n) {
    Result<size_t> got = files.ReadAt(path, offset + done, out + done, n - done);
    if (!got.ok()) return got.status().Annotate("reading " + path);
    if (*got == 0) {
      return Status::Error(EIO, path + " ends at byte " + std::to_string(offset + done) +
                                    ", its metadata says it holds bytes up to " + std::to_string(offset + n));
    }
    done += *got;
  }
  return Status::Ok();
}

Result<std::optional<std::shared_ptr<FullView>>> FullView::Build(ShardReader& files,
                                                                 const std::string& dir_name) {
  using Found = std::optional<std::shared_ptr<FullView>>;
  try {
    std::shared_ptr<FullView> view(new FullView());
    if (files.Size(".metadata").ok()) {
      Result<std::string> meta = ReadSmallFile(files, ".metadata", kMaxMetadataBytes);
      if (!meta.ok()) return meta.status();
      CKPTFS_RETURN_IF_ERROR(view->BuildDcp(files, std::move(*meta)));
    } else if (files.Size("metadata.json").ok()) {
      Result<std::string> meta = ReadSmallFile(files, "metadata.json", kMaxMetadataBytes);
      if (!meta.ok()) return meta.status();
      // Other writers' metadata.json (Megatron's, anyone's) is not ours to show.
      nlohmann::json doc = nlohmann::json::parse(*meta, nullptr, /*allow_exceptions=*/false);
      if (!doc.is_object() || !doc.contains("tensors")) return Found();
      CKPTFS_RETURN_IF_ERROR(view->BuildOlmo(std::move(*meta)));
      view->whole_group_ = dir_name;
    } else {
      return Found();
    }
    CKPTFS_RETURN_IF_ERROR(view->AddFiles());
    view->RenderIndex();
    return Found(std::move(view));
  } catch (const std::exception& e) {  // allocation failures on hostile sizes: report, never escape
    return Status::Error(EIO, std::string("cannot build the view: ") + e.what());
  }
}

Status FullView::BuildDcp(ShardReader& files, std::string metadata) {
  format_ = ViewFormat::kDcp;
  Result<DcpMetadata> meta = ParseDcpMetadata(metadata);
  if (!meta.ok()) return meta.status().Annotate("cannot parse .metadata");
  dcp_ = std::move(*meta);

  // storage_data by (fqn, chunk offsets); bytes items have no offsets.
  std::map<std::pair<std::string, std::vector<int64_t>>, size_t> chunks;
  std::map<std::string, size_t> items;
  for (size_t i = 0; i < dcp_.storage.size(); ++i) {
    const DcpStorageEntry& e = dcp_.storage[i];
    if (e.chunk_offsets) {
      chunks.emplace(std::make_pair(e.fqn, *e.chunk_offsets), i);
    } else {
      items.emplace(e.fqn, i);
    }
  }
  for (size_t i = 0; i < dcp_.tensors.size(); ++i) {
    const DcpTensor& d = dcp_.tensors[i];
    ViewTensor t;
    t.fqn = d.fqn;
    t.dtype = d.dtype;
    t.code = SafetensorsCodeOf(d.dtype);
    t.shape = d.size;
    t.meta_index = i;
    if (std::optional<uint32_t> es = TorchDtypeElementSize(d.dtype)) {
      t.element_size = *es;
      if (std::optional<uint64_t> bytes = TensorBytes(d.size, *es)) {
        t.bytes = *bytes;
      } else {
        t.error = "the tensor's size overflows";
      }
    } else {
      t.error = "unsupported dtype torch." + d.dtype;
    }
    for (const DcpChunk& c : d.chunks) {
      auto it = chunks.find({d.fqn, c.offsets});
      if (it == chunks.end()) {
        if (t.error.empty()) t.error = "the chunk at " + OffsetsText(c.offsets) + " has no storage entry";
        continue;
      }
      t.storage.push_back(it->second);
    }
    tensors_.push_back(std::move(t));
  }
  for (const std::string& fqn : dcp_.byte_items) {
    ViewBytesItem item;
    item.fqn = fqn;
    auto it = items.find(fqn);
    if (it == items.end()) {
      item.error = "the item has no storage entry";
      bytes_items_.push_back(std::move(item));
      continue;
    }
    item.storage = it->second;
    const DcpStorageEntry& e = dcp_.storage[it->second];
    Result<ItemTransform> transform = ParseItemTransforms(e.transform_descriptors);
    if (!transform.ok()) {
      item.error = transform.status().message();
    } else if (*transform == ItemTransform::kNone) {
      item.bytes = e.length;
    } else {
      // A zstd stream says nothing reliable about its decoded size: decode it
      // once (without keeping the bytes) so that stat is exact.
      auto decoder = ZstdStreamReader::Create(e.length, [&files, &e](uint64_t off, void* buf, size_t n) {
        return files.ReadAt(e.relative_path, e.offset + off, buf, n);
      });
      Result<uint64_t> size = decoder.ok() ? (*decoder)->DecodedSize(kMaxBytesItem) : decoder.status();
      if (size.ok()) {
        item.bytes = *size;
      } else {
        item.error = size.status().message();
      }
    }
    bytes_items_.push_back(std::move(item));
  }
  return Status::Ok();
}

Status FullView::BuildOlmo(std::string metadata) {
  format_ = ViewFormat::kOlmoSafetensors;
  Result<OlmoMetadata> meta = ParseOlmoMetadata(metadata);
  if (!meta.ok()) return meta.status();
  olmo_ = std::move(*meta);
  for (size_t i = 0; i < olmo_.tensors.size(); ++i) {
    const OlmoTensor& o = olmo_.tensors[i];
    ViewTensor t;
    t.fqn = o.key;
    t.shape = o.shape;
    t.meta_index = i;
    std::optional<std::string> dtype = TorchDtypeOfCode(o.dtype);
    std::optional<uint32_t> bits = SafetensorsDtypeBits(o.dtype);
    if (!dtype || !bits || *bits % 8 != 0) {
      t.dtype = o.dtype;
      t.error = "unsupported dtype " + o.dtype;
    } else {
      t.dtype = *dtype;
      t.code = o.dtype;
      t.element_size = *bits / 8;
      if (std::optional<uint64_t> bytes = TensorBytes(o.shape, t.element_size)) {
        t.bytes = *bytes;
      } else {
        t.error = "the tensor's size overflows";
      }
    }
    tensors_.push_back(std::move(t));
  }
  return Status::Ok();
}

std::optional<uint32_t> FullView::Lookup(uint32_t dir, const std::string& name) const {
  auto it = by_name_.find({dir, name});
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

const std::vector<uint32_t>& FullView::Children(uint32_t dir) const {
  static const std::vector<uint32_t> kNone;
  return dir < children_.size() ? children_[dir] : kNone;
}

std::optional<std::string> FullView::Xattr(uint32_t node, const std::string& name) const {
  if (node >= nodes_.size() || nodes_[node].kind != ViewNode::Kind::kTensor) return std::nullopt;
  const ViewTensor& t = tensors_[nodes_[node].ref];
  if (name == "user.ckptfs.dtype") return t.dtype;
  if (name == "user.ckptfs.shape") return nlohmann::json(t.shape).dump();
  return std::nullopt;
}

std::vector<std::string> FullView::XattrNames(uint32_t node) const {
  if (node >= nodes_.size() || nodes_[node].kind != ViewNode::Kind::kTensor) return {};
  return {"user.ckptfs.dtype", "user.ckptfs.shape"};
}

const DcpStorageEntry& FullView::BytesSource(uint32_t item) const {
  return dcp_.storage[bytes_items_[item].storage];
}

}  // namespace ckptfs
