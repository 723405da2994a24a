// Test-only helpers for src/formats tests: where the real checkpoints written
// by torch 1.13 and 2.14 (tests/fixtures/dcp, see its README) and this
// folder's tiny generated fixtures (src/formats/testdata, see gen_fixtures.py)
// are, and reading them. The build defines CKPTFS_SOURCE_DIR (repo root);
// without it paths are derived from __FILE__ and the working directory.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "formats/safetensors_header.h"

namespace ckptfs::testing {

inline std::string SourceDir() {
#if defined(CKPTFS_SOURCE_DIR)
  return CKPTFS_SOURCE_DIR;
#else
  std::string f = __FILE__;
  size_t p = f.rfind("src/formats/");
  std::string root = p == std::string::npos ? std::string() : f.substr(0, p);
  return root.empty() ? "." : root;
#endif
}

inline std::string DcpTestdata(const std::string& rel) {
  return SourceDir() + "/tests/fixtures/dcp/" + rel;
}
inline std::string Fixture(const std::string& name) {
  return SourceDir() + "/src/formats/testdata/" + name;
}

// False when the file cannot be read.
inline bool ReadTestFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return static_cast<bool>(in) || in.eof();
}

// The real DCP cases with a .metadata (path relative to testdata/dcp).
inline const char* const kDcpCases[] = {
    "torch-1.13/ckpt113",     "torch-1.13/ckpt113b", "torch-1.13/ckpt113c",
    "torch-2.14/dcp_default", "torch-2.14/dcp_zstd", "torch-2.14/dcp_threads",
    "torch-2.14/dcp_zero",
};

struct TestTensor {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
};

// A valid safetensors file holding `tensors` in this order, header padded with
// spaces to a multiple of 8, every data byte 0xA5.
inline std::string MakeSafetensors(
    const std::vector<TestTensor>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    for (const auto& [k, v] : metadata) h["__metadata__"][k] = v;
  }
  uint64_t cursor = 0;
  for (const TestTensor& t : tensors) {
    uint64_t bits = SafetensorsDtypeBits(t.dtype).value_or(8);
    for (uint64_t d : t.shape) bits *= d;
    h[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {cursor, cursor + bits / 8}}};
    cursor += bits / 8;
  }
  std::string json = h.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json + std::string(cursor, '\xa5');
}

}  // namespace ckptfs::testing
