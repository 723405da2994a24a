// libFuzzer target: the S3 client's XML reader and the response parsers built
// on it (src/remote/s3_xml.h). The bytes come from a server, or from anything
// between us and it: a proxy, a captive portal, a truncated reply.
//
// Input: one response body, given to every parser. Checks:
//  - every failure is EIO with a message (the client turns it into a retry or
//    a clear error, never a crash);
//  - an accepted document nests at most 64 elements deep;
//  - XmlEscape round-trips: any text the reader returned, escaped and parsed
//    again as an element's content, reads back unchanged;
//  - a ListObjectsV2 page's objects each came from a <Contents> with a <Key>
//    (counted in the generic tree); the client itself refuses a truncated
//    page without a new token (S3ObjectStore::List), so that is not checked;
//  - an accepted Initiate result has a non-empty upload id;
//  - FormUrlDecode never grows its input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "remote/s3_xml.h"

namespace ckptfs {
namespace {

size_t Depth(const XmlElement& e, size_t limit) {
  size_t deepest = 0;
  for (const XmlElement& c : e.children) {
    if (deepest >= limit) break;
    size_t d = Depth(c, limit);
    if (d > deepest) deepest = d;
  }
  return deepest + 1;
}

void CheckEscapeRoundTrip(const std::string& text) {
  Result<XmlElement> again = ParseXml("<t>" + XmlEscape(text) + "</t>");
  FUZZ_CHECK(again.ok(), "escaped text does not parse: %s", again.status().message().c_str());
  FUZZ_CHECK(again->text == text, "escaped text reads back as '%s' instead of '%s'",
             again->text.c_str(), text.c_str());
}

void CheckTree(const XmlElement& e, int budget) {
  CheckEscapeRoundTrip(e.text);
  for (const XmlElement& c : e.children) {
    if (--budget <= 0) return;
    CheckTree(c, budget);
  }
}

void CheckError(const Status& st) {
  FUZZ_CHECK(!st.ok(), "an error Status that is ok");
  FUZZ_CHECK(st.err() == EIO, "error %d instead of EIO: %s", st.err(), st.message().c_str());
  FUZZ_CHECK(!st.message().empty(), "an error without a message");
}

}  // namespace
}  // namespace ckptfs

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptfs;
  const std::string_view doc = fuzz::AsText(data, size);

  Result<XmlElement> root = ParseXml(doc);
  if (root.ok()) {
    FUZZ_CHECK(Depth(*root, 100) <= 64, "an accepted document nests deeper than 64");
    CheckTree(*root, 64);
  } else {
    CheckError(root.status());
  }

  Result<ListObjectsPage> page = ParseListObjectsV2(doc);
  if (page.ok()) {
    size_t contents = 0;
    if (root.ok()) {
      for (const XmlElement& c : root->children) contents += c.name == "Contents";
    }
    FUZZ_CHECK(root.ok() && page->objects.size() == contents,
               "%zu objects from %zu <Contents>", page->objects.size(), contents);
  } else {
    CheckError(page.status());
  }

  Result<std::string> upload = ParseInitiateMultipartUpload(doc);
  if (upload.ok()) {
    FUZZ_CHECK(!upload->empty(), "an empty upload id");
  } else {
    CheckError(upload.status());
  }

  Result<std::vector<DeleteError>> deleted = ParseDeleteResult(doc);
  if (!deleted.ok()) CheckError(deleted.status());

  Result<S3ErrorDocument> error = ParseErrorDocument(doc);
  if (!error.ok()) CheckError(error.status());
  (void)IsErrorDocument(doc);

  Result<std::string> decoded = FormUrlDecode(doc);
  if (decoded.ok()) {
    FUZZ_CHECK(decoded->size() <= doc.size(), "FormUrlDecode grew its input");
  } else {
    CheckError(decoded.status());
  }
  return 0;
}
