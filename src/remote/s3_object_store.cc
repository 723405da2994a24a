// The S3 object store; see s3_object_store.h.
#include "remote/s3_object_store.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>

#include "remote/s3_signer.h"
#include "remote/s3_xml.h"

namespace ckptfs {

namespace {

constexpr size_t kMaxS3KeyBytes = 1024;
constexpr int kMaxPartNumber = 10000;
constexpr int kMaxBatch = 1000;  // S3's bound for list pages and delete batches
// Ranged reads reserve their buffer up front, but no more than this, so a
// caller asking for "everything from offset" does not allocate gigabytes.
constexpr uint64_t kMaxReserve = uint64_t{8} << 20;

std::string AmzDateNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

// Base64 of the MD5 of body: the Content-MD5 header DeleteObjects requires.
std::string ContentMd5(std::string_view body) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(body.data(), body.size(), md, &len, EVP_md5(), nullptr) != 1) return {};
  unsigned char b64[4 * ((EVP_MAX_MD_SIZE + 2) / 3) + 1];
  const int n = EVP_EncodeBlock(b64, md, static_cast<int>(len));
  return std::string(reinterpret_cast<const char*>(b64), static_cast<size_t>(std::max(n, 0)));
}

// S3's codes for a body that does not match the checksum sent with it.
bool IsDamagedUploadCode(const std::string& code) {
  return code == "BadDigest" || code == "XAmzContentChecksumMismatch" || code == "InvalidDigest";
}

Result<uint64_t> ParseContentLength(const std::string& text) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Status::Error(EIO, "HEAD response without a valid Content-Length (\"" + text + "\")");
  }
  return v;
}

}  // namespace

// One S3 operation's request, as Execute sends it on every attempt.
struct S3ObjectStore::Request {
  std::string method;
  std::optional<std::string> s3_key;  // the object; none = the bucket
  S3Query query;
  std::vector<std::pair<std::string, std::string>> headers;  // besides those Sign adds
  const char* body = nullptr;
  size_t body_size = 0;
  // Object data: sent with UNSIGNED-PAYLOAD over https.
  bool bulk_body = false;
  // A non-2xx status the operation handles itself (416 for GetObject); 0 = none.
  int accepted_status = 0;
  // Whether a 2xx may carry an <Error> document (CompleteMultipartUpload).
  bool error_in_2xx = false;
  // When set, a 2xx answer must pass it (an upload's checksums); a failure is
  // a damaged upload and retried.
  std::function<Status(const HttpResponse&)> check_answer;
  // When set, called before each attempt for a fresh body sink (so a retry
  // starts from an empty buffer).
  std::function<std::function<bool(int, std::string_view)>()> make_sink;
  std::string upload_id;  // for messages
};

Result<std::unique_ptr<ObjectStore>> OpenS3ObjectStore(S3Config config) {
  Result<std::unique_ptr<S3ObjectStore>> store = S3ObjectStore::Open(std::move(config));
  if (!store.ok()) return store.status();
  return std::unique_ptr<ObjectStore>(std::move(store).value());
}

Result<std::unique_ptr<S3ObjectStore>> S3ObjectStore::Open(S3Config config) {
  CKPTFS_RETURN_IF_ERROR(ValidateBucketName(config.bucket));
  CKPTFS_RETURN_IF_ERROR(ValidateS3Prefix(config.prefix));
  if (config.credentials.access_key_id.empty() || config.credentials.secret_access_key.empty()) {
    return Status::Error(EINVAL, "no AWS credentials for s3://" + config.bucket +
                                     ": set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a "
                                     "profile in ~/.aws/credentials");
  }
  if (config.max_parallel < 1) {
    return Status::Error(EINVAL, "S3 max_parallel must be at least 1, not " +
                                     std::to_string(config.max_parallel));
  }
  if (config.list_page_size < 1 || config.list_page_size > kMaxBatch ||
      config.delete_batch_size < 1 || config.delete_batch_size > static_cast<size_t>(kMaxBatch)) {
    return Status::Error(EINVAL, "S3 list page and delete batch sizes must be 1 to 1000");
  }
  Result<S3Endpoint> endpoint =
      S3Endpoint::Make(config.endpoint, config.region, config.bucket, config.addressing);
  if (!endpoint.ok()) return endpoint.status();
  return std::unique_ptr<S3ObjectStore>(
      new S3ObjectStore(std::move(config), std::move(endpoint).value()));
}

namespace {

HttpClientOptions ClientOptions(const S3Config& config) {
  HttpClientOptions o;
  o.connect_timeout = config.connect_timeout;
  o.low_speed_limit = 1;
  o.low_speed_time = config.stall_timeout;
  o.ca_bundle = config.ca_bundle;
  o.max_connections = config.max_parallel;
  return o;
}

}  // namespace

S3ObjectStore::S3ObjectStore(S3Config config, S3Endpoint endpoint)
    : config_(std::move(config)),
      endpoint_(std::move(endpoint)),
      key_prefix_(config_.prefix.empty() ? std::string() : config_.prefix + "/"),
      describe_("s3://" + config_.bucket + (config_.prefix.empty() ? "" : "/" + config_.prefix) +
                " (" + endpoint_.url() + ")"),
      http_(ClientOptions(config_)),
      retry_(config_.retry) {}

Result<std::string> S3ObjectStore::S3Key(const std::string& key) const {
  CKPTFS_RETURN_IF_ERROR(ValidateObjectKey(key));
  std::string full = key_prefix_ + key;
  if (full.size() > kMaxS3KeyBytes) {
    return Status::Error(EINVAL, "invalid object key \"" + key + "\": with the prefix it has " +
                                     std::to_string(full.size()) + " bytes, S3 allows " +
                                     std::to_string(kMaxS3KeyBytes));
  }
  return full;
}

void S3ObjectStore::NoteDamagedUpload(const std::string& what, const std::string& detail) {
  checksum_mismatches_++;
  // One line per damaged attempt in ckptfs.log: rare, and each one matters.
  std::fprintf(stderr, "ckptfs: %s: %s: %s; sending it again\n", describe_.c_str(), what.c_str(),
               detail.c_str());
}

std::optional<S3ObjectStore::UploadDigests> S3ObjectStore::Digests(const std::string& body,
                                                                   bool conditional) const {
  if (!config_.upload_checksums) return std::nullopt;
  UploadDigests d;
  if (server_checks_crc32c_.load()) {
    d.sent = DigestBody(body, /*with_md5=*/false);
    return d;
  }
  // Over plain http Execute signs the body's SHA-256, which S3, Ceph's
  // gateway and MinIO check before they store anything: the MD5 then only
  // serves the ETag check of the answer (servers that check no signature,
  // as s3rver), so it is computed while the body is sent instead of before.
  // Small bodies are not worth a thread; over https (UNSIGNED-PAYLOAD)
  // Content-MD5 is the server's only check until it echoes a CRC32C.
  constexpr size_t kMd5InBackgroundMinBytes = 1 << 20;
  const bool md5_may_wait =
      !endpoint_.https() && !conditional && body.size() >= kMd5InBackgroundMinBytes;
  d.sent = DigestBody(body, /*with_md5=*/!md5_may_wait);
  if (md5_may_wait) d.md5_later = std::make_shared<Md5InBackground>(body);
  return d;
}

void S3ObjectStore::AddChecksumHeaders(const BodyDigests& d,
                                       std::vector<std::pair<std::string, std::string>>* headers) {
  if (!d.md5_base64.empty()) headers->emplace_back("content-md5", d.md5_base64);
  headers->emplace_back("x-amz-checksum-crc32c", d.crc32c_base64);
}

std::function<Status(const HttpResponse&)> S3ObjectStore::AnswerCheck(const UploadDigests& d) {
  return [this, d](const HttpResponse& resp) {
    if (AnswerConfirmsCrc32c(resp, d.sent)) {
      server_checks_crc32c_ = true;
      return Status::Ok();
    }
    BodyDigests sent = d.sent;
    if (d.md5_later) d.md5_later->FillIn(&sent);
    return CheckUploadAnswer(resp, sent);
  };
}

S3ErrorContext S3ObjectStore::ErrorContext(const std::string& upload_id) const {
  S3ErrorContext ctx;
  ctx.bucket = config_.bucket;
  ctx.endpoint = endpoint_.url();
  ctx.upload_id = upload_id;
  return ctx;
}

Result<HttpResponse> S3ObjectStore::Execute(const Request& req, const std::string& what) {
  const S3Target target =
      req.s3_key ? endpoint_.ForObject(*req.s3_key, req.query) : endpoint_.ForBucket(req.query);
  std::string payload_hash;
  if (req.body_size == 0) {
    payload_hash = kEmptyPayloadSha256;
  } else if (req.bulk_body && endpoint_.https()) {
    payload_hash = kUnsignedPayload;
  } else {
    payload_hash = Sha256Hex(std::string_view(req.body, req.body_size));
  }

  std::optional<HttpResponse> result;
  const Status st = retry_.Run([&](int /*attempt*/) -> RetryPolicy::Attempt {
    // Signed per attempt: the date must be current, and S3 refuses requests
    // signed more than 15 minutes ago.
    HttpRequestToSign to_sign;
    to_sign.method = req.method;
    to_sign.path = target.path;
    to_sign.query = req.query;
    to_sign.headers.emplace_back("host", target.host);
    to_sign.headers.insert(to_sign.headers.end(), req.headers.begin(), req.headers.end());
    to_sign.payload_sha256_hex = payload_hash;
    Status signed_ok = Sign(&to_sign, config_.credentials,
                            SigningParams::For(config_.region, "s3", AmzDateNow()));
    if (!signed_ok.ok()) return {signed_ok, false};

    HttpRequest http;
    http.method = req.method;
    http.url = target.url;
    http.headers = std::move(to_sign.headers);
    http.body = req.body;
    http.body_size = req.body_size;
    if (req.make_sink) http.body_sink = req.make_sink();
    Result<HttpResponse> resp = http_.Send(http);
    if (!resp.ok()) return {resp.status(), IsRetryableTransportError(resp.err())};

    const int code = resp->status;
    bool failed = code < 200 || code >= 300;
    if (code == req.accepted_status) failed = false;
    if (!failed && req.error_in_2xx && IsErrorDocument(resp->body)) failed = true;
    if (!failed && req.check_answer) {
      if (Status damaged = req.check_answer(*resp); !damaged.ok()) {
        NoteDamagedUpload(what, damaged.message());
        return {damaged, true};
      }
    }
    if (!failed) {
      result = std::move(resp).value();
      return {Status::Ok(), false};
    }
    S3ErrorDocument doc;
    if (!resp->body.empty()) {
      Result<S3ErrorDocument> parsed = ParseErrorDocument(resp->body);
      if (parsed.ok()) doc = std::move(parsed).value();
    }
    if (IsDamagedUploadCode(doc.code)) NoteDamagedUpload(what, doc.code + ": " + doc.message);
    S3ErrorContext ctx = ErrorContext(req.upload_id);
    ctx.bucket_region = resp->Header("x-amz-bucket-region");
    return {MapS3Error(code, doc, ctx), IsRetryableHttpResponse(code, doc.code)};
  });
  if (!st.ok()) return st.Annotate(describe_ + ": " + what);
  return std::move(*result);
}

Status S3ObjectStore::Put(const std::string& key, const std::string& data) {
  return PutObject(key, data, /*if_absent=*/false);
}

Status S3ObjectStore::PutIfAbsent(const std::string& key, const std::string& data) {
  return PutObject(key, data, /*if_absent=*/true);
}

Status S3ObjectStore::PutObject(const std::string& key, const std::string& data, bool if_absent) {
  Result<std::string> s3_key = S3Key(key);
  if (!s3_key.ok()) return s3_key.status();
  Request req;
  req.method = "PUT";
  req.s3_key = *s3_key;
  req.body = data.data();
  req.body_size = data.size();
  req.bulk_body = true;
  // 412 PreconditionFailed when the key exists (EEXIST, s3_errors.cc); 409
  // ConditionalRequestConflict while another conditional write of the key
  // is in flight, retried. GCS's XML API says it with a generation of 0
  // ("no live object"); other stores ignore its x-goog- header.
  if (if_absent) req.headers = {{"if-none-match", "*"}, {"x-goog-if-generation-match", "0"}};
  if (std::optional<UploadDigests> d = Digests(data, if_absent)) {
    AddChecksumHeaders(d->sent, &req.headers);
    req.check_answer = AnswerCheck(*d);
  }
  return Execute(req, (if_absent ? "conditional put " : "put ") + key).status();
}

Result<std::string> S3ObjectStore::BeginMultipart(const std::string& key) {
  Result<std::string> s3_key = S3Key(key);
  if (!s3_key.ok()) return s3_key.status();
  Request req;
  req.method = "POST";
  req.s3_key = *s3_key;
  req.query = {{"uploads", ""}};
  // The parts then carry CRC32Cs and S3 keeps the object's composite.
  if (config_.upload_checksums) req.headers = {{"x-amz-checksum-algorithm", "CRC32C"}};
  const std::string what = "begin multipart upload of " + key;
  Result<HttpResponse> resp = Execute(req, what);
  if (!resp.ok()) return resp.status();
  Result<std::string> id = ParseInitiateMultipartUpload(resp->body);
  if (!id.ok()) return id.status().Annotate(describe_ + ": " + what);
  return id;
}

Result<std::string> S3ObjectStore::UploadPart(const std::string& key, const std::string& upload_id,
                                              int part_number, const std::string& data) {
  Result<std::string> s3_key = S3Key(key);
  if (!s3_key.ok()) return s3_key.status();
  const std::string what = "upload part " + std::to_string(part_number) + " of " + key;
  if (part_number < 1 || part_number > kMaxPartNumber) {
    return Status::Error(EINVAL, what + ": part number outside 1.." +
                                     std::to_string(kMaxPartNumber));
  }
  if (upload_id.empty()) return Status::Error(ENOENT, what + ": empty multipart upload id");
  Request req;
  req.method = "PUT";
  req.s3_key = *s3_key;
  req.query = {{"partNumber", std::to_string(part_number)}, {"uploadId", upload_id}};
  req.body = data.data();
  req.body_size = data.size();
  req.bulk_body = true;
  req.upload_id = upload_id;
  const std::optional<UploadDigests> digests = Digests(data, /*conditional=*/false);
  if (digests) {
    AddChecksumHeaders(digests->sent, &req.headers);
    req.check_answer = AnswerCheck(*digests);
  }
  Result<HttpResponse> resp = Execute(req, what);
  if (!resp.ok()) return resp.status();
  std::string etag = resp->Header("etag");
  if (etag.empty()) {
    return Status::Error(EIO, describe_ + ": " + what + ": the response has no ETag header");
  }
  return digests ? MakePartToken(etag, digests->sent.crc32c) : etag;
}

Status S3ObjectStore::CompleteMultipart(const std::string& key, const std::string& upload_id,
                                        const std::vector<std::string>& part_etags) {
  Result<std::string> s3_key = S3Key(key);
  if (!s3_key.ok()) return s3_key.status();
  const std::string what = "complete multipart upload of " + key;
  if (part_etags.empty() || part_etags.size() > static_cast<size_t>(kMaxPartNumber)) {
    return Status::Error(EINVAL, what + ": part count " + std::to_string(part_etags.size()) +
                                     " outside 1.." + std::to_string(kMaxPartNumber));
  }
  if (upload_id.empty()) return Status::Error(ENOENT, what + ": empty multipart upload id");
  std::vector<CompletedPart> parts;
  std::vector<uint32_t> part_crcs;
  parts.reserve(part_etags.size());
  for (const std::string& token : part_etags) {
    PartToken part = ParsePartToken(token);
    CompletedPart& out = parts.emplace_back();
    out.etag = std::move(part.etag);
    if (part.crc32c) {
      out.checksum_crc32c = Crc32cBase64(*part.crc32c);
      part_crcs.push_back(*part.crc32c);
    }
  }
  const std::string body = BuildCompleteMultipartUploadWithChecksums(parts);
  Request req;
  req.method = "POST";
  req.s3_key = *s3_key;
  req.query = {{"uploadId", upload_id}};
  req.headers = {{"content-type", "application/xml"}};
  req.body = body.data();
  req.body_size = body.size();
  // S3 answers 200 at once and only then assembles the object; a failure
  // from then on arrives as an <Error> body.
  req.error_in_2xx = true;
  req.upload_id = upload_id;
  if (part_crcs.size() == parts.size()) {
    // S3 answers with the composite it computed from the parts it holds.
    req.check_answer = [expected = CompositeCrc32c(part_crcs)](const HttpResponse& resp) -> Status {
      Result<XmlElement> doc = ParseXml(resp.body);
      if (!doc.ok()) return Status::Ok();  // servers that answer nothing to check
      const std::string got = doc->ChildText("ChecksumCRC32C");
      if (got.empty() || got == expected) return Status::Ok();
      return Status::Error(EIO, "checksum mismatch: the server assembled an object with CRC32C " + got +
                                    ", the parts sent make " + expected);
    };
  }
  return Execute(req, what).status();
}

Status S3ObjectStore::AbortMultipart(const std::string& key, const std::string& upload_id) {
  Result<std::string> s3_key = S3Key(key);
  if (!s3_key.ok()) return s3_key.status();
  const std::string what = "abort multipart upload of " + key;
  if (upload_id.empty()) return Status::Error(ENOENT, what + ": empty multipart upload id");
  Request req;
  req.method = "DELETE";
  req.s3_key = *s3_key;
  req.query = {{"uploadId", upload_id}};
  req.upload_id = upload_id;
  return Execute(req, what).status();
}

Result<std::string> S3ObjectStore::GetRange(const std::string& key, uint64_t offset,
                                            uint64_t length) {
  std::string data;
  const bool whole = offset == 0 && length == UINT64_MAX;
  if (!whole) data.reserve(std::min(length, kMaxReserve));
  Result<uint64_t> n = ReadRange(key, offset, length, [&data](uint64_t at, std::string_view piece) {
    // Pieces come in order; a retried request starts again at 0.
    data.resize(at);
    data.append(piece);
    return Status::Ok();
  });
  if (!n.ok()) return n.status();
  data.resize(*n);
  return data;
}

Result<uint64_t> S3ObjectStore::ReadRange(const std::string& key, uint64_t offset, uint64_t length,
                                          const RangeSink& sink) {
  Result<std::string> s3_key = S3Key(key);
  if (!s3_key.ok()) return s3_key.status();
  if (length == 0) {
    // No byte range means "zero bytes"; only existence is left to report.
    Result<ObjectInfo> info = Head(key);
    if (!info.ok()) return info.status();
    return uint64_t{0};
  }
  Request req;
  req.method = "GET";
  req.s3_key = *s3_key;
  const bool whole = offset == 0 && length == UINT64_MAX;
  if (!whole) {
    const bool to_end = length - 1 > UINT64_MAX - offset;  // offset + length overflows
    req.headers = {{"range", "bytes=" + std::to_string(offset) + "-" +
                                 (to_end ? std::string() : std::to_string(offset + length - 1))}};
  }
  // 416: the range starts at or past the end of the object.
  req.accepted_status = 416;

  // curl hands over the body in callbacks of at most 16 KiB; they are
  // gathered into pieces of kSinkPiece, so a sink that writes a file makes
  // a quarter of the system calls (and takes the file's lock a quarter as
  // often). Larger pieces cost more than they save; see kSinkPiece.
  const auto buf = std::make_unique_for_overwrite<char[]>(kSinkPiece);
  // Per attempt: bytes handed to the sink, bytes gathered after them, bytes
  // of a whole-object answer skipped. A failing sink ends the read (it is
  // not retried).
  uint64_t delivered = 0;
  size_t filled = 0;
  uint64_t skipped = 0;
  Status sink_failed;
  auto flush = [&]() {
    if (filled == 0) return true;
    Status st = sink(delivered, std::string_view(buf.get(), filled));
    if (!st.ok()) {
      sink_failed = std::move(st);
      return false;
    }
    delivered += filled;
    filled = 0;
    return true;
  };
  req.make_sink = [&]() -> std::function<bool(int, std::string_view)> {
    delivered = 0;
    filled = 0;
    skipped = 0;
    return [&](int status, std::string_view chunk) {
      // A 200 to a ranged request is the whole object: the server ignored
      // the Range (S3 never does; some S3-compatible servers might).
      if (status == 200 && !whole && skipped < offset) {
        const uint64_t drop = std::min<uint64_t>(offset - skipped, chunk.size());
        chunk.remove_prefix(drop);
        skipped += drop;
      }
      // Never more than asked for, whatever the server sends.
      chunk = chunk.substr(0, std::min<uint64_t>(chunk.size(), length - delivered - filled));
      while (!chunk.empty()) {
        const size_t n = std::min(chunk.size(), kSinkPiece - filled);
        std::memcpy(buf.get() + filled, chunk.data(), n);
        filled += n;
        chunk.remove_prefix(n);
        if (filled == kSinkPiece && !flush()) return false;
      }
      return true;
    };
  };
  Result<HttpResponse> resp = Execute(req, "get " + key);
  if (resp.ok() && resp->status != 416) flush();
  if (!sink_failed.ok()) return sink_failed;
  if (!resp.ok()) return resp.status();
  if (resp->status == 416) return uint64_t{0};
  return delivered;
}

Result<ObjectInfo> S3ObjectStore::Head(const std::string& key) {
  Result<std::string> s3_key = S3Key(key);
  if (!s3_key.ok()) return s3_key.status();
  Request req;
  req.method = "HEAD";
  req.s3_key = *s3_key;
  const std::string what = "head " + key;
  Result<HttpResponse> resp = Execute(req, what);
  if (!resp.ok()) return resp.status();
  Result<uint64_t> size = ParseContentLength(resp->Header("content-length"));
  if (!size.ok()) return size.status().Annotate(describe_ + ": " + what);
  return ObjectInfo{.key = key, .size = *size};
}

Result<std::vector<ObjectInfo>> S3ObjectStore::List(const std::string& prefix) {
  const std::string what = "list \"" + prefix + "\"";
  const std::string full_prefix = key_prefix_ + prefix;
  std::vector<ObjectInfo> out;
  std::string token;
  for (;;) {
    Request req;
    req.method = "GET";
    req.query = {{"list-type", "2"},
                 {"max-keys", std::to_string(config_.list_page_size)},
                 // Keys come back %-encoded, so keys with characters XML
                 // cannot carry survive the trip.
                 {"encoding-type", "url"}};
    if (!full_prefix.empty()) req.query.emplace_back("prefix", full_prefix);
    if (!token.empty()) req.query.emplace_back("continuation-token", token);
    Result<HttpResponse> resp = Execute(req, what);
    if (!resp.ok()) return resp.status();
    Result<ListObjectsPage> page = ParseListObjectsV2(resp->body);
    if (!page.ok()) return page.status().Annotate(describe_ + ": " + what);
    for (ObjectInfo& info : page->objects) {
      if (info.key.compare(0, key_prefix_.size(), key_prefix_) != 0) continue;
      info.key.erase(0, key_prefix_.size());
      if (!ValidateObjectKey(info.key).ok()) continue;
      out.push_back(std::move(info));
    }
    if (!page->is_truncated) break;
    if (page->next_continuation_token.empty() || page->next_continuation_token == token) {
      // Asking again would return the same page forever.
      return Status::Error(EIO, describe_ + ": " + what +
                                    ": truncated listing without a new continuation token");
    }
    token = page->next_continuation_token;
  }
  // S3 lists in UTF-8 byte order already; sorting keeps the promise for
  // servers that do not.
  std::sort(out.begin(), out.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return out;
}

Status S3ObjectStore::Delete(const std::vector<std::string>& keys) {
  std::vector<std::string> s3_keys;
  s3_keys.reserve(keys.size());
  for (const std::string& key : keys) {
    Result<std::string> s3_key = S3Key(key);
    if (!s3_key.ok()) return s3_key.status();
    s3_keys.push_back(std::move(s3_key).value());
  }
  std::vector<DeleteError> failed;
  for (size_t start = 0; start < s3_keys.size(); start += config_.delete_batch_size) {
    const size_t end = std::min(s3_keys.size(), start + config_.delete_batch_size);
    const std::vector<std::string> batch(s3_keys.begin() + static_cast<std::ptrdiff_t>(start),
                                         s3_keys.begin() + static_cast<std::ptrdiff_t>(end));
    const std::string body = BuildDeleteObjects(batch, /*quiet=*/true);
    Request req;
    req.method = "POST";
    req.query = {{"delete", ""}};
    req.headers = {{"content-md5", ContentMd5(body)}, {"content-type", "application/xml"}};
    req.body = body.data();
    req.body_size = body.size();
    req.error_in_2xx = true;
    const std::string what = "delete " + std::to_string(batch.size()) + " objects";
    Result<HttpResponse> resp = Execute(req, what);
    if (!resp.ok()) return resp.status();
    if (resp->body.find('<') == std::string::npos) continue;  // nothing to report
    Result<std::vector<DeleteError>> errors = ParseDeleteResult(resp->body);
    if (!errors.ok()) return errors.status().Annotate(describe_ + ": " + what);
    failed.insert(failed.end(), errors->begin(), errors->end());
  }
  if (failed.empty()) return Status::Ok();
  // Name a few; the count says how many more.
  bool all_denied = true;
  std::string detail;
  for (size_t i = 0; i < failed.size(); i++) {
    all_denied &= failed[i].code == "AccessDenied";
    if (i < 3) {
      std::string key = failed[i].key;
      if (key.compare(0, key_prefix_.size(), key_prefix_) == 0) key.erase(0, key_prefix_.size());
      detail += (i ? "; " : "") + key + ": " + failed[i].code + ": " + failed[i].message;
    }
  }
  if (failed.size() > 3) detail += "; ...";
  return Status::Error(all_denied ? EACCES : EIO,
                       describe_ + ": delete: " + std::to_string(failed.size()) + " of " +
                           std::to_string(keys.size()) + " objects not deleted: " + detail);
}

}  // namespace ckptfs
