// Test support: a fresh directory under /tmp, removed with everything in it
// when the object goes away.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace ckptfs {

class TempDirForTest {
 public:
  TempDirForTest() {
    char tmpl[] = "/tmp/ckptfs_test.XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    EXPECT_NE(made, nullptr);
    path_ = made ? made : "";
  }
  TempDirForTest(const TempDirForTest&) = delete;
  TempDirForTest& operator=(const TempDirForTest&) = delete;
  ~TempDirForTest() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ckptfs
