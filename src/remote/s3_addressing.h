// Where S3 requests go: parsing "s3://bucket/prefix" URLs and --s3-endpoint
// values, the S3 rules for bucket names, and turning (bucket, key, query)
// into the URL, Host header and canonical URI the signer and the transport
// use. Pure string work, no I/O, so every rule is unit-tested.
//
// Two addressing styles exist:
//   virtual-hosted  https://bucket.s3.us-east-1.amazonaws.com/some/key
//   path-style      http://127.0.0.1:9000/bucket/some/key
// AWS prefers the first (path-style is deprecated there); S3-compatible
// servers addressed by IP or a plain host name only understand the second.
// kAuto picks virtual-hosted for AWS endpoints, except for bucket names with
// dots over https (the *.s3 wildcard certificate does not cover them), and
// path-style for every other endpoint.
//
// Keys go on the wire URI-encoded per SigV4's rules for S3: each byte outside
// A-Za-z0-9-._~ as %XX, '/' kept, so the path is its own canonical URI (S3
// neither normalizes nor double-encodes it).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ckptfs {

enum class S3Addressing { kAuto, kPath, kVirtualHosted };

struct S3Location {
  std::string bucket;
  std::string prefix;  // no leading or trailing '/'; may be empty
};

// "s3://bucket", "s3://bucket/", "s3://bucket/some/prefix/". EINVAL with
// the reason for anything else: another scheme, a bad bucket name, a prefix
// with empty, "." or ".." components.
Result<S3Location> ParseS3Url(std::string_view url);

// The rules for bucket names S3 accepts today: 3 to 63 characters of a-z,
// 0-9, '.' and '-', starting and ending with a letter or digit, no "..", not
// an IP address, not starting with "xn--". EINVAL naming the rule broken.
Status ValidateBucketName(std::string_view bucket);

// A prefix inside the bucket: empty, or a valid object key (no leading or
// trailing '/'). EINVAL otherwise.
Status ValidateS3Prefix(std::string_view prefix);

// url with the user information of its authority ("user:password@")
// replaced by "***@", for messages: a refused endpoint must not echo the
// secret it carried. Anything else is returned unchanged.
std::string RedactUrlUserinfo(std::string_view url);

// Decoded query parameters, in the order they go into the URL.
using S3Query = std::vector<std::pair<std::string, std::string>>;

// The URL of one request and what the signer needs of it.
struct S3Target {
  std::string url;   // "https://bucket.s3.us-east-1.amazonaws.com/a%20b?uploads"
  std::string host;  // the Host header: "bucket.s3.us-east-1.amazonaws.com"
  std::string path;  // the canonical URI: "/a%20b", or "/bucket/a%20b"
};

class S3Endpoint {
 public:
  // endpoint: "" (AWS, https://s3.<region>.amazonaws.com) or
  // "http[s]://host[:port][/]". EINVAL for anything else, an empty or
  // malformed region, or kVirtualHosted with an IP address endpoint.
  static Result<S3Endpoint> Make(std::string_view endpoint, std::string_view region,
                                 std::string_view bucket, S3Addressing addressing);

  // An object, by its full S3 key (prefix included).
  S3Target ForObject(std::string_view s3_key, const S3Query& query = {}) const;
  // The bucket itself (ListObjectsV2, DeleteObjects).
  S3Target ForBucket(const S3Query& query = {}) const;

  bool https() const { return scheme_ == "https"; }
  bool virtual_hosted() const { return virtual_hosted_; }
  // "https://s3.us-east-1.amazonaws.com": the endpoint as configured, for
  // messages.
  std::string url() const { return scheme_ + "://" + authority_; }

 private:
  S3Endpoint() = default;
  S3Target Target(const std::string& path, const S3Query& query) const;

  std::string scheme_;     // "http" or "https"
  std::string authority_;  // host[:port] of the endpoint
  std::string bucket_;
  bool virtual_hosted_ = false;
};

// "a%20b/c": the key with each byte but A-Za-z0-9-._~ and '/' as %XX.
std::string EncodeS3Key(std::string_view key);
// "a=1&b=x%2Fy", "uploads" for an empty value; names and values encoded as
// SigV4's canonical query string encodes them.
std::string EncodeS3Query(const S3Query& query);

}  // namespace ckptfs
