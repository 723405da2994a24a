// S3 error responses to errno; see s3_errors.h.
#include "remote/s3_errors.h"

#include <cerrno>
#include <string_view>

namespace ckptfs {

namespace {

bool OneOf(const std::string& code, std::initializer_list<std::string_view> codes) {
  for (std::string_view c : codes) {
    if (code == c) return true;
  }
  return false;
}

}  // namespace

Status MapS3Error(int http_status, const S3ErrorDocument& doc, const S3ErrorContext& ctx) {
  const std::string http = "HTTP " + std::to_string(http_status);
  // "AccessDenied: Access Denied (HTTP 403)", or just "HTTP 403".
  std::string said = doc.code.empty() ? http : doc.code + ": " + doc.message + " (" + http + ")";
  if (!doc.code.empty() && doc.message.empty()) said = doc.code + " (" + http + ")";
  const std::string& code = doc.code;

  if (code == "NoSuchBucket") {
    return Status::Error(ENOENT, "bucket " + ctx.bucket + " does not exist at " + ctx.endpoint +
                                     " (" + said + ")");
  }
  if (code == "NoSuchUpload") {
    return Status::Error(ENOENT, "no multipart upload \"" + ctx.upload_id +
                                     "\" (completed, aborted or never begun; " + said + ")");
  }
  if (code == "NoSuchKey" || (http_status == 404 && code.empty())) {
    return Status::Error(ENOENT, "no such object (" + said + ")");
  }
  const bool wrong_region = http_status == 301 || http_status == 307 ||
                            OneOf(code, {"PermanentRedirect", "TemporaryRedirect",
                                         "AuthorizationHeaderMalformed",
                                         "IllegalLocationConstraintException"});
  if (wrong_region) {
    std::string region = !ctx.bucket_region.empty() ? ctx.bucket_region : doc.region;
    std::string hint = region.empty()
                           ? " (is the S3 region or endpoint right?)"
                           : "; bucket " + ctx.bucket + " is in region " + region +
                                 ", set that region";
    if (region.empty() && !doc.endpoint.empty()) hint = "; S3 says to use endpoint " + doc.endpoint;
    return Status::Error(EINVAL, said + hint);
  }
  if (http_status == 403 || OneOf(code, {"AccessDenied", "InvalidAccessKeyId",
                                         "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
                                         "TokenRefreshRequired", "RequestTimeTooSkewed",
                                         "AllAccessDisabled", "AccountProblem"})) {
    return Status::Error(EACCES, said);
  }
  if (OneOf(code, {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
                   "TooManyRequestsException", "ServiceUnavailable"}) ||
      http_status == 429 || http_status == 503) {
    return Status::Error(EAGAIN, said);
  }
  if (code == "RequestTimeout") return Status::Error(ETIMEDOUT, said);
  // A conditional put (If-None-Match: *) of a key that exists; and one that
  // raced another conditional write of the key (retried before it gets here).
  if (code == "PreconditionFailed" || http_status == 412) return Status::Error(EEXIST, said);
  if (code == "ConditionalRequestConflict") return Status::Error(EAGAIN, said);
  if (code == "EntityTooLarge") return Status::Error(EFBIG, said);
  if (http_status == 405 || http_status == 501 ||
      OneOf(code, {"MethodNotAllowed", "NotImplemented"})) {
    return Status::Error(EOPNOTSUPP, said);
  }
  if (OneOf(code, {"EntityTooSmall", "InvalidPart", "InvalidPartOrder", "InvalidArgument",
                   "InvalidRequest", "MalformedXML", "KeyTooLongError", "InvalidBucketName",
                   "InvalidRange", "InvalidDigest", "MissingContentLength",
                   "IncompleteBody", "TooManyParts"})) {
    return Status::Error(EINVAL, said);
  }
  return Status::Error(EIO, said);
}

}  // namespace ckptfs
