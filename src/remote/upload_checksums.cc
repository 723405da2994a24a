// Upload digests and the check of S3's answer; see upload_checksums.h.
#include "remote/upload_checksums.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cctype>
#include <charconv>
#include <cstdio>

#include "common/crc32c.h"

namespace ckptfs {

namespace {

std::string Base64(const unsigned char* bytes, size_t n) {
  std::string out(4 * ((n + 2) / 3), '\0');
  const int len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), bytes, static_cast<int>(n));
  out.resize(static_cast<size_t>(len > 0 ? len : 0));
  return out;
}

std::string Hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '\0');
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xF];
  }
  return out;
}

void BigEndian(uint32_t v, unsigned char out[4]) {
  out[0] = static_cast<unsigned char>(v >> 24);
  out[1] = static_cast<unsigned char>(v >> 16);
  out[2] = static_cast<unsigned char>(v >> 8);
  out[3] = static_cast<unsigned char>(v);
}

std::string_view Unquoted(std::string_view etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return etag;
}

constexpr std::string_view kPartTokenTag = ";crc32c=";

}  // namespace

std::string Crc32cBase64(uint32_t crc) {
  unsigned char be[4];
  BigEndian(crc, be);
  return Base64(be, 4);
}

namespace {

void Md5Into(std::string_view body, BodyDigests* d) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(body.data(), body.size(), md, &len, EVP_md5(), nullptr) == 1) {
    d->md5_hex = Hex(md, len);
    d->md5_base64 = Base64(md, len);
  }
}

}  // namespace

BodyDigests DigestBody(std::string_view body, bool with_md5) {
  BodyDigests d;
  d.crc32c = Crc32c(0, body.data(), body.size());
  d.crc32c_base64 = Crc32cBase64(d.crc32c);
  if (with_md5) Md5Into(body, &d);
  return d;
}

Md5InBackground::Md5InBackground(std::string_view body)
    : thread_([this, body] { Md5Into(body, &md5_); }) {}

Md5InBackground::~Md5InBackground() {
  if (thread_.joinable()) thread_.join();
}

void Md5InBackground::FillIn(BodyDigests* digests) {
  if (thread_.joinable()) thread_.join();
  digests->md5_hex = md5_.md5_hex;
  digests->md5_base64 = md5_.md5_base64;
}

std::string CompositeCrc32c(const std::vector<uint32_t>& part_crcs) {
  uint32_t crc = 0;
  for (uint32_t part : part_crcs) {
    unsigned char be[4];
    BigEndian(part, be);
    crc = Crc32c(crc, be, 4);
  }
  return Crc32cBase64(crc) + "-" + std::to_string(part_crcs.size());
}

bool IsPlainMd5Etag(std::string_view etag) {
  etag = Unquoted(etag);
  if (etag.size() != 32) return false;
  for (char c : etag) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
  }
  return true;
}

Status CheckUploadAnswer(const HttpResponse& resp, const BodyDigests& sent) {
  const std::string echoed = resp.Header("x-amz-checksum-crc32c");
  if (!echoed.empty()) {
    // The server computed the CRC32C of what it received: that settles it
    // (and its ETag need not be an MD5).
    if (echoed == sent.crc32c_base64) return Status::Ok();
    return Status::Error(EIO, "checksum mismatch: the server stored CRC32C " + echoed + ", ckptfs sent " +
                                  sent.crc32c_base64 + " (the body was damaged on the way)");
  }
  // SSE-KMS and SSE-C objects have ETags of 32 hex digits that are no MD5.
  const std::string sse = resp.Header("x-amz-server-side-encryption");
  if (sse.rfind("aws:kms", 0) == 0 || !resp.Header("x-amz-server-side-encryption-customer-algorithm").empty()) {
    return Status::Ok();
  }
  const std::string etag = resp.Header("etag");
  if (!sent.md5_hex.empty() && IsPlainMd5Etag(etag)) {
    std::string got(Unquoted(etag));
    for (char& c : got) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (got != sent.md5_hex) {
      return Status::Error(EIO, "checksum mismatch: the server stored MD5 " + got + ", ckptfs sent " +
                                    sent.md5_hex + " (the body was damaged on the way)");
    }
  }
  return Status::Ok();
}

bool AnswerConfirmsCrc32c(const HttpResponse& resp, const BodyDigests& sent) {
  return resp.Header("x-amz-checksum-crc32c") == sent.crc32c_base64;
}

std::string MakePartToken(const std::string& etag, uint32_t crc32c) {
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc32c);
  return etag + std::string(kPartTokenTag) + hex;
}

PartToken ParsePartToken(std::string_view token) {
  PartToken out;
  const size_t at = token.rfind(kPartTokenTag);
  if (at != std::string_view::npos && token.size() - at == kPartTokenTag.size() + 8) {
    const std::string_view hex = token.substr(at + kPartTokenTag.size());
    uint32_t v = 0;
    const auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), v, 16);
    if (ec == std::errc() && end == hex.data() + hex.size()) {
      out.etag = std::string(token.substr(0, at));
      out.crc32c = v;
      return out;
    }
  }
  out.etag = std::string(token);
  return out;
}

}  // namespace ckptfs
