// The S3 documents, read through pugixml; see s3_xml.h.
#include "remote/s3_xml.h"

#include <cerrno>
#include <charconv>
#include <cstring>

#include <pugixml.hpp>

namespace ckptfs {

namespace {

constexpr size_t kMaxDepth = 64;

// pugixml does the tokenizing. Entity references are left undecoded
// (no parse_escapes) because pugixml passes unknown or invalid ones through
// as text, and a reply that says "&foo;" is one we did not understand: the
// strict DecodeText below refuses it. parse_fragment keeps text outside the
// root element as nodes, so trailing garbage is seen rather than dropped;
// parse_ws_pcdata keeps whitespace-only text ("<Key> </Key>" is a real key).
// No custom entities are expanded, so a DOCTYPE cannot inflate the document.
constexpr unsigned kParseOptions =
    pugi::parse_cdata | pugi::parse_eol | pugi::parse_ws_pcdata | pugi::parse_fragment;

Status Malformed(const std::string& why, size_t at) {
  return Status::Error(EIO, "malformed XML: " + why + " at byte " + std::to_string(at));
}

bool AllSpace(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Appends text with its entity references decoded; at is text's offset in
// the document, for messages.
Status DecodeText(std::string_view text, size_t at, std::string* out) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t amp = text.find('&', i);
    if (amp == std::string_view::npos) {
      out->append(text.substr(i));
      break;
    }
    out->append(text.substr(i, amp - i));
    const size_t semi = text.find(';', amp);
    if (semi == std::string_view::npos || semi - amp > 12) {
      return Malformed("unterminated entity reference", at + amp);
    }
    const std::string_view name = text.substr(amp + 1, semi - amp - 1);
    if (name == "lt") {
      out->push_back('<');
    } else if (name == "gt") {
      out->push_back('>');
    } else if (name == "amp") {
      out->push_back('&');
    } else if (name == "quot") {
      out->push_back('"');
    } else if (name == "apos") {
      out->push_back('\'');
    } else if (name.size() >= 2 && name[0] == '#') {
      const bool hex = name[1] == 'x' || name[1] == 'X';
      const std::string_view digits = name.substr(hex ? 2 : 1);
      uint32_t cp = 0;
      const auto [end, ec] =
          std::from_chars(digits.data(), digits.data() + digits.size(), cp, hex ? 16 : 10);
      if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() ||
          cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return Malformed("bad character reference &" + std::string(name) + ";", at + amp);
      }
      AppendUtf8(cp, out);
    } else {
      return Malformed("unknown entity &" + std::string(name) + ";", at + amp);
    }
    i = semi + 1;
  }
  return Status::Ok();
}

std::string_view LocalName(std::string_view qname) {
  const size_t colon = qname.find(':');
  return colon == std::string_view::npos ? qname : qname.substr(colon + 1);
}

size_t OffsetOf(const pugi::xml_node& node) {
  const ptrdiff_t at = node.offset_debug();
  return at < 0 ? 0 : static_cast<size_t>(at);
}

// Copies source's name, text and element children into out. Iterative, with
// an explicit stack and the depth bound, so no document exhausts our stack.
Status Convert(const pugi::xml_node& source, XmlElement* out) {
  struct Pending {
    pugi::xml_node node;
    XmlElement* element;
    size_t depth;
  };
  std::vector<Pending> work{{source, out, 1}};
  while (!work.empty()) {
    const Pending p = work.back();
    work.pop_back();
    p.element->name = std::string(LocalName(p.node.name()));
    for (const pugi::xml_node& child : p.node.children()) {
      switch (child.type()) {
        case pugi::node_pcdata: {
          Status st = DecodeText(child.value(), OffsetOf(child), &p.element->text);
          if (!st.ok()) return st;
          break;
        }
        case pugi::node_cdata:
          p.element->text.append(child.value());
          break;
        case pugi::node_element:
          if (p.depth >= kMaxDepth) return Malformed("elements nested too deep", OffsetOf(child));
          p.element->children.emplace_back();
          break;
        default:  // comments, processing instructions: not parsed at all
          break;
      }
    }
    // The children vector is complete, so these pointers stay valid.
    size_t i = 0;
    for (const pugi::xml_node& child : p.node.children()) {
      if (child.type() != pugi::node_element) continue;
      work.push_back({child, &p.element->children[i++], p.depth + 1});
    }
  }
  return Status::Ok();
}

Result<XmlElement> ReadDocument(std::string_view doc) {
  // pugixml stops at a NUL (its strings are C strings); XML allows none, and
  // bytes after one must not be silently ignored.
  if (const size_t nul = doc.find('\0'); nul != std::string_view::npos) {
    return Malformed("NUL byte", nul);
  }
  pugi::xml_document tree;
  const pugi::xml_parse_result parsed =
      tree.load_buffer(doc.data(), doc.size(), kParseOptions, pugi::encoding_utf8);
  if (!parsed) return Malformed(parsed.description(), static_cast<size_t>(parsed.offset));
  // parse_fragment accepts any sequence at the top; a document is exactly
  // one element among whitespace, comments and a declaration or DOCTYPE.
  pugi::xml_node root;
  for (const pugi::xml_node& top : tree.children()) {
    if (top.type() == pugi::node_element) {
      if (root) return Malformed("a second root element", OffsetOf(top));
      root = top;
    } else if (top.type() == pugi::node_pcdata || top.type() == pugi::node_cdata) {
      if (!AllSpace(top.value())) return Malformed("text outside the root element", OffsetOf(top));
    }
  }
  if (!root) return Malformed("no element", doc.size());
  XmlElement out;
  Status st = Convert(root, &out);
  if (!st.ok()) return st;
  return out;
}

Result<XmlElement> ParseRoot(std::string_view xml, std::string_view want, const char* what) {
  Result<XmlElement> root = ParseXml(xml);
  if (!root.ok()) return root.status().Annotate(what);
  if (root->name != want) {
    return Status::Error(EIO, std::string(what) + ": expected <" + std::string(want) + ">, got <" +
                                  root->name + ">");
  }
  return root;
}

Result<uint64_t> ParseSize(const std::string& text) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Status::Error(EIO, "bad object size \"" + text + "\"");
  }
  return v;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

const XmlElement* XmlElement::Child(std::string_view child_name) const {
  for (const XmlElement& c : children) {
    if (c.name == child_name) return &c;
  }
  return nullptr;
}

std::string XmlElement::ChildText(std::string_view child_name) const {
  const XmlElement* c = Child(child_name);
  return c == nullptr ? std::string() : c->text;
}

Result<XmlElement> ParseXml(std::string_view doc) { return ReadDocument(doc); }

std::string XmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      // Carriage returns would be normalized away by the reader.
      case '\r': out += "&#13;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Result<std::string> FormUrlDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%') {
      const int hi = i + 2 < s.size() ? HexValue(s[i + 1]) : -1;
      const int lo = hi >= 0 ? HexValue(s[i + 2]) : -1;
      if (lo < 0) return Status::Error(EIO, "bad %-escape in \"" + std::string(s) + "\"");
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

Result<ListObjectsPage> ParseListObjectsV2(std::string_view xml) {
  constexpr char kWhat[] = "ListObjectsV2 response";
  Result<XmlElement> root = ParseRoot(xml, "ListBucketResult", kWhat);
  if (!root.ok()) return root.status();
  ListObjectsPage page;
  const std::string truncated = root->ChildText("IsTruncated");
  if (truncated != "true" && truncated != "false" && !truncated.empty()) {
    return Status::Error(EIO, std::string(kWhat) + ": IsTruncated is \"" + truncated + "\"");
  }
  page.is_truncated = truncated == "true";
  page.next_continuation_token = root->ChildText("NextContinuationToken");
  const bool url_encoded = root->ChildText("EncodingType") == "url";
  for (const XmlElement& c : root->children) {
    if (c.name != "Contents") continue;
    const XmlElement* key = c.Child("Key");
    if (key == nullptr) return Status::Error(EIO, std::string(kWhat) + ": <Contents> without <Key>");
    ObjectInfo info;
    if (url_encoded) {
      Result<std::string> decoded = FormUrlDecode(key->text);
      if (!decoded.ok()) return decoded.status().Annotate(kWhat);
      info.key = std::move(decoded).value();
    } else {
      info.key = key->text;
    }
    Result<uint64_t> size = ParseSize(c.ChildText("Size"));
    if (!size.ok()) return size.status().Annotate(std::string(kWhat) + ": key " + info.key);
    info.size = *size;
    info.etag = c.ChildText("ETag");
    // S3 quotes it ("\"9b2c...\"").
    if (info.etag.size() >= 2 && info.etag.front() == '"' && info.etag.back() == '"') {
      info.etag = info.etag.substr(1, info.etag.size() - 2);
    }
    page.objects.push_back(std::move(info));
  }
  return page;
}

Result<std::string> ParseInitiateMultipartUpload(std::string_view xml) {
  constexpr char kWhat[] = "CreateMultipartUpload response";
  Result<XmlElement> root = ParseRoot(xml, "InitiateMultipartUploadResult", kWhat);
  if (!root.ok()) return root.status();
  std::string id = root->ChildText("UploadId");
  if (id.empty()) return Status::Error(EIO, std::string(kWhat) + ": no <UploadId>");
  return id;
}

Result<std::vector<DeleteError>> ParseDeleteResult(std::string_view xml) {
  Result<XmlElement> root = ParseRoot(xml, "DeleteResult", "DeleteObjects response");
  if (!root.ok()) return root.status();
  std::vector<DeleteError> errors;
  for (const XmlElement& c : root->children) {
    if (c.name != "Error") continue;
    errors.push_back(DeleteError{c.ChildText("Key"), c.ChildText("Code"), c.ChildText("Message")});
  }
  return errors;
}

Result<S3ErrorDocument> ParseErrorDocument(std::string_view xml) {
  Result<XmlElement> root = ParseRoot(xml, "Error", "S3 error response");
  if (!root.ok()) return root.status();
  return S3ErrorDocument{root->ChildText("Code"), root->ChildText("Message"),
                         root->ChildText("Region"), root->ChildText("Endpoint")};
}

bool IsErrorDocument(std::string_view body) {
  // An error document is small; a large body is data, whatever it holds.
  if (body.size() > (size_t{64} << 10)) return false;
  Result<XmlElement> root = ParseXml(body);
  return root.ok() && root->name == "Error";
}

std::string BuildCompleteMultipartUpload(const std::vector<std::string>& part_etags) {
  std::vector<CompletedPart> parts;
  parts.reserve(part_etags.size());
  for (const std::string& etag : part_etags) parts.push_back({etag, {}});
  return BuildCompleteMultipartUploadWithChecksums(parts);
}

std::string BuildCompleteMultipartUploadWithChecksums(const std::vector<CompletedPart>& parts) {
  std::string out = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
  for (size_t i = 0; i < parts.size(); i++) {
    out += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + XmlEscape(parts[i].etag) +
           "</ETag>";
    if (!parts[i].checksum_crc32c.empty()) {
      out += "<ChecksumCRC32C>" + XmlEscape(parts[i].checksum_crc32c) + "</ChecksumCRC32C>";
    }
    out += "</Part>";
  }
  out += "</CompleteMultipartUpload>";
  return out;
}

std::string BuildDeleteObjects(const std::vector<std::string>& keys, bool quiet) {
  std::string out = "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
  if (quiet) out += "<Quiet>true</Quiet>";
  for (const std::string& key : keys) out += "<Object><Key>" + XmlEscape(key) + "</Key></Object>";
  out += "</Delete>";
  return out;
}

}  // namespace ckptfs
