// The upload digests against known vectors (RFC 1321's MD5, the CRC32C
// check value), the check of S3's answer, and the part tokens.
#include "remote/upload_checksums.h"

#include <gtest/gtest.h>

#include "common/crc32c.h"

namespace ckptfs {
namespace {

TEST(UploadChecksums, Crc32cInBase64OfTheBigEndianBytes) {
  // CRC32C("123456789") = 0xE3069283, the check value of the Castagnoli CRC.
  EXPECT_EQ(DigestBody("123456789", false).crc32c, 0xE3069283u);
  EXPECT_EQ(DigestBody("123456789", false).crc32c_base64, "4waSgw==");  // e3 06 92 83
  EXPECT_EQ(Crc32cBase64(0), "AAAAAA==");
  EXPECT_EQ(Crc32cBase64(0x01020304), "AQIDBA==");
}

TEST(UploadChecksums, Md5InHexAndBase64) {
  BodyDigests empty = DigestBody("", true);
  EXPECT_EQ(empty.md5_hex, "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(empty.md5_base64, "1B2M2Y8AsgTpgAmY7PhCfg==");
  BodyDigests fox = DigestBody("The quick brown fox jumps over the lazy dog", true);
  EXPECT_EQ(fox.md5_hex, "9e107d9d372bb6826bd81d3542a419d6");
  EXPECT_EQ(fox.md5_base64, "nhB9nTcrtoJr2B01QqQZ1g==");
  EXPECT_TRUE(DigestBody("x", false).md5_hex.empty());
}

TEST(UploadChecksums, CompositeIsTheCrcOfThePartCrcsWithTheCount) {
  // By definition: CRC32C over the parts' checksums as big-endian bytes.
  const unsigned char be[] = {0xE3, 0x06, 0x92, 0x83, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(CompositeCrc32c({0xE3069283u, 0}), Crc32cBase64(Crc32cPortable(0, be, 8)) + "-2");
  EXPECT_EQ(CompositeCrc32c({0xE3069283u}), Crc32cBase64(Crc32cPortable(0, be, 4)) + "-1");
  // Not the CRC32C of the whole object: a different value.
  EXPECT_NE(CompositeCrc32c({0xE3069283u}), Crc32cBase64(0xE3069283u) + "-1");
}

TEST(UploadChecksums, PlainMd5EtagsOnly) {
  EXPECT_TRUE(IsPlainMd5Etag("\"9e107d9d372bb6826bd81d3542a419d6\""));
  EXPECT_TRUE(IsPlainMd5Etag("9E107D9D372BB6826BD81D3542A419D6"));
  EXPECT_FALSE(IsPlainMd5Etag("\"3858f62230ac3c915f300c664312c11f-2\""));  // multipart
  EXPECT_FALSE(IsPlainMd5Etag("\"part-etag\""));
  EXPECT_FALSE(IsPlainMd5Etag("\"9e107d9d372bb6826bd81d3542a419dz\""));
  EXPECT_FALSE(IsPlainMd5Etag(""));
}

HttpResponse Answer(std::string etag, std::string crc = {}) {
  HttpResponse r;
  r.status = 200;
  if (!etag.empty()) r.headers["etag"] = std::move(etag);
  if (!crc.empty()) r.headers["x-amz-checksum-crc32c"] = std::move(crc);
  return r;
}

TEST(UploadChecksums, AnswerCheckedAgainstWhatWasSent) {
  const BodyDigests sent = DigestBody("The quick brown fox jumps over the lazy dog", true);
  EXPECT_TRUE(CheckUploadAnswer(Answer("\"9e107d9d372bb6826bd81d3542a419d6\""), sent).ok());
  EXPECT_TRUE(CheckUploadAnswer(Answer("\"9E107D9D372BB6826BD81D3542A419D6\""), sent).ok());
  // The MD5 of the same text with one bit changed ("dog" -> "eog") differs.
  Status bad = CheckUploadAnswer(Answer("\"" + DigestBody("The quick brown fox jumps over the lazy eog", true).md5_hex + "\""), sent);
  EXPECT_EQ(bad.err(), EIO);
  EXPECT_NE(bad.message().find("checksum mismatch"), std::string::npos) << bad.message();
  // ETags that are no plain MD5 (SSE-KMS, fakes) leave it to the CRC32C.
  EXPECT_TRUE(CheckUploadAnswer(Answer("\"opaque-etag\""), sent).ok());
  EXPECT_TRUE(CheckUploadAnswer(Answer("\"opaque-etag\"", sent.crc32c_base64), sent).ok());
  EXPECT_EQ(CheckUploadAnswer(Answer("\"opaque-etag\"", "AAAAAA=="), sent).err(), EIO);
  EXPECT_TRUE(AnswerConfirmsCrc32c(Answer("", sent.crc32c_base64), sent));
  EXPECT_FALSE(AnswerConfirmsCrc32c(Answer(""), sent));
  // An echoed CRC32C that matches settles it, whatever the ETag.
  EXPECT_TRUE(CheckUploadAnswer(Answer("\"00000000000000000000000000000000\"", sent.crc32c_base64), sent).ok());
  // SSE-KMS / SSE-C ETags are 32 hex digits but no MD5.
  HttpResponse kms = Answer("\"00000000000000000000000000000000\"");
  EXPECT_EQ(CheckUploadAnswer(kms, sent).err(), EIO);
  kms.headers["x-amz-server-side-encryption"] = "aws:kms";
  EXPECT_TRUE(CheckUploadAnswer(kms, sent).ok());
  HttpResponse ssec = Answer("\"00000000000000000000000000000000\"");
  ssec.headers["x-amz-server-side-encryption-customer-algorithm"] = "AES256";
  EXPECT_TRUE(CheckUploadAnswer(ssec, sent).ok());
  // Without an MD5 computed, the ETag is not compared.
  EXPECT_TRUE(CheckUploadAnswer(Answer("\"00000000000000000000000000000000\""), DigestBody("x", false)).ok());
}

TEST(UploadChecksums, PartTokensCarryTheEtagAndTheCrc) {
  const std::string token = MakePartToken("\"abc\"", 0xE3069283u);
  EXPECT_EQ(token, "\"abc\";crc32c=e3069283");
  PartToken part = ParsePartToken(token);
  EXPECT_EQ(part.etag, "\"abc\"");
  ASSERT_TRUE(part.crc32c.has_value());
  EXPECT_EQ(*part.crc32c, 0xE3069283u);
  PartToken bare = ParsePartToken("\"abc\"");
  EXPECT_EQ(bare.etag, "\"abc\"");
  EXPECT_FALSE(bare.crc32c.has_value());
  EXPECT_FALSE(ParsePartToken("\"abc\";crc32c=zz").crc32c.has_value());
}

}  // namespace
}  // namespace ckptfs
