// libFuzzer target: the DCP `.metadata` reader (src/formats/dcp_metadata.h),
// run with storage_only and without on every input.
//
// Input: the bytes of a `.metadata` file (a pickle). Checks:
//  - a failure is EIO with a "DCP .metadata: " message;
//  - every storage entry names a safe relative path (IsSafeRelativePath) and
//    offset + length does not overflow;
//  - every tensor has non-negative sizes and every chunk has the tensor's rank
//    and lies inside it;
//  - the parsed output stays within a small multiple of the input size;
//  - storage_only parses whatever the full parse accepts, to the same storage
//    index and version, with no tensors and no byte items.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/dcp_metadata.h"
#include "fuzz_check.h"

namespace ckptfs {
namespace {

// A generous version of the reader's own output budget (32x input + 1 MiB).
uint64_t OutputBytes(const DcpMetadata& m) {
  uint64_t n = 0;
  for (const DcpStorageEntry& e : m.storage) {
    n += sizeof e + e.fqn.size() + e.relative_path.size();
    if (e.chunk_offsets) n += 8 * e.chunk_offsets->size();
    for (const std::string& d : e.transform_descriptors) n += sizeof d + d.size();
  }
  for (const DcpTensor& t : m.tensors) {
    n += sizeof t + t.fqn.size() + t.dtype.size() + 8 * t.size.size();
    for (const DcpChunk& c : t.chunks) n += sizeof c + 8 * (c.offsets.size() + c.sizes.size());
  }
  for (const std::string& b : m.byte_items) n += sizeof b + b.size();
  return n;
}

void CheckMetadata(const DcpMetadata& m, size_t input_size) {
  for (const DcpStorageEntry& e : m.storage) {
    FUZZ_CHECK(IsSafeRelativePath(e.relative_path), "unsafe relative_path '%s'",
               e.relative_path.c_str());
    FUZZ_CHECK(e.offset + e.length >= e.offset, "offset %llu + length %llu overflows",
               static_cast<unsigned long long>(e.offset),
               static_cast<unsigned long long>(e.length));
    if (e.chunk_offsets) {
      for (int64_t o : *e.chunk_offsets) FUZZ_CHECK(o >= 0, "negative chunk offset %lld",
                                                    static_cast<long long>(o));
    }
  }
  for (const DcpTensor& t : m.tensors) {
    for (int64_t d : t.size) FUZZ_CHECK(d >= 0, "negative size in tensor '%s'", t.fqn.c_str());
    for (const DcpChunk& c : t.chunks) {
      FUZZ_CHECK(c.offsets.size() == t.size.size() && c.sizes.size() == t.size.size(),
                 "chunk rank differs from tensor '%s'", t.fqn.c_str());
      for (size_t d = 0; d < t.size.size(); ++d) {
        FUZZ_CHECK(c.offsets[d] >= 0 && c.sizes[d] >= 0 && c.offsets[d] <= t.size[d] &&
                       c.sizes[d] <= t.size[d] - c.offsets[d],
                   "chunk outside tensor '%s' in dimension %zu", t.fqn.c_str(), d);
      }
    }
  }
  uint64_t out = OutputBytes(m);
  FUZZ_CHECK(out <= 64 * uint64_t{input_size} + (uint64_t{2} << 20),
             "%llu bytes of output from %zu input bytes", static_cast<unsigned long long>(out),
             input_size);
}

}  // namespace
}  // namespace ckptfs

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptfs;
  std::string_view in = fuzz::AsText(data, size);

  Result<DcpMetadata> full = ParseDcpMetadata(in);
  DcpParseOptions storage_only;
  storage_only.storage_only = true;
  Result<DcpMetadata> index = ParseDcpMetadata(in, storage_only);

  if (full.ok()) CheckMetadata(*full, size);
  else fuzz::CheckError(full.status(), "DCP .metadata: ");
  if (index.ok()) {
    CheckMetadata(*index, size);
    FUZZ_CHECK(index->tensors.empty() && index->byte_items.empty(),
               "storage_only parsed state_dict_metadata");
  } else {
    fuzz::CheckError(index.status(), "DCP .metadata: ");
  }

  if (full.ok()) {
    FUZZ_CHECK(index.ok(), "storage_only refused what the full parse accepted: %s",
               index.status().message().c_str());
    FUZZ_CHECK(index->version == full->version, "version differs with storage_only");
    FUZZ_CHECK(index->storage.size() == full->storage.size(), "storage size differs");
    for (size_t i = 0; i < full->storage.size(); ++i) {
      const DcpStorageEntry& a = full->storage[i];
      const DcpStorageEntry& b = index->storage[i];
      FUZZ_CHECK(a.fqn == b.fqn && a.chunk_offsets == b.chunk_offsets &&
                     a.index_hint == b.index_hint && a.relative_path == b.relative_path &&
                     a.offset == b.offset && a.length == b.length &&
                     a.transform_descriptors == b.transform_descriptors,
                 "storage entry %zu differs with storage_only", i);
    }
  }
  return 0;
}
