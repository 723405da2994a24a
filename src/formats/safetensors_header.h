// Parses and validates the header of a safetensors file (FORMATS.md section
// 3.1): an 8-byte little-endian header length N, then N bytes of JSON, then
// the data buffer. Validation follows the safetensors library (tensor.rs):
// N <= 100,000,000; the JSON is an object whose "__metadata__" (optional) maps
// str -> str and whose other entries are {"dtype", "shape", "data_offsets"};
// sorted by offsets the tensors tile the buffer from 0 with no hole or
// overlap; and for a known dtype, end - begin == numel * bits / 8. Unknown
// dtype codes are accepted without the size check (the enum grows), so a
// newer writer is never called broken for a dtype this reader lacks.
//
// The caller reads the bytes (from a file, a byte range, the remote tier) and
// compares data_start() + data_size with the file size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ckptfs {

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // the code, e.g. "F32", "BF16"
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // data_offsets, relative to data_start()
  uint64_t end = 0;    // exclusive
};

struct SafetensorsHeader {
  uint64_t header_length = 0;                                 // N
  std::vector<SafetensorsTensor> tensors;                     // sorted by begin
  std::vector<std::pair<std::string, std::string>> metadata;  // "__metadata__"
  uint64_t data_size = 0;  // end of the last tensor = bytes after the header

  uint64_t data_start() const { return 8 + header_length; }
  uint64_t file_size() const { return data_start() + data_size; }
  const SafetensorsTensor* Find(std::string_view name) const;
};

// Bits per element of a dtype code, or nullopt when the code is unknown.
std::optional<uint32_t> SafetensorsDtypeBits(std::string_view dtype);

// Decodes N from the first 8 bytes of the file; EIO when `prefix` is shorter
// than 8 bytes or N exceeds kSafetensorsMaxHeaderBytes.
Result<uint64_t> ParseSafetensorsHeaderLength(std::string_view prefix);

// Parses and validates the N JSON bytes that follow the length.
Result<SafetensorsHeader> ParseSafetensorsHeader(uint64_t header_length, std::string_view json);

}  // namespace ckptfs
