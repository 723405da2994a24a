// The one table that turns an S3 error response into the errno ckptfs
// reports (mountpoint-s3 keeps the same kind of table in fs/error.rs):
//
//   NoSuchKey, 404 without a body (HEAD)         ENOENT
//   NoSuchBucket                                 ENOENT "bucket B does not exist at ENDPOINT"
//   NoSuchUpload                                 ENOENT
//   403: AccessDenied, InvalidAccessKeyId,
//        SignatureDoesNotMatch, ExpiredToken...  EACCES, with S3's code and message
//   301/307 redirects, AuthorizationHeaderMalformed
//        (the bucket lives in another region)    EINVAL, naming the region when S3 does
//   EntityTooSmall, InvalidPart(Order),
//        InvalidArgument, MalformedXML, ...      EINVAL
//   EntityTooLarge                               EFBIG
//   405 / 501 (MethodNotAllowed, NotImplemented) EOPNOTSUPP
//   SlowDown, 429, 503, Throttling               EAGAIN (after the retries)
//   412 PreconditionFailed (conditional put)     EEXIST
//   409 ConditionalRequestConflict               EAGAIN (after the retries)
//   RequestTimeout                               ETIMEDOUT (after the retries)
//   anything else                                EIO
//
// Messages carry S3's code and message and the HTTP status, never a header
// or a credential. Transport failures (no response at all) keep the errno
// HttpClient chose and do not come through here.
#pragma once

#include <string>

#include "common/status.h"
#include "remote/s3_xml.h"

namespace ckptfs {

// What the message can name besides S3's own words.
struct S3ErrorContext {
  std::string bucket;
  std::string endpoint;  // "https://s3.us-east-1.amazonaws.com"
  std::string upload_id;  // for NoSuchUpload, when the request had one
  // The x-amz-bucket-region response header, sent with redirects.
  std::string bucket_region;
};

// http_status and doc (empty fields when the response had no error body)
// to a Status; the caller prefixes what it was doing.
Status MapS3Error(int http_status, const S3ErrorDocument& doc, const S3ErrorContext& ctx);

}  // namespace ckptfs
