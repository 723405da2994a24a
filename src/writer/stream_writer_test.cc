// The pipeline on real files: ring wrap-around, the unaligned tail under
// O_DIRECT, checksums joined across I/O threads, errors that stick.
#include "writer/stream_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "common/crc32c.h"
#include "common/temp_dir_for_test.h"
#include "writer/writer_test_util.h"

namespace ckptfs::writer {
namespace {

using writer_test::Pattern;
using writer_test::Slurp;

struct Case {
  size_t size;
  size_t buffer;
  unsigned count;
  bool direct;
  size_t chunk;  // bytes per Append
};

class StreamWriterTest : public ::testing::TestWithParam<Case> {};

TEST_P(StreamWriterTest, FileAndChecksumMatchTheData) {
  const Case c = GetParam();
  TempDirForTest dir;
  const std::string path = dir.path() + "/f";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  PipelineOptions o;
  o.buffer_bytes = c.buffer;
  o.buffer_count = c.count;
  o.direct = c.direct;
  o.source = Source::kHost;
  auto w = StreamWriter::Create(fd, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::string data = Pattern(c.size, c.size);
  for (size_t off = 0; off < data.size(); off += c.chunk) {
    const size_t n = std::min(c.chunk, data.size() - off);
    ASSERT_TRUE((*w)->Append(data.data() + off, n, off % (3 * c.chunk) == 0).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
  EXPECT_EQ((*w)->bytes(), data.size());
  EXPECT_EQ(*(*w)->Crc(), Crc32c(0, data.data(), data.size()));
  close(fd);
  const std::string got = Slurp(path);
  ASSERT_EQ(got.size(), data.size());  // the O_DIRECT padding is trimmed
  EXPECT_TRUE(got == data);
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, StreamWriterTest,
    ::testing::Values(Case{0, 4096, 2, true, 1}, Case{1, 4096, 2, true, 1}, Case{4095, 4096, 2, true, 4095},
                      Case{4096, 4096, 2, true, 4096}, Case{(1 << 20) + 1, 8192, 3, true, 10000},
                      Case{(1 << 20) + 1, 8192, 3, false, 10000},
                      Case{5 << 20, 64 << 10, 8, true, 1 << 20},  // 4 I/O threads, many wraps
                      Case{3 << 20, 1 << 20, 4, true, 3 << 20}, Case{100, 4096, 2, true, 7}));

TEST(StreamWriterErrors, DeviceSourceWithoutCudaSaysWhy) {
  if (CudaAvailable()) GTEST_SKIP() << "a CUDA device is present: device sources work here";
  TempDirForTest dir;
  const int fd = open((dir.path() + "/f").c_str(), O_WRONLY | O_CREAT, 0644);
  PipelineOptions o;
  o.source = Source::kDevice;
  auto w = StreamWriter::Create(fd, o);
  ASSERT_TRUE(w.ok());
  char buf[16] = {};
  Status st = (*w)->Append(buf, sizeof buf, true);
  EXPECT_TRUE(st.err() == ENOTSUP || st.err() == ENODEV) << st.ToString();
  EXPECT_NE(st.message().find("device memory"), std::string::npos) << st.message();
  close(fd);
}

TEST(StreamWriterErrors, FullDiskErrorIsKeptAndReturned) {
  const int fd = open("/dev/full", O_WRONLY);
  if (fd < 0) GTEST_SKIP() << "no /dev/full";
  PipelineOptions o;
  o.buffer_bytes = 4096;
  o.buffer_count = 2;
  o.direct = false;
  auto w = StreamWriter::Create(fd, o);
  ASSERT_TRUE(w.ok());
  const std::string data(64 << 10, 'x');
  Status st = (*w)->Append(data.data(), data.size(), true);
  EXPECT_EQ(st.err(), ENOSPC) << st.ToString();
  EXPECT_EQ((*w)->Append(data.data(), 10, false).err(), ENOSPC);  // sticky
  EXPECT_EQ((*w)->Finish().err(), ENOSPC);
  close(fd);
}

TEST(StreamWriterErrors, BadOptionsAreRefused) {
  PipelineOptions o;
  o.buffer_count = 1;
  EXPECT_EQ(StreamWriter::Create(1, o).err(), EINVAL);
  o.buffer_count = 4;
  o.buffer_bytes = 0;
  EXPECT_EQ(StreamWriter::Create(1, o).err(), EINVAL);
}

}  // namespace
}  // namespace ckptfs::writer
