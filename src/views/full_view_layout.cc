// Where a view's tensor bytes lie in its shards (FullView::Layout): DCP items
// are torch.save zips (possibly zstd streams), OLMo-core shards are
// safetensors files. See FORMATS.md sections 1.4 and 4.1.
#include <algorithm>

#include "formats/torch_zip.h"
#include "formats/zstd_stream.h"
#include "views/full_view.h"

namespace ckptfs {
namespace {

// A shard file as a ByteSource, for the zip reader.
class ShardByteSource final : public ByteSource {
 public:
  ShardByteSource(ShardReader& files, std::string path, uint64_t size)
      : files_(files), path_(std::move(path)), size_(size) {}
  Result<size_t> ReadAt(uint64_t offset, void* buf, size_t n) const override {
    return files_.ReadAt(path_, offset, buf, n);
  }
  uint64_t Size() const override { return size_; }

 private:
  ShardReader& files_;
  const std::string path_;
  const uint64_t size_;
};

// A decoded zstd item as a ByteSource. The zip reader reads the end of the
// zip (its directory) and the beginning (data.pkl's local header and bytes),
// so one decoding pass keeps both ends; anything else decodes again.
class ZstdItemSource final : public ByteSource {
 public:
  static constexpr size_t kKeep = 1 << 20;

  static Result<std::unique_ptr<ZstdItemSource>> Open(ShardReader& files, const DcpStorageEntry& e,
                                                      uint64_t max_bytes) {
    auto decoder = ZstdStreamReader::Create(e.length, [&files, e](uint64_t off, void* buf, size_t n) {
      return files.ReadAt(e.relative_path, e.offset + off, buf, n);
    });
    if (!decoder.ok()) return decoder.status();
    std::unique_ptr<ZstdItemSource> src(new ZstdItemSource(std::move(*decoder)));
    std::string piece(128 << 10, '\0');
    for (;;) {
      Result<size_t> got = src->decoder_->ReadAt(src->decoder_->position(), piece.data(), piece.size());
      if (!got.ok()) return got.status();
      if (*got == 0) break;
      if (src->decoder_->position() > max_bytes) {
        return Status::Error(EIO, "the zstd item decodes to more than " + std::to_string(max_bytes) + " bytes");
      }
      const std::string_view p(piece.data(), *got);
      if (src->head_.size() < kKeep) src->head_.append(p.substr(0, kKeep - src->head_.size()));
      src->tail_.append(p);
      if (src->tail_.size() > 2 * kKeep) src->tail_.erase(0, src->tail_.size() - kKeep);
    }
    src->size_ = src->decoder_->position();
    src->tail_start_ = src->size_ - src->tail_.size();
    return src;
  }

  Result<size_t> ReadAt(uint64_t offset, void* buf, size_t n) const override {
    if (offset >= size_) return size_t{0};
    n = static_cast<size_t>(std::min<uint64_t>(n, size_ - offset));
    if (offset + n <= head_.size()) {
      std::copy_n(head_.data() + offset, n, static_cast<char*>(buf));
      return n;
    }
    if (offset >= tail_start_) {
      std::copy_n(tail_.data() + (offset - tail_start_), n, static_cast<char*>(buf));
      return n;
    }
    return decoder_->ReadAt(offset, buf, n);
  }
  uint64_t Size() const override { return size_; }

 private:
  explicit ZstdItemSource(std::unique_ptr<ZstdStreamReader> d) : decoder_(std::move(d)) {}
  std::unique_ptr<ZstdStreamReader> decoder_;
  std::string head_, tail_;
  uint64_t size_ = 0, tail_start_ = 0;
};

std::string Dims(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

// Contiguous tensors need no strides (a single run per box).
std::vector<int64_t> StridesFor(const TorchTensorInfo& info) {
  return info.IsContiguous() ? std::vector<int64_t>{} : info.stride;
}

}  // namespace

Result<std::shared_ptr<const TensorLayout>> FullView::Layout(uint32_t t, ShardReader& files) const {
  {
    MutexLock lock(&layout_mu_);
    auto it = layouts_.find(t);
    if (it != layouts_.end()) return it->second;
  }
  // Resolved without the lock (it reads shards); a concurrent first read of
  // the same tensor resolves it twice, to the same result.
  const ViewTensor& tensor = tensors_.at(t);
  Result<std::shared_ptr<const TensorLayout>> layout =
      !tensor.error.empty() ? Status::Error(EIO, tensor.error)
      : format_ == ViewFormat::kDcp ? ResolveDcp(tensor, files)
                                    : ResolveOlmo(tensor, files);
  if (!layout.ok()) layout = layout.status().Annotate("tensor '" + tensor.fqn + "'");
  MutexLock lock(&layout_mu_);
  return layouts_.emplace(t, std::move(layout)).first->second;
}

Result<std::shared_ptr<const TensorLayout>> FullView::ResolveDcp(const ViewTensor& t,
                                                                 ShardReader& files) const {
  const DcpTensor& d = dcp_.tensors[t.meta_index];
  std::vector<LayoutSource> sources;
  std::map<std::string, uint32_t> plain;  // path -> source id
  std::vector<BoxSource> boxes;
  for (size_t c = 0; c < t.storage.size(); ++c) {
    // BuildDcp found a storage entry for every chunk (or set t.error).
    const DcpStorageEntry& e = dcp_.storage[t.storage[c]];
    const DcpChunk* chunk = &d.chunks[c];
    const std::string where = "chunk " + Dims(e.chunk_offsets.value()) + " in " + e.relative_path;
    Result<ItemTransform> transform = ParseItemTransforms(e.transform_descriptors);
    if (!transform.ok()) return transform.status().Annotate(where);
    Result<uint64_t> file_size = files.Size(e.relative_path);
    if (!file_size.ok()) return file_size.status().Annotate(where);
    if (e.offset + e.length > *file_size) {
      return Status::Error(EIO, where + ": the item ends at byte " + std::to_string(e.offset + e.length) +
                                    ", the file has " + std::to_string(*file_size));
    }
    Result<TorchTensorInfo> info = Status::Error(EIO, "");
    uint32_t id = 0;
    if (*transform == ItemTransform::kNone) {
      ShardByteSource src(files, e.relative_path, *file_size);
      info = ReadTorchSaveTensor(src, e.offset, e.length);
      auto [it, added] = plain.emplace(e.relative_path, static_cast<uint32_t>(sources.size()));
      if (added) sources.push_back(LayoutSource{e.relative_path});
      id = it->second;
    } else {
      // A chunk decodes to at most its bytes plus torch.save's zip records.
      const uint64_t limit = t.bytes + (uint64_t{64} << 20);
      auto src = ZstdItemSource::Open(files, e, limit);
      if (!src.ok()) return src.status().Annotate(where);
      info = ReadTorchSaveTensor(**src, 0, (*src)->Size());
      id = static_cast<uint32_t>(sources.size());
      sources.push_back(LayoutSource{e.relative_path, true, e.offset, e.length});
    }
    if (!info.ok()) return info.status().Annotate(where);
    if (info->dtype != t.dtype) {
      return Status::Error(EIO, where + " holds torch." + info->dtype + ", .metadata says torch." + t.dtype);
    }
    if (info->shape != chunk->sizes) {
      return Status::Error(EIO, where + " holds a tensor of shape " + Dims(info->shape) +
                                    ", .metadata says " + Dims(chunk->sizes));
    }
    boxes.push_back(BoxSource{chunk->offsets, chunk->sizes, StridesFor(*info), id, info->data_position()});
  }
  Result<AssemblyPlanner> planner = AssemblyPlanner::Create(t.shape, t.element_size, boxes);
  if (!planner.ok()) return planner.status();
  if (!planner->fully_covered()) {
    return Status::Error(EIO, "its chunks cover " + std::to_string(planner->covered_bytes()) + " of its " +
                                  std::to_string(planner->size_bytes()) + " bytes");
  }
  return std::shared_ptr<const TensorLayout>(
      new TensorLayout{std::move(*planner), std::move(sources)});
}

Result<std::shared_ptr<const SafetensorsHeader>> FullView::ShardHeader(const std::string& path,
                                                                       ShardReader& files) const {
  {
    MutexLock lock(&layout_mu_);
    auto it = headers_.find(path);
    if (it != headers_.end()) return it->second;
  }
  Result<uint64_t> size = files.Size(path);
  if (!size.ok()) return size.status().Annotate(path);
  std::string prefix(8, '\0');
  if (*size < 8) return Status::Error(EIO, path + " is shorter than a safetensors header");
  CKPTFS_RETURN_IF_ERROR(ReadFully(files, path, 0, prefix.data(), 8));
  Result<uint64_t> n = ParseSafetensorsHeaderLength(prefix);
  if (!n.ok()) return n.status().Annotate(path);
  if (8 + *n > *size) return Status::Error(EIO, path + " is shorter than its safetensors header says");
  std::string text(static_cast<size_t>(*n), '\0');
  CKPTFS_RETURN_IF_ERROR(ReadFully(files, path, 8, text.data(), text.size()));
  Result<SafetensorsHeader> header = ParseSafetensorsHeader(*n, text);
  if (!header.ok()) return header.status().Annotate(path);
  if (header->file_size() != *size) {
    return Status::Error(EIO, path + " is " + std::to_string(*size) + " bytes, its header describes " +
                                  std::to_string(header->file_size()));
  }
  auto shared = std::make_shared<const SafetensorsHeader>(std::move(*header));
  MutexLock lock(&layout_mu_);
  return headers_.emplace(path, std::move(shared)).first->second;
}

Result<std::shared_ptr<const TensorLayout>> FullView::ResolveOlmo(const ViewTensor& t,
                                                                  ShardReader& files) const {
  const OlmoTensor& o = olmo_.tensors[t.meta_index];
  std::vector<LayoutSource> sources;
  std::vector<BoxSource> boxes;
  std::vector<FlatSource> flats;
  for (const OlmoShardSpec& spec : o.shards) {
    const uint64_t numel = spec.numel();
    if (numel == 0) continue;  // an empty shard need not be stored
    Result<std::shared_ptr<const SafetensorsHeader>> header = ShardHeader(spec.file, files);
    if (!header.ok()) return header.status();
    const SafetensorsTensor* st = (*header)->Find(o.key);
    if (st == nullptr) return Status::Error(EIO, spec.file + " lacks the tensor");
    if (st->dtype != o.dtype) {
      return Status::Error(EIO, spec.file + " holds it as " + st->dtype + ", metadata.json says " + o.dtype);
    }
    if (st->end - st->begin != numel * t.element_size) {
      return Status::Error(EIO, spec.file + " holds " + std::to_string((st->end - st->begin) / t.element_size) +
                                    " elements of it, metadata.json says " + std::to_string(numel));
    }
    const uint32_t id = static_cast<uint32_t>(sources.size());
    sources.push_back(LayoutSource{spec.file});
    uint64_t at = (*header)->data_start() + st->begin;
    if (spec.is_box) {
      boxes.push_back(BoxSource{spec.global_offset, spec.local_shape, {}, id, at});
      continue;
    }
    for (const auto& [b, e] : spec.ranges) {
      flats.push_back(FlatSource{b, e, id, at});
      at += (e - b) * t.element_size;
    }
  }
  Result<AssemblyPlanner> planner = AssemblyPlanner::Create(t.shape, t.element_size, boxes, flats);
  if (!planner.ok()) return planner.status();
  if (!planner->fully_covered()) {
    return Status::Error(EIO, "its shards cover " + std::to_string(planner->covered_bytes()) + " of its " +
                                  std::to_string(planner->size_bytes()) + " bytes");
  }
  return std::shared_ptr<const TensorLayout>(
      new TensorLayout{std::move(*planner), std::move(sources)});
}

}  // namespace ckptfs
