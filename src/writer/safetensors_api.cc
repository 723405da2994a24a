// ckptfs_safetensors_*: a safetensors file written through a ckptfs_writer.
// The header (JSON: each tensor's dtype, shape and byte range, plus
// __metadata__) comes first and names every tensor, so tensors are
// collected and written at finish: header, then each tensor in the order
// added, straight from the caller's (host or device) memory.
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "writer/writer_api.h"

struct ckptfs_safetensors {
  struct Tensor {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    const void* data = nullptr;
    size_t nbytes = 0;
  };
  ckptfs_writer* writer = nullptr;
  std::vector<Tensor> tensors;
  std::set<std::string> names;
  std::map<std::string, std::string> metadata;
};

namespace ckptfs::writer {
namespace {

// Bytes per element of each safetensors dtype code.
int DtypeSize(const std::string& dtype) {
  static const std::map<std::string, int> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"U16", 2},
      {"I16", 2},  {"F16", 2}, {"BF16", 2}, {"U32", 4},     {"I32", 4},     {"F32", 4},
      {"U64", 8},  {"I64", 8}, {"F64", 8},
  };
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string Header(const ckptfs_safetensors& s) {
  std::string h = "{";
  bool first = true;
  if (!s.metadata.empty()) {
    h += "\"__metadata__\":{";
    for (const auto& [k, v] : s.metadata) {
      if (!first) h += ",";
      first = false;
      h += JsonString(k) + ":" + JsonString(v);
    }
    h += "}";
    first = false;
  }
  uint64_t offset = 0;
  for (const auto& t : s.tensors) {
    if (!first) h += ",";
    first = false;
    h += JsonString(t.name) + ":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); i++) h += (i ? "," : "") + std::to_string(t.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.nbytes) + "]}";
    offset += t.nbytes;
  }
  h += "}";
  // Tensor data starts 8-byte aligned (the format allows trailing spaces).
  while ((8 + h.size()) % 8 != 0) h += ' ';
  return h;
}

Status Add(ckptfs_safetensors* s, const char* name, const char* dtype, int ndim, const int64_t* shape,
           const void* data, size_t nbytes) {
  if (!s) return Status::Error(EBADF, "null safetensors writer");
  if (!name || !*name) return Status::Error(EINVAL, "tensor name is empty");
  if (std::string(name) == "__metadata__") return Status::Error(EINVAL, "__metadata__ is not a tensor name");
  if (s->names.count(name)) return Status::Error(EEXIST, std::string("tensor ") + name + " added twice");
  const int size = dtype ? DtypeSize(dtype) : 0;
  if (size == 0) {
    return Status::Error(EINVAL, std::string("tensor ") + name + ": unknown safetensors dtype '" +
                                     (dtype ? dtype : "") + "'");
  }
  if (ndim < 0 || ndim > 64 || (ndim > 0 && !shape)) {
    return Status::Error(EINVAL, std::string("tensor ") + name + ": bad number of dimensions");
  }
  // At most 2^62 bytes: no product below overflows.
  constexpr uint64_t kMaxBytes = 1ULL << 62;
  uint64_t bytes = static_cast<uint64_t>(size);
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) return Status::Error(EINVAL, std::string("tensor ") + name + ": negative dimension");
    const uint64_t dim = static_cast<uint64_t>(shape[i]);
    if (dim != 0 && bytes > kMaxBytes / dim) {
      return Status::Error(EOVERFLOW, std::string("tensor ") + name + ": too many elements");
    }
    bytes *= dim;
  }
  if (bytes != nbytes) {
    return Status::Error(EINVAL, std::string("tensor ") + name + ": " + std::to_string(nbytes) +
                                     " bytes given, its shape and dtype need " + std::to_string(bytes));
  }
  if (!data && nbytes) return Status::Error(EFAULT, std::string("tensor ") + name + ": null data");
  s->tensors.push_back({name, dtype, std::vector<int64_t>(shape, shape + ndim), data, nbytes});
  s->names.insert(name);
  return Status::Ok();
}

Status Finish(ckptfs_safetensors* s, ckptfs_writer_info* info) {
  const std::string header = Header(*s);
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  Status st = WriteTo(s->writer, len, sizeof len, false);
  if (st.ok()) st = WriteTo(s->writer, header.data(), header.size(), false);
  for (const auto& t : s->tensors) {
    if (!st.ok()) break;
    st = WriteTo(s->writer, t.data, t.nbytes, false);
    if (!st.ok()) st = st.Annotate("tensor " + t.name);
  }
  if (!st.ok()) {
    AbortWriter(s->writer);
    return st;
  }
  return CloseWriter(s->writer, info);
}

}  // namespace
}  // namespace ckptfs::writer

using namespace ckptfs::writer;  // NOLINT: the C entry points below

extern "C" {

int ckptfs_safetensors_open(const char* path, const ckptfs_writer_options* opts, ckptfs_safetensors** out) {
  if (!out) return Fail(ckptfs::Status::Error(EINVAL, "out is NULL"));
  *out = nullptr;
  auto w = OpenWriter(path, opts);
  if (!w.ok()) return Fail(w.status());
  auto* s = new ckptfs_safetensors();
  s->writer = *w;
  *out = s;
  return Succeed();
}

int ckptfs_safetensors_add(ckptfs_safetensors* s, const char* name, const char* dtype, int ndim,
                           const int64_t* shape, const void* data, size_t nbytes) {
  ckptfs::Status st = Add(s, name, dtype, ndim, shape, data, nbytes);
  return st.ok() ? Succeed() : Fail(st);
}

int ckptfs_safetensors_set_metadata(ckptfs_safetensors* s, const char* key, const char* value) {
  if (!s) return Fail(ckptfs::Status::Error(EBADF, "null safetensors writer"));
  if (!key || !value) return Fail(ckptfs::Status::Error(EINVAL, "metadata key and value must not be NULL"));
  s->metadata[key] = value;
  return Succeed();
}

int ckptfs_safetensors_finish(ckptfs_safetensors* s) { return ckptfs_safetensors_finish_info(s, nullptr); }

int ckptfs_safetensors_finish_info(ckptfs_safetensors* s, ckptfs_writer_info* info) {
  if (!s) return Fail(ckptfs::Status::Error(EBADF, "null safetensors writer"));
  std::unique_ptr<ckptfs_safetensors> owned(s);
  ckptfs::Status st = Finish(s, info);
  return st.ok() ? Succeed() : Fail(st);
}

void ckptfs_safetensors_abort(ckptfs_safetensors* s) {
  if (!s) return;
  std::unique_ptr<ckptfs_safetensors> owned(s);
  AbortWriter(s->writer);
}

}  // extern "C"
