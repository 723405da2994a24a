// The S3 remote (SPEC section 4): the ObjectStore interface over S3's REST
// API, with our own small client (HttpClient over libcurl, S3Signer for
// SigV4, RetryPolicy) instead of an AWS SDK.
//
// Keys given to the interface are relative to the configured prefix: the S3
// key is prefix + "/" + key, or just key when the prefix is empty. List
// returns keys relative to the prefix again.
//
// How each operation maps to S3:
//   Put                PutObject                      checksummed, answer checked
//   BeginMultipart     CreateMultipartUpload          upload id from the XML; CRC32C
//   UploadPart         UploadPart                     checksummed, answer checked; the
//                                                     ETag header, quotes kept, plus the
//                                                     part's CRC32C (upload_checksums.h)
//   CompleteMultipart  CompleteMultipartUpload        parts' CRC32Cs listed; a 200 with
//                                                     an <Error> body fails
//   AbortMultipart     AbortMultipartUpload
//   GetRange           GetObject, Range: bytes=a-b    416 / past the end: empty data
//   ReadRange          the same, body streamed to the caller's sink
//   Head               HeadObject                     size from Content-Length
//   List               ListObjectsV2, all pages       continuation tokens, encoding-type=url
//   Delete             DeleteObjects, <= 1000 a batch quiet, Content-MD5; per-key errors reported
//
// Uploads carry their checksums (x-amz-checksum-crc32c, and Content-MD5
// until the server shows it checks CRC32C itself by echoing it) and the
// answer is checked against them (upload_checksums.h). Over plain http,
// where the body's SHA-256 is signed and so checked by the server, bodies of
// 1 MiB and more (conditional puts aside) go without Content-MD5: their MD5
// is computed while they are sent, for the check of the answer's ETag only. A damaged upload, seen
// by us or by the server (BadDigest, XAmzContentChecksumMismatch,
// InvalidDigest), is retried like a 5xx, counted and written to stderr (the
// daemon's ckptfs.log); when every attempt was damaged the call fails with EIO.
//
// Every request is signed anew and retried per RetryPolicy (bodies are sent
// again from the caller's buffer, never consumed). Payloads are hashed as
// botocore does: over https, Put and UploadPart bodies are sent with
// UNSIGNED-PAYLOAD (TLS protects them, and hashing gigabytes costs); over
// http, and for the small XML bodies, the SHA-256 is signed. Errors map per
// s3_errors.h; unreachable endpoints keep the transport errno.
//
// Credentials (secret key, session token, the Authorization header) never
// appear in a Status message or in Describe().
//
// Thread safety: every method may be called from any thread; at most
// max_parallel requests are in flight at once, further calls wait. The store
// keeps no per-upload state, so uploads survive a restart of the process.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "remote/aws_credentials.h"
#include "remote/http_client.h"
#include "remote/object_store.h"
#include "remote/retry_policy.h"
#include "remote/s3_addressing.h"
#include "remote/s3_errors.h"
#include "remote/upload_checksums.h"

namespace ckptfs {

struct S3Config {
  std::string bucket;
  std::string prefix;    // no leading or trailing '/'; may be empty
  std::string endpoint;  // "http://127.0.0.1:4568"; empty = https://s3.<region>.amazonaws.com
  std::string region = "us-east-1";
  using Addressing = S3Addressing;
  Addressing addressing = Addressing::kAuto;
  std::string ca_bundle;  // PEM file of trusted CAs (AWS_CA_BUNDLE); empty = system store
  AwsCredentials credentials;
  int max_parallel = 16;  // requests in flight at once
  RetryOptions retry;     // 8 attempts, 100 ms base, 5 s cap
  std::chrono::milliseconds connect_timeout{10'000};
  // A transfer that moves no data for this long has stalled and is retried.
  std::chrono::seconds stall_timeout{30};
  // S3's own limits; smaller values make pagination and batching testable.
  int list_page_size = 1000;
  size_t delete_batch_size = 1000;
  // Checksums on uploads (see above). Off only for bench/object_store's
  // baseline, which measures what they cost.
  bool upload_checksums = true;
};

// Checks the configuration (bucket name, prefix, endpoint, region,
// credentials present) and builds the store; EINVAL with the reason
// otherwise. Sends nothing: a missing bucket or bad credentials show up on
// the first request.
Result<std::unique_ptr<ObjectStore>> OpenS3ObjectStore(S3Config config);

class S3ObjectStore final : public ObjectStore {
 public:
  static constexpr uint64_t kMinPartSize = uint64_t{5} << 20;  // S3's rule
  // ReadRange hands its sink pieces of this many bytes (the last shorter),
  // gathered from curl's callbacks of at most 16 KiB. Not more: measured on
  // a VM (kernel 6.18, ext4), pwrites of 1 MiB into a new file cost ten
  // times the system time of 64 KiB ones (2 s vs 0.2 s per GiB, nearly all
  // of it in copying into the large folios the page cache then allocates;
  // memory, it seems, that the hypervisor supplies on first touch), and in
  // the read-through path 256 KiB pieces cost 40% more daemon CPU than
  // 64 KiB ones, 1 MiB pieces 2.5 times as much.
  static constexpr size_t kSinkPiece = size_t{64} << 10;

  static Result<std::unique_ptr<S3ObjectStore>> Open(S3Config config);

  S3ObjectStore(const S3ObjectStore&) = delete;
  S3ObjectStore& operator=(const S3ObjectStore&) = delete;

  Status Put(const std::string& key, const std::string& data) override;
  Status PutIfAbsent(const std::string& key, const std::string& data) override;
  Result<std::string> BeginMultipart(const std::string& key) override;
  Result<std::string> UploadPart(const std::string& key, const std::string& upload_id,
                                 int part_number, const std::string& data) override;
  // If a retried Complete finds the upload gone (NoSuchUpload), an earlier
  // attempt may have completed it with its answer lost; the caller can tell
  // with Head. S3 gives no way to know for sure.
  Status CompleteMultipart(const std::string& key, const std::string& upload_id,
                           const std::vector<std::string>& part_etags) override;
  Status AbortMultipart(const std::string& key, const std::string& upload_id) override;
  uint64_t min_part_size() const override { return kMinPartSize; }
  Result<std::string> GetRange(const std::string& key, uint64_t offset, uint64_t length) override;
  // Streams the body to sink as curl receives it, in pieces of kSinkPiece.
  Result<uint64_t> ReadRange(const std::string& key, uint64_t offset, uint64_t length,
                             const RangeSink& sink) override;
  // A 404 on HEAD has no body, so a missing bucket reads as a missing object
  // here; every other operation tells them apart.
  Result<ObjectInfo> Head(const std::string& key) override;
  // Objects whose relative key is not a valid key (folder markers "dir/",
  // "a//b" written by other tools) are left out: no caller could name them.
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override;
  Status Delete(const std::vector<std::string>& keys) override;
  std::string Describe() const override { return describe_; }
  uint64_t UploadChecksumMismatches() const override { return checksum_mismatches_.load(); }

 private:
  struct Request;

  S3ObjectStore(S3Config config, S3Endpoint endpoint);

  // The full S3 key, after checking key and the length S3 allows.
  Result<std::string> S3Key(const std::string& key) const;
  // PutObject, with If-None-Match: * when if_absent.
  Status PutObject(const std::string& key, const std::string& data, bool if_absent);
  // Sends req (signing every attempt afresh) until it succeeds or fails for
  // good; see Request. what prefixes the error ("put run1/x").
  Result<HttpResponse> Execute(const Request& req, const std::string& what);
  S3ErrorContext ErrorContext(const std::string& upload_id = {}) const;
  // An upload's digests: those its headers carry, and the MD5 still being
  // computed when only the answer's check needs it.
  struct UploadDigests {
    BodyDigests sent;
    std::shared_ptr<Md5InBackground> md5_later;
  };
  // The digests of an upload's body (none with upload_checksums off), and
  // the headers that carry them. conditional: a put with If-None-Match,
  // whose damaged body must be refused by the server (Content-MD5), not
  // found afterwards (its retry would meet the damaged copy).
  std::optional<UploadDigests> Digests(const std::string& body, bool conditional) const;
  // Counts and logs an upload attempt whose body arrived damaged.
  void NoteDamagedUpload(const std::string& what, const std::string& detail);
  static void AddChecksumHeaders(const BodyDigests& d, std::vector<std::pair<std::string, std::string>>* headers);
  // The check of a 2xx answer to an upload of a body with digests d.
  std::function<Status(const HttpResponse&)> AnswerCheck(const UploadDigests& d);

  const S3Config config_;
  const S3Endpoint endpoint_;
  const std::string key_prefix_;  // "prefix/" or ""
  const std::string describe_;
  HttpClient http_;
  RetryPolicy retry_;
  // Set once an answer echoed our x-amz-checksum-crc32c: the server checks
  // CRC32C, so the MD5 (about 1.5 s of CPU per GiB) is no longer computed.
  std::atomic<bool> server_checks_crc32c_{false};
  std::atomic<uint64_t> checksum_mismatches_{0};
};

}  // namespace ckptfs
