// Tests for S3Signer: every header-signing case of the AWS SigV4 test suite
// (tests/fixtures/aws-sigv4, see its README) byte for byte, then the S3
// examples from the S3 API reference (no path normalization or re-encoding,
// x-amz-content-sha256) and the argument checks of Sign.
#include "remote/s3_signer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace ckptfs {
namespace {

namespace fs = std::filesystem;

std::string SuiteDir() {
#if defined(CKPTFS_SOURCE_DIR)
  return std::string(CKPTFS_SOURCE_DIR) + "/tests/fixtures/aws-sigv4";
#else
  return "tests/fixtures/aws-sigv4";
#endif
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Case folders holding the header-signing expectations. The suite's query-*
// files are presigned URLs, which ckptfs never produces, so they are not read.
std::vector<std::string> HeaderCases() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(SuiteDir(), ec)) {
    const fs::path& d = e.path();
    if (fs::exists(d / "request.txt") && fs::exists(d / "context.json") &&
        fs::exists(d / "header-canonical-request.txt") &&
        fs::exists(d / "header-string-to-sign.txt") &&
        fs::exists(d / "header-signed-request.txt")) {
      out.push_back(d.filename().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The suite's request.txt: "METHOD target HTTP/1.1" (the target may hold raw
// spaces and UTF-8), header lines where a line starting with whitespace
// continues the previous value, a blank line, then the body.
HttpRequestToSign ParseRequest(const std::string& text, std::string* body) {
  HttpRequestToSign req;
  std::vector<std::string> lines;
  size_t pos = 0;
  bool in_body = false;
  while (pos <= text.size() && !in_body) {
    size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    pos = nl == std::string::npos ? text.size() + 1 : nl + 1;
    if (line.empty() && !lines.empty()) {
      in_body = true;
      *body = pos <= text.size() ? text.substr(pos) : std::string();
    } else if (!line.empty()) {
      lines.push_back(line);
    }
  }
  const std::string& start = lines.at(0);
  size_t sp1 = start.find(' ');
  size_t sp2 = start.rfind(' ');
  req.method = start.substr(0, sp1);
  std::string target = start.substr(sp1 + 1, sp2 - sp1 - 1);
  size_t q = target.find('?');
  req.path = target.substr(0, q);
  if (q != std::string::npos) {
    std::string_view query = std::string_view(target).substr(q + 1);
    while (!query.empty()) {
      size_t amp = query.find('&');
      std::string_view kv = query.substr(0, amp);
      size_t eq = kv.find('=');
      req.query.emplace_back(PercentDecode(kv.substr(0, eq)),
                             eq == std::string_view::npos ? "" : PercentDecode(kv.substr(eq + 1)));
      query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    }
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if ((l[0] == ' ' || l[0] == '\t') && !req.headers.empty()) {
      req.headers.back().second += "\n" + l;  // folded; the signer collapses it
      continue;
    }
    size_t colon = l.find(':');
    req.headers.emplace_back(l.substr(0, colon), l.substr(colon + 1));
  }
  return req;
}

std::string Lookup(const HttpRequestToSign& req, const std::string& name) {
  for (const auto& [n, v] : req.headers) {
    if (n == name) return v;
  }
  return "<missing>";
}

class AwsSuiteTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AwsSuiteTest, HeaderSigningMatches) {
  fs::path dir = fs::path(SuiteDir()) / GetParam();
  auto ctx = nlohmann::json::parse(ReadFile(dir / "context.json"));
  std::string ts = ctx.at("timestamp").get<std::string>();  // 2015-08-30T12:36:00Z
  std::erase_if(ts, [](char c) { return c == '-' || c == ':'; });
  SigningParams params = SigningParams::For(ctx.at("region"), ctx.at("service"), ts);
  params.normalize_path = ctx.value("normalize", true);
  AwsCredentials creds{ctx.at("credentials").at("access_key_id"),
                       ctx.at("credentials").at("secret_access_key"),
                       ctx.at("credentials").value("token", "")};

  std::string body;
  HttpRequestToSign req = ParseRequest(ReadFile(dir / "request.txt"), &body);
  req.payload_sha256_hex = Sha256Hex(body);
  // sign_body asks for the payload hash as a signed header too (as S3 does).
  if (ctx.value("sign_body", false)) {
    req.headers.emplace_back("x-amz-content-sha256", req.payload_sha256_hex);
  }
  // omit_session_token: the token travels unsigned, added after signing.
  bool omit_token = ctx.value("omit_session_token", false);
  AwsCredentials signing_creds = creds;
  if (omit_token) signing_creds.session_token.clear();

  ASSERT_TRUE(Sign(&req, signing_creds, params).ok());
  if (omit_token) req.headers.emplace_back("X-Amz-Security-Token", creds.session_token);

  // Rebuild what was signed: the request less Authorization (and less the
  // token when it was added afterwards).
  HttpRequestToSign signed_part = req;
  std::erase_if(signed_part.headers, [&](const auto& h) {
    return h.first == "Authorization" || (omit_token && h.first == "X-Amz-Security-Token");
  });
  std::string creq = CanonicalRequest(signed_part, params);
  EXPECT_EQ(creq, ReadFile(dir / "header-canonical-request.txt"));
  std::string sts = StringToSign(creq, params);
  EXPECT_EQ(sts, ReadFile(dir / "header-string-to-sign.txt"));
  if (fs::exists(dir / "header-signature.txt")) {
    EXPECT_EQ(Signature(sts, creds.secret_access_key, params),
              ReadFile(dir / "header-signature.txt"));
  }

  // The signed request carries the Authorization header (and the date and
  // token headers) the suite expects.
  std::string signed_text = ReadFile(dir / "header-signed-request.txt");
  std::string body_unused;
  HttpRequestToSign expected = ParseRequest(signed_text, &body_unused);
  EXPECT_EQ(Lookup(req, "Authorization"), Lookup(expected, "Authorization"));
  EXPECT_EQ(Lookup(req, "X-Amz-Date"), Lookup(expected, "X-Amz-Date"));
  if (!creds.session_token.empty()) {
    EXPECT_EQ(Lookup(req, "X-Amz-Security-Token"), Lookup(expected, "X-Amz-Security-Token"));
  }
}

std::string CaseName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Suite, AwsSuiteTest, ::testing::ValuesIn(HeaderCases()), CaseName);
// Without the fixtures there are no cases; SuiteIsPresent below says so and
// names the folder, which says more than gtest's "uninstantiated" failure.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(AwsSuiteTest);

TEST(S3SignerTest, SuiteIsPresent) {
  // Guards against a silently empty parameter list (wrong path).
  EXPECT_GE(HeaderCases().size(), 30u) << "looked in " << SuiteDir();
}

TEST(S3SignerTest, SessionTokenIsSignedHeader) {
  HttpRequestToSign req{
      "GET", "/", {}, {{"Host", "example.amazonaws.com"}}, std::string(kEmptyPayloadSha256)};
  AwsCredentials creds{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                       "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"};
  ASSERT_TRUE(Sign(&req, creds, "us-east-1", "service", "20150830T123600Z", true).ok());
  EXPECT_EQ(Lookup(req, "X-Amz-Security-Token"), creds.session_token);
  EXPECT_EQ(Lookup(req, "Authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            "SignedHeaders=host;x-amz-date;x-amz-security-token, "
            "Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8");
}

// The worked examples of the S3 API reference ("Signature Calculations for the
// Authorization Header"): service s3, real payload hashes, encoded keys.
const AwsCredentials kS3Creds{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                              ""};

TEST(S3SignerTest, S3GetObjectExample) {
  HttpRequestToSign req{"GET",
                        "/test.txt",
                        {},
                        {{"Host", "examplebucket.s3.amazonaws.com"}, {"Range", "bytes=0-9"}},
                        std::string(kEmptyPayloadSha256)};
  ASSERT_TRUE(Sign(&req, kS3Creds, "us-east-1", "s3", "20130524T000000Z", false).ok());
  EXPECT_EQ(Lookup(req, "x-amz-content-sha256"), kEmptyPayloadSha256);
  EXPECT_EQ(Lookup(req, "Authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(S3SignerTest, S3PutObjectExampleKeepsEncodedKey) {
  std::string body = "Welcome to Amazon S3.";
  HttpRequestToSign req{"PUT",
                        "/test%24file.text",
                        {},
                        {{"Host", "examplebucket.s3.amazonaws.com"},
                         {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                         {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
                        Sha256Hex(body)};
  EXPECT_EQ(req.payload_sha256_hex,
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  SigningParams params = SigningParams::For("us-east-1", "s3", "20130524T000000Z");
  ASSERT_TRUE(Sign(&req, kS3Creds, params).ok());
  // "%24" must reach the canonical form as is: S3 does not re-encode.
  EXPECT_NE(CanonicalRequest(req, params).find("\n/test%24file.text\n"), std::string::npos);
  EXPECT_EQ(Lookup(req, "Authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class, "
            "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(S3SignerTest, S3ListObjectsExampleQuery) {
  HttpRequestToSign req{"GET",
                        "/",
                        {{"prefix", "J"}, {"max-keys", "2"}},
                        {{"Host", "examplebucket.s3.amazonaws.com"}},
                        std::string(kEmptyPayloadSha256)};
  ASSERT_TRUE(Sign(&req, kS3Creds, "us-east-1", "s3", "20130524T000000Z", false).ok());
  EXPECT_EQ(Lookup(req, "Authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
            "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(S3SignerTest, S3DoesNotNormalizeAndSignsUnsignedPayload) {
  HttpRequestToSign req{"PUT",
                        "/bucket/run1//step%20100/./a",
                        {{"uploadId", "x/y+z"}},
                        {{"Host", "bucket.s3.amazonaws.com"}},
                        std::string(kUnsignedPayload)};
  SigningParams params = SigningParams::For("eu-west-1", "s3", "20240101T000000Z");
  ASSERT_TRUE(Sign(&req, kS3Creds, params).ok());
  std::string creq = CanonicalRequest(req, params);
  EXPECT_EQ(creq,
            "PUT\n/bucket/run1//step%20100/./a\nuploadId=x%2Fy%2Bz\n"
            "host:bucket.s3.amazonaws.com\nx-amz-content-sha256:UNSIGNED-PAYLOAD\n"
            "x-amz-date:20240101T000000Z\n\nhost;x-amz-content-sha256;x-amz-date\n"
            "UNSIGNED-PAYLOAD");
}

TEST(S3SignerTest, ResigningReplacesAuthorization) {
  HttpRequestToSign req{
      "GET", "/k", {}, {{"Host", "b.s3.amazonaws.com"}}, std::string(kEmptyPayloadSha256)};
  ASSERT_TRUE(Sign(&req, kS3Creds, "us-east-1", "s3", "20130524T000000Z", false).ok());
  std::string first = Lookup(req, "Authorization");
  ASSERT_TRUE(Sign(&req, kS3Creds, "us-east-1", "s3", "20130524T000000Z", false).ok());
  int count = 0;
  for (const auto& h : req.headers) count += h.first == "Authorization";
  EXPECT_EQ(count, 1);
  EXPECT_EQ(Lookup(req, "Authorization"), first);
}

TEST(S3SignerTest, UriEncode) {
  EXPECT_EQ(UriEncode("a b/c~d", false), "a%20b/c~d");
  EXPECT_EQ(UriEncode("a b/c~d", true), "a%20b%2Fc~d");
  EXPECT_EQ(UriEncode("+*=&\xe1\x88\xb4", true), "%2B%2A%3D%26%E1%88%B4");
}

TEST(S3SignerTest, RejectsBadArguments) {
  HttpRequestToSign req{"GET", "/", {}, {{"Host", "h"}}, std::string(kEmptyPayloadSha256)};
  EXPECT_EQ(Sign(&req, kS3Creds, "us-east-1", "s3", "2013-05-24", false).err(), EINVAL);
  EXPECT_EQ(Sign(&req, AwsCredentials{}, "us-east-1", "s3", "20130524T000000Z", false).err(),
            EINVAL);
  HttpRequestToSign no_hash{"GET", "/", {}, {{"Host", "h"}}, ""};
  Status st = Sign(&no_hash, kS3Creds, "us-east-1", "s3", "20130524T000000Z", false);
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_EQ(st.message().find(kS3Creds.secret_access_key), std::string::npos);
}

}  // namespace
}  // namespace ckptfs
