// Walks the pickle tree of a DCP `.metadata` (see dcp_metadata.h). Every walk
// is over known, fixed-depth structure, so cycles in a hostile pickle cannot
// make it loop.
#include "formats/dcp_metadata.h"

#include "formats/pickle_reader.h"

namespace ckptfs {
namespace {

using Kind = PickleValue::Kind;

Status Bad(const std::string& what) { return Status::Error(EIO, "DCP .metadata: " + what); }

// The memo lets a hostile pickle reference one long string from many entries
// for a few bytes each; the parsed output is capped at a multiple of the input
// size (real files expand about 2x).
class OutputBudget {
 public:
  explicit OutputBudget(size_t input_size)
      : left_(32 * uint64_t{input_size} + (uint64_t{1} << 20)) {}
  Status Charge(uint64_t n) {
    if (n > left_) return Bad("parsed metadata would be far larger than the file");
    left_ -= n;
    return Status::Ok();
  }
  Status Charge(const DcpStorageEntry& e) {
    uint64_t n = sizeof e + e.fqn.size() + e.relative_path.size();
    if (e.chunk_offsets) n += 8 * e.chunk_offsets->size();
    return Charge(n);  // transform_descriptors are charged as they are parsed
  }
  Status Charge(const DcpTensor& t) {
    uint64_t n = sizeof t + t.fqn.size() + t.dtype.size() + 8 * t.size.size();
    return Charge(n);  // chunks are charged as they are parsed
  }

 private:
  uint64_t left_;
};

std::string Quote(std::string_view s) {
  constexpr size_t kMax = 80;
  std::string out = "'";
  out.append(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  return out + "'";
}

// A list of non-negative ints from torch.Size((d0, d1, ...)), or from a plain
// tuple/list (other writers).
Result<std::vector<int64_t>> ParseDims(const PickleValue* v, const std::string& what) {
  const PickleValue* seq = v;
  if (v->kind == Kind::kObject) {
    if (v->args->items.empty()) return std::vector<int64_t>{};  // torch.Size()
    if (v->args->items.size() != 1) return Bad(what + " is not a torch.Size");
    seq = v->args->items[0];
  }
  if (seq->kind != Kind::kTuple && seq->kind != Kind::kList) {
    return Bad(what + " is a " + PickleKindName(seq->kind) + ", not a shape");
  }
  std::vector<int64_t> dims;
  dims.reserve(seq->items.size());
  for (const PickleValue* d : seq->items) {
    if (d->kind != Kind::kInt || d->int_value < 0) return Bad(what + " holds a non-size value");
    dims.push_back(d->int_value);
  }
  return dims;
}

Result<std::string> RequireString(const PickleValue& obj, std::string_view attr,
                                  const std::string& what) {
  const PickleValue* v = obj.Attr(attr);
  if (v == nullptr) return Bad(what + " has no " + std::string(attr));
  if (v->kind != Kind::kString) {
    return Bad(what + "." + std::string(attr) + " is a " + PickleKindName(v->kind) + ", not a str");
  }
  return v->text;
}

Result<uint64_t> RequireSize(const PickleValue& obj, std::string_view attr,
                             const std::string& what) {
  const PickleValue* v = obj.Attr(attr);
  if (v == nullptr) return Bad(what + " has no " + std::string(attr));
  if (v->kind != Kind::kInt) {
    return Bad(what + "." + std::string(attr) + " is a " + PickleKindName(v->kind) +
               ", not an int");
  }
  if (v->int_value < 0) return Bad(what + "." + std::string(attr) + " is negative");
  return static_cast<uint64_t>(v->int_value);
}

// The dataclasses read here have a handful of attributes; a state dict much
// larger than that would make every Attr() lookup a long scan.
constexpr size_t kMaxAttributes = 64;
bool HasSmallState(const PickleValue& obj) {
  const PickleValue* s = obj.state;
  if (s == nullptr) return true;
  if (s->kind == Kind::kDict) return s->entries.size() <= kMaxAttributes;
  if (s->kind == Kind::kTuple && s->items.size() == 2) {
    return s->items[0]->entries.size() + s->items[1]->entries.size() <= kMaxAttributes;
  }
  return true;
}

Result<DcpStorageEntry> ParseStorageEntry(const PickleValue& key, const PickleValue& info,
                                          size_t position, OutputBudget* budget) {
  std::string where = "storage_data entry " + std::to_string(position);
  if (key.kind != Kind::kObject) return Bad(where + ": key is not a MetadataIndex");
  if (info.kind != Kind::kObject) return Bad(where + ": value is not a _StorageInfo");
  if (!HasSmallState(key) || !HasSmallState(info)) return Bad(where + ": too many attributes");
  DcpStorageEntry e;
  Result<std::string> fqn = RequireString(key, "fqn", where + " MetadataIndex");
  if (!fqn.ok()) return fqn.status();
  e.fqn = std::move(fqn).value();
  where += " (" + Quote(e.fqn) + ")";

  if (const PickleValue* off = key.Attr("offset"); off != nullptr && off->kind != Kind::kNone) {
    Result<std::vector<int64_t>> dims = ParseDims(off, where + " offset");
    if (!dims.ok()) return dims.status();
    e.chunk_offsets = std::move(dims).value();
  }
  if (const PickleValue* idx = key.Attr("index"); idx != nullptr && idx->kind != Kind::kNone) {
    if (idx->kind != Kind::kInt) return Bad(where + " index is not an int");
    e.index_hint = idx->int_value;
  }

  Result<std::string> path = RequireString(info, "relative_path", where);
  if (!path.ok()) return path.status();
  e.relative_path = std::move(path).value();
  if (!IsSafeRelativePath(e.relative_path)) {
    return Bad(where + " relative_path " + Quote(e.relative_path) +
               " is not a path inside the checkpoint");
  }
  Result<uint64_t> offset = RequireSize(info, "offset", where);
  if (!offset.ok()) return offset.status();
  Result<uint64_t> length = RequireSize(info, "length", where);
  if (!length.ok()) return length.status();
  e.offset = *offset;
  e.length = *length;
  if (e.offset + e.length < e.offset) return Bad(where + " offset + length overflows");

  if (const PickleValue* td = info.Attr("transform_descriptors");
      td != nullptr && td->kind != Kind::kNone) {
    if (td->kind != Kind::kList && td->kind != Kind::kTuple) {
      return Bad(where + " transform_descriptors is not a list");
    }
    for (const PickleValue* d : td->items) {
      if (d->kind != Kind::kString) return Bad(where + " transform_descriptors holds a non-str");
      CKPTFS_RETURN_IF_ERROR(budget->Charge(sizeof(std::string) + d->text.size()));
      e.transform_descriptors.push_back(d->text);
    }
  }
  return e;
}

// TensorProperties pickles its __getstate__ tuple (dtype, layout, ...); accept
// a dataclass-style dict with "dtype" as well.
Result<std::string> ParseDtype(const PickleValue* props, const std::string& where) {
  if (props == nullptr || props->kind != Kind::kObject || props->state == nullptr) {
    return Bad(where + " has no TensorProperties");
  }
  const PickleValue* dtype = nullptr;
  if (props->state->kind == Kind::kTuple && !props->state->items.empty()) {
    dtype = props->state->items[0];
  } else if (props->state->kind == Kind::kDict) {
    dtype = props->state->Get("dtype");
  }
  if (dtype == nullptr || dtype->kind != Kind::kGlobal || dtype->module() != "torch") {
    return Bad(where + " has no torch dtype in its properties");
  }
  return dtype->name();
}

Result<DcpTensor> ParseTensor(std::string fqn, const PickleValue& meta, OutputBudget* budget) {
  std::string where = "tensor " + Quote(fqn);
  if (!HasSmallState(meta)) return Bad(where + " has too many attributes");
  DcpTensor t;
  t.fqn = std::move(fqn);
  Result<std::string> dtype = ParseDtype(meta.Attr("properties"), where);
  if (!dtype.ok()) return dtype.status();
  t.dtype = std::move(dtype).value();
  const PickleValue* size = meta.Attr("size");
  if (size == nullptr) return Bad(where + " has no size");
  Result<std::vector<int64_t>> dims = ParseDims(size, where + " size");
  if (!dims.ok()) return dims.status();
  t.size = std::move(dims).value();
  const PickleValue* chunks = meta.Attr("chunks");
  if (chunks->kind != Kind::kList && chunks->kind != Kind::kTuple) {
    return Bad(where + " chunks is not a list");
  }
  for (const PickleValue* c : chunks->items) {
    if (c->kind != Kind::kObject) return Bad(where + " has a chunk that is not an object");
    if (!HasSmallState(*c)) return Bad(where + " has a chunk with too many attributes");
    CKPTFS_RETURN_IF_ERROR(budget->Charge(sizeof(DcpChunk) + 16 * t.size.size()));
    const PickleValue* offsets = c->Attr("offsets");
    const PickleValue* sizes = c->Attr("sizes");
    if (offsets == nullptr || sizes == nullptr)
      return Bad(where + " has a chunk without offsets/sizes");
    Result<std::vector<int64_t>> o = ParseDims(offsets, where + " chunk offsets");
    if (!o.ok()) return o.status();
    Result<std::vector<int64_t>> s = ParseDims(sizes, where + " chunk sizes");
    if (!s.ok()) return s.status();
    if (o->size() != t.size.size() || s->size() != t.size.size()) {
      return Bad(where + " has a chunk whose rank differs from the tensor's");
    }
    for (size_t d = 0; d < t.size.size(); ++d) {
      if ((*o)[d] > t.size[d] || (*s)[d] > t.size[d] - (*o)[d]) {
        return Bad(where + " has a chunk outside the tensor");
      }
    }
    t.chunks.push_back(DcpChunk{std::move(o).value(), std::move(s).value()});
  }
  return t;
}

Status ParseStateDictMetadata(const PickleValue& sdm, OutputBudget* budget, DcpMetadata* out) {
  if (sdm.kind != Kind::kDict) return Bad("state_dict_metadata is not a dict");
  for (const auto& [key, value] : sdm.entries) {
    if (key->kind != Kind::kString) return Bad("state_dict_metadata has a non-str key");
    if (value->kind != Kind::kObject) {
      return Bad("state_dict_metadata entry " + Quote(key->text) + " is not an object");
    }
    if (value->Attr("chunks") == nullptr) {
      // BytesStorageMetadata carries no state at all.
      if (value->state != nullptr && value->name() != "BytesStorageMetadata") {
        return Bad("state_dict_metadata entry " + Quote(key->text) + " (" + value->name() +
                   ") is neither a tensor nor a bytes item");
      }
      CKPTFS_RETURN_IF_ERROR(budget->Charge(sizeof key->text + key->text.size()));
      out->byte_items.push_back(key->text);
      continue;
    }
    Result<DcpTensor> t = ParseTensor(key->text, *value, budget);
    if (!t.ok()) return t.status();
    CKPTFS_RETURN_IF_ERROR(budget->Charge(*t));
    out->tensors.push_back(std::move(t).value());
  }
  return Status::Ok();
}

}  // namespace

bool IsSafeRelativePath(std::string_view path) {
  if (path.empty() || path.front() == '/' || path.find('\0') != std::string_view::npos)
    return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

Result<DcpMetadata> ParseDcpMetadata(std::string_view bytes, const DcpParseOptions& options) {
  Result<PickleDocument> doc = Unpickle(bytes);
  if (!doc.ok()) return Bad(doc.status().message());
  const PickleValue& root = doc->root();
  if (root.kind != Kind::kObject || root.state == nullptr) {
    return Bad(std::string("top-level value is a ") + PickleKindName(root.kind) +
               ", not a built Metadata object");
  }
  DcpMetadata out;
  OutputBudget budget(bytes.size());
  const PickleValue* storage = root.Attr("storage_data");
  if (storage == nullptr) return Bad("Metadata has no storage_data");
  if (storage->kind != Kind::kDict) {
    return Bad(std::string("storage_data is a ") + PickleKindName(storage->kind) + ", not a dict");
  }
  for (size_t i = 0; i < storage->entries.size(); ++i) {
    Result<DcpStorageEntry> e =
        ParseStorageEntry(*storage->entries[i].first, *storage->entries[i].second, i, &budget);
    if (!e.ok()) return e.status();
    CKPTFS_RETURN_IF_ERROR(budget.Charge(*e));
    out.storage.push_back(std::move(e).value());
  }
  if (const PickleValue* v = root.Attr("version"); v != nullptr && v->kind == Kind::kString) {
    out.version = v->text;
  }
  if (!options.storage_only) {
    const PickleValue* sdm = root.Attr("state_dict_metadata");
    if (sdm == nullptr) return Bad("Metadata has no state_dict_metadata");
    CKPTFS_RETURN_IF_ERROR(ParseStateDictMetadata(*sdm, &budget, &out));
  }
  return out;
}

}  // namespace ckptfs
