// What travels with an upload so that a body damaged between ckptfs and the
// object store is refused instead of stored (issue 15): the digests of the
// bytes sent, the headers S3 checks them with, and the check of the answer.
//
//   x-amz-checksum-crc32c   base64 of the big-endian CRC32C of the body, on
//                           PutObject and on every UploadPart. S3 (and MinIO,
//                           Ceph RGW...) recompute it and answer BadDigest /
//                           XAmzContentChecksumMismatch when it differs.
//   Content-MD5             base64 of the body's MD5, for servers that know
//                           no x-amz-checksum-* (older S3-compatible ones).
//   the answer              an echoed x-amz-checksum-crc32c must be the CRC32C
//                           sent; without one, a plain-MD5 ETag (32 hex
//                           digits, no "-N", not SSE-KMS / SSE-C) must be the
//                           MD5 of what was sent.
//                           Either mismatch is a damaged upload: retried,
//                           never recorded.
//
// Multipart: each UploadPart carries its part's CRC32C; CompleteMultipartUpload
// lists them (<ChecksumCRC32C>) and S3 checks them against the parts it holds
// and computes the object's composite checksum (CompositeCrc32c).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "remote/http_client.h"

namespace ckptfs {

struct BodyDigests {
  uint32_t crc32c = 0;
  std::string crc32c_base64;  // "4waSgw==" for "123456789"
  // Empty when MD5 was not asked for (the server checks CRC32C itself).
  std::string md5_hex;
  std::string md5_base64;
};

// The digests of body, computed once from the very buffer that is sent.
BodyDigests DigestBody(std::string_view body, bool with_md5);

// The MD5 of a body computed on a thread of its own while the body is on
// its way (issue 29): for an upload whose SHA-256 is signed (the server
// refuses a body that does not match it) the MD5 only serves the check of
// the answer's ETag, so it need not delay the request. The destructor
// waits for the thread: the body must outlive this object.
class Md5InBackground {
 public:
  explicit Md5InBackground(std::string_view body);
  ~Md5InBackground();
  Md5InBackground(const Md5InBackground&) = delete;
  Md5InBackground& operator=(const Md5InBackground&) = delete;
  // Waits for the digest; digests.crc32c* are kept, md5_* filled in.
  void FillIn(BodyDigests* digests);

 private:
  // Declared before thread_, so that it exists when the thread starts.
  BodyDigests md5_;  // written by thread_ only, read after it is joined
  std::thread thread_;
};

// base64 of the 4 big-endian bytes of crc, as S3 writes CRC32C checksums.
std::string Crc32cBase64(uint32_t crc);

// S3's checksum of a multipart object: the CRC32C of the parts' big-endian
// CRC32Cs concatenated, in base64, then "-" and the part count.
std::string CompositeCrc32c(const std::vector<uint32_t>& part_crcs);

// Whether etag (quotes included or not) is a plain MD5 ETag: 32 hex digits.
// Multipart objects ("...-3") and SSE-KMS / SSE-C objects have other forms.
bool IsPlainMd5Etag(std::string_view etag);

// Checks the 2xx answer to a PutObject / UploadPart of a body with these
// digests: EIO naming the mismatch when an echoed x-amz-checksum-crc32c
// differs from what was sent or, when none was echoed, the ETag differs
// from the MD5 sent (if one was computed, the ETag has the plain-MD5 form
// and the object is not SSE-KMS / SSE-C encrypted, whose ETags are no MD5).
Status CheckUploadAnswer(const HttpResponse& resp, const BodyDigests& sent);

// Whether the answer echoed our x-amz-checksum-crc32c: such a server checks
// the CRC32C itself, so Content-MD5 and the ETag check add nothing.
bool AnswerConfirmsCrc32c(const HttpResponse& resp, const BodyDigests& sent);

// The token UploadPart hands back (the ObjectStore seam calls it the part's
// ETag): the ETag as the server sent it, then ";crc32c=" and the part's
// CRC32C in 8 hex digits, so that CompleteMultipart can list both.
std::string MakePartToken(const std::string& etag, uint32_t crc32c);
struct PartToken {
  std::string etag;
  std::optional<uint32_t> crc32c;  // none for a bare ETag
};
PartToken ParsePartToken(std::string_view token);

}  // namespace ckptfs
