// The XML reader and S3 documents; see s3_xml.h.
#include "remote/s3_xml.h"

#include <cerrno>
#include <charconv>
#include <cstring>

namespace ckptfs {

namespace {

constexpr size_t kMaxDepth = 64;

Status Malformed(const std::string& why, size_t at) {
  return Status::Error(EIO, "malformed XML: " + why + " at byte " + std::to_string(at));
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

bool AllSpace(std::string_view s) {
  for (char c : s) {
    if (!IsSpace(c)) return false;
  }
  return true;
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

// An iterative reader: an explicit stack instead of recursion, so no input
// can exhaust the call stack.
class XmlReader {
 public:
  explicit XmlReader(std::string_view doc) : doc_(doc) {}

  Result<XmlElement> Read() {
    if (doc_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;  // UTF-8 byte order mark
    while (pos_ < doc_.size()) {
      Status st = doc_[pos_] == '<' ? Markup() : Text();
      if (!st.ok()) return st;
    }
    if (!stack_.empty()) {
      return Malformed("element <" + stack_.back().qname + "> is not closed", doc_.size());
    }
    if (!have_root_) return Malformed("no element", doc_.size());
    return std::move(root_);
  }

 private:
  struct Open {
    std::string qname;
    XmlElement element;
  };

  // Skips to just past terminator; false when it never comes.
  bool SkipPast(std::string_view terminator) {
    const size_t end = doc_.find(terminator, pos_);
    if (end == std::string_view::npos) return false;
    pos_ = end + terminator.size();
    return true;
  }

  Status Text() {
    const size_t start = pos_;
    size_t end = doc_.find('<', pos_);
    if (end == std::string_view::npos) end = doc_.size();
    pos_ = end;
    const std::string_view text = doc_.substr(start, end - start);
    if (stack_.empty()) {
      if (AllSpace(text)) return Status::Ok();
      return Malformed("text outside the root element", start);
    }
    return DecodeText(text, start, &stack_.back().element.text);
  }

  Status Markup() {
    const size_t start = pos_;
    const std::string_view rest = doc_.substr(pos_);
    if (rest.substr(0, 4) == "<!--") {
      return SkipPast("-->") ? Status::Ok() : Malformed("unterminated comment", start);
    }
    if (rest.substr(0, 9) == "<![CDATA[") {
      pos_ += 9;
      const size_t end = doc_.find("]]>", pos_);
      if (end == std::string_view::npos) return Malformed("unterminated CDATA section", start);
      if (stack_.empty()) return Malformed("CDATA outside the root element", start);
      stack_.back().element.text.append(doc_.substr(pos_, end - pos_));
      pos_ = end + 3;
      return Status::Ok();
    }
    if (rest.substr(0, 2) == "<?") {
      return SkipPast("?>") ? Status::Ok() : Malformed("unterminated processing instruction", start);
    }
    if (rest.substr(0, 2) == "<!") {
      // A DOCTYPE; an internal subset ends with "]>".
      const size_t bracket = rest.find('[');
      const size_t gt = rest.find('>');
      const bool subset = bracket != std::string_view::npos && bracket < gt;
      return SkipPast(subset ? "]>" : ">") ? Status::Ok() : Malformed("unterminated <!", start);
    }
    if (rest.substr(0, 2) == "</") return EndTag();
    return StartTag();
  }

  // The name at pos_ (up to whitespace, '/', '>' or '='); empty if none.
  std::string_view Name() {
    const size_t start = pos_;
    while (pos_ < doc_.size() && !IsSpace(doc_[pos_]) && doc_[pos_] != '/' &&
           doc_[pos_] != '>' && doc_[pos_] != '=' && doc_[pos_] != '<') {
      pos_++;
    }
    return doc_.substr(start, pos_ - start);
  }

  void SkipSpace() {
    while (pos_ < doc_.size() && IsSpace(doc_[pos_])) pos_++;
  }

  Status StartTag() {
    const size_t start = pos_;
    pos_++;  // '<'
    const std::string_view qname = Name();
    if (qname.empty()) return Malformed("element without a name", start);
    if (stack_.empty() && have_root_) return Malformed("a second root element", start);
    if (stack_.size() >= kMaxDepth) return Malformed("elements nested too deep", start);
    // Attributes: read past, values skipped (S3 puts nothing we need there).
    bool self_closing = false;
    for (;;) {
      SkipSpace();
      if (pos_ >= doc_.size()) return Malformed("unterminated tag <" + std::string(qname), start);
      if (doc_[pos_] == '>') {
        pos_++;
        break;
      }
      if (doc_[pos_] == '/') {
        if (pos_ + 1 >= doc_.size() || doc_[pos_ + 1] != '>') return Malformed("stray '/'", pos_);
        pos_ += 2;
        self_closing = true;
        break;
      }
      const size_t attr = pos_;
      if (Name().empty()) return Malformed("bad attribute", attr);
      SkipSpace();
      if (pos_ >= doc_.size() || doc_[pos_] != '=') return Malformed("attribute without '='", attr);
      pos_++;
      SkipSpace();
      if (pos_ >= doc_.size() || (doc_[pos_] != '"' && doc_[pos_] != '\'')) {
        return Malformed("unquoted attribute value", attr);
      }
      const char quote = doc_[pos_++];
      const size_t end = doc_.find(quote, pos_);
      if (end == std::string_view::npos) return Malformed("unterminated attribute value", attr);
      pos_ = end + 1;
    }
    Open open{std::string(qname), XmlElement{}};
    open.element.name = std::string(LocalName(qname));
    stack_.push_back(std::move(open));
    if (self_closing) Close();
    return Status::Ok();
  }

  Status EndTag() {
    const size_t start = pos_;
    pos_ += 2;  // "</"
    const std::string_view qname = Name();
    SkipSpace();
    if (pos_ >= doc_.size() || doc_[pos_] != '>') return Malformed("unterminated end tag", start);
    pos_++;
    if (stack_.empty()) return Malformed("end tag </" + std::string(qname) + "> without a start", start);
    if (stack_.back().qname != qname) {
      return Malformed("</" + std::string(qname) + "> closes <" + stack_.back().qname + ">", start);
    }
    Close();
    return Status::Ok();
  }

  // Pops the innermost open element into its parent (or the root).
  void Close() {
    XmlElement done = std::move(stack_.back().element);
    stack_.pop_back();
    if (stack_.empty()) {
      root_ = std::move(done);
      have_root_ = true;
    } else {
      stack_.back().element.children.push_back(std::move(done));
    }
  }

  const std::string_view doc_;
  size_t pos_ = 0;
  std::vector<Open> stack_;
  XmlElement root_;
  bool have_root_ = false;
};

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

Result<XmlElement> ParseXml(std::string_view doc) { return XmlReader(doc).Read(); }

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
