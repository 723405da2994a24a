// Test-only helpers for src/formats tests: where the shared real checkpoints
// (../shared/testdata/dcp, see its README) and this folder's tiny generated
// fixtures (src/formats/testdata, see gen_fixtures.py) are, and reading them.
// The build defines CKPTFS_SOURCE_DIR (repo root) or CKPTFS_SHARED_DIR;
// without them paths are derived from __FILE__ and the working directory.
#pragma once

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

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

inline std::string SharedDir() {
#if defined(CKPTFS_SHARED_DIR)
  return CKPTFS_SHARED_DIR;
#else
  return SourceDir() + "/../shared";
#endif
}

inline std::string DcpTestdata(const std::string& rel) { return SharedDir() + "/testdata/dcp/" + rel; }
inline std::string Fixture(const std::string& name) { return SourceDir() + "/src/formats/testdata/" + name; }

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
    "torch-1.13/ckpt113",       "torch-1.13/ckpt113b",       "torch-1.13/ckpt113c",
    "torch-2.14/dcp_default",   "torch-2.14/dcp_zstd",       "torch-2.14/dcp_threads",
    "torch-2.14/dcp_zero",
};

}  // namespace ckptfs::testing
