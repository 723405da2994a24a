// The S3 store's upload checksums against a fake server: the headers each
// upload carries, the answer checked (a wrong ETag or CRC32C is a damaged
// upload: retried, counted, and EIO when every attempt was damaged), S3's
// BadDigest retried, the parts' CRC32Cs and the composite on Complete.
#include <gtest/gtest.h>

#include <atomic>

#include "common/crc32c.h"
#include "remote/fake_http_server_for_test.h"
#include "remote/s3_object_store.h"
#include "remote/upload_checksums.h"

namespace ckptfs {
namespace {

std::unique_ptr<ObjectStore> Open(const FakeHttpServer& server, bool checksums = true) {
  S3Config c;
  c.bucket = "bkt";
  c.prefix = "pre";
  c.endpoint = server.url();
  c.credentials = AwsCredentials{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
  c.retry.max_attempts = 3;
  c.retry.sleep = [](std::chrono::milliseconds) {};
  c.stall_timeout = std::chrono::seconds(1);
  c.upload_checksums = checksums;
  Result<std::unique_ptr<ObjectStore>> s = OpenS3ObjectStore(c);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

// What s3rver and S3 send for a PUT: the MD5 of what arrived as the ETag.
FakeHttpResponse EtagOf(const std::string& body) {
  FakeHttpResponse r;
  r.headers = {{"ETag", "\"" + DigestBody(body, true).md5_hex + "\""}};
  return r;
}

const std::string kData = "The quick brown fox jumps over the lazy dog";

TEST(S3UploadChecksums, PutCarriesCrc32cAndContentMd5) {
  FakeHttpServer server([](const FakeHttpRequest& req) { return EtagOf(req.body); });
  std::unique_ptr<ObjectStore> s = Open(server);
  ASSERT_TRUE(s->Put("k", kData).ok());
  ASSERT_EQ(server.request_count(), 1u);
  const FakeHttpRequest req = server.requests()[0];
  EXPECT_EQ(req.Header("x-amz-checksum-crc32c"), Crc32cBase64(Crc32c(0, kData.data(), kData.size())));
  EXPECT_EQ(req.Header("content-md5"), "nhB9nTcrtoJr2B01QqQZ1g==");
  // Both are signed, so nobody on the way can change them unnoticed.
  EXPECT_NE(req.Header("authorization").find("content-md5;host;x-amz-checksum-crc32c;"), std::string::npos);
  EXPECT_EQ(s->UploadChecksumMismatches(), 0u);
}

TEST(S3UploadChecksums, NoChecksumsForTheBenchmarkBaseline) {
  FakeHttpServer server([](const FakeHttpRequest& req) { return EtagOf(req.body + "x"); });
  std::unique_ptr<ObjectStore> s = Open(server, /*checksums=*/false);
  ASSERT_TRUE(s->Put("k", kData).ok());  // the wrong ETag goes unnoticed
  EXPECT_EQ(server.requests()[0].Header("x-amz-checksum-crc32c"), "");
  EXPECT_EQ(server.requests()[0].Header("content-md5"), "");
}

TEST(S3UploadChecksums, EtagOfOtherBytesIsRetriedAndCounted) {
  std::atomic<int> n{0};
  // The first body "arrives" with a bit flipped: the server's ETag is the
  // MD5 of the damaged bytes.
  FakeHttpServer server([&](const FakeHttpRequest& req) {
    std::string arrived = req.body;
    if (n++ == 0) arrived[3] ^= 0x10;
    return EtagOf(arrived);
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  Status st = s->Put("k", kData);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(server.request_count(), 2u);
  EXPECT_EQ(s->UploadChecksumMismatches(), 1u);
  // Sent again from the same bytes with the same checksums.
  EXPECT_EQ(server.requests()[1].body, kData);
  EXPECT_EQ(server.requests()[1].Header("content-md5"), server.requests()[0].Header("content-md5"));
}

TEST(S3UploadChecksums, EveryAttemptDamagedIsEio) {
  FakeHttpServer server([](const FakeHttpRequest& req) { return EtagOf(req.body + "!"); });
  std::unique_ptr<ObjectStore> s = Open(server);
  Status st = s->Put("k", kData);
  EXPECT_EQ(st.err(), EIO);
  EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos) << st.message();
  EXPECT_EQ(server.request_count(), 3u);
  EXPECT_EQ(s->UploadChecksumMismatches(), 3u);
}

TEST(S3UploadChecksums, EchoedCrc32cMustMatch) {
  FakeHttpServer server([](const FakeHttpRequest&) {
    FakeHttpResponse r;
    r.headers = {{"ETag", "\"sse-kms-etag\""}, {"x-amz-checksum-crc32c", "AAAAAA=="}};
    return r;
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  EXPECT_EQ(s->Put("k", kData).err(), EIO);
  EXPECT_EQ(s->UploadChecksumMismatches(), 3u);
}

TEST(S3UploadChecksums, BadDigestAndChecksumMismatchRepliesAreRetried) {
  for (const char* code : {"BadDigest", "XAmzContentChecksumMismatch", "InvalidDigest"}) {
    std::atomic<int> n{0};
    FakeHttpServer server([&](const FakeHttpRequest& req) {
      if (n++ == 0) return FakeHttpResponse::S3Error(400, code, "The checksum you specified did not match.");
      return EtagOf(req.body);
    });
    std::unique_ptr<ObjectStore> s = Open(server);
    Status st = s->Put("k", kData);
    EXPECT_TRUE(st.ok()) << code << ": " << st.ToString();
    EXPECT_EQ(server.request_count(), 2u) << code;
    EXPECT_EQ(s->UploadChecksumMismatches(), 1u) << code;
  }
}

TEST(S3UploadChecksums, ServerThatEchoesCrc32cIsSpentNoMoreMd5) {
  FakeHttpServer server([](const FakeHttpRequest& req) {
    FakeHttpResponse r = EtagOf(req.body);
    r.headers.emplace_back("x-amz-checksum-crc32c", req.Header("x-amz-checksum-crc32c"));
    return r;
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  ASSERT_TRUE(s->Put("a", kData).ok());
  ASSERT_TRUE(s->Put("b", kData).ok());
  const std::vector<FakeHttpRequest> reqs = server.requests();
  EXPECT_NE(reqs[0].Header("content-md5"), "");
  EXPECT_EQ(reqs[1].Header("content-md5"), "");
  EXPECT_NE(reqs[1].Header("x-amz-checksum-crc32c"), "");
}

// Bodies of 1 MiB and more over http: the signed SHA-256 is the server's
// check, the MD5 is computed while the body is sent (issue 29).
const std::string kBig = [] {
  std::string b(2 << 20, '\0');
  for (size_t i = 0; i < b.size(); i++) b[i] = static_cast<char>((i * 2654435761u) >> 13);
  return b;
}();

TEST(S3UploadChecksums, BigBodyOverHttpGoesWithoutContentMd5AndItsEtagIsChecked) {
  std::atomic<int> n{0};
  FakeHttpServer server([&](const FakeHttpRequest& req) {
    std::string arrived = req.body;
    if (n++ == 0) arrived[12345] ^= 0x4;  // the first attempt arrives damaged
    return EtagOf(arrived);
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  Status st = s->Put("big", kBig);
  EXPECT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(server.request_count(), 2u);
  EXPECT_EQ(s->UploadChecksumMismatches(), 1u);
  for (const FakeHttpRequest& req : server.requests()) {
    EXPECT_EQ(req.Header("content-md5"), "");
    EXPECT_EQ(req.Header("x-amz-checksum-crc32c"),
              Crc32cBase64(Crc32c(0, kBig.data(), kBig.size())));
    // The payload's SHA-256 travels signed: a server refuses other bytes.
    EXPECT_EQ(req.Header("x-amz-content-sha256").size(), 64u);
    EXPECT_NE(req.Header("authorization").find("x-amz-content-sha256"), std::string::npos);
  }
}

TEST(S3UploadChecksums, BigBodyWhoseEveryAttemptIsDamagedIsEio) {
  FakeHttpServer server([](const FakeHttpRequest& req) { return EtagOf(req.body + "!"); });
  std::unique_ptr<ObjectStore> s = Open(server);
  EXPECT_EQ(s->Put("big", kBig).err(), EIO);
  EXPECT_EQ(s->UploadChecksumMismatches(), 3u);
}

TEST(S3UploadChecksums, BigConditionalPutAndSmallBodiesKeepContentMd5) {
  FakeHttpServer server([](const FakeHttpRequest& req) { return EtagOf(req.body); });
  std::unique_ptr<ObjectStore> s = Open(server);
  ASSERT_TRUE(s->PutIfAbsent("big", kBig).ok());
  ASSERT_TRUE(s->Put("small", kData).ok());
  const std::vector<FakeHttpRequest> reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].Header("content-md5"), DigestBody(kBig, true).md5_base64);
  EXPECT_EQ(reqs[1].Header("content-md5"), "nhB9nTcrtoJr2B01QqQZ1g==");
}

TEST(S3UploadChecksums, BigPartGoesWithoutContentMd5AndItsEtagIsChecked) {
  std::atomic<int> n{0};
  FakeHttpServer server([&](const FakeHttpRequest& req) {
    if (req.method == "POST") {
      return FakeHttpResponse::Ok(
          "<InitiateMultipartUploadResult><UploadId>u1</UploadId></InitiateMultipartUploadResult>");
    }
    std::string arrived = req.body;
    if (n++ == 0) arrived[7] ^= 1;
    return EtagOf(arrived);
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  Result<std::string> id = s->BeginMultipart("obj");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  Result<std::string> part = s->UploadPart("obj", *id, 1, kBig);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(s->UploadChecksumMismatches(), 1u);
  const std::vector<FakeHttpRequest> reqs = server.requests();
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[1].Header("content-md5"), "");
  EXPECT_EQ(reqs[2].Header("content-md5"), "");
}

TEST(S3UploadChecksums, MultipartPartsAndComplete) {
  const std::string p1 = "first part", p2 = "second part";
  const uint32_t c1 = Crc32c(0, p1.data(), p1.size()), c2 = Crc32c(0, p2.data(), p2.size());
  std::atomic<int> parts{0};
  std::atomic<bool> wrong_composite{false};
  FakeHttpServer server([&](const FakeHttpRequest& req) {
    if (req.method == "POST" && req.target.find("?uploads") != std::string::npos) {
      return FakeHttpResponse::Ok("<InitiateMultipartUploadResult><UploadId>u1</UploadId></InitiateMultipartUploadResult>");
    }
    if (req.method == "PUT") {
      std::string arrived = req.body;
      if (parts++ == 0) arrived[0] ^= 1;  // the first part arrives damaged once
      return EtagOf(arrived);
    }
    // Complete: S3 answers with the composite of the parts it holds.
    return FakeHttpResponse::Ok("<CompleteMultipartUploadResult><ETag>\"x-2\"</ETag><ChecksumCRC32C>" +
                                (wrong_composite ? std::string("AAAAAA==-2") : CompositeCrc32c({c1, c2})) +
                                "</ChecksumCRC32C></CompleteMultipartUploadResult>");
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  Result<std::string> id = s->BeginMultipart("big");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  Result<std::string> e1 = s->UploadPart("big", *id, 1, p1);
  Result<std::string> e2 = s->UploadPart("big", *id, 2, p2);
  ASSERT_TRUE(e1.ok() && e2.ok());
  EXPECT_EQ(s->UploadChecksumMismatches(), 1u);
  ASSERT_TRUE(s->CompleteMultipart("big", *id, {*e1, *e2}).ok());

  const std::vector<FakeHttpRequest> reqs = server.requests();
  ASSERT_EQ(reqs.size(), 5u);
  EXPECT_EQ(reqs[0].Header("x-amz-checksum-algorithm"), "CRC32C");
  EXPECT_EQ(reqs[1].Header("x-amz-checksum-crc32c"), Crc32cBase64(c1));
  EXPECT_EQ(reqs[3].Header("x-amz-checksum-crc32c"), Crc32cBase64(c2));
  const std::string etag1 = "\"" + DigestBody(p1, true).md5_hex + "\"";
  const std::string etag2 = "\"" + DigestBody(p2, true).md5_hex + "\"";
  EXPECT_EQ(reqs[4].body,
            "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
            "<Part><PartNumber>1</PartNumber><ETag>&quot;" + etag1.substr(1, 32) + "&quot;</ETag><ChecksumCRC32C>" +
                Crc32cBase64(c1) + "</ChecksumCRC32C></Part>"
            "<Part><PartNumber>2</PartNumber><ETag>&quot;" + etag2.substr(1, 32) + "&quot;</ETag><ChecksumCRC32C>" +
                Crc32cBase64(c2) + "</ChecksumCRC32C></Part></CompleteMultipartUpload>");

  // An assembled object whose composite differs is not taken as complete.
  wrong_composite = true;
  Status st = s->CompleteMultipart("big", *id, {*e1, *e2});
  EXPECT_EQ(st.err(), EIO);
  EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ckptfs
