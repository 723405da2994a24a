// The few S3 XML documents the S3 client reads and writes. pugixml
// (libpugixml-dev) tokenizes; this file keeps what S3 needs on top: local
// names (namespace prefixes dropped), each element's text with the five
// predefined entities and character references decoded strictly (an unknown
// entity is an error, not text), CDATA, and comments, processing
// instructions and a DOCTYPE skipped. It never crashes or loops on bad
// input: anything it cannot read is EIO with the reason and the byte offset.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "remote/object_store.h"

namespace ckptfs {

struct XmlElement {
  std::string name;  // local name: "Key" for <s3:Key>
  std::string text;  // character data directly inside, entities decoded
  std::vector<XmlElement> children;

  // The first child called name, or null.
  const XmlElement* Child(std::string_view child_name) const;
  // That child's text, or "" when there is no such child.
  std::string ChildText(std::string_view child_name) const;
};

// The root element of doc. EIO for malformed XML or nesting deeper than 64.
Result<XmlElement> ParseXml(std::string_view doc);

// &, <, >, " and ' as entity references: for text and attribute values.
std::string XmlEscape(std::string_view s);

// ---- Responses ----

// One page of ListObjectsV2. Keys are as S3 has them (with the bucket
// prefix); with EncodingType "url" in the document they are decoded here.
struct ListObjectsPage {
  std::vector<ObjectInfo> objects;
  bool is_truncated = false;
  std::string next_continuation_token;
};
Result<ListObjectsPage> ParseListObjectsV2(std::string_view xml);

// The UploadId of an InitiateMultipartUploadResult.
Result<std::string> ParseInitiateMultipartUpload(std::string_view xml);

// The per-key failures in a DeleteResult (quiet mode lists only those).
struct DeleteError {
  std::string key;
  std::string code;
  std::string message;
};
Result<std::vector<DeleteError>> ParseDeleteResult(std::string_view xml);

// An <Error> document: what S3 sends with a 4xx/5xx, and sometimes with a
// 200 (CompleteMultipartUpload fails after the headers went out).
struct S3ErrorDocument {
  std::string code;      // "NoSuchKey"
  std::string message;   // "The specified key does not exist."
  std::string region;    // <Region>, sent with AuthorizationHeaderMalformed etc.
  std::string endpoint;  // <Endpoint>, sent with PermanentRedirect
};
// EIO when xml is not an Error document.
Result<S3ErrorDocument> ParseErrorDocument(std::string_view xml);
// Whether body's root element is <Error>, without reading the whole of a
// large body that is not XML at all.
bool IsErrorDocument(std::string_view body);

// ---- Requests ----

// The CompleteMultipartUpload body for parts 1..N with these ETags.
std::string BuildCompleteMultipartUpload(const std::vector<std::string>& part_etags);
// The same with each part's checksum (base64 CRC32C; left out when empty).
struct CompletedPart {
  std::string etag;
  std::string checksum_crc32c;
};
std::string BuildCompleteMultipartUploadWithChecksums(const std::vector<CompletedPart>& parts);
// The DeleteObjects body for these (full S3) keys.
std::string BuildDeleteObjects(const std::vector<std::string>& keys, bool quiet);

// application/x-www-form-urlencoded decoding as S3's encoding-type=url uses
// it: %XX escapes and '+' for a space. EIO for a broken escape.
Result<std::string> FormUrlDecode(std::string_view s);

}  // namespace ckptfs
