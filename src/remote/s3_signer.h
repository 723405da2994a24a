// S3Signer: AWS Signature Version 4 for requests carried in the Authorization
// header (no presigned URLs: ckptfs always talks to S3 itself). It owns the
// canonical request, the string to sign, the signing-key derivation and the
// header that carries the result; it does no I/O and keeps no state, so every
// function is thread-safe. The HTTP client (s3_client) builds an
// HttpRequestToSign, calls Sign, and sends exactly the headers it ends up with:
// every header in req is signed, so headers the transport adds later
// (User-Agent, Content-Length from libcurl) are simply not covered, which S3
// accepts; anything S3 must verify has to be in req before Sign.
//
// Checked byte for byte against the AWS signing test suite in
// tests/fixtures/aws-sigv4 (s3_signer_test.cc).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "remote/aws_credentials.h"

namespace ckptfs {

// Hex SHA-256 of the empty payload: the x-amz-content-sha256 of a GET.
inline constexpr std::string_view kEmptyPayloadSha256 =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
// S3 accepts this instead of a payload hash when the body is not hashed.
inline constexpr std::string_view kUnsignedPayload = "UNSIGNED-PAYLOAD";

struct HttpRequestToSign {
  std::string method;  // "GET", "PUT", ...
  // The path as it goes on the wire. For S3 the caller has already URI-encoded
  // each key segment; other services get it encoded again (see encode_path).
  std::string path;
  // Decoded query parameters ("uploadId", "partNumber", ...); the signer
  // encodes them for the canonical form and does not care about their order.
  std::vector<std::pair<std::string, std::string>> query;
  // Header names in any case; repeated names are allowed (joined with ',').
  std::vector<std::pair<std::string, std::string>> headers;
  // Lower-case hex SHA-256 of the body, or kUnsignedPayload for S3.
  std::string payload_sha256_hex;
};

struct SigningParams {
  std::string region;    // "us-east-1"
  std::string service;   // "s3"
  std::string amz_date;  // "YYYYMMDDTHHMMSSZ", UTC
  // Remove "." / ".." segments and repeated '/'. S3 must not: "a//b" and
  // "a/./b" are distinct keys there.
  bool normalize_path = true;
  // URI-encode the wire path once more ("double encoding"), which every AWS
  // service except S3 expects.
  bool encode_path = true;

  // The settings AWS SDKs use: everything but S3 normalizes and re-encodes.
  static SigningParams For(std::string region, std::string service, std::string amz_date) {
    bool s3 = service == "s3";
    return SigningParams{std::move(region), std::move(service), std::move(amz_date), !s3, !s3};
  }
};

// AWS URI encoding: A-Za-z0-9-._~ kept, every other byte as %XX (upper-case
// hex), so a space is %20, never '+'. '/' is kept only when encode_slash is
// false (paths); query names and values encode it.
std::string UriEncode(std::string_view in, bool encode_slash);

// Lower-case hex SHA-256 of data (payload hashes, canonical request hash).
std::string Sha256Hex(std::string_view data);

// The pieces of the algorithm, public so tests can compare each one with the
// suite. Headers are signed exactly as present in req (an Authorization
// header, if any, is left out).
std::string CanonicalRequest(const HttpRequestToSign& req, const SigningParams& params);
// "host;x-amz-date": the lower-case names CanonicalRequest signs.
std::string SignedHeaders(const HttpRequestToSign& req);
std::string CredentialScope(const SigningParams& params);  // date/region/service/aws4_request
std::string StringToSign(const std::string& canonical_request, const SigningParams& params);
// Hex HMAC of string_to_sign under the key derived from the secret and scope.
std::string Signature(const std::string& string_to_sign, const std::string& secret_access_key,
                      const SigningParams& params);
// The Authorization header value for req as it stands.
std::string AuthorizationHeader(const HttpRequestToSign& req, const AwsCredentials& creds,
                                const SigningParams& params);

// Signs req in place: adds X-Amz-Date (unless present), X-Amz-Security-Token
// when creds carry a session token, x-amz-content-sha256 for service "s3"
// (unless present), then replaces any Authorization header with a fresh one.
// EINVAL for a malformed amz_date, missing payload hash or empty credentials;
// messages never contain the secret.
Status Sign(HttpRequestToSign* req, const AwsCredentials& creds, const SigningParams& params);

// Shorthand with SigningParams::For, but normalize_path chosen by the caller
// (encode_path still follows the service).
Status Sign(HttpRequestToSign* req, const AwsCredentials& creds, const std::string& region,
            const std::string& service, const std::string& amz_date, bool normalize_path);

}  // namespace ckptfs
