#include "common/crc32c.h"
#include "common/crc32c_chunks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>

namespace ckptfs {
namespace {

// Check values from RFC 3720 (iSCSI), appendix B.4.
TEST(Crc32c, KnownValues) {
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(0, zeros.data(), zeros.size()), 0x8A9136AAu);
  const std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(0, ones.data(), ones.size()), 0x62A8AB43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; i++) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(Crc32c(0, ascending.data(), ascending.size()), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(0, "", 0), 0u);
}

TEST(Crc32c, HardwareMatchesPortableAndExtends) {
  std::mt19937_64 rng(7);
  std::string data(10000, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  for (size_t len : {0, 1, 7, 8, 9, 63, 64, 4095, 10000}) {
    for (size_t split : {size_t{0}, len / 3, len}) {
      const uint32_t whole = Crc32c(0, data.data(), len);
      EXPECT_EQ(whole, Crc32cPortable(0, data.data(), len)) << len;
      const uint32_t a = Crc32c(0, data.data(), split);
      EXPECT_EQ(Crc32c(a, data.data() + split, len - split), whole) << len << "/" << split;
    }
  }
}

TEST(Crc32c, CombineJoinsIndependentChecksums) {
  std::mt19937_64 rng(11);
  std::string data(1 << 20, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  for (size_t len : {size_t{0}, size_t{1}, size_t{4096}, size_t{1000003}, data.size()}) {
    for (size_t split : {size_t{0}, len / 2, len}) {
      const uint32_t a = Crc32c(0, data.data(), split);
      const uint32_t b = Crc32c(0, data.data() + split, len - split);
      EXPECT_EQ(Crc32cCombine(a, b, len - split), Crc32c(0, data.data(), len)) << len << "/" << split;
    }
  }
  // Eight buffers checksummed apart, joined in order.
  uint32_t joined = 0;
  const size_t part = data.size() / 8;
  for (size_t i = 0; i < 8; i++) joined = Crc32cCombine(joined, Crc32c(0, data.data() + i * part, part), part);
  EXPECT_EQ(joined, Crc32c(0, data.data(), data.size()));
}

}  // namespace
}  // namespace ckptfs

TEST(Crc32cChunks, ChunksAndWholeMatchOnePassWhateverThePieces) {
  std::mt19937 rng(7);
  std::string data(10'000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t piece : {1u, 7u, 1000u, 4096u, 10'000u}) {
    ckptfs::ChunkCrc32c sums(4096);
    for (size_t at = 0; at < data.size(); at += piece) {
      sums.Add(data.data() + at, std::min(piece, data.size() - at));
    }
    EXPECT_EQ(sums.bytes(), data.size());
    EXPECT_EQ(sums.Whole(), ckptfs::Crc32c(0, data.data(), data.size()));
    const std::vector<uint32_t> chunks = sums.Chunks();
    ASSERT_EQ(chunks.size(), 3u);
    EXPECT_EQ(chunks[0], ckptfs::Crc32c(0, data.data(), 4096));
    EXPECT_EQ(chunks[1], ckptfs::Crc32c(0, data.data() + 4096, 4096));
    EXPECT_EQ(chunks[2], ckptfs::Crc32c(0, data.data() + 8192, data.size() - 8192));
  }
  ckptfs::ChunkCrc32c empty(4096);
  EXPECT_EQ(empty.Whole(), 0u);
  EXPECT_TRUE(empty.Chunks().empty());
  empty.Add("abc", 3);
  empty.Reset();
  EXPECT_EQ(empty.bytes(), 0u);
  EXPECT_TRUE(empty.Chunks().empty());
}
