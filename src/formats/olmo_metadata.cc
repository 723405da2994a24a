// OLMo-core metadata.json (see olmo_metadata.h).
#include "formats/olmo_metadata.h"

#include <algorithm>
#include <exception>
#include <nlohmann/json.hpp>

#include "formats/dcp_metadata.h"  // IsSafeRelativePath

namespace ckptfs {
namespace {

using nlohmann::json;

// A value for a message: arrays and objects only by type, since dump()
// recurses once per nesting level of the input.
std::string Show(const json& v) {
  return v.is_structured() ? std::string("an ") + v.type_name() : v.dump();
}

bool AddTo(uint64_t* acc, uint64_t v) { return !__builtin_add_overflow(*acc, v, acc); }
bool MulTo(uint64_t* acc, uint64_t v) { return !__builtin_mul_overflow(*acc, v, acc); }

Status Bad(const std::string& where, const std::string& why) {
  return Status::Error(EIO, "metadata.json: " + where + ": " + why);
}

Result<std::vector<int64_t>> IntList(const json& v, const std::string& what) {
  if (!v.is_array()) return Status::Error(EIO, what + " is not a list");
  std::vector<int64_t> out;
  for (const json& d : v) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 62))
      return Status::Error(EIO, what + " holds " + Show(d) + ", not a size");
    out.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }
  return out;
}

// [[s, e], ...] or, in legacy files, a single [s, e].
Status ParseRanges(const json& v, uint64_t numel, std::vector<std::pair<uint64_t, uint64_t>>* out) {
  if (!v.is_array()) return Status::Error(EIO, "flattened offsets are not a list");
  auto one = [&](const json& r) {
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_unsigned() || !r[1].is_number_unsigned())
      return Status::Error(EIO, "flattened offset " + Show(r) + " is not [start, end]");
    const uint64_t s = r[0].get<uint64_t>(), e = r[1].get<uint64_t>();
    if (e < s || e > numel) {
      return Status::Error(EIO, "flattened offset " + r.dump() + " is outside the tensor's " +
                                    std::to_string(numel) + " elements");
    }
    if (e > s) out->emplace_back(s, e);  // FSDP writes (0, 0) for an empty shard
    return Status::Ok();
  };
  if (!v.empty() && v[0].is_number()) return one(v);
  for (const json& r : v) CKPTFS_RETURN_IF_ERROR(one(r));
  return Status::Ok();
}

// A file cannot hold more of a tensor than the tensor has (ranges that
// overlap are refused later, by the assembly planner); this also keeps
// numel() from overflowing.
Result<OlmoShardSpec> CheckRangesFit(OlmoShardSpec spec, uint64_t numel) {
  uint64_t total = 0;
  for (const auto& [s, e] : spec.ranges) {
    if (!AddTo(&total, e - s) || total > numel) {
      return Status::Error(EIO, "flattened offsets hold more elements than the tensor's " +
                                    std::to_string(numel));
    }
  }
  return spec;
}

Result<OlmoShardSpec> ParseSpec(const std::string& file, const json& spec,
                                const std::vector<int64_t>& shape, uint64_t numel) {
  OlmoShardSpec out;
  out.file = file;
  if (!spec.is_object()) {  // legacy flattened_offsets_per_file value
    CKPTFS_RETURN_IF_ERROR(ParseRanges(spec, numel, &out.ranges));
    return CheckRangesFit(std::move(out), numel);
  }
  auto fo = spec.find("flattened_offsets");
  if (fo != spec.end() && !fo->is_null()) {
    CKPTFS_RETURN_IF_ERROR(ParseRanges(*fo, numel, &out.ranges));
    return CheckRangesFit(std::move(out), numel);
  }
  auto ls = spec.find("local_shape");
  auto go = spec.find("global_offset");
  if (ls == spec.end() || ls->is_null() || go == spec.end() || go->is_null()) {
    return Status::Error(EIO, "neither flattened_offsets nor local_shape and global_offset");
  }
  auto local = IntList(*ls, "local_shape");
  if (!local.ok()) return local.status();
  auto offset = IntList(*go, "global_offset");
  if (!offset.ok()) return offset.status();
  if (local->size() != shape.size() || offset->size() != shape.size()) {
    return Status::Error(EIO, "local_shape and global_offset must have the tensor's " +
                                  std::to_string(shape.size()) + " dimensions");
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if ((*offset)[d] > shape[d] || (*local)[d] > shape[d] - (*offset)[d]) {
      return Status::Error(EIO, "the box at " + go->dump() + " of shape " + ls->dump() +
                                    " is outside the tensor");
    }
  }
  out.is_box = true;
  out.local_shape = std::move(*local);
  out.global_offset = std::move(*offset);
  return out;
}

Result<OlmoTensor> ParseTensor(const std::string& key, const json& v) {
  const std::string where = "tensor '" + key + "'";
  if (!v.is_object()) return Bad(where, "not an object");
  OlmoTensor t;
  t.key = key;
  auto dtype = v.find("dtype");
  if (dtype == v.end() || !dtype->is_string()) return Bad(where, "no dtype");
  t.dtype = dtype->get<std::string>();
  auto shape = v.find("shape");
  if (shape == v.end()) return Bad(where, "no shape");
  auto dims = IntList(*shape, "shape");
  if (!dims.ok()) return Bad(where, dims.status().message());
  t.shape = std::move(*dims);
  uint64_t numel = 1;
  for (int64_t d : t.shape) {
    if (!MulTo(&numel, static_cast<uint64_t>(d))) return Bad(where, "the shape overflows");
  }
  auto specs = v.find("shard_spec_per_file");
  if (specs == v.end() || specs->is_null()) specs = v.find("flattened_offsets_per_file");
  if (specs == v.end() || !specs->is_object()) return Bad(where, "names no files");
  for (auto f = specs->begin(); f != specs->end(); ++f) {
    if (!IsSafeRelativePath(f.key())) return Bad(where, "names an unsafe path '" + f.key() + "'");
    auto spec = ParseSpec(f.key(), *f, t.shape, numel);
    if (!spec.ok()) return Bad(where + " in " + f.key(), spec.status().message());
    t.shards.push_back(std::move(*spec));
  }
  return t;
}

Result<OlmoMetadata> Parse(std::string_view text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::Error(EIO, "metadata.json is not valid JSON");
  if (!doc.is_object()) return Status::Error(EIO, "metadata.json is not a JSON object");
  auto tensors = doc.find("tensors");
  if (tensors == doc.end()) return Status::Error(EIO, "metadata.json has no \"tensors\"");
  if (!tensors->is_object()) return Status::Error(EIO, "metadata.json: \"tensors\" is not an object");
  OlmoMetadata meta;
  for (auto it = tensors->begin(); it != tensors->end(); ++it) {
    auto t = ParseTensor(it.key(), *it);
    if (!t.ok()) return t.status();
    for (const OlmoShardSpec& s : t->shards) meta.files.push_back(s.file);
    meta.tensors.push_back(std::move(*t));
  }
  std::sort(meta.files.begin(), meta.files.end());
  meta.files.erase(std::unique(meta.files.begin(), meta.files.end()), meta.files.end());
  return meta;
}

}  // namespace

uint64_t OlmoShardSpec::numel() const {
  uint64_t n = 0;
  if (is_box) {
    n = 1;
    for (int64_t d : local_shape) n *= static_cast<uint64_t>(d);  // bounded by the tensor's numel
    return n;
  }
  for (const auto& [s, e] : ranges) n += e - s;  // at most the tensor's numel (CheckRangesFit)
  return n;
}

Result<OlmoMetadata> ParseOlmoMetadata(std::string_view text) {
  try {
    return Parse(text);
  } catch (const std::exception& e) {  // allocation failures and the like: report, never escape
    return Status::Error(EIO, std::string("metadata.json: ") + e.what());
  }
}

}  // namespace ckptfs
