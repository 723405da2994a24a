// The torch.save container reader (torch_zip.h): ZIP end records and central
// directory, local headers, and the walk of data.pkl's value tree. All sizes
// read from the input are checked against the container before they are used
// to read or allocate.
#include "formats/torch_zip.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "formats/pickle_reader.h"

namespace ckptfs {
namespace {

using Kind = PickleValue::Kind;
// 128-bit sums and products for overflow checks (GCC and Clang extension).
__extension__ typedef unsigned __int128 Wide;

Status Bad(const std::string& what) { return Status::Error(EIO, "torch.save zip: " + what); }

std::string Quote(std::string_view s) {
  constexpr size_t kMax = 80;
  std::string out = "'";
  out.append(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  return out + "'";
}

uint64_t Le(const char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint16_t U16(const char* p) { return static_cast<uint16_t>(Le(p, 2)); }
uint32_t U32(const char* p) { return static_cast<uint32_t>(Le(p, 4)); }
uint64_t U64(const char* p) { return Le(p, 8); }

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEocdSig = 0x06054b50;
constexpr uint32_t kZip64EocdSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kEocdSize = 22;
constexpr uint64_t kLocatorSize = 20;
constexpr uint64_t kZip64EocdSize = 56;
constexpr uint64_t kCentralSize = 46;
constexpr uint64_t kLocalSize = 30;
constexpr uint64_t kMaxComment = 0xffff;

// Exactly n bytes at `offset`; a short source is EIO.
Status ReadExact(const ByteSource& source, uint64_t offset, size_t n, std::string* out) {
  out->assign(n, '\0');
  size_t done = 0;
  while (done < n) {
    Result<size_t> r = source.ReadAt(offset + done, out->data() + done, n - done);
    if (!r.ok()) return r.status();
    if (*r == 0 || *r > n - done) {
      return Bad("short read at offset " + std::to_string(offset + done) + " (source size " +
                 std::to_string(source.Size()) + ")");
    }
    done += *r;
  }
  return Status::Ok();
}

// What the end records say about the central directory (offsets relative to
// the container).
struct EndRecords {
  uint64_t records = 0;
  uint64_t cd_offset = 0;
  uint64_t cd_size = 0;
  uint64_t cd_limit = 0;  // where the central directory must end
};

// The EOCD's position: torch writes no comment, so it is the last 22 bytes;
// other writers may add a comment, found by scanning back at most 64 KiB.
Result<uint64_t> FindEocd(const ByteSource& source, uint64_t base, uint64_t length) {
  std::string tail;
  CKPTFS_RETURN_IF_ERROR(ReadExact(source, base + length - kEocdSize, kEocdSize, &tail));
  if (U32(tail.data()) == kEocdSig && U16(tail.data() + 20) == 0) return length - kEocdSize;
  uint64_t n = std::min(length, kEocdSize + kMaxComment);
  CKPTFS_RETURN_IF_ERROR(ReadExact(source, base + length - n, n, &tail));
  for (uint64_t p = n - kEocdSize + 1; p-- > 0;) {
    if (U32(tail.data() + p) == kEocdSig && p + kEocdSize + U16(tail.data() + p + 20) == n) {
      return length - n + p;
    }
  }
  return Bad("no end-of-central-directory record (not a zip, or truncated)");
}

Result<EndRecords> ReadEndRecords(const ByteSource& source, uint64_t base, uint64_t length) {
  Result<uint64_t> eocd_at = FindEocd(source, base, length);
  if (!eocd_at.ok()) return eocd_at.status();
  std::string e;
  CKPTFS_RETURN_IF_ERROR(ReadExact(source, base + *eocd_at, kEocdSize, &e));
  EndRecords out;
  if (U16(e.data() + 4) != 0 || U16(e.data() + 6) != 0 || U16(e.data() + 8) != U16(e.data() + 10)) {
    return Bad("multi-disk zips are not supported");
  }
  out.records = U16(e.data() + 10);
  out.cd_size = U32(e.data() + 12);
  out.cd_offset = U32(e.data() + 16);
  out.cd_limit = *eocd_at;
  std::string loc;
  if (*eocd_at >= kLocatorSize) {
    CKPTFS_RETURN_IF_ERROR(ReadExact(source, base + *eocd_at - kLocatorSize, kLocatorSize, &loc));
  }
  if (!loc.empty() && U32(loc.data()) == kZip64LocatorSig) {
    uint64_t z = U64(loc.data() + 8);
    if (U32(loc.data() + 4) != 0 || U32(loc.data() + 16) > 1) {
      return Bad("multi-disk zips are not supported");
    }
    if (z > *eocd_at - kLocatorSize || *eocd_at - kLocatorSize - z < kZip64EocdSize) {
      return Bad("ZIP64 end record offset " + std::to_string(z) + " is out of range");
    }
    std::string r;
    CKPTFS_RETURN_IF_ERROR(ReadExact(source, base + z, kZip64EocdSize, &r));
    if (U32(r.data()) != kZip64EocdSig) return Bad("bad ZIP64 end record signature");
    if (U32(r.data() + 16) != 0 || U32(r.data() + 20) != 0 ||
        U64(r.data() + 24) != U64(r.data() + 32)) {
      return Bad("multi-disk zips are not supported");
    }
    out.records = U64(r.data() + 32);
    out.cd_size = U64(r.data() + 40);
    out.cd_offset = U64(r.data() + 48);
    out.cd_limit = z;
  } else if (out.records == 0xffff || out.cd_size == 0xffffffff || out.cd_offset == 0xffffffff) {
    return Bad("end record defers to ZIP64 but there is no ZIP64 locator");
  }
  if (out.cd_offset > out.cd_limit || out.cd_size > out.cd_limit - out.cd_offset) {
    return Bad("central directory [" + std::to_string(out.cd_offset) + ", +" +
               std::to_string(out.cd_size) + ") is outside the container");
  }
  return out;
}

// Replaces the 0xffff... placeholders of a central header from its ZIP64
// extra field (id 1), whose values appear in this fixed order when present.
Status ApplyZip64Extra(std::string_view extra, TorchZipRecord* r, uint32_t* disk) {
  bool need = r->size == 0xffffffff || r->compressed_size == 0xffffffff ||
              r->local_header_offset == 0xffffffff || *disk == 0xffff;
  while (extra.size() >= 4) {
    uint16_t id = U16(extra.data());
    uint16_t n = U16(extra.data() + 2);
    if (n > extra.size() - 4) return Bad("extra field of " + Quote(r->name) + " overruns");
    std::string_view body = extra.substr(4, n);
    extra.remove_prefix(4 + size_t{n});
    if (id != 1) continue;
    auto take = [&](uint64_t* field, uint64_t marker, size_t width) -> Status {
      if (*field != marker) return Status::Ok();
      if (body.size() < width) return Bad("short ZIP64 extra field in " + Quote(r->name));
      *field = Le(body.data(), static_cast<int>(width));
      body.remove_prefix(width);
      return Status::Ok();
    };
    uint64_t d = *disk;
    CKPTFS_RETURN_IF_ERROR(take(&r->size, 0xffffffff, 8));
    CKPTFS_RETURN_IF_ERROR(take(&r->compressed_size, 0xffffffff, 8));
    CKPTFS_RETURN_IF_ERROR(take(&r->local_header_offset, 0xffffffff, 8));
    CKPTFS_RETURN_IF_ERROR(take(&d, 0xffff, 4));
    *disk = static_cast<uint32_t>(d);
    return Status::Ok();
  }
  if (need) return Bad("record " + Quote(r->name) + " needs a ZIP64 extra field it lacks");
  return Status::Ok();
}

struct DtypeSize {
  std::string_view name;
  uint32_t size;
};

constexpr DtypeSize kDtypes[] = {
    {"float32", 4},         {"float64", 8},
    {"float16", 2},         {"bfloat16", 2},
    {"int64", 8},           {"int32", 4},
    {"int16", 2},           {"int8", 1},
    {"uint8", 1},           {"bool", 1},
    {"complex32", 4},       {"complex64", 8},
    {"complex128", 16},     {"uint16", 2},
    {"uint32", 4},          {"uint64", 8},
    {"float8_e4m3fn", 1},   {"float8_e5m2", 1},
    {"float8_e4m3fnuz", 1}, {"float8_e5m2fnuz", 1},
    {"float8_e8m0fnu", 1},  {"float4_e2m1fn_x2", 1},
    {"bits8", 1},           {"bits16", 2},
    {"bits1x8", 1},         {"bits2x4", 1},
    {"bits4x2", 1},
};

// torch.<X>Storage, the typed storages of _rebuild_tensor_v2 (torch/storage.py
// _LegacyStorage subclasses; quantized ones only come with _rebuild_qtensor).
constexpr std::pair<std::string_view, std::string_view> kLegacyStorages[] = {
    {"FloatStorage", "float32"},
    {"DoubleStorage", "float64"},
    {"HalfStorage", "float16"},
    {"BFloat16Storage", "bfloat16"},
    {"LongStorage", "int64"},
    {"IntStorage", "int32"},
    {"ShortStorage", "int16"},
    {"CharStorage", "int8"},
    {"ByteStorage", "uint8"},
    {"BoolStorage", "bool"},
    {"ComplexFloatStorage", "complex64"},
    {"ComplexDoubleStorage", "complex128"},
};

constexpr size_t kMaxDims = 64;

bool IsTorchUtils(const PickleValue& v, std::string_view name) {
  return v.kind == Kind::kObject && v.IsA("torch._utils", name);
}

Result<std::vector<int64_t>> Dims(const PickleValue* v, const char* what) {
  if (v->kind == Kind::kObject && v->IsA("torch", "Size") && v->args->items.size() == 1) {
    v = v->args->items[0];
  }
  if (v->kind != Kind::kTuple && v->kind != Kind::kList) {
    return Bad(std::string(what) + " is a " + PickleKindName(v->kind) + ", not a tuple");
  }
  if (v->items.size() > kMaxDims) return Bad(std::string(what) + " has too many dimensions");
  std::vector<int64_t> out;
  for (const PickleValue* d : v->items) {
    if (d->kind != Kind::kInt || d->int_value < 0) {
      return Bad(std::string(what) + " holds " + DescribePickleValue(*d, 1));
    }
    out.push_back(d->int_value);
  }
  return out;
}

// The archive and its source, for rebuilding tensors out of data.pkl.
struct Container {
  const ByteSource& source;
  const TorchZipArchive& archive;
};

Result<TorchTensorInfo> Rebuild(const Container& c, const PickleValue& value) {
  const PickleValue* v = &value;
  // nn.Parameter saved whole: the tensor is its first argument.
  if (IsTorchUtils(*v, "_rebuild_parameter") || IsTorchUtils(*v, "_rebuild_parameter_with_state")) {
    if (v->args->items.empty()) return Bad("_rebuild_parameter without arguments");
    v = v->args->items[0];
  }
  bool v3 = IsTorchUtils(*v, "_rebuild_tensor_v3");
  if (!v3 && !IsTorchUtils(*v, "_rebuild_tensor_v2")) {
    return Bad("unsupported tensor kind " + DescribePickleValue(*v, 1));
  }
  const std::vector<const PickleValue*>& a = v->args->items;
  if (a.size() < (v3 ? 7u : 6u)) return Bad("too few arguments to " + v->name());
  const PickleValue* pid = a[0];
  if (pid->kind != Kind::kPersistentId || pid->args->kind != Kind::kTuple ||
      pid->args->items.size() != 5) {
    return Bad("tensor storage is not a ('storage', ...) persistent id");
  }
  const std::vector<const PickleValue*>& p = pid->args->items;
  if (p[0]->kind != Kind::kString || p[0]->text != "storage" || p[1]->kind != Kind::kGlobal ||
      p[2]->kind != Kind::kString || p[4]->kind != Kind::kInt || p[4]->int_value < 0) {
    return Bad("malformed storage persistent id " + DescribePickleValue(*pid->args, 2));
  }
  TorchTensorInfo t;
  t.storage_key = p[2]->text;
  // The storage's element size: 1 for UntypedStorage (numel counts bytes).
  uint64_t storage_unit = 1;
  if (v3) {
    if (a[6]->kind != Kind::kGlobal || a[6]->module() != "torch") {
      return Bad("tensor dtype is " + DescribePickleValue(*a[6], 1));
    }
    t.dtype = a[6]->name();
  }
  if (p[1]->IsA("torch.storage", "UntypedStorage")) {
    if (!v3) return Bad("_rebuild_tensor_v2 with an UntypedStorage has no dtype");
  } else if (p[1]->module() == "torch") {
    const auto* it = std::find_if(std::begin(kLegacyStorages), std::end(kLegacyStorages),
                                  [&](const auto& s) { return s.first == p[1]->name(); });
    if (it == std::end(kLegacyStorages)) return Bad("unsupported storage torch." + p[1]->name());
    if (!v3) t.dtype = it->second;
    storage_unit = *TorchDtypeElementSize(it->second);
  } else {
    return Bad("unsupported storage " + p[1]->module() + "." + p[1]->name());
  }
  std::optional<uint32_t> es = TorchDtypeElementSize(t.dtype);
  if (!es) return Bad("unsupported dtype torch." + t.dtype);
  t.element_size = *es;
  if (a[1]->kind != Kind::kInt || a[1]->int_value < 0) return Bad("bad storage offset");
  t.storage_offset = a[1]->int_value;
  Result<std::vector<int64_t>> shape = Dims(a[2], "size");
  if (!shape.ok()) return shape.status();
  Result<std::vector<int64_t>> stride = Dims(a[3], "stride");
  if (!stride.ok()) return stride.status();
  t.shape = std::move(shape).value();
  t.stride = std::move(stride).value();
  if (t.shape.size() != t.stride.size()) return Bad("size and stride differ in rank");

  uint64_t storage_bytes = 0;
  if (__builtin_mul_overflow(uint64_t(p[4]->int_value), storage_unit, &storage_bytes)) {
    return Bad("storage size overflows");
  }
  const TorchZipRecord* rec = c.archive.Find("data/" + t.storage_key);
  if (rec == nullptr) return Bad("storage record data/" + t.storage_key + " is missing");
  if (rec->size != storage_bytes) {
    return Bad("storage data/" + t.storage_key + " holds " + std::to_string(rec->size) +
               " bytes, its persistent id says " + std::to_string(storage_bytes));
  }
  // The view's byte count must be representable, and the highest element it
  // reaches must lie inside the storage. Each term is below 2^126 and the sum
  // stops growing once past the storage, so the 128-bit arithmetic cannot wrap.
  Wide bytes = t.element_size;
  Wide last = static_cast<uint64_t>(t.storage_offset);
  for (size_t d = 0; d < t.shape.size(); ++d) {
    bytes *= static_cast<uint64_t>(t.shape[d]);
    if (bytes > (uint64_t{1} << 62)) return Bad("tensor of more than 2^62 bytes");
    if (t.shape[d] > 0 && last <= storage_bytes) {
      last += static_cast<Wide>(t.shape[d] - 1) * static_cast<uint64_t>(t.stride[d]);
    }
  }
  // An empty view reads nothing, but its start must still be in (or just
  // past) the storage so that data_position() stays inside the container.
  Wide reach =
      bytes > 0 ? (last + 1) * t.element_size : Wide(uint64_t(t.storage_offset)) * t.element_size;
  if (reach > storage_bytes) {
    return Bad("tensor reaches past its storage data/" + t.storage_key + " (" +
               std::to_string(storage_bytes) + " bytes)");
  }
  Result<uint64_t> at = c.archive.DataOffset(c.source, *rec);
  if (!at.ok()) return at.status();
  t.storage_position = *at;
  t.storage_bytes = storage_bytes;
  return t;
}

// torch writes "little" (and, since 2.1, always writes the record); a
// big-endian archive would need byte swapping this reader does not do.
Status CheckByteOrder(const Container& c) {
  const TorchZipRecord* r = c.archive.Find("byteorder");
  if (r == nullptr) return Status::Ok();
  Result<std::string> text = c.archive.ReadRecord(c.source, *r, 16);
  if (!text.ok()) return text.status();
  if (*text != "little") return Bad("byteorder " + Quote(*text) + " is not supported");
  return Status::Ok();
}

Result<PickleDocument> ReadDataPickle(const Container& c, const TorchZipLimits& limits) {
  CKPTFS_RETURN_IF_ERROR(CheckByteOrder(c));
  const TorchZipRecord* r = c.archive.Find("data.pkl");
  if (r == nullptr) return Bad("no " + c.archive.prefix() + "/data.pkl record");
  Result<std::string> bytes = c.archive.ReadRecord(c.source, *r, limits.max_pickle_bytes);
  if (!bytes.ok()) return bytes.status();
  PickleLimits pl;
  pl.max_input_bytes = limits.max_pickle_bytes;
  Result<PickleDocument> doc = Unpickle(*bytes, pl);
  if (!doc.ok()) return doc.status().Annotate("torch.save zip: data.pkl");
  return doc;
}

// Walks a state dict's value tree. The memo can share nodes (a DAG, even a
// cycle), so depth and total visits are bounded.
class StateDictWalker {
 public:
  StateDictWalker(const Container& c, size_t node_count, uint64_t pickle_bytes)
      : c_(c),
        visits_left_(std::max<size_t>(size_t{1} << 16, 4 * node_count)),
        key_bytes_left_(32 * pickle_bytes + (uint64_t{1} << 20)) {}

  Status Walk(const PickleValue& v, const std::string& key, int depth) {
    if (visits_left_-- == 0) return Bad("data.pkl shares values too often to walk");
    if (depth > 64) return Bad("data.pkl nests deeper than 64 levels at " + Quote(key));
    if (v.kind == Kind::kObject && v.module() == "torch._utils" &&
        v.name().starts_with("_rebuild_")) {
      return AddTensor(v, key);
    }
    if (v.kind == Kind::kDict || (v.kind == Kind::kObject && v.IsA("collections", "OrderedDict"))) {
      for (const auto& [k, child] : v.entries) {
        std::string name;
        if (k->kind == Kind::kString) {
          name = k->text;
        } else if (k->kind == Kind::kInt) {
          name = std::to_string(k->int_value);
        } else {
          CKPTFS_RETURN_IF_ERROR(ChargeKey(key, "?"));
          out_.skipped.push_back(Join(key, "?") + ": a " + PickleKindName(k->kind) + " key");
          continue;
        }
        CKPTFS_RETURN_IF_ERROR(ChargeKey(key, name));
        CKPTFS_RETURN_IF_ERROR(Walk(*child, Join(key, name), depth + 1));
      }
    } else if (v.kind == Kind::kList || v.kind == Kind::kTuple) {
      for (size_t i = 0; i < v.items.size(); ++i) {
        CKPTFS_RETURN_IF_ERROR(ChargeKey(key, std::to_string(i)));
        CKPTFS_RETURN_IF_ERROR(Walk(*v.items[i], Join(key, std::to_string(i)), depth + 1));
      }
    }
    return Status::Ok();
  }

  TorchSaveContents Take() { return std::move(out_); }

 private:
  // Keys repeat their parents' keys, and the memo lets one long string be
  // reached along many paths: bound the bytes of all keys built together.
  Status ChargeKey(const std::string& key, const std::string& name) {
    uint64_t n = key.size() + 1 + name.size();
    if (n > key_bytes_left_) return Bad("data.pkl keys would be far larger than the file");
    key_bytes_left_ -= n;
    return Status::Ok();
  }

  static std::string Join(const std::string& key, const std::string& name) {
    return key.empty() ? name : key + "." + name;
  }

  Status AddTensor(const PickleValue& v, const std::string& key) {
    const PickleValue* inner = &v;
    if (IsTorchUtils(v, "_rebuild_parameter") || IsTorchUtils(v, "_rebuild_parameter_with_state")) {
      if (!v.args->items.empty()) inner = v.args->items[0];
    }
    if (!IsTorchUtils(*inner, "_rebuild_tensor_v2") &&
        !IsTorchUtils(*inner, "_rebuild_tensor_v3")) {
      out_.skipped.push_back(key + ": " + inner->module() + "." + inner->name() +
                             " is not supported");
      return Status::Ok();
    }
    if (!emitted_.insert(key).second) return Bad("key " + Quote(key) + " appears twice");
    Result<TorchTensorInfo> t = Rebuild(c_, v);
    if (!t.ok()) return t.status().Annotate(key.empty() ? "root tensor" : Quote(key));
    out_.tensors.push_back({key, std::move(t).value()});
    return Status::Ok();
  }

  const Container& c_;
  size_t visits_left_;
  uint64_t key_bytes_left_;
  std::unordered_set<std::string> emitted_;
  TorchSaveContents out_;
};

}  // namespace

Result<size_t> StringByteSource::ReadAt(uint64_t offset, void* buf, size_t n) const {
  if (offset >= bytes_.size()) return size_t{0};
  size_t k = std::min<uint64_t>(n, bytes_.size() - offset);
  std::memcpy(buf, bytes_.data() + offset, k);
  return k;
}

std::optional<uint32_t> TorchDtypeElementSize(std::string_view dtype) {
  for (const DtypeSize& d : kDtypes) {
    if (d.name == dtype) return d.size;
  }
  return std::nullopt;
}

Result<TorchZipArchive> TorchZipArchive::Open(const ByteSource& source, uint64_t base,
                                              uint64_t length, const TorchZipLimits& limits) {
  uint64_t size = source.Size();
  if (base > size || length > size - base) {
    return Bad("container [" + std::to_string(base) + ", +" + std::to_string(length) +
               ") extends past the end of the source (" + std::to_string(size) + " bytes)");
  }
  if (length < kEocdSize) return Bad("container of " + std::to_string(length) + " bytes is no zip");
  Result<EndRecords> end = ReadEndRecords(source, base, length);
  if (!end.ok()) return end.status();
  if (end->records == 0) return Bad("zip has no records");
  if (end->records > limits.max_records) {
    return Bad(std::to_string(end->records) + " records exceed the limit of " +
               std::to_string(limits.max_records));
  }
  if (end->cd_size > limits.max_central_directory_bytes) {
    return Bad("central directory of " + std::to_string(end->cd_size) + " bytes exceeds the limit");
  }
  if (end->records > end->cd_size / kCentralSize) {
    return Bad(std::to_string(end->records) + " records cannot fit a central directory of " +
               std::to_string(end->cd_size) + " bytes");
  }
  std::string cd;
  CKPTFS_RETURN_IF_ERROR(ReadExact(source, base + end->cd_offset, end->cd_size, &cd));

  TorchZipArchive z;
  z.base_ = base;
  z.length_ = length;
  z.central_directory_offset_ = end->cd_offset;
  z.records_.reserve(end->records);
  size_t pos = 0;
  for (uint64_t i = 0; i < end->records; ++i) {
    if (cd.size() - pos < kCentralSize || U32(cd.data() + pos) != kCentralSig) {
      return Bad("central directory entry " + std::to_string(i) + " is malformed");
    }
    const char* h = cd.data() + pos;
    size_t name_len = U16(h + 28), extra_len = U16(h + 30), comment_len = U16(h + 32);
    if (cd.size() - pos - kCentralSize < name_len + extra_len + comment_len) {
      return Bad("central directory entry " + std::to_string(i) + " overruns the directory");
    }
    TorchZipRecord r;
    r.name.assign(h + kCentralSize, name_len);
    if (U16(h + 8) & 1) return Bad("record " + Quote(r.name) + " is encrypted");
    r.method = U16(h + 10);
    r.compressed_size = U32(h + 20);
    r.size = U32(h + 24);
    r.local_header_offset = U32(h + 42);
    uint32_t disk = U16(h + 34);
    CKPTFS_RETURN_IF_ERROR(
        ApplyZip64Extra(std::string_view(h + kCentralSize + name_len, extra_len), &r, &disk));
    if (disk != 0) return Bad("multi-disk zips are not supported");
    if (r.local_header_offset >= end->cd_offset) {
      return Bad("local header of " + Quote(r.name) + " is outside the record area");
    }
    pos += kCentralSize + name_len + extra_len + comment_len;
    z.records_.push_back(std::move(r));
  }
  if (pos != cd.size()) return Bad("central directory size disagrees with its entries");

  const std::string& first = z.records_[0].name;
  size_t slash = first.find('/');
  if (slash == 0 || slash == std::string::npos) {
    return Bad("first record " + Quote(first) + " has no archive folder");
  }
  z.prefix_ = first.substr(0, slash);
  z.by_name_.resize(z.records_.size());
  for (size_t i = 0; i < z.by_name_.size(); ++i) z.by_name_[i] = i;
  std::sort(z.by_name_.begin(), z.by_name_.end(),
            [&](size_t a, size_t b) { return z.records_[a].name < z.records_[b].name; });
  for (size_t i = 1; i < z.by_name_.size(); ++i) {
    if (z.records_[z.by_name_[i]].name == z.records_[z.by_name_[i - 1]].name) {
      return Bad("record " + Quote(z.records_[z.by_name_[i]].name) + " appears twice");
    }
  }
  return z;
}

const TorchZipRecord* TorchZipArchive::Find(std::string_view relative) const {
  std::string name = prefix_ + "/";
  name.append(relative);
  auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                             [&](size_t i, const std::string& n) { return records_[i].name < n; });
  if (it == by_name_.end() || records_[*it].name != name) return nullptr;
  return &records_[*it];
}

Result<uint64_t> TorchZipArchive::DataOffset(const ByteSource& source,
                                             const TorchZipRecord& r) const {
  if (r.method != 0) {
    return Bad("record " + Quote(r.name) + " is compressed (method " + std::to_string(r.method) +
               "); only stored records can be served");
  }
  if (r.compressed_size != r.size) {
    return Bad("stored record " + Quote(r.name) + " has different compressed and plain sizes");
  }
  uint64_t want = kLocalSize + r.name.size();
  if (r.local_header_offset > central_directory_offset_ ||
      want > central_directory_offset_ - r.local_header_offset) {
    return Bad("local header of " + Quote(r.name) + " overruns the record area");
  }
  std::string h;
  CKPTFS_RETURN_IF_ERROR(ReadExact(source, base_ + r.local_header_offset, want, &h));
  if (U32(h.data()) != kLocalSig) return Bad("bad local header signature for " + Quote(r.name));
  if (U16(h.data() + 8) != 0) {
    return Bad("local header of " + Quote(r.name) + " says method " +
               std::to_string(U16(h.data() + 8)));
  }
  uint64_t name_len = U16(h.data() + 26), extra_len = U16(h.data() + 28);
  if (name_len != r.name.size() || h.compare(kLocalSize, name_len, r.name) != 0) {
    return Bad("local header of " + Quote(r.name) + " names another record");
  }
  uint64_t data = r.local_header_offset + kLocalSize + name_len + extra_len;
  if (data > central_directory_offset_ || r.size > central_directory_offset_ - data) {
    return Bad("data of " + Quote(r.name) + " runs into the central directory");
  }
  return base_ + data;
}

Result<std::string> TorchZipArchive::ReadRecord(const ByteSource& source, const TorchZipRecord& r,
                                                uint64_t max_bytes) const {
  if (r.size > max_bytes) {
    return Bad("record " + Quote(r.name) + " has " + std::to_string(r.size) +
               " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  Result<uint64_t> at = DataOffset(source, r);
  if (!at.ok()) return at.status();
  std::string out;
  CKPTFS_RETURN_IF_ERROR(ReadExact(source, *at, r.size, &out));
  return out;
}

uint64_t TorchTensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

bool TorchTensorInfo::IsContiguous() const {
  if (numel() == 0) return true;
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && stride[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

Result<TorchTensorInfo> ReadTorchSaveTensor(const ByteSource& source, uint64_t base,
                                            uint64_t length, const TorchZipLimits& limits) {
  Result<TorchZipArchive> z = TorchZipArchive::Open(source, base, length, limits);
  if (!z.ok()) return z.status();
  Container c{source, *z};
  Result<PickleDocument> doc = ReadDataPickle(c, limits);
  if (!doc.ok()) return doc.status();
  return Rebuild(c, doc->root());
}

Result<TorchSaveContents> ReadTorchSaveTensors(const ByteSource& source, uint64_t base,
                                               uint64_t length, const TorchZipLimits& limits) {
  Result<TorchZipArchive> z = TorchZipArchive::Open(source, base, length, limits);
  if (!z.ok()) return z.status();
  Container c{source, *z};
  Result<PickleDocument> doc = ReadDataPickle(c, limits);
  if (!doc.ok()) return doc.status();
  StateDictWalker walker(c, doc->node_count(), z->Find("data.pkl")->size);
  CKPTFS_RETURN_IF_ERROR(walker.Walk(doc->root(), "", 0));
  return walker.Take();
}

}  // namespace ckptfs
