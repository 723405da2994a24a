// Reading `.full/` files (see view_reader.h).
#include "views/view_reader.h"

#include <algorithm>
#include <cstring>

namespace ckptfs {

ViewFileReader::ViewFileReader(std::shared_ptr<const FullView> view, uint32_t node,
                               std::unique_ptr<ShardReader> files)
    : view_(std::move(view)), node_(node), files_(std::move(files)) {}

Result<size_t> ViewFileReader::Read(void* buf, size_t n, uint64_t offset) {
  const ViewNode& node = view_->nodes().at(node_);
  if (offset >= node.size) return size_t{0};
  n = static_cast<size_t>(std::min<uint64_t>(n, node.size - offset));
  char* dst = static_cast<char*>(buf);
  Status st;
  switch (node.kind) {
    case ViewNode::Kind::kIndexJson:
      std::memcpy(dst, view_->index_json().data() + offset, n);
      break;
    case ViewNode::Kind::kTensor:
      st = ReadTensor(node.ref, dst, offset, n);
      break;
    case ViewNode::Kind::kSafetensors:
      st = ReadSafetensors(view_->safetensors()[node.ref], dst, offset, n);
      break;
    case ViewNode::Kind::kBytesItem:
      st = ReadBytesItem(node.ref, dst, offset, n);
      break;
    case ViewNode::Kind::kDir:
      return Status::Error(EISDIR, "a directory");
  }
  if (!st.ok()) return st;
  return n;
}

Status ViewFileReader::ReadTensor(uint32_t t, char* dst, uint64_t offset, uint64_t n) {
  if (n == 0) return Status::Ok();
  Result<std::shared_ptr<const TensorLayout>> layout = view_->Layout(t, *files_);
  if (!layout.ok()) return layout.status();
  Result<std::vector<AssemblySegment>> plan = (*layout)->planner.Plan(offset, n);
  if (!plan.ok()) return plan.status();
  const std::string key_prefix = std::to_string(t) + "/";
  for (const AssemblySegment& seg : *plan) {
    char* out = dst + (seg.tensor_offset - offset);
    if (seg.kind == AssemblySegment::Kind::kHole) {
      return Status::Error(EIO, "tensor '" + view_->tensors()[t].fqn + "': bytes " +
                                    std::to_string(seg.tensor_offset) + ".. are in no shard");
    }
    const LayoutSource& src = (*layout)->sources.at(seg.file);
    CKPTFS_RETURN_IF_ERROR(ReadSource(src, key_prefix + std::to_string(seg.file), seg.file_offset, out,
                                      static_cast<size_t>(seg.length))
                               .Annotate("tensor '" + view_->tensors()[t].fqn + "'"));
  }
  return Status::Ok();
}

Status ViewFileReader::ReadSafetensors(const ViewSafetensors& st, char* dst, uint64_t offset, uint64_t n) {
  const uint64_t end = offset + n;
  if (offset < st.header.size()) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(end, st.header.size()) - offset);
    std::memcpy(dst, st.header.data() + offset, len);
  }
  // The first part that ends after offset.
  auto it = std::upper_bound(st.parts.begin(), st.parts.end(), offset, [&](uint64_t off, const auto& p) {
    return off < p.offset + view_->tensors()[p.tensor].bytes;
  });
  for (; it != st.parts.end() && it->offset < end; ++it) {
    const uint64_t bytes = view_->tensors()[it->tensor].bytes;
    const uint64_t from = std::max(offset, it->offset);
    const uint64_t to = std::min(end, it->offset + bytes);
    if (from >= to) continue;
    CKPTFS_RETURN_IF_ERROR(ReadTensor(it->tensor, dst + (from - offset), from - it->offset, to - from));
  }
  return Status::Ok();
}

Status ViewFileReader::ReadBytesItem(uint32_t item, char* dst, uint64_t offset, uint64_t n) {
  const ViewBytesItem& b = view_->bytes_items()[item];
  if (!b.error.empty()) return Status::Error(EIO, "item '" + b.fqn + "': " + b.error);
  const DcpStorageEntry& e = view_->BytesSource(item);
  LayoutSource src{e.relative_path, !e.transform_descriptors.empty(), e.offset, e.length};
  // Plain items are a byte range of their file.
  const uint64_t at = src.zstd ? offset : e.offset + offset;
  return ReadSource(src, "b/" + std::to_string(item), at, dst, static_cast<size_t>(n))
      .Annotate("item '" + b.fqn + "'");
}

Status ViewFileReader::ReadSource(const LayoutSource& src, const std::string& key, uint64_t offset, char* dst,
                                  size_t n) {
  if (!src.zstd) {
    if (n >= kDirectMin) return ReadFully(*files_, src.path, offset, dst, n);
    return ReadWindowed(src.path, offset, dst, n);
  }
  Result<ZstdStreamReader*> decoder = Decoder(key, src);
  if (!decoder.ok()) return decoder.status();
  size_t done = 0;
  while (done < n) {
    Result<size_t> got = (*decoder)->ReadAt(offset + done, dst + done, n - done);
    if (!got.ok()) return got.status().Annotate(src.path);
    if (*got == 0) return Status::Error(EIO, src.path + ": the zstd item decodes to fewer bytes than its tensor needs");
    done += *got;
  }
  return Status::Ok();
}

Status ViewFileReader::ReadWindowed(const std::string& path, uint64_t offset, char* dst, size_t n) {
  while (n > 0) {
    auto it = std::find_if(windows_.begin(), windows_.end(), [&](const Window& w) {
      return w.path == path && offset >= w.offset && offset < w.offset + w.bytes.size();
    });
    if (it == windows_.end()) {
      Window w{path, offset - offset % kWindowBytes, std::string()};
      Result<uint64_t> size = files_->Size(path);
      if (!size.ok()) return size.status();
      if (w.offset >= *size) {
        return Status::Error(EIO, path + " ends at byte " + std::to_string(*size) +
                                      ", its metadata says it holds byte " + std::to_string(offset));
      }
      w.bytes.resize(static_cast<size_t>(std::min<uint64_t>(kWindowBytes, *size - w.offset)));
      CKPTFS_RETURN_IF_ERROR(ReadFully(*files_, path, w.offset, w.bytes.data(), w.bytes.size()));
      if (windows_.size() >= kMaxWindows) windows_.pop_back();
      windows_.push_front(std::move(w));
      it = windows_.begin();
    } else if (it != windows_.begin()) {
      windows_.splice(windows_.begin(), windows_, it);
      it = windows_.begin();
    }
    const size_t len = static_cast<size_t>(std::min<uint64_t>(n, it->offset + it->bytes.size() - offset));
    std::memcpy(dst, it->bytes.data() + (offset - it->offset), len);
    dst += len;
    offset += len;
    n -= len;
  }
  return Status::Ok();
}

Result<ZstdStreamReader*> ViewFileReader::Decoder(const std::string& key, const LayoutSource& src) {
  auto it = decoders_.find(key);
  if (it == decoders_.end()) {
    ShardReader* files = files_.get();
    auto decoder = ZstdStreamReader::Create(src.item_length, [files, src](uint64_t off, void* buf, size_t n) {
      return files->ReadAt(src.path, src.item_offset + off, buf, n);
    });
    if (!decoder.ok()) return decoder.status();
    it = decoders_.emplace(key, DecoderEntry{std::move(*decoder), 0}).first;
  }
  // Keep the decoders' memory bounded (their windows grow as they decode):
  // drop the least recently used others; a later read of theirs decodes from
  // the start again.
  size_t total = 0;
  for (const auto& [k, d] : decoders_) total += d.decoder->MemoryUsage();
  while (total > kMaxDecoderBytes && decoders_.size() > 1) {
    auto oldest = decoders_.end();
    for (auto d = decoders_.begin(); d != decoders_.end(); ++d) {
      if (d != it && (oldest == decoders_.end() || d->second.last_use < oldest->second.last_use)) oldest = d;
    }
    total -= oldest->second.decoder->MemoryUsage();
    decoders_.erase(oldest);
  }
  it->second.last_use = ++use_clock_;
  return it->second.decoder.get();
}

}  // namespace ckptfs
