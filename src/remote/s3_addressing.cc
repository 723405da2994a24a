// S3 URLs, bucket names and request addressing; see s3_addressing.h.
#include "remote/s3_addressing.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>

#include "remote/object_store.h"
#include "remote/s3_signer.h"

namespace ckptfs {

namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool IsIpv4(std::string_view s) {
  in_addr addr{};
  return ::inet_pton(AF_INET, std::string(s).c_str(), &addr) == 1;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

Status BadEndpoint(std::string_view endpoint, const std::string& why) {
  return Status::Error(EINVAL, "invalid S3 endpoint \"" + RedactUrlUserinfo(endpoint) + "\": " + why);
}

}  // namespace

std::string RedactUrlUserinfo(std::string_view url) {
  const size_t sep = url.find("://");
  const size_t start = sep == std::string_view::npos ? 0 : sep + 3;
  // The authority ends at the first '/', '?' or '#'; userinfo is what comes
  // before its last '@' (a password may itself contain '@').
  const size_t end = std::min(url.find_first_of("/?#", start), url.size());
  const size_t at = url.substr(0, end).rfind('@');
  if (at == std::string_view::npos || at < start) return std::string(url);
  return std::string(url.substr(0, start)) + "***" + std::string(url.substr(at));
}

Status ValidateBucketName(std::string_view bucket) {
  auto bad = [&](const std::string& why) {
    return Status::Error(EINVAL, "invalid S3 bucket name \"" + std::string(bucket) + "\": " + why);
  };
  if (bucket.size() < 3 || bucket.size() > 63) {
    return bad("must be 3 to 63 characters long, not " + std::to_string(bucket.size()));
  }
  for (char c : bucket) {
    if (!IsLowerAlnum(c) && c != '.' && c != '-') {
      return bad("may hold only lower-case letters, digits, '.' and '-'");
    }
  }
  if (!IsLowerAlnum(bucket.front()) || !IsLowerAlnum(bucket.back())) {
    return bad("must start and end with a letter or digit");
  }
  if (bucket.find("..") != std::string_view::npos) return bad("must not contain \"..\"");
  if (IsIpv4(bucket)) return bad("must not be an IP address");
  if (bucket.substr(0, 4) == "xn--") return bad("must not start with \"xn--\"");
  return Status::Ok();
}

Status ValidateS3Prefix(std::string_view prefix) {
  if (prefix.empty()) return Status::Ok();
  Status st = ValidateObjectKey(std::string(prefix));
  if (!st.ok()) {
    return Status::Error(EINVAL, "invalid S3 prefix \"" + std::string(prefix) +
                                     "\" (it must be empty or look like an object key): " +
                                     st.message());
  }
  return Status::Ok();
}

Result<S3Location> ParseS3Url(std::string_view url) {
  constexpr std::string_view kScheme = "s3://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    return Status::Error(EINVAL, "invalid S3 URL \"" + std::string(url) +
                                     "\": must look like s3://bucket or s3://bucket/prefix");
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  S3Location loc;
  loc.bucket = std::string(rest.substr(0, slash));
  if (loc.bucket.empty()) {
    return Status::Error(EINVAL, "invalid S3 URL \"" + std::string(url) + "\": no bucket name");
  }
  Status st = ValidateBucketName(loc.bucket);
  if (!st.ok()) return st.Annotate("invalid S3 URL \"" + std::string(url) + "\"");
  if (slash != std::string_view::npos) {
    std::string_view prefix = rest.substr(slash + 1);
    // One trailing '/' is how people write "the folder"; it is not part of
    // the prefix (keys are joined to it with '/').
    if (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
    st = ValidateS3Prefix(prefix);
    if (!st.ok()) return st.Annotate("invalid S3 URL \"" + std::string(url) + "\"");
    loc.prefix = std::string(prefix);
  }
  return loc;
}

Result<S3Endpoint> S3Endpoint::Make(std::string_view endpoint, std::string_view region,
                                    std::string_view bucket, S3Addressing addressing) {
  if (region.empty()) return Status::Error(EINVAL, "S3 region is empty");
  for (char c : region) {
    if (!IsLowerAlnum(c) && !(c >= 'A' && c <= 'Z') && c != '-' && c != '_') {
      return Status::Error(EINVAL, "invalid S3 region \"" + std::string(region) + "\"");
    }
  }
  S3Endpoint ep;
  ep.bucket_ = std::string(bucket);
  bool aws = false;
  std::string_view hostname;  // without the port
  if (endpoint.empty()) {
    ep.scheme_ = "https";
    ep.authority_ = "s3." + std::string(region) + ".amazonaws.com";
    hostname = ep.authority_;
    aws = true;
  } else {
    const size_t sep = endpoint.find("://");
    if (sep == std::string_view::npos) {
      return BadEndpoint(endpoint, "must start with http:// or https://");
    }
    ep.scheme_ = std::string(endpoint.substr(0, sep));
    if (ep.scheme_ != "http" && ep.scheme_ != "https") {
      return BadEndpoint(endpoint, "must start with http:// or https://");
    }
    std::string_view rest = endpoint.substr(sep + 3);
    if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
    if (rest.empty()) return BadEndpoint(endpoint, "no host");
    if (rest.find_first_of("/?#") != std::string_view::npos) {
      return BadEndpoint(endpoint, "must be only scheme://host[:port], without a path");
    }
    if (rest.find('@') != std::string_view::npos) {
      return BadEndpoint(endpoint, "must not carry a user name or password");
    }
    for (char c : rest) {
      if (c <= ' ' || c == 0x7f) return BadEndpoint(endpoint, "contains a space or control character");
    }
    ep.authority_ = std::string(rest);
    hostname = ep.authority_;
    if (hostname.front() == '[') {
      const size_t close = hostname.find(']');
      if (close == std::string_view::npos) return BadEndpoint(endpoint, "unterminated IPv6 address");
      hostname = hostname.substr(0, close + 1);
    } else {
      hostname = hostname.substr(0, hostname.find(':'));
    }
    if (hostname.empty()) return BadEndpoint(endpoint, "no host");
    aws = EndsWith(hostname, ".amazonaws.com") || EndsWith(hostname, ".amazonaws.com.cn");
  }
  switch (addressing) {
    case S3Addressing::kPath:
      ep.virtual_hosted_ = false;
      break;
    case S3Addressing::kVirtualHosted:
      if (hostname.front() == '[' || IsIpv4(hostname)) {
        return BadEndpoint(endpoint, "virtual-hosted addressing needs a host name, not an IP "
                                     "address; use path-style addressing");
      }
      ep.virtual_hosted_ = true;
      break;
    case S3Addressing::kAuto:
      ep.virtual_hosted_ = aws && !(ep.https() && bucket.find('.') != std::string_view::npos);
      break;
  }
  return ep;
}

S3Target S3Endpoint::Target(const std::string& path, const S3Query& query) const {
  S3Target t;
  t.host = virtual_hosted_ ? bucket_ + "." + authority_ : authority_;
  t.path = path;
  t.url = scheme_ + "://" + t.host + path;
  if (!query.empty()) t.url += "?" + EncodeS3Query(query);
  return t;
}

S3Target S3Endpoint::ForObject(std::string_view s3_key, const S3Query& query) const {
  const std::string key = EncodeS3Key(s3_key);
  return Target(virtual_hosted_ ? "/" + key : "/" + bucket_ + "/" + key, query);
}

S3Target S3Endpoint::ForBucket(const S3Query& query) const {
  return Target(virtual_hosted_ ? "/" : "/" + bucket_, query);
}

std::string EncodeS3Key(std::string_view key) { return UriEncode(key, /*encode_slash=*/false); }

std::string EncodeS3Query(const S3Query& query) {
  std::string out;
  for (const auto& [name, value] : query) {
    if (!out.empty()) out += '&';
    out += UriEncode(name, true);
    if (!value.empty()) out += "=" + UriEncode(value, true);
  }
  return out;
}

}  // namespace ckptfs
