// libFuzzer target: the safetensors header reader
// (src/formats/safetensors_header.h).
//
// Input: the start of a safetensors file: the 8-byte little-endian length N,
// then (at least) N bytes of JSON. ParseSafetensorsHeaderLength runs on the
// input, and ParseSafetensorsHeader on the N bytes after it when the input has
// them. Checks:
//  - a failure is EIO with a "safetensors header: " message; inputs shorter
//    than 8 bytes and N > kSafetensorsMaxHeaderBytes are refused; a JSON text
//    whose size is not N is refused;
//  - a success keeps N, sorts tensors by begin, and they tile
//    [0, data_size) with no hole or overlap; for a known dtype,
//    end - begin == numel * bits / 8;
//  - data_start() + data_size (file_size()) does not wrap around 2^64: the
//    caller compares it with the real file size.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/safetensors_header.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptfs;
  std::string_view in = fuzz::AsText(data, size);

  Result<uint64_t> n = ParseSafetensorsHeaderLength(in);
  if (!n.ok()) {
    fuzz::CheckError(n.status(), "safetensors header: ");
    if (size >= 8) {
      uint64_t raw = 0;
      for (int i = 7; i >= 0; --i) raw = (raw << 8) | data[i];
      FUZZ_CHECK(raw > kSafetensorsMaxHeaderBytes, "length %llu refused",
                 static_cast<unsigned long long>(raw));
    }
    return 0;
  }
  FUZZ_CHECK(size >= 8, "accepted a %zu-byte prefix", size);
  FUZZ_CHECK(*n <= kSafetensorsMaxHeaderBytes, "length %llu over the limit",
             static_cast<unsigned long long>(*n));
  if (*n > size - 8) return 0;
  std::string_view json = in.substr(8, static_cast<size_t>(*n));

  Result<SafetensorsHeader> h = ParseSafetensorsHeader(*n, json);
  if (!h.ok()) {
    fuzz::CheckError(h.status(), "safetensors header: ");
    return 0;
  }
  FUZZ_CHECK(h->header_length == *n, "header_length %llu, not N",
             static_cast<unsigned long long>(h->header_length));
  FUZZ_CHECK(h->data_start() == 8 + *n, "data_start");
  uint64_t cursor = 0;
  for (const SafetensorsTensor& t : h->tensors) {
    FUZZ_CHECK(t.begin == cursor, "tensor '%s' begins at %llu, not %llu", t.name.c_str(),
               static_cast<unsigned long long>(t.begin), static_cast<unsigned long long>(cursor));
    FUZZ_CHECK(t.end >= t.begin, "tensor '%s' ends before it begins", t.name.c_str());
    FUZZ_CHECK(t.name != "__metadata__", "__metadata__ parsed as a tensor");
    if (std::optional<uint32_t> bits = SafetensorsDtypeBits(t.dtype)) {
      unsigned __int128 total = *bits;
      for (uint64_t d : t.shape) total *= d;  // can only overflow if the reader missed it
      FUZZ_CHECK(total % 8 == 0 && total / 8 == t.end - t.begin,
                 "tensor '%s' (%s) holds %llu bytes, not what its shape needs", t.name.c_str(),
                 t.dtype.c_str(), static_cast<unsigned long long>(t.end - t.begin));
    }
    FUZZ_CHECK(h->Find(t.name) != nullptr, "Find('%s') fails", t.name.c_str());
    cursor = t.end;
  }
  FUZZ_CHECK(h->data_size == cursor, "data_size %llu, last end %llu",
             static_cast<unsigned long long>(h->data_size),
             static_cast<unsigned long long>(cursor));
  FUZZ_CHECK(h->file_size() >= h->data_start(),
             "file_size() wraps around: data_start %llu + data_size %llu = %llu",
             static_cast<unsigned long long>(h->data_start()),
             static_cast<unsigned long long>(h->data_size),
             static_cast<unsigned long long>(h->file_size()));

  // The same JSON under another length is refused.
  Result<SafetensorsHeader> wrong = ParseSafetensorsHeader(*n + 1, json);
  FUZZ_CHECK(!wrong.ok(), "accepted %zu JSON bytes for a length of %llu", json.size(),
             static_cast<unsigned long long>(*n + 1));
  return 0;
}
