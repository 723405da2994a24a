#include "formats/cluster_records.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string_view>

#include "common/crc32c_chunks.h"
#include "formats/node_name.h"

namespace ckptfs {

namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr int kFormatVersion = 1;
constexpr const char* kPartFormat = "ckptfs-part";
constexpr const char* kStepFormat = "ckptfs-step";
constexpr const char* kPartKind = "part record";
constexpr const char* kStepKind = "step record";
constexpr const char* kRunFileFormat = "ckptfs-run-file";
constexpr const char* kRunFileKind = "run file record";

Status Bad(const char* kind, const std::string& field, const std::string& why) {
  return Status::Error(EIO, std::string(kind) + ": " + field + ": " + why);
}

// The name of entry i of the array field `name`: "files[3]".
std::string At(const std::string& name, size_t i) { return name + "[" + std::to_string(i) + "]"; }


// A JSON value for a message: strings quoted and cut, arrays and objects by
// type only (dump() recurses once per nesting level of the input).
std::string Show(const Json& v) {
  if (v.is_string()) return "the string " + QuoteForMessage(v.get_ref<const std::string&>());
  if (v.is_structured()) return std::string("an ") + v.type_name();
  return v.dump();
}

std::string Hex32(uint32_t v) {
  char buf[9];
  snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// Eight lower-case hex digits, as Hex32 writes them (commit_object.cc).
std::optional<uint32_t> ParseHex32(const std::string& s) {
  if (s.size() != 8 || s.find_first_not_of("0123456789abcdef") != std::string::npos)
    return std::nullopt;
  return static_cast<uint32_t>(std::stoul(s, nullptr, 16));
}

// Well-formed UTF-8 (Unicode 15, table 3-7): what a JSON string can carry.
bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      n = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else {
      return false;
    }
    if (s.size() - i - 1 < n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xbf)) return false;
    }
    i += n + 1;
  }
  return true;
}

// Why p is not a path below the step directory (as commit_object.cc's
// ValidRelativePath: relative, no empty, "." or ".." components, no NUL,
// components of at most 255 bytes; here also at most 4096 bytes and UTF-8),
// or "" when it is one.
std::string WhyNotRelativePath(std::string_view p) {
  if (p.empty()) return "is empty";
  if (p.size() > kMaxRecordPathLength) {
    return "is " + std::to_string(p.size()) + " bytes long (at most " +
           std::to_string(kMaxRecordPathLength) + ")";
  }
  if (p.find('\0') != std::string_view::npos) return QuoteForMessage(p) + " contains NUL";
  if (!ValidUtf8(p)) return QuoteForMessage(p) + " is not valid UTF-8";
  if (p.front() == '/') return QuoteForMessage(p) + " is absolute";
  if (p.back() == '/') return QuoteForMessage(p) + " ends with '/'";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string_view::npos) end = p.size();
    const std::string_view part = p.substr(start, end - start);
    if (part.empty()) return QuoteForMessage(p) + " has an empty component";
    if (part == "." || part == "..")
      return QuoteForMessage(p) + " has a '" + std::string(part) + "' component";
    if (part.size() > kMaxRecordComponentLength) {
      return QuoteForMessage(p) + " has a component longer than " +
             std::to_string(kMaxRecordComponentLength) + " bytes";
    }
    start = end + 1;
  }
  return "";
}

Status CheckPath(const char* kind, const std::string& field, const std::string& p) {
  std::string why = WhyNotRelativePath(p);
  if (why.empty()) return Status::Ok();
  return Bad(kind, field,
             why +
                 "; a path inside the step has no leading or trailing '/' and no empty, '.' or "
                 "'..' components");
}

Status CheckNode(const char* kind, const std::string& field, const std::string& node) {
  Status st = ValidateNodeName(node);
  return st.ok() ? st : Bad(kind, field, st.message());
}

Status CheckTime(const char* kind, const std::string& field, double t) {
  if (!std::isfinite(t) || t < 0)
    return Bad(kind, field, "must be a finite number of seconds >= 0");
  return Status::Ok();
}

Status CheckMode(const char* kind, const std::string& field, uint32_t mode) {
  if (mode > 07777) return Bad(kind, field, std::to_string(mode) + " has bits beyond 07777");
  return Status::Ok();
}

// Free text: at most kMaxRecordStringLength bytes of UTF-8 without NUL.
Status CheckText(const char* kind, const std::string& field, const std::string& s) {
  if (s.size() > kMaxRecordStringLength) {
    return Bad(kind, field, "longer than " + std::to_string(kMaxRecordStringLength) + " bytes");
  }
  if (s.find('\0') != std::string::npos) return Bad(kind, field, QuoteForMessage(s) + " contains NUL");
  if (!ValidUtf8(s)) return Bad(kind, field, QuoteForMessage(s) + " is not valid UTF-8");
  return Status::Ok();
}

Status CheckCount(const char* kind, const std::string& field, size_t n, size_t max) {
  if (n > max) {
    return Bad(kind, field,
               std::to_string(n) + " entries; at most " + std::to_string(max) + " are allowed");
  }
  return Status::Ok();
}

// Directories and symlinks of either record, sharing `seen` with the files.
Status CheckTree(const char* kind, const std::vector<std::string>& dirs,
                 const std::vector<CommitObject::Symlink>& symlinks,
                 std::set<std::string_view>* seen) {
  CKPTFS_RETURN_IF_ERROR(CheckCount(kind, "dirs", dirs.size(), kMaxRecordEntries));
  for (size_t i = 0; i < dirs.size(); ++i) {
    CKPTFS_RETURN_IF_ERROR(CheckPath(kind, At("dirs", i), dirs[i]));
    if (!seen->insert(dirs[i]).second)
      return Bad(kind, At("dirs", i), "duplicate path " + QuoteForMessage(dirs[i]));
  }
  CKPTFS_RETURN_IF_ERROR(CheckCount(kind, "symlinks", symlinks.size(), kMaxRecordEntries));
  for (size_t i = 0; i < symlinks.size(); ++i) {
    const auto& s = symlinks[i];
    CKPTFS_RETURN_IF_ERROR(CheckPath(kind, At("symlinks", i) + ".path", s.path));
    if (!seen->insert(s.path).second) {
      return Bad(kind, At("symlinks", i) + ".path", "duplicate path " + QuoteForMessage(s.path));
    }
    if (s.target.empty()) return Bad(kind, At("symlinks", i) + ".target", "is empty");
    CKPTFS_RETURN_IF_ERROR(CheckText(kind, At("symlinks", i) + ".target", s.target));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Decoding: typed fields of a JSON object, every one required.

class Fields {
 public:
  Fields(const char* kind, const Json& obj, std::string where)
      : kind_(kind), obj_(obj), where_(std::move(where)) {}

  Status Bad(const char* key, const std::string& why) const {
    return ckptfs::Bad(kind_, Name(key), why);
  }

  Status Get(const char* key, const Json** out) const {
    auto it = obj_.find(key);
    if (it == obj_.end()) return Bad(key, "missing");
    *out = &*it;
    return Status::Ok();
  }
  Status String(const char* key, std::string* out) const {
    const Json* v;
    CKPTFS_RETURN_IF_ERROR(Get(key, &v));
    if (!v->is_string()) return Bad(key, "must be a string, not " + Show(*v));
    *out = v->get<std::string>();
    return Status::Ok();
  }
  Status Uint(const char* key, uint64_t max, uint64_t* out) const {
    const Json* v;
    CKPTFS_RETURN_IF_ERROR(Get(key, &v));
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0)) {
      return Bad(key, "must be a non-negative integer, not " + Show(*v));
    }
    *out = v->get<uint64_t>();
    if (*out > max)
      return Bad(key, std::to_string(*out) + " is larger than " + std::to_string(max));
    return Status::Ok();
  }
  Status Uint32(const char* key, uint32_t* out) const {
    uint64_t v;
    CKPTFS_RETURN_IF_ERROR(Uint(key, UINT32_MAX, &v));
    *out = static_cast<uint32_t>(v);
    return Status::Ok();
  }
  Status Int(const char* key, int64_t* out) const {
    const Json* v;
    CKPTFS_RETURN_IF_ERROR(Get(key, &v));
    if (v->is_number_unsigned()) {
      if (v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return Bad(key, "does not fit 64 signed bits");
    } else if (!v->is_number_integer()) {
      return Bad(key, "must be an integer, not " + Show(*v));
    }
    *out = v->get<int64_t>();
    return Status::Ok();
  }
  Status Bool(const char* key, bool* out) const {
    const Json* v;
    CKPTFS_RETURN_IF_ERROR(Get(key, &v));
    if (!v->is_boolean()) return Bad(key, "must be true or false, not " + Show(*v));
    *out = v->get<bool>();
    return Status::Ok();
  }
  Status Seconds(const char* key, double* out) const {
    const Json* v;
    CKPTFS_RETURN_IF_ERROR(Get(key, &v));
    if (!v->is_number()) return Bad(key, "must be a number of seconds, not " + Show(*v));
    *out = v->get<double>();
    return CheckTime(kind_, Name(key), *out);
  }
  // null or eight lower-case hex digits.
  Status Crc(const char* key, std::optional<uint32_t>* out) const {
    const Json* v;
    CKPTFS_RETURN_IF_ERROR(Get(key, &v));
    if (v->is_null()) {
      out->reset();
      return Status::Ok();
    }
    std::optional<uint32_t> crc;
    if (v->is_string()) crc = ParseHex32(v->get<std::string>());
    if (!crc) return Bad(key, "must be null or 8 lower-case hex digits, not " + Show(*v));
    *out = crc;
    return Status::Ok();
  }
  Status Array(const char* key, size_t max, const Json** out) const {
    CKPTFS_RETURN_IF_ERROR(Get(key, out));
    if (!(*out)->is_array()) return Bad(key, "must be an array, not " + Show(**out));
    return CheckCount(kind_, Name(key), (*out)->size(), max);
  }
  Status Object(const char* key, size_t max, const Json** out) const {
    CKPTFS_RETURN_IF_ERROR(Get(key, out));
    if (!(*out)->is_object()) return Bad(key, "must be an object, not " + Show(**out));
    return CheckCount(kind_, Name(key), (*out)->size(), max);
  }
  std::string Name(const char* key) const { return where_.empty() ? key : where_ + "." + key; }

 private:
  const char* kind_;
  const Json& obj_;
  std::string where_;
};

// The document and its format/version.
Status ParseHead(const char* kind, const char* format, const std::string& text, Json* j) {
  *j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j->is_discarded()) return Status::Error(EIO, std::string(kind) + ": not valid JSON");
  if (!j->is_object()) return Status::Error(EIO, std::string(kind) + ": not a JSON object");
  Fields top(kind, *j, "");
  std::string f;
  CKPTFS_RETURN_IF_ERROR(top.String("format", &f));
  if (f != format) return top.Bad("format", QuoteForMessage(f) + " is not '" + format + "'");
  const Json* v;
  CKPTFS_RETURN_IF_ERROR(top.Get("version", &v));
  if (!v->is_number_integer() || v->get<int64_t>() != kFormatVersion) {
    return top.Bad("version", Show(*v) + " is not supported (this build reads version " +
                                  std::to_string(kFormatVersion) + ")");
  }
  return Status::Ok();
}

Status DecodeStrings(const char* kind, const Fields& top, const char* key,
                     std::vector<std::string>* out) {
  const Json* arr;
  CKPTFS_RETURN_IF_ERROR(top.Array(key, kMaxRecordEntries, &arr));
  out->reserve(arr->size());
  for (size_t i = 0; i < arr->size(); ++i) {
    const Json& v = (*arr)[i];
    if (!v.is_string()) return Bad(kind, At(key, i), "must be a string, not " + Show(v));
    out->push_back(v.get<std::string>());
  }
  return Status::Ok();
}

Status DecodeSymlinks(const char* kind, const Fields& top,
                      std::vector<CommitObject::Symlink>* out) {
  const Json* arr;
  CKPTFS_RETURN_IF_ERROR(top.Array("symlinks", kMaxRecordEntries, &arr));
  out->reserve(arr->size());
  for (size_t i = 0; i < arr->size(); ++i) {
    const Json& v = (*arr)[i];
    if (!v.is_object()) return Bad(kind, At("symlinks", i), "must be an object, not " + Show(v));
    Fields f(kind, v, At("symlinks", i));
    CommitObject::Symlink s;
    CKPTFS_RETURN_IF_ERROR(f.String("path", &s.path));
    CKPTFS_RETURN_IF_ERROR(f.String("target", &s.target));
    out->push_back(std::move(s));
  }
  return Status::Ok();
}

template <typename T>
void SortByPath(std::vector<T>* v) {
  std::sort(v->begin(), v->end(), [](const T& a, const T& b) { return a.path < b.path; });
}

// ---------------------------------------------------------------------------
// Encoding: entries in path order, whatever the struct's order.

// A string value: JSON carries UTF-8 only, so one that is not (refused by
// Validate*) is written as null, which no decoder accepts, rather than as
// another string.
OrderedJson Text(const std::string& s) {
  return ValidUtf8(s) ? OrderedJson(s) : OrderedJson(nullptr);
}

template <typename T>
std::vector<const T*> InPathOrder(const std::vector<T>& v) {
  std::vector<const T*> out;
  out.reserve(v.size());
  for (const T& e : v) out.push_back(&e);
  std::stable_sort(out.begin(), out.end(),
                   [](const T* a, const T* b) { return a->path < b->path; });
  return out;
}

OrderedJson SortedStrings(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  OrderedJson out = OrderedJson::array();
  for (const std::string& s : v) out.push_back(Text(s));
  return out;
}

OrderedJson Symlinks(const std::vector<CommitObject::Symlink>& v) {
  OrderedJson out = OrderedJson::array();
  for (const auto* s : InPathOrder(v))
    out.push_back({{"path", Text(s->path)}, {"target", Text(s->target)}});
  return out;
}

OrderedJson Crc(const std::optional<uint32_t>& crc) {
  return crc ? OrderedJson(Hex32(*crc)) : OrderedJson(nullptr);
}

// Compact, and never throws (an object key that is not UTF-8, a node name
// Validate* refuses, gets U+FFFD in place of the bad bytes).
std::string Dump(const OrderedJson& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

std::string PartRecordKey(const std::string& step_path, const std::string& node) {
  return step_path + "/" + kPartRecordDir + "/" + node + ".json";
}

std::string StepRecordKey(const std::string& step_path) {
  return step_path + "/" + kStepRecordName;
}

bool ParsePartRecordKey(const std::string& key, std::string* step_path, std::string* node) {
  const std::string dir = std::string("/") + kPartRecordDir + "/";
  const std::string suffix = ".json";
  const size_t at = key.rfind(dir);
  if (at == std::string::npos || at == 0) return false;
  const size_t name_at = at + dir.size();
  if (key.size() < name_at + suffix.size() ||
      key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  std::string step = key.substr(0, at);
  std::string name = key.substr(name_at, key.size() - suffix.size() - name_at);
  if (!WhyNotRelativePath(step).empty() || !ValidateNodeName(name).ok()) return false;
  if (step_path) *step_path = std::move(step);
  if (node) *node = std::move(name);
  return true;
}

bool ParseProposal(const std::string& proposal, std::string* node, std::string* nonce) {
  const size_t tilde = proposal.find('~');
  if (tilde == std::string::npos) return false;
  std::string name = proposal.substr(0, tilde);
  std::string rest = proposal.substr(tilde + 1);
  if (!ValidateNodeName(name).ok() || rest.empty() || rest.size() > kMaxProposalNonceLength)
    return false;
  for (char c : rest) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  if (node) *node = std::move(name);
  if (nonce) *nonce = std::move(rest);
  return true;
}

// ---------------------------------------------------------------------------
// Part records.

Status ValidatePartRecord(const PartRecord& r) {
  const char* k = kPartKind;
  CKPTFS_RETURN_IF_ERROR(CheckNode(k, "node", r.node));
  if (r.cache_id.empty() || r.cache_id.size() > kMaxRecordStringLength) {
    return Bad(k, "cache_id",
               "must be 1-" + std::to_string(kMaxRecordStringLength) + " characters");
  }
  for (char c : r.cache_id) {
    if (c <= 0x20 || c >= 0x7f)
      return Bad(k, "cache_id", QuoteForMessage(r.cache_id) + " is not printable ASCII without spaces");
  }
  if (r.epoch == 0) return Bad(k, "epoch", "is 0 (a node name's epochs start at 1)");
  CKPTFS_RETURN_IF_ERROR(CheckPath(k, "step_path", r.step_path));
  if (!r.staged_as.empty()) CKPTFS_RETURN_IF_ERROR(CheckPath(k, "staged_as", r.staged_as));
  CKPTFS_RETURN_IF_ERROR(CheckTime(k, "published_at", r.published_at));
  CKPTFS_RETURN_IF_ERROR(CheckTime(k, "last_activity", r.last_activity));
  if (r.synced && r.open_writers > 0) {
    return Bad(k, "synced",
               "is true in a record with " + std::to_string(r.open_writers) + " open writer(s)");
  }
  if (r.chunk_size != 0 && (r.chunk_size < kMinChecksumChunk || r.chunk_size > kMaxChecksumChunk)) {
    return Bad(k, "chunk_size",
               std::to_string(r.chunk_size) + " is neither 0 nor within [" +
                   std::to_string(kMinChecksumChunk) + ", " + std::to_string(kMaxChecksumChunk) +
                   "]");
  }
  CKPTFS_RETURN_IF_ERROR(CheckCount(k, "files", r.files.size(), kMaxRecordEntries));
  std::set<std::string_view> seen;
  for (size_t i = 0; i < r.files.size(); ++i) {
    const PartRecord::File& f = r.files[i];
    const std::string at = At("files", i);
    CKPTFS_RETURN_IF_ERROR(CheckPath(k, at + ".path", f.path));
    if (!seen.insert(f.path).second) return Bad(k, at + ".path", "duplicate path " + QuoteForMessage(f.path));
    CKPTFS_RETURN_IF_ERROR(CheckMode(k, at + ".mode", f.mode));
    if (f.uploaded && !f.crc32c) return Bad(k, at + ".crc32c", "is null for an uploaded file");
    if (!f.chunks.empty()) {
      if (r.chunk_size == 0) return Bad(k, at + ".chunks", "chunk CRC32Cs without a chunk_size");
      if (f.chunks.size() != ChunkCount(f.size, r.chunk_size)) {
        return Bad(k, at + ".chunks",
                   std::to_string(f.chunks.size()) + " chunk CRC32Cs do not cover " +
                       std::to_string(f.size) + " bytes in chunks of " +
                       std::to_string(r.chunk_size));
      }
    }
    if (r.all_uploaded && !f.uploaded) {
      return Bad(k, at + ".uploaded", "is false in a record whose all_uploaded is true");
    }
  }
  return CheckTree(k, r.dirs, r.symlinks, &seen);
}

std::string EncodePartRecord(const PartRecord& r) {
  OrderedJson files = OrderedJson::array();
  for (const PartRecord::File* f : InPathOrder(r.files)) {
    OrderedJson chunks = OrderedJson::array();
    for (uint32_t c : f->chunks) chunks.push_back(Hex32(c));
    files.push_back({{"path", Text(f->path)},
                     {"size", f->size},
                     {"mode", f->mode & 07777},
                     {"mtime_ns", f->mtime_ns},
                     {"crc32c", Crc(f->crc32c)},
                     {"uploaded", f->uploaded},
                     {"chunks", std::move(chunks)}});
  }
  OrderedJson j = {
      {"format", kPartFormat},
      {"version", kFormatVersion},
      {"node", Text(r.node)},
      {"cache_id", Text(r.cache_id)},
      {"epoch", r.epoch},
      {"step_path", Text(r.step_path)},
      {"seq", r.seq},
      {"staged_as", Text(r.staged_as)},
      {"published_at", r.published_at},
      {"open_writers", r.open_writers},
      {"last_activity", r.last_activity},
      {"files", std::move(files)},
      {"dirs", SortedStrings(r.dirs)},
      {"symlinks", Symlinks(r.symlinks)},
      {"chunk_size", r.chunk_size},
      {"all_uploaded", r.all_uploaded},
      {"synced", r.synced},
  };
  return Dump(j);
}

Result<PartRecord> DecodePartRecord(const std::string& json) {
  const char* k = kPartKind;
  try {
    Json j;
    CKPTFS_RETURN_IF_ERROR(ParseHead(k, kPartFormat, json, &j));
    Fields top(k, j, "");
    PartRecord r;
    CKPTFS_RETURN_IF_ERROR(top.String("node", &r.node));
    CKPTFS_RETURN_IF_ERROR(top.String("cache_id", &r.cache_id));
    CKPTFS_RETURN_IF_ERROR(top.Uint("epoch", UINT64_MAX, &r.epoch));
    CKPTFS_RETURN_IF_ERROR(top.String("step_path", &r.step_path));
    CKPTFS_RETURN_IF_ERROR(top.Uint("seq", UINT64_MAX, &r.seq));
    CKPTFS_RETURN_IF_ERROR(top.String("staged_as", &r.staged_as));
    CKPTFS_RETURN_IF_ERROR(top.Seconds("published_at", &r.published_at));
    CKPTFS_RETURN_IF_ERROR(top.Uint32("open_writers", &r.open_writers));
    CKPTFS_RETURN_IF_ERROR(top.Seconds("last_activity", &r.last_activity));
    CKPTFS_RETURN_IF_ERROR(top.Uint("chunk_size", UINT64_MAX, &r.chunk_size));
    CKPTFS_RETURN_IF_ERROR(top.Bool("all_uploaded", &r.all_uploaded));
    CKPTFS_RETURN_IF_ERROR(top.Bool("synced", &r.synced));
    const Json* files;
    CKPTFS_RETURN_IF_ERROR(top.Array("files", kMaxRecordEntries, &files));
    r.files.reserve(files->size());
    for (size_t i = 0; i < files->size(); ++i) {
      const Json& v = (*files)[i];
      if (!v.is_object()) return Bad(k, At("files", i), "must be an object, not " + Show(v));
      Fields f(k, v, At("files", i));
      PartRecord::File file;
      CKPTFS_RETURN_IF_ERROR(f.String("path", &file.path));
      CKPTFS_RETURN_IF_ERROR(f.Uint("size", UINT64_MAX, &file.size));
      CKPTFS_RETURN_IF_ERROR(f.Uint32("mode", &file.mode));
      CKPTFS_RETURN_IF_ERROR(f.Int("mtime_ns", &file.mtime_ns));
      CKPTFS_RETURN_IF_ERROR(f.Crc("crc32c", &file.crc32c));
      CKPTFS_RETURN_IF_ERROR(f.Bool("uploaded", &file.uploaded));
      const Json* chunks;
      CKPTFS_RETURN_IF_ERROR(f.Array("chunks", SIZE_MAX, &chunks));
      file.chunks.reserve(chunks->size());
      for (size_t c = 0; c < chunks->size(); ++c) {
        const Json& cv = (*chunks)[c];
        std::optional<uint32_t> crc;
        if (cv.is_string()) crc = ParseHex32(cv.get<std::string>());
        if (!crc)
          return Bad(k, At(f.Name("chunks"), c),
                     "must be 8 lower-case hex digits, not " + Show(cv));
        file.chunks.push_back(*crc);
      }
      r.files.push_back(std::move(file));
    }
    CKPTFS_RETURN_IF_ERROR(DecodeStrings(k, top, "dirs", &r.dirs));
    CKPTFS_RETURN_IF_ERROR(DecodeSymlinks(k, top, &r.symlinks));
    CKPTFS_RETURN_IF_ERROR(ValidatePartRecord(r));
    SortByPath(&r.files);
    std::sort(r.dirs.begin(), r.dirs.end());
    SortByPath(&r.symlinks);
    return r;
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(EIO, std::string(k) + ": malformed: " + e.what());
  }
}

// ---------------------------------------------------------------------------
// Step records.

Status ValidateClusterStepRecord(const ClusterStepRecord& r) {
  const char* k = kStepKind;
  CKPTFS_RETURN_IF_ERROR(CheckPath(k, "step_path", r.step_path));
  if (!ParseProposal(r.proposal, nullptr, nullptr)) {
    return Bad(k, "proposal",
               QuoteForMessage(r.proposal) + " is not '<node>~<nonce>' (a node name, '~', then 1-" +
                   std::to_string(kMaxProposalNonceLength) +
                   " characters from A-Z, a-z, 0-9, '.', '_' and '-')");
  }
  CKPTFS_RETURN_IF_ERROR(CheckNode(k, "committer", r.committer));
  CKPTFS_RETURN_IF_ERROR(CheckTime(k, "committed_at", r.committed_at));
  if (r.dir_mtime_ns < 0) return Bad(k, "dir_mtime_ns", "is negative");
  CKPTFS_RETURN_IF_ERROR(CheckText(k, "best_ref", r.best_ref));
  CKPTFS_RETURN_IF_ERROR(CheckCount(k, "parts", r.parts.size(), kMaxRecordNodes));
  for (const auto& [node, part] : r.parts) {
    CKPTFS_RETURN_IF_ERROR(CheckNode(k, "parts[" + QuoteForMessage(node) + "]", node));
  }
  CKPTFS_RETURN_IF_ERROR(CheckCount(k, "files", r.files.size(), kMaxRecordEntries));
  std::set<std::string_view> seen;
  uint64_t total = 0;
  for (size_t i = 0; i < r.files.size(); ++i) {
    const ClusterStepRecord::File& f = r.files[i];
    const std::string at = At("files", i);
    CKPTFS_RETURN_IF_ERROR(CheckPath(k, at + ".path", f.path));
    if (!seen.insert(f.path).second) return Bad(k, at + ".path", "duplicate path " + QuoteForMessage(f.path));
    if (!r.parts.contains(f.node))
      return Bad(k, at + ".node", QuoteForMessage(f.node) + " has no entry in parts");
    CKPTFS_RETURN_IF_ERROR(CheckMode(k, at + ".mode", f.mode));
    if (__builtin_add_overflow(total, f.size, &total))
      return Bad(k, at + ".size", "the sizes overflow 64 bits");
  }
  if (total != r.bytes) {
    return Bad(k, "bytes",
               std::to_string(r.bytes) + " is not the files' total size " + std::to_string(total));
  }
  return CheckTree(k, r.dirs, r.symlinks, &seen);
}

std::string EncodeClusterStepRecord(const ClusterStepRecord& r) {
  OrderedJson parts = OrderedJson::object();
  for (const auto& [node, part] : r.parts) parts[node] = {{"seq", part.seq}, {"files", part.files}};
  OrderedJson files = OrderedJson::array();
  for (const ClusterStepRecord::File* f : InPathOrder(r.files)) {
    files.push_back({{"path", Text(f->path)},
                     {"node", Text(f->node)},
                     {"size", f->size},
                     {"crc32c", Crc(f->crc32c)},
                     {"mode", f->mode & 07777},
                     {"mtime_ns", f->mtime_ns}});
  }
  OrderedJson j = {
      {"format", kStepFormat},
      {"version", kFormatVersion},
      {"step_path", Text(r.step_path)},
      {"step", r.step},
      {"proposal", Text(r.proposal)},
      {"committer", Text(r.committer)},
      {"committed_at", r.committed_at},
      {"dir_mtime_ns", r.dir_mtime_ns},
      {"ephemeral", r.ephemeral},
      {"best_ref", Text(r.best_ref)},
      {"bytes", r.bytes},
      {"parts", std::move(parts)},
      {"files", std::move(files)},
      {"dirs", SortedStrings(r.dirs)},
      {"symlinks", Symlinks(r.symlinks)},
  };
  return Dump(j);
}

Result<ClusterStepRecord> DecodeClusterStepRecord(const std::string& json) {
  const char* k = kStepKind;
  try {
    Json j;
    CKPTFS_RETURN_IF_ERROR(ParseHead(k, kStepFormat, json, &j));
    Fields top(k, j, "");
    ClusterStepRecord r;
    CKPTFS_RETURN_IF_ERROR(top.String("step_path", &r.step_path));
    CKPTFS_RETURN_IF_ERROR(top.Int("step", &r.step));
    CKPTFS_RETURN_IF_ERROR(top.String("proposal", &r.proposal));
    CKPTFS_RETURN_IF_ERROR(top.String("committer", &r.committer));
    CKPTFS_RETURN_IF_ERROR(top.Seconds("committed_at", &r.committed_at));
    CKPTFS_RETURN_IF_ERROR(top.Int("dir_mtime_ns", &r.dir_mtime_ns));
    CKPTFS_RETURN_IF_ERROR(top.Bool("ephemeral", &r.ephemeral));
    CKPTFS_RETURN_IF_ERROR(top.String("best_ref", &r.best_ref));
    CKPTFS_RETURN_IF_ERROR(top.Uint("bytes", UINT64_MAX, &r.bytes));
    const Json* parts;
    CKPTFS_RETURN_IF_ERROR(top.Object("parts", kMaxRecordNodes, &parts));
    for (const auto& [node, v] : parts->items()) {
      const std::string at = "parts[" + QuoteForMessage(node) + "]";
      if (!v.is_object()) return Bad(k, at, "must be an object, not " + Show(v));
      Fields p(k, v, at);
      ClusterStepRecord::Part part;
      CKPTFS_RETURN_IF_ERROR(p.Uint("seq", UINT64_MAX, &part.seq));
      CKPTFS_RETURN_IF_ERROR(p.Uint("files", UINT64_MAX, &part.files));
      r.parts.emplace(node, part);
    }
    const Json* files;
    CKPTFS_RETURN_IF_ERROR(top.Array("files", kMaxRecordEntries, &files));
    r.files.reserve(files->size());
    for (size_t i = 0; i < files->size(); ++i) {
      const Json& v = (*files)[i];
      if (!v.is_object()) return Bad(k, At("files", i), "must be an object, not " + Show(v));
      Fields f(k, v, At("files", i));
      ClusterStepRecord::File file;
      CKPTFS_RETURN_IF_ERROR(f.String("path", &file.path));
      CKPTFS_RETURN_IF_ERROR(f.String("node", &file.node));
      CKPTFS_RETURN_IF_ERROR(f.Uint("size", UINT64_MAX, &file.size));
      CKPTFS_RETURN_IF_ERROR(f.Crc("crc32c", &file.crc32c));
      CKPTFS_RETURN_IF_ERROR(f.Uint32("mode", &file.mode));
      CKPTFS_RETURN_IF_ERROR(f.Int("mtime_ns", &file.mtime_ns));
      r.files.push_back(std::move(file));
    }
    CKPTFS_RETURN_IF_ERROR(DecodeStrings(k, top, "dirs", &r.dirs));
    CKPTFS_RETURN_IF_ERROR(DecodeSymlinks(k, top, &r.symlinks));
    CKPTFS_RETURN_IF_ERROR(ValidateClusterStepRecord(r));
    SortByPath(&r.files);
    std::sort(r.dirs.begin(), r.dirs.end());
    SortByPath(&r.symlinks);
    return r;
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(EIO, std::string(k) + ": malformed: " + e.what());
  }
}

// ---------------------------------------------------------------------------
// Run-level file records.

Status ValidateRunFileRecord(const RunFileRecord& r) {
  const char* k = kRunFileKind;
  CKPTFS_RETURN_IF_ERROR(CheckPath(k, "path", r.path));
  CKPTFS_RETURN_IF_ERROR(CheckNode(k, "node", r.node));
  return Status::Ok();
}

std::string EncodeRunFileRecord(const RunFileRecord& r) {
  OrderedJson j = {
      {"format", kRunFileFormat},
      {"version", kFormatVersion},
      {"path", Text(r.path)},
      {"node", Text(r.node)},
      {"size", r.size},
      {"mtime_ns", r.mtime_ns},
      {"crc32c", Hex32(r.crc32c)},
  };
  return Dump(j);
}

Result<RunFileRecord> DecodeRunFileRecord(const std::string& json) {
  const char* k = kRunFileKind;
  try {
    Json j;
    CKPTFS_RETURN_IF_ERROR(ParseHead(k, kRunFileFormat, json, &j));
    Fields top(k, j, "");
    RunFileRecord r;
    CKPTFS_RETURN_IF_ERROR(top.String("path", &r.path));
    CKPTFS_RETURN_IF_ERROR(top.String("node", &r.node));
    CKPTFS_RETURN_IF_ERROR(top.Uint("size", UINT64_MAX, &r.size));
    CKPTFS_RETURN_IF_ERROR(top.Int("mtime_ns", &r.mtime_ns));
    std::optional<uint32_t> crc;
    CKPTFS_RETURN_IF_ERROR(top.Crc("crc32c", &crc));
    if (!crc) return top.Bad("crc32c", "must be 8 lower-case hex digits, not null");
    r.crc32c = *crc;
    CKPTFS_RETURN_IF_ERROR(ValidateRunFileRecord(r));
    return r;
  } catch (const nlohmann::json::exception& e) {
    return Status::Error(EIO, std::string(k) + ": malformed: " + e.what());
  }
}

}  // namespace ckptfs
