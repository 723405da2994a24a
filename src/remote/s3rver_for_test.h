// Test support: s3rver (a Node.js S3 server, tests/s3rver, installed by
// packaging/install-deps.sh) as a child process, so the S3 store is tested
// against a real HTTP S3 implementation without AWS.
//
// The server runs in its own process group on 127.0.0.1 at a port it picks
// (-p 0; it prints the port even when --silent), with a fresh data
// directory; Stop (and the destructor) kill the whole group, and the child
// dies with the test process if that is killed (PR_SET_PDEATHSIG).
//
// s3rver accepts any well-formed SigV4 signature from a known access key
// (S3RVER / S3RVER), so a wrong secret is not detected, but a wrong key id is
// (InvalidAccessKeyId). It implements neither AbortMultipartUpload nor
// NoSuchUpload nor EntityTooSmall checks; the tests account for that. Node
// runs it with --openssl-legacy-provider (see Start).
// Other quirks worth knowing when writing tests against it: it ignores
// encoding-type=url, answers "Range: bytes=0-0" with the whole object, and
// reads a Delete request's keys through an XML parser that turns numeric
// keys ("123") into numbers and fails on them.
#pragma once

#include <sys/types.h>

#include <cstdlib>
#include <string>

#include "common/status.h"
#include "common/temp_dir_for_test.h"
#include "remote/s3_object_store.h"

namespace ckptfs {

class S3rverForTest {
 public:
  struct Options {
    std::string bucket = "ckptfs-test";
    // TLS: both or neither.
    std::string key_file;
    std::string cert_file;
    // --service-endpoint: with "localhost", virtual-hosted requests to
    // BUCKET.s3.localhost reach the bucket (path-style ones still work).
    std::string service_endpoint;
  };

  S3rverForTest() = default;
  ~S3rverForTest() { Stop(); }
  S3rverForTest(const S3rverForTest&) = delete;
  S3rverForTest& operator=(const S3rverForTest&) = delete;

  // The s3rver script in the source tree, and whether it is there.
  static std::string ScriptPath();
  static bool Installed();
  // What to tell the user when it is not.
  static std::string NotInstalledMessage();

  // Starts the server and waits (up to 20 s) until it listens.
  Status Start(const Options& options);
  Status Start() { return Start(Options()); }
  void Stop();

  int port() const { return port_; }
  // "http://127.0.0.1:PORT" (https with TLS).
  std::string endpoint() const;
  const std::string& bucket() const { return bucket_; }
  const std::string& data_dir() const { return dir_.path(); }

  // A store on this server: credentials S3RVER/S3RVER, path-style, retries
  // fast (a few ms) so failing tests fail quickly.
  S3Config Config(const std::string& prefix) const;

 private:
  TempDirForTest dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool tls_ = false;
  std::string bucket_;
};

// Skips the test when s3rver is not installed, or fails it when the CI
// environment variable is set (CI must run these tests). Use in a test body
// or SetUp.
#define CKPTFS_REQUIRE_S3RVER()                                            \
  do {                                                                     \
    if (!::ckptfs::S3rverForTest::Installed()) {                           \
      if (std::getenv("CI") != nullptr) {                                  \
        FAIL() << ::ckptfs::S3rverForTest::NotInstalledMessage();          \
      }                                                                    \
      GTEST_SKIP() << ::ckptfs::S3rverForTest::NotInstalledMessage();      \
    }                                                                      \
  } while (0)

}  // namespace ckptfs
