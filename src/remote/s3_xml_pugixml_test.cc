// Edges where the reader's behaviour comes from pugixml (s3_xml.cc): what it
// would pass through or drop silently, and what we refuse on top of it.
#include <gtest/gtest.h>

#include <string>

#include "remote/s3_xml.h"

namespace ckptfs {
namespace {

void ExpectMalformed(const std::string& doc, const std::string& why) {
  Result<XmlElement> r = ParseXml(doc);
  ASSERT_EQ(r.err(), EIO) << "\"" << doc << "\"";
  EXPECT_NE(r.status().message().find("malformed XML"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().ToString();
}

TEST(S3XmlPugixmlTest, RefusesWhatPugixmlWouldPassThrough) {
  // pugixml keeps unknown entities as text; a DOCTYPE's own entities are
  // never expanded (no entity-expansion blow-up), so they are unknown too.
  ExpectMalformed("<a>&foo;</a>", "unknown entity &foo; at byte 3");
  ExpectMalformed("<!DOCTYPE a [<!ENTITY e \"x\">]><a>&e;</a>", "unknown entity &e;");
  // parse_fragment is on so that text after the root is seen, not dropped.
  ExpectMalformed("<a></a>trailing", "text outside the root element");
  ExpectMalformed("x<a/>", "text outside the root element");
  ExpectMalformed("<a/><b/>", "a second root element");
  ExpectMalformed("<!-- only a comment -->", "no element");
  // pugixml's strings end at a NUL; bytes after one must not be ignored.
  ExpectMalformed(std::string("<a/>\0<b>", 8), "NUL byte at byte 4");
  ExpectMalformed(std::string("<a>x\0</a>", 9), "NUL byte at byte 4");
}

TEST(S3XmlPugixmlTest, ReportsPugixmlsReasonAndOffset) {
  ExpectMalformed("<a><b></a></b>", "Start-end tags mismatch at byte 8");
  ExpectMalformed("<a x=1></a>", "attribute");
}

TEST(S3XmlPugixmlTest, WhitespaceAndLineEnds) {
  // A key of one space is a real S3 key: whitespace-only text is kept.
  Result<XmlElement> space = ParseXml("<Contents><Key> </Key></Contents>");
  ASSERT_TRUE(space.ok()) << space.status().ToString();
  EXPECT_EQ(space->ChildText("Key"), " ");
  // Literal line ends are normalized (XML 1.0 section 2.11); &#13; survives,
  // which is why XmlEscape writes a carriage return that way.
  Result<XmlElement> eol = ParseXml("<a>x\r\ny\rz&#13;</a>");
  ASSERT_TRUE(eol.ok());
  EXPECT_EQ(eol->text, "x\ny\nz\r");
  // Misc around the root: BOM, declaration, DOCTYPE, comments, PIs.
  Result<XmlElement> misc = ParseXml(
      "\xEF\xBB\xBF<?xml version=\"1.0\"?>\r\n<!DOCTYPE Error>\n<!-- c --><Error><?pi x?>"
      "<Code>C</Code><!-- d --></Error>\n<?after?>\n");
  ASSERT_TRUE(misc.ok()) << misc.status().ToString();
  EXPECT_EQ(misc->name, "Error");
  EXPECT_EQ(misc->ChildText("Code"), "C");
}

TEST(S3XmlPugixmlTest, NamespacesAndTextAcrossCdata) {
  Result<XmlElement> root = ParseXml(
      "<s3:Root xmlns:s3=\"urn:x\"><s3:Key>a<![CDATA[&b]]>&amp;c<!-- x -->d</s3:Key></s3:Root>");
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_EQ(root->name, "Root");
  EXPECT_EQ(root->ChildText("Key"), "a&b&cd");
  // End tags match on the qualified name, as written.
  EXPECT_EQ(ParseXml("<s3:a></a>").err(), EIO);
}

TEST(S3XmlPugixmlTest, DepthBoundHoldsOnWellFormedDocuments) {
  std::string deep;
  for (int i = 0; i < 65; i++) deep += "<a>";
  for (int i = 0; i < 65; i++) deep += "</a>";
  ExpectMalformed(deep, "elements nested too deep");
  std::string very_deep;
  for (int i = 0; i < 100000; i++) very_deep += "<a>";
  for (int i = 0; i < 100000; i++) very_deep += "</a>";
  EXPECT_EQ(ParseXml(very_deep).err(), EIO);
  std::string ok;
  for (int i = 0; i < 64; i++) ok += "<a>";
  for (int i = 0; i < 64; i++) ok += "</a>";
  EXPECT_TRUE(ParseXml(ok).ok());
}

}  // namespace
}  // namespace ckptfs
