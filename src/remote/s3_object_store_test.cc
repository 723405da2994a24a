// The S3 store for real: against s3rver (put/get/head/list, ranges,
// multipart, pagination and delete batches past 1000 keys, odd keys, bad
// credentials, a missing bucket, both addressing styles, TLS with a
// self-signed certificate), and against a fake HTTP server for what s3rver
// cannot do: throttling, resets, stalls, errors inside a 200, abort, per-key
// delete errors, and the exact requests we sign. The contract tests shared
// with the other stores are in object_store_test.cc.
#include "remote/s3_object_store.h"

#include <gtest/gtest.h>

#include "remote/object_store_test_util.h"
#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "common/temp_dir_for_test.h"
#include "remote/fake_http_server_for_test.h"
#include "remote/s3_signer.h"
#include "remote/s3rver_for_test.h"
#include "remote/upload_checksums.h"
#include "common/crc32c.h"

namespace ckptfs {
namespace {

using std::chrono::milliseconds;

std::string Bytes(size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i++) s[i] = static_cast<char>((i * 131 + seed * 7) % 251);
  return s;
}


// ---- Against s3rver ----

class S3ObjectStoreTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!S3rverForTest::Installed()) return;
    server_ = new S3rverForTest;
    S3rverForTest::Options options;
    options.service_endpoint = "localhost";
    started_ = server_->Start(options);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    CKPTFS_REQUIRE_S3RVER();
    ASSERT_TRUE(started_.ok()) << started_.ToString();
  }

  // A store under a prefix no other test uses.
  std::unique_ptr<ObjectStore> Open(const std::string& prefix,
                                    const std::function<void(S3Config&)>& tweak = {}) {
    S3Config config = server_->Config(prefix);
    if (tweak) tweak(config);
    Result<std::unique_ptr<ObjectStore>> store = OpenS3ObjectStore(config);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  static inline S3rverForTest* server_ = nullptr;
  static inline Status started_;
};

TEST_F(S3ObjectStoreTest, PutGetHeadListUnderThePrefix) {
  std::unique_ptr<ObjectStore> s = Open("basic/run");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Describe(), "s3://ckptfs-test/basic/run (" + server_->endpoint() + ")");
  EXPECT_EQ(s->min_part_size(), 5u << 20);
  const std::string data = Bytes(100000, 1);
  ASSERT_TRUE(s->Put("step1/model.bin", data).ok());
  ASSERT_TRUE(s->Put("step1/empty", "").ok());
  ASSERT_TRUE(s->Put("step2/x", "x").ok());
  EXPECT_EQ(*s->GetRange("step1/model.bin", 0, UINT64_MAX), data);
  EXPECT_EQ(*s->GetRange("step1/empty", 0, UINT64_MAX), "");
  Result<ObjectInfo> info = s->Head("step1/model.bin");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->key, "step1/model.bin");
  EXPECT_EQ(info->size, data.size());
  EXPECT_EQ(s->Head("step1/empty")->size, 0u);

  Result<std::vector<ObjectInfo>> listed = s->List("step1/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].key, "step1/empty");
  EXPECT_EQ((*listed)[0].size, 0u);
  EXPECT_EQ((*listed)[1].key, "step1/model.bin");
  EXPECT_EQ((*listed)[1].size, data.size());

  // The objects really are at prefix + "/" + key in the bucket.
  std::unique_ptr<ObjectStore> whole = Open("");
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->Describe(), "s3://ckptfs-test (" + server_->endpoint() + ")");
  EXPECT_EQ(Keys(whole.get(), "basic/"),
            (std::vector<std::string>{"basic/run/step1/empty", "basic/run/step1/model.bin",
                                      "basic/run/step2/x"}));
  EXPECT_EQ(*whole->GetRange("basic/run/step2/x", 0, 10), "x");
  // A sibling prefix that merely starts the same sees none of it.
  std::unique_ptr<ObjectStore> sibling = Open("basic/ru");
  EXPECT_TRUE(Keys(sibling.get(), "").empty());
}

TEST_F(S3ObjectStoreTest, RangedGets) {
  std::unique_ptr<ObjectStore> s = Open("ranges");
  const std::string data = Bytes(1000, 2);
  ASSERT_TRUE(s->Put("k", data).ok());
  EXPECT_EQ(*s->GetRange("k", 0, 1), data.substr(0, 1));  // s3rver sends it all; we cut
  EXPECT_EQ(*s->GetRange("k", 100, 50), data.substr(100, 50));
  EXPECT_EQ(*s->GetRange("k", 990, 50), data.substr(990));  // fewer at the end
  EXPECT_EQ(*s->GetRange("k", 999, 1), data.substr(999));
  EXPECT_EQ(*s->GetRange("k", 10, UINT64_MAX), data.substr(10));  // open-ended
  EXPECT_EQ(*s->GetRange("k", 0, 0), "");
  EXPECT_EQ(*s->GetRange("k", 1000, 10), "");  // at the end: S3 says 416
  EXPECT_EQ(*s->GetRange("k", 5000, 10), "");  // past the end
  EXPECT_EQ(*s->GetRange("k", UINT64_MAX - 1, UINT64_MAX), "");
  EXPECT_EQ(s->GetRange("absent", 0, 0).err(), ENOENT);
  EXPECT_EQ(s->GetRange("absent", 5000, 10).err(), ENOENT);
}

TEST_F(S3ObjectStoreTest, NoSuchKeyIsEnoent) {
  std::unique_ptr<ObjectStore> s = Open("nosuchkey");
  Result<std::string> got = s->GetRange("run1/missing.bin", 0, 10);
  EXPECT_EQ(got.err(), ENOENT);
  EXPECT_NE(got.status().message().find("run1/missing.bin"), std::string::npos)
      << got.status().message();
  EXPECT_NE(got.status().message().find("NoSuchKey"), std::string::npos);
  EXPECT_EQ(s->Head("run1/missing.bin").err(), ENOENT);
  EXPECT_TRUE(s->Delete({"run1/missing.bin"}).ok());
}

TEST_F(S3ObjectStoreTest, MultipartThreePartsInParallel) {
  std::unique_ptr<ObjectStore> s = Open("multipart");
  Result<std::string> id = s->BeginMultipart("big/model.bin");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const std::vector<std::string> parts = {Bytes(5 << 20, 1), Bytes(5 << 20, 2), Bytes(1234, 3)};
  std::vector<std::string> etags(3);
  std::vector<std::thread> threads;
  for (int i = 2; i >= 0; i--) {  // last part first
    threads.emplace_back([&, i] {
      Result<std::string> etag = s->UploadPart("big/model.bin", *id, i + 1, parts[i]);
      EXPECT_TRUE(etag.ok()) << etag.status().ToString();
      if (etag.ok()) etags[i] = *etag;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& e : etags) {
    // "\"<md5 hex>\";crc32c=<8 hex>": the ETag and the part's CRC32C.
    EXPECT_EQ(ParsePartToken(e).etag.size(), 34u) << e;
    EXPECT_TRUE(ParsePartToken(e).crc32c.has_value()) << e;
    EXPECT_EQ(e.front(), '"');
  }
  EXPECT_EQ(s->Head("big/model.bin").err(), ENOENT);  // not visible before Complete
  Status st = s->CompleteMultipart("big/model.bin", *id, etags);
  ASSERT_TRUE(st.ok()) << st.ToString();
  const std::string want = parts[0] + parts[1] + parts[2];
  EXPECT_EQ(s->Head("big/model.bin")->size, want.size());
  EXPECT_TRUE(*s->GetRange("big/model.bin", 0, UINT64_MAX) == want);
  EXPECT_EQ(*s->GetRange("big/model.bin", (5 << 20) - 3, 6), want.substr((5 << 20) - 3, 6));
  EXPECT_EQ(*s->GetRange("big/model.bin", (10 << 20) + 1000, 1000), parts[2].substr(1000));

  // An upload that is never completed leaves nothing visible.
  Result<std::string> other = s->BeginMultipart("big/abandoned.bin");
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(s->UploadPart("big/abandoned.bin", *other, 1, "x").ok());
  EXPECT_EQ(Keys(s.get(), ""), std::vector<std::string>{"big/model.bin"});
  EXPECT_EQ(s->UploadPart("big/abandoned.bin", *other, 0, "x").err(), EINVAL);
  EXPECT_EQ(s->CompleteMultipart("big/abandoned.bin", *other, {}).err(), EINVAL);
}

TEST_F(S3ObjectStoreTest, ListPaginatesAndDeleteBatchesPastAThousandKeys) {
  std::unique_ptr<ObjectStore> s = Open("many");
  constexpr int kCount = 1005;
  std::vector<std::string> keys;
  for (int i = 0; i < kCount; i++) {
    char name[32];
    std::snprintf(name, sizeof(name), "k%05d", i);
    keys.push_back(name);
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; t++) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kCount; i += 8) {
        if (!s->Put(keys[i], "v").ok()) failures++;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  EXPECT_EQ(Keys(s.get(), ""), keys);  // two pages of at most 1000
  std::unique_ptr<ObjectStore> small_pages = Open("many", [](S3Config& c) {
    c.list_page_size = 100;
  });
  EXPECT_EQ(Keys(small_pages.get(), ""), keys);  // eleven pages
  EXPECT_EQ(Keys(small_pages.get(), "k0001"), std::vector<std::string>(keys.begin() + 10,
                                                                      keys.begin() + 20));

  std::vector<std::string> doomed = keys;
  doomed.push_back("never-existed");
  Status st = s->Delete(doomed);  // two batches: 1000 + 6
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(Keys(s.get(), "").empty());
}

TEST_F(S3ObjectStoreTest, KeysWithSpacesUnicodeAndPunctuation) {
  std::unique_ptr<ObjectStore> s = Open("odd keys/ü");
  const std::vector<std::string> keys = {
      "dir with space/file name.bin",
      "unicode/\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E/\xC3\xBC\xC3\xB1\xC3\xAE.txt",
      "punct/a+b=c&d;e,f@g$h'(i)!*~.bin",
      "pct/100%25 done%.bin",
      "xml/<tag attr=\"v\">&amp;",
  };
  for (const std::string& k : keys) {
    Status st = s->Put(k, "data of " + k);
    ASSERT_TRUE(st.ok()) << k << ": " << st.ToString();
  }
  for (const std::string& k : keys) {
    Result<std::string> got = s->GetRange(k, 0, UINT64_MAX);
    ASSERT_TRUE(got.ok()) << k << ": " << got.status().ToString();
    EXPECT_EQ(*got, "data of " + k);
    EXPECT_EQ(s->Head(k)->size, ("data of " + k).size()) << k;
  }
  std::vector<std::string> sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(Keys(s.get(), ""), sorted);
  EXPECT_EQ(Keys(s.get(), "unicode/\xE6\x97\xA5"), std::vector<std::string>{keys[1]});
  ASSERT_TRUE(s->Delete(keys).ok());
  EXPECT_TRUE(Keys(s.get(), "").empty());
}

TEST_F(S3ObjectStoreTest, WrongCredentialsAreEaccesWithoutSecrets) {
  const std::string secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
  const std::string token = "FQoGZXIvYXdzEXAMPLETOKENVALUE";
  std::unique_ptr<ObjectStore> s = Open("creds", [&](S3Config& c) {
    c.credentials = AwsCredentials{"AKIAIOSFODNN7EXAMPLE", secret, token};
  });
  ASSERT_NE(s, nullptr);
  std::vector<Status> errors = {s->Put("k", "v"), s->GetRange("k", 0, 1).status(),
                                s->List("").status(), s->Delete({"k"}),
                                s->BeginMultipart("k").status()};
  for (const Status& st : errors) {
    EXPECT_EQ(st.err(), EACCES) << st.ToString();
    EXPECT_NE(st.message().find("InvalidAccessKeyId"), std::string::npos) << st.message();
    for (const std::string& hidden : {secret, token, std::string("AWS4-HMAC-SHA256"),
                                      std::string("Signature="), std::string("/K7MDENG/")}) {
      EXPECT_EQ(st.message().find(hidden), std::string::npos) << st.message();
    }
  }
  EXPECT_EQ(s->Head("k").err(), EACCES);  // HEAD: status alone
  EXPECT_EQ(s->Describe().find(secret), std::string::npos);
}

TEST_F(S3ObjectStoreTest, MissingBucketIsEnoentNamingIt) {
  std::unique_ptr<ObjectStore> s = Open("x", [](S3Config& c) { c.bucket = "no-such-bucket"; });
  for (const Status& st : {s->Put("k", "v"), s->List("").status(), s->GetRange("k", 0, 1).status()}) {
    EXPECT_EQ(st.err(), ENOENT) << st.ToString();
    EXPECT_NE(st.message().find("bucket no-such-bucket does not exist at " + server_->endpoint()),
              std::string::npos)
        << st.message();
  }
}

TEST_F(S3ObjectStoreTest, VirtualHostedAddressing) {
  // s3rver runs with --service-endpoint localhost, and curl resolves
  // *.localhost to the loopback address itself.
  const std::string endpoint = "http://s3.localhost:" + std::to_string(server_->port());
  std::unique_ptr<ObjectStore> vhost = Open("vhost", [&](S3Config& c) {
    c.endpoint = endpoint;
    c.addressing = S3Config::Addressing::kVirtualHosted;
  });
  ASSERT_NE(vhost, nullptr);
  Status st = vhost->Put("a b/ü", "virtual");
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(*vhost->GetRange("a b/ü", 0, 100), "virtual");
  EXPECT_EQ(Keys(vhost.get(), ""), std::vector<std::string>{"a b/ü"});
  // The same object through path-style addressing.
  std::unique_ptr<ObjectStore> path = Open("vhost", [&](S3Config& c) {
    c.endpoint = endpoint;
    c.addressing = S3Config::Addressing::kPath;
  });
  EXPECT_EQ(*path->GetRange("a b/ü", 0, 100), "virtual");
  ASSERT_TRUE(vhost->Delete({"a b/ü"}).ok());
  EXPECT_EQ(path->Head("a b/ü").err(), ENOENT);
}

TEST_F(S3ObjectStoreTest, OpenChecksTheConfiguration) {
  S3Config good = server_->Config("p");
  auto open_with = [&](const std::function<void(S3Config&)>& tweak) {
    S3Config c = good;
    tweak(c);
    return OpenS3ObjectStore(c).status();
  };
  EXPECT_TRUE(open_with([](S3Config&) {}).ok());
  EXPECT_EQ(open_with([](S3Config& c) { c.bucket = "Bad_Bucket"; }).err(), EINVAL);
  EXPECT_EQ(open_with([](S3Config& c) { c.prefix = "/lead"; }).err(), EINVAL);
  EXPECT_EQ(open_with([](S3Config& c) { c.prefix = "trail/"; }).err(), EINVAL);
  EXPECT_EQ(open_with([](S3Config& c) { c.endpoint = "127.0.0.1:1"; }).err(), EINVAL);
  EXPECT_EQ(open_with([](S3Config& c) { c.region = ""; }).err(), EINVAL);
  EXPECT_EQ(open_with([](S3Config& c) { c.max_parallel = 0; }).err(), EINVAL);
  EXPECT_EQ(open_with([](S3Config& c) { c.list_page_size = 1001; }).err(), EINVAL);
  Status no_creds = open_with([](S3Config& c) { c.credentials.secret_access_key.clear(); });
  EXPECT_EQ(no_creds.err(), EINVAL);
  EXPECT_NE(no_creds.message().find("AWS_ACCESS_KEY_ID"), std::string::npos);

  // A long prefix makes long keys too long for S3.
  std::unique_ptr<ObjectStore> s = Open(std::string(1000, 'p'));
  EXPECT_EQ(s->Put(std::string(30, 'k'), "x").err(), EINVAL);
}

// ---- TLS ----

// Generates a self-signed certificate for 127.0.0.1 with the openssl CLI.
bool MakeCertificate(const std::string& dir, std::string* key, std::string* cert) {
  *key = dir + "/key.pem";
  *cert = dir + "/cert.pem";
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
      "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout " + *key + " -out " +
      *cert + " >" + dir + "/openssl.log 2>&1";
  return std::system(cmd.c_str()) == 0;
}

TEST(S3ObjectStoreTlsTest, VerifiesTheCertificateAgainstTheCaBundle) {
  CKPTFS_REQUIRE_S3RVER();
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "the openssl command is not installed";
  }
  TempDirForTest dir;
  std::string key;
  std::string cert;
  ASSERT_TRUE(MakeCertificate(dir.path(), &key, &cert));
  S3rverForTest server;
  S3rverForTest::Options options;
  options.key_file = key;
  options.cert_file = cert;
  Status started = server.Start(options);
  ASSERT_TRUE(started.ok()) << started.ToString();
  ASSERT_EQ(server.endpoint().substr(0, 8), "https://");

  // Without the CA bundle: the system store does not know our certificate.
  S3Config config = server.Config("tls");
  Result<std::unique_ptr<ObjectStore>> untrusting = OpenS3ObjectStore(config);
  ASSERT_TRUE(untrusting.ok());
  Status st = (*untrusting)->Put("k", "v");
  EXPECT_EQ(st.err(), EPROTO) << st.ToString();
  EXPECT_NE(st.message().find("certificate"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("AWS_CA_BUNDLE"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("gave up"), std::string::npos) << "not retried: " << st.message();

  config.ca_bundle = cert;
  Result<std::unique_ptr<ObjectStore>> trusting = OpenS3ObjectStore(config);
  ASSERT_TRUE(trusting.ok());
  ObjectStore* s = trusting->get();
  const std::string data = Bytes(300000, 5);
  st = s->Put("dir/k", data);  // UNSIGNED-PAYLOAD over https
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(*s->GetRange("dir/k", 0, UINT64_MAX), data);
  EXPECT_EQ(*s->GetRange("dir/k", 7, 3), data.substr(7, 3));
  EXPECT_EQ(Keys(s, ""), std::vector<std::string>{"dir/k"});
  EXPECT_TRUE(s->Delete({"dir/k"}).ok());
}

// ---- Against a fake server: faults and the exact requests ----

std::string Md5Base64(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_md5(), nullptr);
  unsigned char b64[64];
  const int n = EVP_EncodeBlock(b64, md, static_cast<int>(len));
  return std::string(reinterpret_cast<const char*>(b64), static_cast<size_t>(n));
}

class S3FaultTest : public testing::Test {
 protected:
  // A store on server with 4 attempts and recorded, instant backoff.
  std::unique_ptr<ObjectStore> Open(const FakeHttpServer& server,
                                    const std::function<void(S3Config&)>& tweak = {}) {
    S3Config c;
    c.bucket = "bkt";
    c.prefix = "pre";
    c.endpoint = server.url();
    c.credentials = AwsCredentials{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
    c.retry.max_attempts = 4;
    c.retry.sleep = [this](milliseconds d) {
      std::lock_guard<std::mutex> lock(mu_);
      slept_.push_back(d);
    };
    c.stall_timeout = std::chrono::seconds(1);
    if (tweak) tweak(c);
    Result<std::unique_ptr<ObjectStore>> s = OpenS3ObjectStore(c);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  size_t sleeps() {
    std::lock_guard<std::mutex> lock(mu_);
    return slept_.size();
  }

  std::mutex mu_;
  std::vector<milliseconds> slept_;
};

TEST_F(S3FaultTest, SignsWhatItSends) {
  FakeHttpServer server([](const FakeHttpRequest&) { return FakeHttpResponse::Ok(); });
  std::unique_ptr<ObjectStore> s = Open(server, [](S3Config& c) {
    c.credentials.session_token = "SESSIONTOKEN";
  });
  ASSERT_TRUE(s->Put("run 1/k", "payload").ok());
  ASSERT_EQ(server.request_count(), 1u);
  const FakeHttpRequest req = server.requests()[0];
  EXPECT_EQ(req.method, "PUT");
  EXPECT_EQ(req.target, "/bkt/pre/run%201/k");
  EXPECT_EQ(req.Header("host"), "127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(req.body, "payload");
  // Over http the payload is hashed and signed.
  EXPECT_EQ(req.Header("x-amz-content-sha256"), Sha256Hex("payload"));
  EXPECT_EQ(req.Header("x-amz-security-token"), "SESSIONTOKEN");
  const std::string auth = req.Header("authorization");
  EXPECT_EQ(auth.rfind("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/", 0), 0u) << auth;
  EXPECT_NE(auth.find("/us-east-1/s3/aws4_request"), std::string::npos) << auth;
  EXPECT_NE(auth.find("SignedHeaders=content-md5;host;x-amz-checksum-crc32c;x-amz-content-sha256;x-amz-date;"
                      "x-amz-security-token"),
            std::string::npos)
      << auth;
  // The signature checks out when recomputed from what arrived.
  HttpRequestToSign again;
  again.method = req.method;
  again.path = req.target;
  again.headers = {{"content-md5", req.Header("content-md5")},
                   {"host", req.Header("host")},
                   {"x-amz-checksum-crc32c", req.Header("x-amz-checksum-crc32c")},
                   {"x-amz-content-sha256", req.Header("x-amz-content-sha256")},
                   {"x-amz-date", req.Header("x-amz-date")},
                   {"x-amz-security-token", req.Header("x-amz-security-token")}};
  again.payload_sha256_hex = req.Header("x-amz-content-sha256");
  const std::string want = AuthorizationHeader(
      again,
      AwsCredentials{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "SESSIONTOKEN"},
      SigningParams::For("us-east-1", "s3", req.Header("x-amz-date")));
  EXPECT_EQ(auth, want);
}

TEST_F(S3FaultTest, SlowDownIsRetriedUntilItPasses) {
  int calls = 0;
  FakeHttpServer server([&](const FakeHttpRequest&) {
    return ++calls <= 3 ? FakeHttpResponse::S3Error(503, "SlowDown", "Please reduce your request rate.")
                        : FakeHttpResponse::Ok();
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  const std::string data = Bytes(200000, 9);
  Status st = s->Put("k", data);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(server.request_count(), 4u);
  for (const FakeHttpRequest& r : server.requests()) EXPECT_TRUE(r.body == data);  // re-sent whole
  EXPECT_EQ(sleeps(), 3u);
  for (size_t i = 0; i < slept_.size(); i++) {
    EXPECT_LE(slept_[i], milliseconds(100 << i));  // full jitter under the doubling cap
  }
}

TEST_F(S3FaultTest, GivesUpAfterTheBoundedAttempts) {
  FakeHttpServer server([](const FakeHttpRequest&) {
    return FakeHttpResponse::S3Error(503, "SlowDown", "Please reduce your request rate.");
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  Status st = s->Put("run/k", "v");
  EXPECT_EQ(st.err(), EAGAIN);
  EXPECT_EQ(server.request_count(), 4u);
  EXPECT_NE(st.message().find("gave up after 4 attempts"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("SlowDown: Please reduce your request rate. (HTTP 503)"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("put run/k"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("s3://bkt/pre (" + server.url() + ")"), std::string::npos);
}

TEST_F(S3FaultTest, OtherRetryableAnswers) {
  std::vector<FakeHttpResponse> script = {
      FakeHttpResponse::S3Error(500, "InternalError", "We encountered an internal error."),
      FakeHttpResponse::S3Error(400, "RequestTimeout", "Your socket connection timed out."),
      FakeHttpResponse::S3Error(429, "TooManyRequests", "slow"),
      FakeHttpResponse::Ok("finally")};
  size_t next = 0;
  FakeHttpServer server([&](const FakeHttpRequest&) { return script[std::min(next++, script.size() - 1)]; });
  std::unique_ptr<ObjectStore> s = Open(server);
  Result<std::string> got = s->GetRange("k", 0, 100);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "finally");
  EXPECT_EQ(server.request_count(), 4u);
}

TEST_F(S3FaultTest, ConditionalPutSendsIfNoneMatchAndMapsTheAnswers) {
  std::vector<FakeHttpResponse> script = {
      FakeHttpResponse::Ok(),
      FakeHttpResponse::S3Error(412, "PreconditionFailed",
                                "At least one of the pre-conditions you specified did not hold"),
      FakeHttpResponse::S3Error(409, "ConditionalRequestConflict",
                                "A conflicting conditional operation is currently in progress"),
      FakeHttpResponse::Ok()};
  size_t next = 0;
  FakeHttpServer server([&](const FakeHttpRequest&) { return script[std::min(next++, script.size() - 1)]; });
  std::unique_ptr<ObjectStore> s = Open(server);
  ASSERT_TRUE(s->PutIfAbsent("run/k", "a").ok());
  const FakeHttpRequest first = server.requests()[0];
  EXPECT_EQ(first.method, "PUT");
  EXPECT_EQ(first.Header("if-none-match"), "*");
  EXPECT_EQ(first.Header("x-goog-if-generation-match"), "0");  // GCS's way to say it
  // Signed, so a proxy cannot drop the condition unnoticed.
  EXPECT_NE(first.Header("authorization").find("host;if-none-match;"), std::string::npos)
      << first.Header("authorization");
  // The key exists: EEXIST at once, not retried.
  Status exists = s->PutIfAbsent("run/k", "b");
  EXPECT_EQ(exists.err(), EEXIST) << exists.ToString();
  EXPECT_EQ(server.request_count(), 2u);
  // Another conditional write in flight: retried, then it goes through.
  Status conflict = s->PutIfAbsent("run/k2", "c");
  EXPECT_TRUE(conflict.ok()) << conflict.ToString();
  EXPECT_EQ(server.request_count(), 4u);
}

TEST_F(S3FaultTest, PermanentErrorsAreNotRetried) {
  FakeHttpServer server([](const FakeHttpRequest&) {
    return FakeHttpResponse::S3Error(403, "AccessDenied", "Access Denied");
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  Status st = s->Put("k", "v");
  EXPECT_EQ(st.err(), EACCES);
  EXPECT_EQ(server.request_count(), 1u);
  EXPECT_EQ(sleeps(), 0u);
  EXPECT_NE(st.message().find("AccessDenied: Access Denied (HTTP 403)"), std::string::npos)
      << st.message();
}

TEST_F(S3FaultTest, ResetConnectionsAreRetried) {
  int calls = 0;
  FakeHttpServer server([&](const FakeHttpRequest&) {
    calls++;
    if (calls == 1) return FakeHttpResponse::Reset();
    if (calls == 2) return FakeHttpResponse::Close();
    return FakeHttpResponse::Ok("data");
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  Result<std::string> got = s->GetRange("k", 0, 4);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "data");
  EXPECT_EQ(server.request_count(), 3u);
}

// A body cut short is fetched again, and the sink sees the retry start
// again at 0 with the whole range; it never sees the partial piece that was
// still being gathered.
TEST_F(S3FaultTest, ReadRangeStartsAgainAtZeroAfterARetry) {
  const std::string data = Bytes(200 * 1024, 3);
  int calls = 0;
  FakeHttpServer server([&](const FakeHttpRequest&) {
    FakeHttpResponse r = FakeHttpResponse::Ok(++calls == 1 ? data.substr(0, 150 * 1024) : data);
    r.status = 206;
    // The first answer promises more than it sends, then hangs up.
    if (calls == 1) {
      r.headers = {{"Content-Length", std::to_string(data.size())}, {"Connection", "close"}};
    }
    return r;
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  std::string got;
  std::vector<uint64_t> ats;
  Result<uint64_t> n = s->ReadRange("k", 0, data.size(), [&](uint64_t at, std::string_view piece) {
    EXPECT_LE(at, got.size());
    ats.push_back(at);
    got.resize(at);
    got.append(piece);
    return Status::Ok();
  });
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, data.size());
  EXPECT_TRUE(got == data);
  EXPECT_EQ(server.request_count(), 2u);
  EXPECT_EQ(std::count(ats.begin(), ats.end(), 0u), 2);  // each attempt from the start
  for (size_t i = 0; i < ats.size(); i++) {
    if (ats[i] != 0) {
      EXPECT_EQ(ats[i] % S3ObjectStore::kSinkPiece, 0u);  // whole pieces
    }
  }
}

TEST_F(S3FaultTest, StalledTransfersTimeOutAndAreRetried) {
  int calls = 0;
  FakeHttpServer server([&](const FakeHttpRequest&) {
    return ++calls == 1 ? FakeHttpResponse::Stall(milliseconds(10000)) : FakeHttpResponse::Ok();
  });
  std::unique_ptr<ObjectStore> s = Open(server);  // stall_timeout: 1 s
  const auto start = std::chrono::steady_clock::now();
  Status st = s->Put("k", "v");
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(server.request_count(), 2u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(S3FaultTest, UnreachableEndpointKeepsTheTransportErrno) {
  std::unique_ptr<ObjectStore> s;
  std::string url;
  {
    FakeHttpServer gone([](const FakeHttpRequest&) { return FakeHttpResponse::Ok(); });
    url = gone.url();
    s = Open(gone);
  }  // nothing listens there any more
  Status st = s->Put("k", "v");
  EXPECT_EQ(st.err(), ECONNREFUSED) << st.ToString();
  EXPECT_NE(st.message().find("gave up after 4 attempts"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(url.substr(7)), std::string::npos) << st.message();  // the host
  EXPECT_EQ(sleeps(), 3u);
}

TEST_F(S3FaultTest, CompleteFailingInsideA200) {
  int calls = 0;
  FakeHttpServer server([&](const FakeHttpRequest& req) {
    calls++;
    FakeHttpResponse r;
    if (calls == 1) {
      // S3 answered 200, then failed while assembling: retried.
      r.body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\n<Error><Code>InternalError</Code>"
               "<Message>We encountered an internal error. Please try again.</Message></Error>";
    } else if (calls == 2) {
      r.body = "<CompleteMultipartUploadResult><Location>x</Location><Bucket>bkt</Bucket>"
               "<Key>pre/k</Key><ETag>\"3858f62230ac3c915f300c664312c11f-2\"</ETag>"
               "</CompleteMultipartUploadResult>";
    } else {
      r = FakeHttpResponse::S3Error(400, "InvalidPart", "One or more of the specified parts "
                                                        "could not be found.");
      r.status = 200;  // a permanent failure inside a 200: not retried
    }
    EXPECT_EQ(req.Header("content-type"), "application/xml");
    return r;
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  Status st = s->CompleteMultipart("k", "UPLOAD-ID", {"\"e1\"", "\"e2\""});
  ASSERT_TRUE(st.ok()) << st.ToString();
  const std::vector<FakeHttpRequest> reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[1].method, "POST");
  EXPECT_EQ(reqs[1].target, "/bkt/pre/k?uploadId=UPLOAD-ID");
  EXPECT_EQ(reqs[1].body, BuildCompleteMultipartUpload({"\"e1\"", "\"e2\""}));
  EXPECT_EQ(reqs[1].Header("x-amz-content-sha256"), Sha256Hex(reqs[1].body));

  st = s->CompleteMultipart("k", "UPLOAD-ID", {"\"e1\""});
  EXPECT_EQ(st.err(), EINVAL) << st.ToString();
  EXPECT_NE(st.message().find("InvalidPart"), std::string::npos);
  EXPECT_EQ(server.request_count(), 3u);
}

TEST_F(S3FaultTest, BeginUploadPartAndAbortRequests) {
  FakeHttpServer server([](const FakeHttpRequest& req) {
    if (req.method == "POST") {
      return FakeHttpResponse::Ok(
          "<InitiateMultipartUploadResult><Bucket>bkt</Bucket><Key>pre/big</Key>"
          "<UploadId>abc/+=</UploadId></InitiateMultipartUploadResult>");
    }
    if (req.method == "PUT") {
      FakeHttpResponse r;
      r.headers = {{"ETag", "\"part-etag\""}};
      return r;
    }
    if (req.target.find("uploadId=gone") != std::string::npos) {
      return FakeHttpResponse::S3Error(404, "NoSuchUpload", "The specified upload does not exist.");
    }
    FakeHttpResponse r;
    r.status = 204;
    return r;
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  Result<std::string> id = s->BeginMultipart("big");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "abc/+=");
  Result<std::string> etag = s->UploadPart("big", *id, 7, "part data");
  ASSERT_TRUE(etag.ok()) << etag.status().ToString();
  // The ETag, with the part's CRC32C for Complete.
  EXPECT_EQ(*etag, MakePartToken("\"part-etag\"", Crc32c(0, "part data", 9)));
  ASSERT_TRUE(s->AbortMultipart("big", *id).ok());
  Status gone = s->AbortMultipart("big", "gone");
  EXPECT_EQ(gone.err(), ENOENT);
  EXPECT_NE(gone.message().find("\"gone\""), std::string::npos) << gone.message();

  const std::vector<FakeHttpRequest> reqs = server.requests();
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].target, "/bkt/pre/big?uploads");
  EXPECT_EQ(reqs[1].method, "PUT");
  EXPECT_EQ(reqs[1].target, "/bkt/pre/big?partNumber=7&uploadId=abc%2F%2B%3D");
  EXPECT_EQ(reqs[1].body, "part data");
  EXPECT_EQ(reqs[2].method, "DELETE");
  EXPECT_EQ(reqs[2].target, "/bkt/pre/big?uploadId=abc%2F%2B%3D");
}

TEST_F(S3FaultTest, DeleteBatchesWithContentMd5AndReportsPerKeyErrors) {
  FakeHttpServer server([](const FakeHttpRequest& req) {
    if (req.body.find("locked") != std::string::npos) {
      return FakeHttpResponse::Ok(
          "<DeleteResult><Error><Key>pre/locked &amp; loaded</Key><Code>AccessDenied</Code>"
          "<Message>Access Denied</Message></Error></DeleteResult>");
    }
    return FakeHttpResponse::Ok("<DeleteResult/>");
  });
  std::unique_ptr<ObjectStore> s = Open(server, [](S3Config& c) { c.delete_batch_size = 2; });
  Status st = s->Delete({"a", "b", "c", "locked & loaded", "e"});
  EXPECT_EQ(st.err(), EACCES) << st.ToString();
  EXPECT_NE(st.message().find("1 of 5 objects not deleted: locked & loaded: AccessDenied"),
            std::string::npos)
      << st.message();
  const std::vector<FakeHttpRequest> reqs = server.requests();
  ASSERT_EQ(reqs.size(), 3u);  // 2 + 2 + 1
  for (const FakeHttpRequest& r : reqs) {
    EXPECT_EQ(r.method, "POST");
    EXPECT_EQ(r.target, "/bkt?delete");
    EXPECT_EQ(r.Header("content-md5"), Md5Base64(r.body));
    EXPECT_NE(r.body.find("<Quiet>true</Quiet>"), std::string::npos);
  }
  EXPECT_EQ(reqs[1].body, BuildDeleteObjects({"pre/c", "pre/locked & loaded"}, true));
  EXPECT_TRUE(s->Delete({}).ok());
  EXPECT_EQ(server.request_count(), 3u);  // nothing to send
}

TEST_F(S3FaultTest, ListFollowsTokensDecodesKeysAndStopsOnALoop) {
  FakeHttpServer server([](const FakeHttpRequest& req) {
    if (req.target.find("prefix=pre%2Floop") != std::string::npos) {
      return FakeHttpResponse::Ok("<ListBucketResult><IsTruncated>true</IsTruncated>"
                                  "<NextContinuationToken>same</NextContinuationToken>"
                                  "</ListBucketResult>");
    }
    if (req.target.find("continuation-token=next%2Fpage") == std::string::npos) {
      return FakeHttpResponse::Ok(
          "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
          "<NextContinuationToken>next/page</NextContinuationToken>"
          "<Contents><Key>pre/z+last</Key><Size>3</Size></Contents>"
          "<Contents><Key>pre/dir%2F</Key><Size>0</Size></Contents>"  // a folder marker
          "<Contents><Key>pre/a%2F%2Fb</Key><Size>0</Size></Contents>"  // not a valid key
          "</ListBucketResult>");
    }
    return FakeHttpResponse::Ok(
        "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
        "<Contents><Key>pre/a%C3%BC</Key><Size>12</Size></Contents></ListBucketResult>");
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  Result<std::vector<ObjectInfo>> all = s->List("");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].key, "a\xC3\xBC");  // sorted across pages
  EXPECT_EQ((*all)[0].size, 12u);
  EXPECT_EQ((*all)[1].key, "z last");
  const std::vector<FakeHttpRequest> reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].target, "/bkt?list-type=2&max-keys=1000&encoding-type=url&prefix=pre%2F");
  EXPECT_EQ(reqs[1].target,
            "/bkt?list-type=2&max-keys=1000&encoding-type=url&prefix=pre%2F"
            "&continuation-token=next%2Fpage");

  Result<std::vector<ObjectInfo>> loop = s->List("loop");
  EXPECT_EQ(loop.err(), EIO);
  EXPECT_NE(loop.status().message().find("continuation token"), std::string::npos);
}

TEST_F(S3FaultTest, RangeHeadersAndMalformedResponses) {
  FakeHttpServer server([](const FakeHttpRequest& req) {
    if (req.method == "HEAD") {
      FakeHttpResponse r;
      r.headers = {{"Content-Length", req.target == "/bkt/pre/bad" ? "lots" : "42"}};
      return r;
    }
    if (req.target == "/bkt/pre/past") {
      return FakeHttpResponse::S3Error(416, "InvalidRange", "The requested range is not satisfiable");
    }
    if (req.target == "/bkt/pre/full") {  // a server that ignores Range
      return FakeHttpResponse::Ok("0123456789");
    }
    FakeHttpResponse r = FakeHttpResponse::Ok("<html>garbage</html>");
    r.status = 206;
    return r;
  });
  std::unique_ptr<ObjectStore> s = Open(server);
  EXPECT_EQ(*s->GetRange("past", 100, 10), "");
  EXPECT_EQ(*s->GetRange("full", 3, 4), "3456");
  EXPECT_EQ(s->Head("k")->size, 42u);
  EXPECT_EQ(s->Head("bad").err(), EIO);
  EXPECT_EQ(s->List("").err(), EIO);  // a 206 of HTML is no listing
  EXPECT_EQ(s->BeginMultipart("k").err(), EIO);
  const std::vector<FakeHttpRequest> reqs = server.requests();
  EXPECT_EQ(reqs[0].Header("range"), "bytes=100-109");
  EXPECT_EQ(reqs[1].Header("range"), "bytes=3-6");
}

}  // namespace
}  // namespace ckptfs
