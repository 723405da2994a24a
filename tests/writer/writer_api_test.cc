// libckptfs-writer through its public headers and the shared library, as a
// program uses it, outside any ckptfs mount (the fallback: the library
// writes the path itself). The fast path is tested with a real mount in
// tests/integration/test_writer.py.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "ckptfs/writer.h"
#include "ckptfs/writer.hpp"
#include "common/crc32c.h"  // an implementation independent of the library's copy
#include "common/temp_dir_for_test.h"
#include "writer/writer_test_util.h"

namespace {

using ckptfs::writer_test::Pattern;
using ckptfs::writer_test::Slurp;

class WriterApiSizes : public ::testing::TestWithParam<size_t> {};

TEST_P(WriterApiSizes, CApiWritesTheBytesAndTheirChecksum) {
  ckptfs::TempDirForTest dir;
  const std::string path = dir.path() + "/out.bin";
  const std::string data = Pattern(GetParam(), GetParam());
  ckptfs_writer* w = nullptr;
  ASSERT_EQ(ckptfs_writer_open(path.c_str(), &w), 0) << ckptfs_writer_last_message();
  // In pieces of odd sizes, alternating sync and async writes.
  size_t off = 0;
  for (int i = 0; off < data.size(); i++) {
    const size_t n = std::min<size_t>(data.size() - off, 3'000'017);
    const int rc = i % 2 ? ckptfs_writer_write_async(w, data.data() + off, n)
                         : ckptfs_writer_write(w, data.data() + off, n);
    ASSERT_EQ(rc, 0) << ckptfs_writer_last_message();
    off += n;
  }
  ckptfs_writer_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(ckptfs_writer_close_info(w, &info), 0) << ckptfs_writer_last_message();
  EXPECT_EQ(info.bytes, data.size());
  EXPECT_EQ(info.crc32c, ckptfs::Crc32cPortable(0, data.data(), data.size()));
  EXPECT_EQ(info.fast_path, 0);  // not a ckptfs mount
  const std::string got = Slurp(path);
  ASSERT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data);
}

// The sizes the issue names; 1 GiB is the last and takes a few seconds.
INSTANTIATE_TEST_SUITE_P(Sizes, WriterApiSizes,
                         ::testing::Values(size_t{0}, size_t{1}, size_t{4095}, size_t{4096},
                                           size_t{(1 << 20) + 1}, size_t{1} << 30));

TEST(WriterApi, CppWrapperClosesAndAbortsLikeAFile) {
  ckptfs::TempDirForTest dir;
  const std::string path = dir.path() + "/a.bin";
  {
    ckptfs::Writer w(path, ckptfs::WriterOptions().staging(64 << 10, 2));
    w.write("hello ", 6);
    w.write_async("world", 5);
    EXPECT_EQ(w.info().bytes, 11u);
    const auto info = w.close();
    EXPECT_EQ(info.crc32c, ckptfs::Crc32c(0, "hello world", 11));
  }
  EXPECT_EQ(Slurp(path), "hello world");
  // Destroyed without close (an exception mid-save): the file is removed, so
  // a half-written file never looks saved.
  const std::string partial = dir.path() + "/partial.bin";
  try {
    ckptfs::Writer w(partial);
    w.write("abc", 3);
    throw std::runtime_error("trainer failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_NE(access(partial.c_str(), F_OK), 0);
  // Errors carry the errno and a message naming the path.
  try {
    ckptfs::Writer w(dir.path() + "/missing/dir/f");
    FAIL() << "opened a file in a missing directory";
  } catch (const ckptfs::WriterError& e) {
    EXPECT_EQ(e.code(), -ENOENT);
    EXPECT_NE(std::string(e.what()).find("missing/dir/f"), std::string::npos) << e.what();
  }
}

TEST(WriterApi, OptionsAreCheckedAndOldStructsAccepted) {
  ckptfs::TempDirForTest dir;
  const std::string path = dir.path() + "/o.bin";
  ckptfs_writer_options o;
  ckptfs_writer_options_init(&o, sizeof o);
  o.staging_buffer_count = 1;
  ckptfs_writer* w = nullptr;
  EXPECT_EQ(ckptfs_writer_open_with(path.c_str(), &o, &w), -EINVAL);
  EXPECT_NE(std::string(ckptfs_writer_last_message()).find("count"), std::string::npos);
  o.struct_size = 0;
  EXPECT_EQ(ckptfs_writer_open_with(path.c_str(), &o, &w), -EINVAL);
  EXPECT_NE(std::string(ckptfs_writer_last_message()).find("ckptfs_writer_options_init"), std::string::npos);
  // A caller compiled against a header with only the first fields.
  ckptfs_writer_options_init(&o, sizeof o);
  o.struct_size = offsetof(ckptfs_writer_options, cuda_stream);
  o.staging_buffer_bytes = 4096;
  o.flags = 0xdead;  // beyond the struct it says it has: ignored
  ASSERT_EQ(ckptfs_writer_open_with(path.c_str(), &o, &w), 0) << ckptfs_writer_last_message();
  ASSERT_EQ(ckptfs_writer_write(w, "x", 1), 0);
  EXPECT_EQ(ckptfs_writer_close(w), 0);
  ckptfs_writer_options_init(&o, sizeof o);
  o.flags = 0x100;
  EXPECT_EQ(ckptfs_writer_open_with(path.c_str(), &o, &w), -EINVAL);
  EXPECT_EQ(ckptfs_writer_open(nullptr, &w), -EINVAL);
  EXPECT_EQ(ckptfs_writer_close(nullptr), -EBADF);
  EXPECT_STRNE(ckptfs_writer_strerror(-ENODEV), "");
}

TEST(WriterApi, DevicePointersWithoutAGpuGiveAClearError) {
  if (ckptfs_writer_cuda_available()) GTEST_SKIP() << "a CUDA device is present: tested on the GPU machine";
  std::printf("build: %s\n", ckptfs_writer_build_info());
  ckptfs::TempDirForTest dir;
  ckptfs_writer_options o;
  ckptfs_writer_options_init(&o, sizeof o);
  o.source = CKPTFS_WRITER_SOURCE_DEVICE;
  ckptfs_writer* w = nullptr;
  ASSERT_EQ(ckptfs_writer_open_with((dir.path() + "/d.bin").c_str(), &o, &w), 0);
  char buf[8] = {};
  const int rc = ckptfs_writer_write(w, buf, sizeof buf);
  EXPECT_TRUE(rc == -ENODEV || rc == -ENOTSUP) << rc;
  EXPECT_NE(std::string(ckptfs_writer_last_message()).find("device memory"), std::string::npos)
      << ckptfs_writer_last_message();
  // The writer is still usable for host memory.
  o.source = CKPTFS_WRITER_SOURCE_AUTO;
  EXPECT_EQ(ckptfs_writer_close(w), 0);
}

TEST(WriterApi, SafetensorsFileHasHeaderThenTensors) {
  ckptfs::TempDirForTest dir;
  const std::string path = dir.path() + "/model.safetensors";
  const float weights[6] = {1, 2, 3, 4, 5, 6};
  const int64_t ids[2] = {7, -8};
  {
    ckptfs::SafetensorsWriter s(path);
    s.add("layer.\"weight\"", "F32", {2, 3}, weights, sizeof weights);
    s.add("ids", "I64", {2}, ids, sizeof ids);
    s.add("empty", "BF16", {0, 4}, nullptr, 0);
    s.metadata("format", "pt");
    EXPECT_THROW(s.add("ids", "I64", {2}, ids, sizeof ids), ckptfs::WriterError);     // twice
    EXPECT_THROW(s.add("bad", "F32", {5}, weights, sizeof weights), ckptfs::WriterError);  // size
    EXPECT_THROW(s.add("bad", "F33", {1}, weights, 4), ckptfs::WriterError);            // dtype
    s.finish();
  }
  const std::string file = Slurp(path);
  ASSERT_GE(file.size(), 8u);
  uint64_t hlen = 0;
  std::memcpy(&hlen, file.data(), 8);
  ASSERT_EQ((8 + hlen) % 8, 0u);
  const std::string header = file.substr(8, hlen);
  EXPECT_NE(header.find("\"__metadata__\":{\"format\":\"pt\"}"), std::string::npos) << header;
  EXPECT_NE(header.find("\"layer.\\\"weight\\\"\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}"),
            std::string::npos) << header;
  EXPECT_NE(header.find("\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[24,40]}"), std::string::npos);
  EXPECT_NE(header.find("\"empty\":{\"dtype\":\"BF16\",\"shape\":[0,4],\"data_offsets\":[40,40]}"),
            std::string::npos);
  ASSERT_EQ(file.size(), 8 + hlen + 40);
  EXPECT_EQ(std::memcmp(file.data() + 8 + hlen, weights, 24), 0);
  EXPECT_EQ(std::memcmp(file.data() + 8 + hlen + 24, ids, 16), 0);
}

}  // namespace
