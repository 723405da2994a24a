#include "formats/zstd_stream.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <cstring>
#include <random>

namespace ckptfs {
namespace {

std::string Compress(const std::string& in, int level = 3) {
  std::string out(ZSTD_compressBound(in.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), level);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

ZstdStreamReader::ReadCompressed Over(const std::string* bytes, int* reads = nullptr) {
  return [bytes, reads](uint64_t off, void* buf, size_t n) -> Result<size_t> {
    if (reads) ++*reads;
    if (off >= bytes->size()) return size_t{0};
    n = std::min<size_t>(n, bytes->size() - off);
    std::memcpy(buf, bytes->data() + off, n);
    return n;
  };
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  std::mt19937 rng(1);
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i % 251 < 200 ? i % 13 : rng());
  return s;
}

TEST(ZstdStreamTest, TransformDescriptors) {
  EXPECT_EQ(*ParseItemTransforms({}), ItemTransform::kNone);
  EXPECT_EQ(*ParseItemTransforms({"stream.zstd/1"}), ItemTransform::kZstd);
  EXPECT_EQ(*ParseItemTransforms({"stream.zstd/1.2"}), ItemTransform::kZstd);
  EXPECT_EQ(ParseItemTransforms({"stream.zstd/2"}).status().err(), EIO);
  EXPECT_EQ(ParseItemTransforms({"stream.lz4/1"}).status().err(), EIO);
  EXPECT_EQ(ParseItemTransforms({"stream.zstd/1", "stream.zstd/1"}).status().err(), EIO);
}

TEST(ZstdStreamTest, ReadsAnywhereAndSequentialReadsDecodeOnce) {
  const std::string plain = Pattern(3 << 20);
  // Two frames back to back, as a writer flushing in pieces may produce.
  const std::string z = Compress(plain.substr(0, 1 << 20)) + Compress(plain.substr(1 << 20));
  int reads = 0;
  auto r = ZstdStreamReader::Create(z.size(), Over(&z, &reads));
  ASSERT_TRUE(r.ok());
  std::string got;
  std::string buf(100'000, '\0');
  for (;;) {
    Result<size_t> n = (*r)->ReadAt(got.size(), buf.data(), buf.size());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    if (*n == 0) break;
    got.append(buf.data(), *n);
  }
  EXPECT_EQ(got, plain);
  EXPECT_LE(static_cast<size_t>(reads), z.size() / (128 << 10) + 2);  // each compressed byte read once
  std::mt19937 rng(3);
  for (int i = 0; i < 20; ++i) {
    const uint64_t off = rng() % plain.size();
    const size_t len = 1 + rng() % 70'000;
    Result<size_t> n = (*r)->ReadAt(off, buf.data(), len);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(std::string(buf.data(), *n), plain.substr(off, len));
  }
  auto sized = ZstdStreamReader::Create(z.size(), Over(&z));
  EXPECT_EQ(*(*sized)->DecodedSize(plain.size()), plain.size());
  auto capped = ZstdStreamReader::Create(z.size(), Over(&z));
  EXPECT_EQ((*capped)->DecodedSize(1000).status().err(), EFBIG);
  EXPECT_LT((*r)->MemoryUsage(), size_t{8} << 20);
}

TEST(ZstdStreamTest, DamagedStreamsAreEio) {
  const std::string plain = Pattern(200'000);
  const std::string z = Compress(plain);
  std::string buf(plain.size() + 10, '\0');
  const std::string cut = z.substr(0, z.size() - 5);
  auto r = ZstdStreamReader::Create(cut.size(), Over(&cut));
  Result<size_t> n = (*r)->ReadAt(0, buf.data(), buf.size());
  for (uint64_t at = 0; n.ok() && *n > 0; at += *n) n = (*r)->ReadAt(at + *n, buf.data(), buf.size());
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().err(), EIO);

  // Damage in a frame with a checksum (literals of a frame without one decode
  // to wrong bytes undetected: that is zstd's contract, not ours).
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  std::string bad(ZSTD_compressBound(plain.size()), '\0');
  bad.resize(ZSTD_compress2(cctx, bad.data(), bad.size(), plain.data(), plain.size()));
  ZSTD_freeCCtx(cctx);
  bad[bad.size() / 2] ^= 0x5a;
  auto r2 = ZstdStreamReader::Create(bad.size(), Over(&bad));
  EXPECT_EQ((*r2)->DecodedSize(1 << 30).status().err(), EIO);

  const std::string garbage = "this is not zstd at all";
  auto r3 = ZstdStreamReader::Create(garbage.size(), Over(&garbage));
  EXPECT_EQ((*r3)->ReadAt(0, buf.data(), 10).status().err(), EIO);

  const std::string empty;
  auto r4 = ZstdStreamReader::Create(0, Over(&empty));
  EXPECT_EQ((*r4)->ReadAt(0, buf.data(), 10).status().err(), EIO);

  // A stated length beyond what the item holds.
  auto r5 = ZstdStreamReader::Create(z.size() + 100, Over(&z));
  EXPECT_EQ((*r5)->DecodedSize(1 << 30).status().err(), EIO);
}

TEST(ZstdStreamTest, RefusesWindowsLargerThanTheLimit) {
  const std::string plain = Pattern(1 << 20);
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, kZstdMaxWindowLog + 2);
  // Fed in pieces, so the encoder cannot shrink the window to the input.
  std::string z(ZSTD_compressBound(plain.size()) + (1 << 16), '\0');
  ZSTD_outBuffer out{z.data(), z.size(), 0};
  for (size_t at = 0; at < plain.size(); at += 4096) {
    ZSTD_inBuffer in{plain.data() + at, 4096, 0};
    ASSERT_FALSE(ZSTD_isError(ZSTD_compressStream2(cctx, &out, &in, ZSTD_e_continue)));
  }
  ZSTD_inBuffer none{nullptr, 0, 0};
  ASSERT_EQ(ZSTD_compressStream2(cctx, &out, &none, ZSTD_e_end), 0u);
  ZSTD_freeCCtx(cctx);
  z.resize(out.pos);
  auto r = ZstdStreamReader::Create(z.size(), Over(&z));
  Result<uint64_t> n = (*r)->DecodedSize(1 << 30);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("window larger than 32 MiB"), std::string::npos) << n.status().ToString();
}

}  // namespace
}  // namespace ckptfs
