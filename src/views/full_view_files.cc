// The files of a FullView: node table, synthesized safetensors files and
// index.json (see full_view.h).
#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "formats/safetensors_header.h"
#include "views/full_view.h"
#include "views/view_names.h"

namespace ckptfs {
namespace {

using nlohmann::json;

// A safetensors file of `entries` (name in the file, tensor index), laid out
// as the safetensors library writes: by descending alignment, then name,
// the JSON header padded with spaces to a multiple of 8 (FORMATS.md 3.1).
Result<ViewSafetensors> MakeSafetensors(std::vector<std::pair<std::string, uint32_t>> entries,
                                        const std::vector<ViewTensor>& tensors) {
  std::sort(entries.begin(), entries.end(), [&](const auto& a, const auto& b) {
    const uint32_t ea = tensors[a.second].element_size, eb = tensors[b.second].element_size;
    return ea != eb ? ea > eb : a.first < b.first;
  });
  // Built by hand so that the tensors appear in data order after
  // __metadata__, as the library writes them.
  std::string text = R"({"__metadata__":{"format":"pt"})";
  ViewSafetensors out;
  uint64_t offset = 0;
  for (const auto& [name, t] : entries) {
    const ViewTensor& v = tensors[t];
    text += "," + json(name).dump() + R"(:{"dtype":")" + *v.code + R"(","shape":)" + json(v.shape).dump() +
            R"(,"data_offsets":[)" + std::to_string(offset) + "," + std::to_string(offset + v.bytes) + "]}";
    out.parts.push_back({offset, t});
    out.names.push_back(name);
    offset += v.bytes;
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kSafetensorsMaxHeaderBytes) {
    return Status::Error(EFBIG, "its header would be " + std::to_string(text.size()) +
                                    " bytes, more than safetensors allows");
  }
  std::string header(8, '\0');
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((uint64_t(text.size()) >> (8 * i)) & 0xff);
  header += text;
  for (auto& p : out.parts) p.offset += header.size();
  out.size = header.size() + offset;
  out.header = std::move(header);
  return out;
}

}  // namespace

Status FullView::AddFiles() {
  auto add = [&](ViewNode::Kind kind, std::string name, uint32_t parent, uint32_t ref, uint64_t size) {
    const uint32_t id = static_cast<uint32_t>(nodes_.size());
    if (id != kRootNode) by_name_.emplace(std::make_pair(parent, name), id);
    nodes_.push_back(ViewNode{kind, std::move(name), parent, ref, size});
    return id;
  };
  auto taken = [&](uint32_t dir, const std::string& name) { return by_name_.count({dir, name}) != 0; };
  const size_t expected = 3 + tensors_.size() + bytes_items_.size();
  if (expected >= kMaxNodes) {
    return Status::Error(EIO, "the checkpoint has " + std::to_string(expected) + " entries, more than " +
                                  std::to_string(kMaxNodes) + " a view can show");
  }
  add(ViewNode::Kind::kDir, kFullDirName, kRootNode, 0, 0);
  add(ViewNode::Kind::kDir, kBytesDirName, kRootNode, 0, 0);
  add(ViewNode::Kind::kIndexJson, kIndexJsonName, kRootNode, 0, 0);  // size set by RenderIndex

  // Safetensors files: all tensors that have a code, and one per group.
  std::vector<std::pair<std::string, uint32_t>> all;
  std::map<std::string, std::vector<std::pair<std::string, uint32_t>>> groups;
  for (uint32_t t = 0; t < tensors_.size(); ++t) {
    if (!tensors_[t].code) continue;
    all.emplace_back(tensors_[t].fqn, t);
    if (auto g = SplitGroup(tensors_[t].fqn)) groups[g->first].emplace_back(g->second, t);
  }
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, uint32_t>>>> files;
  if (!whole_group_.empty() && !all.empty()) {
    // The directory is itself one group (OLMo-core's model/ or optim/).
    std::optional<std::string> name = ViewFileName(whole_group_ + ".safetensors");
    if (name && *name != kAllSafetensorsName) files.emplace_back(*name, all);
  }
  if (!all.empty()) files.emplace_back(kAllSafetensorsName, std::move(all));
  for (auto& [group, entries] : groups) {
    std::optional<std::string> name = ViewFileName(group + ".safetensors");
    if (name && *name != kAllSafetensorsName) files.emplace_back(*name, std::move(entries));
  }
  for (auto& [name, entries] : files) {
    if (taken(kRootNode, name)) continue;
    Result<ViewSafetensors> st = MakeSafetensors(std::move(entries), tensors_);
    if (!st.ok()) continue;  // listed in index.json's "skipped"
    add(ViewNode::Kind::kSafetensors, name, kRootNode, static_cast<uint32_t>(safetensors_.size()), st->size);
    safetensors_.push_back(std::move(*st));
  }
  for (uint32_t t = 0; t < tensors_.size(); ++t) {
    std::optional<std::string> name = ViewFileName(tensors_[t].fqn);
    if (!name || taken(kRootNode, *name)) continue;  // no file; index.json says "file": null
    tensors_[t].node = add(ViewNode::Kind::kTensor, *name, kRootNode, t, tensors_[t].bytes);
  }
  for (uint32_t i = 0; i < bytes_items_.size(); ++i) {
    std::optional<std::string> name = ViewFileName(bytes_items_[i].fqn);
    if (!name || taken(kBytesDirNode, *name)) continue;
    add(ViewNode::Kind::kBytesItem, *name, kBytesDirNode, i, bytes_items_[i].bytes);
  }
  children_.assign(nodes_.size(), {});
  for (uint32_t n = 2; n < nodes_.size(); ++n) children_[nodes_[n].parent].push_back(n);
  children_[kRootNode].insert(children_[kRootNode].begin(), kBytesDirNode);
  for (auto& c : children_) {
    std::sort(c.begin(), c.end(), [&](uint32_t a, uint32_t b) { return nodes_[a].name < nodes_[b].name; });
  }
  return Status::Ok();
}

void FullView::RenderIndex() {
  json doc = json::object();
  doc["format"] = format_ == ViewFormat::kDcp ? "dcp" : "olmo-core-safetensors";
  doc["source"] = format_ == ViewFormat::kDcp ? ".metadata" : "metadata.json";
  json tensors = json::object();
  for (const ViewTensor& t : tensors_) {
    json e = json::object();
    e["file"] = t.node ? json(nodes_[t.node].name) : json(nullptr);
    e["dtype"] = t.dtype;
    e["safetensors_dtype"] = t.code ? json(*t.code) : json(nullptr);
    e["shape"] = t.shape;
    e["bytes"] = t.bytes;
    json shards = json::array();
    if (format_ == ViewFormat::kDcp) {
      const DcpTensor& d = dcp_.tensors[t.meta_index];
      for (size_t c = 0; c < t.storage.size(); ++c) {
        const DcpStorageEntry& s = dcp_.storage[t.storage[c]];
        json shard = {{"file", s.relative_path}, {"offsets", *s.chunk_offsets},
                      {"item_offset", s.offset}, {"item_length", s.length}};
        for (const DcpChunk& chunk : d.chunks) {
          if (chunk.offsets == *s.chunk_offsets) shard["sizes"] = chunk.sizes;
        }
        if (!s.transform_descriptors.empty()) shard["transforms"] = s.transform_descriptors;
        shards.push_back(std::move(shard));
      }
    } else {
      for (const OlmoShardSpec& s : olmo_.tensors[t.meta_index].shards) {
        json shard = {{"file", s.file}};
        if (s.is_box) {
          shard["local_shape"] = s.local_shape;
          shard["global_offset"] = s.global_offset;
        } else {
          json ranges = json::array();
          for (const auto& [b, e2] : s.ranges) ranges.push_back({b, e2});
          shard["flattened_offsets"] = std::move(ranges);
        }
        shards.push_back(std::move(shard));
      }
    }
    e["shards"] = std::move(shards);
    if (!t.error.empty()) e["error"] = t.error;
    tensors[t.fqn] = std::move(e);
  }
  doc["tensors"] = std::move(tensors);
  json items = json::object();
  for (uint32_t i = 0; i < bytes_items_.size(); ++i) {
    const ViewBytesItem& b = bytes_items_[i];
    json e = {{"bytes", b.bytes}, {"file", nullptr}};
    if (auto name = Lookup(kBytesDirNode, ViewFileName(b.fqn).value_or(""))) {
      if (nodes_[*name].ref == i) e["file"] = std::string(kBytesDirName) + "/" + nodes_[*name].name;
    }
    if (b.error.empty()) {
      const DcpStorageEntry& s = dcp_.storage[b.storage];
      e["source"] = {{"file", s.relative_path}, {"item_offset", s.offset}, {"item_length", s.length}};
    } else {
      e["error"] = b.error;
    }
    items[b.fqn] = std::move(e);
  }
  doc["bytes"] = std::move(items);
  json st = json::object();
  for (const ViewNode& n : nodes_) {
    if (n.kind == ViewNode::Kind::kSafetensors) st[n.name] = safetensors_[n.ref].names;
  }
  doc["safetensors"] = std::move(st);
  index_json_ = doc.dump(1) + "\n";
  nodes_[2].size = index_json_.size();
}

}  // namespace ckptfs
