// libckptfs-writer from CUDA device memory. Needs a GPU: every test skips
// with a message on a machine without one (CI), and runs on the GPU machine
// (docs/benchmarks.md has the figures from there).
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "ckptfs/writer.h"
#include "ckptfs/writer.hpp"
#include "common/crc32c.h"
#include "common/temp_dir_for_test.h"
#include "writer/writer_test_util.h"

namespace {

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REQUIRE_GPU()                                                                  \
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device on this machine: device-memory tests " \
                                  "run on a GPU machine (see docs/benchmarks.md)"

using ckptfs::writer_test::Pattern;
using ckptfs::writer_test::Slurp;

// Device memory holding data.
struct DeviceBuffer {
  explicit DeviceBuffer(const std::string& data) : size(data.size()) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(size, 1)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, data.data(), size, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  void* ptr = nullptr;
  size_t size;
};

class DeviceSizes : public ::testing::TestWithParam<size_t> {};

TEST_P(DeviceSizes, DeviceMemoryIsDetectedAndWritten) {
  REQUIRE_GPU();
  EXPECT_EQ(ckptfs_writer_cuda_available(), 1) << ckptfs_writer_build_info();
  ckptfs::TempDirForTest dir;
  const std::string data = Pattern(GetParam(), GetParam());
  DeviceBuffer dev(data);
  const std::string path = dir.path() + "/dev.bin";
  ckptfs::Writer w(path, ckptfs::WriterOptions().staging(1 << 20, 4));
  w.write(dev.ptr, dev.size);
  const auto info = w.close();
  EXPECT_EQ(info.bytes, data.size());
  EXPECT_EQ(info.crc32c, ckptfs::Crc32cPortable(0, data.data(), data.size()));
  const std::string got = Slurp(path);
  ASSERT_EQ(got.size(), data.size());
  EXPECT_TRUE(got == data);
}

INSTANTIATE_TEST_SUITE_P(Sizes, DeviceSizes,
                         ::testing::Values(size_t{1}, size_t{4095}, size_t{4096}, size_t{(1 << 20) + 1},
                                           size_t{256} << 20));

TEST(CudaWriter, HostAndDeviceWritesInterleaveOnTheCallersStream) {
  REQUIRE_GPU();
  ckptfs::TempDirForTest dir;
  const std::string a = Pattern(3 << 20, 1), b = Pattern(5000, 2), c = Pattern(7 << 20, 3);
  DeviceBuffer da(a), dc(c);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const std::string path = dir.path() + "/mixed.bin";
  {
    ckptfs::Writer w(path, ckptfs::WriterOptions().staging(1 << 20, 3).cuda_stream(stream));
    w.write_async(da.ptr, da.size);
    w.write(b.data(), b.size());  // host memory in between
    w.write_async(dc.ptr, dc.size);
    w.close();
  }
  cudaStreamDestroy(stream);
  EXPECT_TRUE(Slurp(path) == a + b + c);
}

TEST(CudaWriter, SafetensorsFromDeviceTensors) {
  REQUIRE_GPU();
  ckptfs::TempDirForTest dir;
  const std::string w1 = Pattern(4 * 1000, 5), w2 = Pattern(2 * 64, 6);
  DeviceBuffer d1(w1), d2(w2);
  const std::string path = dir.path() + "/m.safetensors";
  ckptfs::SafetensorsWriter s(path);
  s.add("a", "F32", {10, 100}, d1.ptr, d1.size);
  s.add("b", "BF16", {64}, d2.ptr, d2.size);
  s.finish();
  const std::string file = Slurp(path);
  uint64_t hlen = 0;
  std::memcpy(&hlen, file.data(), 8);
  EXPECT_TRUE(file.substr(8 + hlen) == w1 + w2);
}

}  // namespace
