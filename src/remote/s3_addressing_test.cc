// s3:// URLs, bucket-name rules, endpoints, both addressing styles, and the
// encoding of keys and queries on the wire.
#include "remote/s3_addressing.h"

#include <gtest/gtest.h>

#include "remote/s3_signer.h"

namespace ckptfs {
namespace {

TEST(S3AddressingTest, ParseS3Url) {
  Result<S3Location> loc = ParseS3Url("s3://my-bucket/some/prefix");
  ASSERT_TRUE(loc.ok()) << loc.status().ToString();
  EXPECT_EQ(loc->bucket, "my-bucket");
  EXPECT_EQ(loc->prefix, "some/prefix");

  for (const char* url : {"s3://my-bucket", "s3://my-bucket/"}) {
    loc = ParseS3Url(url);
    ASSERT_TRUE(loc.ok()) << url;
    EXPECT_EQ(loc->bucket, "my-bucket");
    EXPECT_EQ(loc->prefix, "") << url;
  }
  loc = ParseS3Url("s3://b.with.dots/run 1/\xC3\xBC/");
  ASSERT_TRUE(loc.ok());
  EXPECT_EQ(loc->bucket, "b.with.dots");
  EXPECT_EQ(loc->prefix, "run 1/\xC3\xBC");
}

TEST(S3AddressingTest, ParseS3UrlRefusesWithClearMessages) {
  struct Case {
    const char* url;
    const char* says;
  };
  for (const Case& c : {Case{"http://bucket/x", "s3://bucket"},
                        Case{"bucket/x", "s3://bucket"},
                        Case{"S3://bucket", "s3://bucket"},
                        Case{"s3://", "no bucket"},
                        Case{"s3:///prefix", "no bucket"},
                        Case{"s3://Bucket/x", "lower-case"},
                        Case{"s3://my_bucket", "lower-case"},
                        Case{"s3://ab", "3 to 63"},
                        Case{"s3://-bucket", "start and end"},
                        Case{"s3://bucket//x", "starts with '/'"},
                        Case{"s3://bucket/a/../b", "'..'"},
                        Case{"s3://bucket/x//", "ends with '/'"}}) {
    Result<S3Location> loc = ParseS3Url(c.url);
    EXPECT_EQ(loc.err(), EINVAL) << c.url;
    EXPECT_NE(loc.status().message().find(c.says), std::string::npos)
        << c.url << ": " << loc.status().message();
  }
}

TEST(S3AddressingTest, BucketNameRules) {
  for (const std::string& ok : {std::string("abc"), std::string("my-bucket"),
                                std::string("my.bucket.name"), std::string("123"),
                                std::string("a1-b2.c3"), std::string("bucket--x-s3"),
                                std::string(63, 'a')}) {
    EXPECT_TRUE(ValidateBucketName(ok).ok()) << ok;
  }
  struct Case {
    std::string bucket;
    const char* says;
  };
  for (const Case& c :
       {Case{"", "3 to 63"}, Case{"ab", "3 to 63"}, Case{std::string(64, 'a'), "3 to 63"},
        Case{"Upper", "lower-case"}, Case{"under_score", "lower-case"},
        Case{"sp ace", "lower-case"}, Case{"slash/es", "lower-case"},
        Case{".dot", "start and end"}, Case{"dash-", "start and end"},
        Case{"a..b", "\"..\""}, Case{"192.168.5.4", "IP address"},
        Case{"xn--bucket", "xn--"}}) {
    Status st = ValidateBucketName(c.bucket);
    EXPECT_EQ(st.err(), EINVAL) << c.bucket;
    EXPECT_NE(st.message().find(c.says), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("\"" + c.bucket + "\""), std::string::npos) << st.message();
  }
}

TEST(S3AddressingTest, AwsDefaultIsVirtualHostedHttps) {
  Result<S3Endpoint> ep = S3Endpoint::Make("", "eu-west-1", "my-bucket", S3Addressing::kAuto);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_TRUE(ep->https());
  EXPECT_TRUE(ep->virtual_hosted());
  EXPECT_EQ(ep->url(), "https://s3.eu-west-1.amazonaws.com");
  S3Target t = ep->ForObject("run 1/step+2/\xC3\xBC.bin");
  EXPECT_EQ(t.host, "my-bucket.s3.eu-west-1.amazonaws.com");
  EXPECT_EQ(t.path, "/run%201/step%2B2/%C3%BC.bin");
  EXPECT_EQ(t.url, "https://my-bucket.s3.eu-west-1.amazonaws.com/run%201/step%2B2/%C3%BC.bin");
  t = ep->ForBucket({{"list-type", "2"}, {"prefix", "a b/c"}});
  EXPECT_EQ(t.path, "/");
  EXPECT_EQ(t.url, "https://my-bucket.s3.eu-west-1.amazonaws.com/?list-type=2&prefix=a%20b%2Fc");
}

TEST(S3AddressingTest, AwsBucketWithDotsFallsBackToPathStyleOverHttps) {
  // The *.s3 wildcard certificate does not cover "a.b.s3...".
  Result<S3Endpoint> ep = S3Endpoint::Make("", "us-east-1", "my.dotted.bucket", S3Addressing::kAuto);
  ASSERT_TRUE(ep.ok());
  EXPECT_FALSE(ep->virtual_hosted());
  S3Target t = ep->ForObject("k");
  EXPECT_EQ(t.host, "s3.us-east-1.amazonaws.com");
  EXPECT_EQ(t.path, "/my.dotted.bucket/k");
  // Asked for explicitly, it is honoured.
  ep = S3Endpoint::Make("", "us-east-1", "my.dotted.bucket", S3Addressing::kVirtualHosted);
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->ForObject("k").host, "my.dotted.bucket.s3.us-east-1.amazonaws.com");
}

TEST(S3AddressingTest, CustomEndpointsArePathStyle) {
  for (const char* endpoint : {"http://127.0.0.1:4568", "http://127.0.0.1:4568/",
                               "http://localhost:9000", "https://minio.internal",
                               "http://[::1]:9000"}) {
    Result<S3Endpoint> ep = S3Endpoint::Make(endpoint, "us-east-1", "bkt", S3Addressing::kAuto);
    ASSERT_TRUE(ep.ok()) << endpoint << ": " << ep.status().ToString();
    EXPECT_FALSE(ep->virtual_hosted()) << endpoint;
  }
  Result<S3Endpoint> ep =
      S3Endpoint::Make("http://127.0.0.1:4568", "us-east-1", "bkt", S3Addressing::kAuto);
  ASSERT_TRUE(ep.ok());
  EXPECT_FALSE(ep->https());
  EXPECT_EQ(ep->url(), "http://127.0.0.1:4568");
  S3Target t = ep->ForObject("p/a b&c?d#e", {{"partNumber", "3"}, {"uploadId", "x/y+z="}});
  EXPECT_EQ(t.host, "127.0.0.1:4568");
  EXPECT_EQ(t.path, "/bkt/p/a%20b%26c%3Fd%23e");
  EXPECT_EQ(t.url, "http://127.0.0.1:4568/bkt/p/a%20b%26c%3Fd%23e?partNumber=3&uploadId=x%2Fy%2Bz%3D");
  t = ep->ForBucket({{"delete", ""}});
  EXPECT_EQ(t.path, "/bkt");
  EXPECT_EQ(t.url, "http://127.0.0.1:4568/bkt?delete");
  t = ep->ForObject("k", {{"uploads", ""}});
  EXPECT_EQ(t.url, "http://127.0.0.1:4568/bkt/k?uploads");

  // An AWS endpoint given explicitly (a VPC or FIPS one) stays virtual-hosted.
  ep = S3Endpoint::Make("https://s3-fips.us-east-2.amazonaws.com", "us-east-2", "bkt",
                        S3Addressing::kAuto);
  ASSERT_TRUE(ep.ok());
  EXPECT_TRUE(ep->virtual_hosted());
  EXPECT_EQ(ep->ForObject("k").host, "bkt.s3-fips.us-east-2.amazonaws.com");
}

TEST(S3AddressingTest, ExplicitStyles) {
  Result<S3Endpoint> ep =
      S3Endpoint::Make("http://s3.localhost:4568", "us-east-1", "bkt", S3Addressing::kVirtualHosted);
  ASSERT_TRUE(ep.ok());
  S3Target t = ep->ForObject("a/b");
  EXPECT_EQ(t.host, "bkt.s3.localhost:4568");
  EXPECT_EQ(t.path, "/a/b");
  EXPECT_EQ(t.url, "http://bkt.s3.localhost:4568/a/b");
  EXPECT_EQ(ep->ForBucket().path, "/");

  ep = S3Endpoint::Make("", "us-east-1", "bkt", S3Addressing::kPath);
  ASSERT_TRUE(ep.ok());
  t = ep->ForObject("a/b");
  EXPECT_EQ(t.host, "s3.us-east-1.amazonaws.com");
  EXPECT_EQ(t.url, "https://s3.us-east-1.amazonaws.com/bkt/a/b");

  EXPECT_EQ(S3Endpoint::Make("http://127.0.0.1:4568", "us-east-1", "bkt",
                             S3Addressing::kVirtualHosted).err(),
            EINVAL);
  EXPECT_EQ(S3Endpoint::Make("http://[::1]:4568", "us-east-1", "bkt",
                             S3Addressing::kVirtualHosted).err(),
            EINVAL);
}

TEST(S3AddressingTest, BadEndpointsAndRegions) {
  for (const char* endpoint : {"127.0.0.1:4568", "ftp://host", "http://", "http:///x",
                               "http://host/base/path", "http://host?x=1", "http://user:pw@host",
                               "http://ho st", "http://[::1"}) {
    Result<S3Endpoint> ep = S3Endpoint::Make(endpoint, "us-east-1", "bkt", S3Addressing::kAuto);
    EXPECT_EQ(ep.err(), EINVAL) << endpoint;
    EXPECT_NE(ep.status().message().find("S3 endpoint"), std::string::npos) << endpoint;
  }
  EXPECT_EQ(S3Endpoint::Make("", "", "bkt", S3Addressing::kAuto).err(), EINVAL);
  EXPECT_EQ(S3Endpoint::Make("", "us-east-1.evil.com/", "bkt", S3Addressing::kAuto).err(), EINVAL);
}

TEST(S3AddressingTest, RefusedEndpointDoesNotEchoItsPassword) {
  Result<S3Endpoint> ep =
      S3Endpoint::Make("http://alice:pa55@word@127.0.0.1:9000", "us-east-1", "bkt", S3Addressing::kAuto);
  EXPECT_EQ(ep.err(), EINVAL);
  EXPECT_NE(ep.status().message().find("http://***@127.0.0.1:9000"), std::string::npos) << ep.status().message();
  EXPECT_EQ(ep.status().message().find("pa55"), std::string::npos) << ep.status().message();
  EXPECT_EQ(ep.status().message().find("alice"), std::string::npos) << ep.status().message();
}

TEST(S3AddressingTest, RedactUrlUserinfo) {
  EXPECT_EQ(RedactUrlUserinfo("https://u:p@host:9000/x"), "https://***@host:9000/x");
  EXPECT_EQ(RedactUrlUserinfo("u:p@host"), "***@host");
  EXPECT_EQ(RedactUrlUserinfo("http://host/path@x"), "http://host/path@x");  // '@' past the authority
  EXPECT_EQ(RedactUrlUserinfo("s3://bucket/prefix"), "s3://bucket/prefix");
}

TEST(S3AddressingTest, KeyEncodingFollowsSigV4ForS3) {
  EXPECT_EQ(EncodeS3Key("plain/Key-1.2_3~"), "plain/Key-1.2_3~");
  EXPECT_EQ(EncodeS3Key("a b+c=d;e,f:g@h$i!j'k(l)m*n"),
            "a%20b%2Bc%3Dd%3Be%2Cf%3Ag%40h%24i%21j%27k%28l%29m%2An");
  EXPECT_EQ(EncodeS3Key("%41"), "%2541");  // a literal percent is encoded, never decoded
  EXPECT_EQ(EncodeS3Key("\xE6\x97\xA5\xE6\x9C\xAC/x"), "%E6%97%A5%E6%9C%AC/x");
  // The path is its own canonical URI: the signer neither normalizes nor
  // re-encodes it for S3.
  HttpRequestToSign req;
  req.method = "GET";
  req.path = "/bkt/" + EncodeS3Key("a b/./c");
  req.headers = {{"host", "127.0.0.1"}};
  req.payload_sha256_hex = std::string(kEmptyPayloadSha256);
  const std::string canonical = CanonicalRequest(req, SigningParams::For("us-east-1", "s3",
                                                                         "20240101T000000Z"));
  EXPECT_EQ(canonical.substr(0, canonical.find('\n', 4)), "GET\n/bkt/a%20b/./c");

  EXPECT_EQ(EncodeS3Query({}), "");
  EXPECT_EQ(EncodeS3Query({{"continuation-token", "1ue/X+Y="}, {"max-keys", "5"}}),
            "continuation-token=1ue%2FX%2BY%3D&max-keys=5");
}

}  // namespace
}  // namespace ckptfs
