// AWS Signature Version 4: canonical request, string to sign, key derivation
// and the Authorization header (see s3_signer.h). Hashing and HMAC come from
// OpenSSL 3; everything else is string handling kept in one place so the test
// suite vectors pin it down.
#include "remote/s3_signer.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cctype>
#include <cerrno>

namespace ckptfs {
namespace {

constexpr char kAlgorithm[] = "AWS4-HMAC-SHA256";

std::string Hex(const unsigned char* data, size_t len) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (size_t i = 0; i < len; ++i) {
    out.push_back(kDigits[data[i] >> 4]);
    out.push_back(kDigits[data[i] & 0xf]);
  }
  return out;
}

// Raw (binary) HMAC-SHA256; the key chain feeds each result into the next.
std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // HMAC() only fails on allocation failure or a missing digest, neither of
  // which a signing request can recover from; an empty result then makes the
  // signature wrong and S3 rejects the request with 403 rather than us
  // sending anything unsigned.
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(data.data()), data.size(), out,
           &len) == nullptr) {
    return std::string();
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// Trims and collapses every run of whitespace (including the newlines of a
// folded multi-line value) to one space, as the canonical form requires.
std::string CanonicalHeaderValue(std::string_view v) {
  std::string out;
  bool pending_space = false;
  for (char c : v) {
    if (IsSpace(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

// Sorted (name, joined values) pairs, Authorization excluded so re-signing a
// request does not sign the old signature.
std::vector<std::pair<std::string, std::string>> CanonicalHeaders(const HttpRequestToSign& req) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, value] : req.headers) {
    std::string lname = ToLower(name);
    if (lname == "authorization") continue;
    std::string cvalue = CanonicalHeaderValue(value);
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& h) { return h.first == lname; });
    if (it == out.end()) {
      out.emplace_back(std::move(lname), std::move(cvalue));
    } else {
      // Repeated headers keep their order of appearance, comma-joined.
      it->second += ',';
      it->second += cvalue;
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

// RFC 3986 dot-segment removal plus collapsing of empty segments, keeping a
// trailing slash ("/a/b/" stays a directory-looking path).
std::string NormalizePath(std::string_view path) {
  std::vector<std::string_view> segs;
  bool trailing_slash = false;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t next = path.find('/', pos);
    if (next == std::string_view::npos) next = path.size();
    std::string_view seg = path.substr(pos, next - pos);
    bool last = next == path.size();
    if (seg == "..") {
      if (!segs.empty()) segs.pop_back();
    } else if (!seg.empty() && seg != ".") {
      segs.push_back(seg);
    }
    if (last) trailing_slash = seg.empty() || seg == "." || seg == "..";
    pos = next + 1;
  }
  std::string out;
  for (std::string_view s : segs) {
    out += '/';
    out += s;
  }
  if (out.empty() || trailing_slash) out += '/';
  return out;
}

std::string CanonicalUri(const std::string& path, const SigningParams& params) {
  std::string p = path.empty() ? std::string("/") : path;
  if (params.normalize_path) p = NormalizePath(p);
  return params.encode_path ? UriEncode(p, /*encode_slash=*/false) : p;
}

std::string CanonicalQuery(const HttpRequestToSign& req) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(req.query.size());
  for (const auto& [name, value] : req.query) {
    enc.emplace_back(UriEncode(name, true), UriEncode(value, true));
  }
  // Sorted by encoded name, then value: byte order of the encoded form is
  // what AWS specifies, so sorting happens after encoding.
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [name, value] : enc) {
    if (!out.empty()) out += '&';
    out += name;
    out += '=';
    out += value;
  }
  return out;
}

bool HasHeader(const HttpRequestToSign& req, std::string_view lower_name) {
  return std::any_of(req.headers.begin(), req.headers.end(),
                     [&](const auto& h) { return ToLower(h.first) == lower_name; });
}

bool IsAmzDate(const std::string& d) {
  if (d.size() != 16 || d[8] != 'T' || d[15] != 'Z') return false;
  for (size_t i = 0; i < 15; ++i) {
    if (i != 8 && !std::isdigit(static_cast<unsigned char>(d[i]))) return false;
  }
  return true;
}

}  // namespace

std::string UriEncode(std::string_view in, bool encode_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(in.size());
  for (char ch : in) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (c == '/' && !encode_slash)) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 0xf]);
    }
  }
  return out;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1) return {};
  return Hex(md, len);
}

std::string SignedHeaders(const HttpRequestToSign& req) {
  std::string out;
  for (const auto& h : CanonicalHeaders(req)) {
    if (!out.empty()) out += ';';
    out += h.first;
  }
  return out;
}

std::string CanonicalRequest(const HttpRequestToSign& req, const SigningParams& params) {
  std::string out = req.method + '\n';
  out += CanonicalUri(req.path, params) + '\n';
  out += CanonicalQuery(req) + '\n';
  std::string signed_headers;
  for (const auto& [name, value] : CanonicalHeaders(req)) {
    out += name + ':' + value + '\n';
    if (!signed_headers.empty()) signed_headers += ';';
    signed_headers += name;
  }
  out += '\n';
  out += signed_headers + '\n';
  out += req.payload_sha256_hex;
  return out;
}

std::string CredentialScope(const SigningParams& params) {
  return params.amz_date.substr(0, 8) + '/' + params.region + '/' + params.service +
         "/aws4_request";
}

std::string StringToSign(const std::string& canonical_request, const SigningParams& params) {
  return std::string(kAlgorithm) + '\n' + params.amz_date + '\n' + CredentialScope(params) + '\n' +
         Sha256Hex(canonical_request);
}

std::string Signature(const std::string& string_to_sign, const std::string& secret_access_key,
                      const SigningParams& params) {
  std::string key = HmacSha256("AWS4" + secret_access_key, params.amz_date.substr(0, 8));
  key = HmacSha256(key, params.region);
  key = HmacSha256(key, params.service);
  key = HmacSha256(key, "aws4_request");
  std::string sig = HmacSha256(key, string_to_sign);
  return Hex(reinterpret_cast<const unsigned char*>(sig.data()), sig.size());
}

std::string AuthorizationHeader(const HttpRequestToSign& req, const AwsCredentials& creds,
                                const SigningParams& params) {
  std::string sts = StringToSign(CanonicalRequest(req, params), params);
  return std::string(kAlgorithm) + " Credential=" + creds.access_key_id + '/' +
         CredentialScope(params) + ", SignedHeaders=" + SignedHeaders(req) +
         ", Signature=" + Signature(sts, creds.secret_access_key, params);
}

Status Sign(HttpRequestToSign* req, const AwsCredentials& creds, const SigningParams& params) {
  if (!IsAmzDate(params.amz_date)) {
    return Status::Error(EINVAL,
                         "SigV4: amz_date '" + params.amz_date + "' is not YYYYMMDDTHHMMSSZ");
  }
  if (creds.access_key_id.empty() || creds.secret_access_key.empty()) {
    return Status::Error(EINVAL, "SigV4: credentials lack an access key id or secret");
  }
  if (params.region.empty() || params.service.empty()) {
    return Status::Error(EINVAL, "SigV4: region and service must be set");
  }
  if (req->payload_sha256_hex.empty()) {
    return Status::Error(EINVAL,
                         "SigV4: payload_sha256_hex not set (use kEmptyPayloadSha256 "
                         "for an empty body)");
  }
  if (!HasHeader(*req, "x-amz-date")) req->headers.emplace_back("X-Amz-Date", params.amz_date);
  if (!creds.session_token.empty() && !HasHeader(*req, "x-amz-security-token")) {
    req->headers.emplace_back("X-Amz-Security-Token", creds.session_token);
  }
  // S3 refuses requests without it, even when the payload is unsigned.
  if (params.service == "s3" && !HasHeader(*req, "x-amz-content-sha256")) {
    req->headers.emplace_back("x-amz-content-sha256", req->payload_sha256_hex);
  }
  std::erase_if(req->headers, [](const auto& h) { return ToLower(h.first) == "authorization"; });
  std::string authz = AuthorizationHeader(*req, creds, params);
  req->headers.emplace_back("Authorization", std::move(authz));
  return Status::Ok();
}

Status Sign(HttpRequestToSign* req, const AwsCredentials& creds, const std::string& region,
            const std::string& service, const std::string& amz_date, bool normalize_path) {
  SigningParams params = SigningParams::For(region, service, amz_date);
  params.normalize_path = normalize_path;
  return Sign(req, creds, params);
}

}  // namespace ckptfs
