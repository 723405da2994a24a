// The XML reader on S3's documents (as AWS documents them, and as s3rver
// writes them), on malformed input, and the request bodies we build.
#include "remote/s3_xml.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace ckptfs {
namespace {

TEST(S3XmlTest, ParsesElementsTextAndEntities) {
  Result<XmlElement> root = ParseXml(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<!-- a comment -->\n"
      "<s3:Root xmlns:s3=\"http://s3.amazonaws.com/doc/2006-03-01/\" a='1' b = \"x>y\">\n"
      "  <Name>a &amp; b &lt;c&gt; &quot;d&quot; &apos;e&apos; &#65;&#x42;&#xfc;&#x1F600;</Name>\n"
      "  <Empty/><Empty2 />\n"
      "  <Data><![CDATA[<not markup> & raw]]></Data>\n"
      "  <Nested><Deeper>x</Deeper></Nested>\n"
      "</s3:Root>\n");
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_EQ(root->name, "Root");
  EXPECT_EQ(root->ChildText("Name"), "a & b <c> \"d\" 'e' AB\xC3\xBC\xF0\x9F\x98\x80");
  ASSERT_NE(root->Child("Empty"), nullptr);
  EXPECT_EQ(root->ChildText("Empty2"), "");
  EXPECT_EQ(root->ChildText("Data"), "<not markup> & raw");
  ASSERT_NE(root->Child("Nested"), nullptr);
  EXPECT_EQ(root->Child("Nested")->ChildText("Deeper"), "x");
  EXPECT_EQ(root->Child("Missing"), nullptr);
  EXPECT_EQ(root->ChildText("Missing"), "");
}

TEST(S3XmlTest, MalformedInputIsEioNeverACrash) {
  const std::vector<std::string> bad = {
      "",
      "   ",
      "just text",
      "<a>",
      "<a></b>",
      "</a>",
      "<a><b></a></b>",
      "<a>&unknown;</a>",
      "<a>&#0;</a>",
      "<a>&#xD800;</a>",
      "<a>&#x110000;</a>",
      "<a>&#xZZ;</a>",
      "<a>& no semicolon</a>",
      "<a x=1></a>",
      "<a x=\"1></a>",
      "<a x></a>",
      "<a/><b/>",
      "<a></a>trailing",
      "<a><![CDATA[never closed</a>",
      "<!-- never closed",
      "<?xml never closed",
      "<",
      "<>",
      "<a / >",
      "<a",
      std::string(200, '<'),
      std::string("<a>\0</a", 7),
  };
  for (const std::string& doc : bad) {
    Result<XmlElement> r = ParseXml(doc);
    EXPECT_EQ(r.err(), EIO) << "\"" << doc << "\"";
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("malformed XML"), std::string::npos);
    }
  }
  // Deep nesting is refused rather than recursed into.
  std::string deep;
  for (int i = 0; i < 10000; i++) deep += "<a>";
  EXPECT_EQ(ParseXml(deep).err(), EIO);
  std::string ok_deep;
  for (int i = 0; i < 60; i++) ok_deep += "<a>";
  for (int i = 0; i < 60; i++) ok_deep += "</a>";
  EXPECT_TRUE(ParseXml(ok_deep).ok());
}

TEST(S3XmlTest, RandomBytesAndTruncationsNeverCrash) {
  const std::string doc =
      "<?xml version=\"1.0\"?><ListBucketResult><Name>b</Name><IsTruncated>true</IsTruncated>"
      "<Contents><Key>a&amp;b</Key><Size>3</Size></Contents><NextContinuationToken>t"
      "</NextContinuationToken></ListBucketResult>";
  for (size_t n = 0; n < doc.size(); n++) {
    (void)ParseListObjectsV2(doc.substr(0, n));  // must not crash or hang
  }
  std::mt19937 rng(42);
  for (int i = 0; i < 2000; i++) {
    std::string mutated = doc;
    for (int j = 0; j < 3; j++) {
      mutated[rng() % mutated.size()] = "<>/&;\"'=x\0"[rng() % 10];
    }
    (void)ParseXml(mutated);
    (void)ParseListObjectsV2(mutated);
  }
}

TEST(S3XmlTest, ListObjectsV2AsAwsSendsIt) {
  Result<ListObjectsPage> page = ParseListObjectsV2(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Name>bucket</Name><Prefix>run/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>"
      "<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
      "<Contents><Key>run/a+b%2Bc%26d</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified>"
      "<ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag><Size>434234</Size>"
      "<StorageClass>STANDARD</StorageClass></Contents>"
      "<Contents><Key>run/%C3%BC%0B</Key><Size>0</Size></Contents>"
      "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
      "</ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_TRUE(page->is_truncated);
  EXPECT_EQ(page->next_continuation_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "run/a b+c&d");  // '+' is a space, %2B a plus
  EXPECT_EQ(page->objects[0].size, 434234u);
  EXPECT_EQ(page->objects[0].etag, "fba9dede5f27731c9771645a39863328");  // unquoted
  EXPECT_EQ(page->objects[1].key, "run/\xC3\xBC\x0B");
  EXPECT_EQ(page->objects[1].size, 0u);
  EXPECT_EQ(page->objects[1].etag, "");  // none given
}

TEST(S3XmlTest, ListObjectsV2WithoutEncodingTypeKeepsKeysAsTheyAre) {
  // s3rver ignores encoding-type=url: keys arrive as text, '+' and '%' included.
  Result<ListObjectsPage> page = ParseListObjectsV2(
      "<ListBucketResult xmlns=\"http://doc.s3.amazonaws.com/2006-03-01/\"><Name>b</Name>"
      "<IsTruncated>false</IsTruncated><Contents><Key>a+b%20 &amp;&#x27;</Key><Size>7</Size>"
      "</Contents></ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_FALSE(page->is_truncated);
  EXPECT_TRUE(page->next_continuation_token.empty());
  ASSERT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(page->objects[0].key, "a+b%20 &'");
  EXPECT_EQ(page->objects[0].size, 7u);

  Result<ListObjectsPage> empty =
      ParseListObjectsV2("<ListBucketResult><KeyCount>0</KeyCount></ListBucketResult>");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->objects.empty());
}

TEST(S3XmlTest, ListObjectsV2Errors) {
  EXPECT_EQ(ParseListObjectsV2("<Error><Code>x</Code></Error>").err(), EIO);
  EXPECT_EQ(ParseListObjectsV2("<ListBucketResult><Contents><Size>1</Size></Contents>"
                               "</ListBucketResult>").err(), EIO);
  EXPECT_EQ(ParseListObjectsV2("<ListBucketResult><Contents><Key>k</Key><Size>-1</Size>"
                               "</Contents></ListBucketResult>").err(), EIO);
  EXPECT_EQ(ParseListObjectsV2("<ListBucketResult><Contents><Key>k</Key><Size>99999999999999999999"
                               "</Size></Contents></ListBucketResult>").err(), EIO);
  EXPECT_EQ(ParseListObjectsV2("<ListBucketResult><IsTruncated>maybe</IsTruncated>"
                               "</ListBucketResult>").err(), EIO);
  EXPECT_EQ(ParseListObjectsV2("<ListBucketResult><EncodingType>url</EncodingType><Contents>"
                               "<Key>bad%zz</Key><Size>1</Size></Contents></ListBucketResult>")
                .err(),
            EIO);
}

TEST(S3XmlTest, InitiateMultipartUpload) {
  Result<std::string> id = ParseInitiateMultipartUpload(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult "
      "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Bucket>example-bucket</Bucket>"
      "<Key>example-object</Key><UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA"
      "</UploadId></InitiateMultipartUploadResult>");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA");
  EXPECT_EQ(ParseInitiateMultipartUpload("<InitiateMultipartUploadResult/>").err(), EIO);
  EXPECT_EQ(ParseInitiateMultipartUpload("<Other><UploadId>x</UploadId></Other>").err(), EIO);
}

TEST(S3XmlTest, DeleteResult) {
  Result<std::vector<DeleteError>> errors = ParseDeleteResult(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<DeleteResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
      "<Deleted><Key>sample1.txt</Key></Deleted>"
      "<Error><Key>sample2 &amp; more.txt</Key><Code>AccessDenied</Code><Message>Access Denied"
      "</Message></Error></DeleteResult>");
  ASSERT_TRUE(errors.ok()) << errors.status().ToString();
  ASSERT_EQ(errors->size(), 1u);
  EXPECT_EQ((*errors)[0].key, "sample2 & more.txt");
  EXPECT_EQ((*errors)[0].code, "AccessDenied");
  EXPECT_EQ((*errors)[0].message, "Access Denied");
  Result<std::vector<DeleteError>> quiet = ParseDeleteResult("<DeleteResult/>");
  ASSERT_TRUE(quiet.ok());
  EXPECT_TRUE(quiet->empty());
  EXPECT_EQ(ParseDeleteResult("<Nope/>").err(), EIO);
}

TEST(S3XmlTest, ErrorDocument) {
  const std::string body =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>"
      "<Message>The resource you requested does not exist</Message>"
      "<Resource>/mybucket/myfoto.jpg</Resource><RequestId>4442587FB7D0A2F9</RequestId></Error>";
  Result<S3ErrorDocument> doc = ParseErrorDocument(body);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ(doc->code, "NoSuchKey");
  EXPECT_EQ(doc->message, "The resource you requested does not exist");
  EXPECT_TRUE(IsErrorDocument(body));

  Result<S3ErrorDocument> redirect = ParseErrorDocument(
      "<Error><Code>PermanentRedirect</Code><Message>use the endpoint</Message>"
      "<Endpoint>b.s3.eu-west-1.amazonaws.com</Endpoint><Region>eu-west-1</Region></Error>");
  ASSERT_TRUE(redirect.ok());
  EXPECT_EQ(redirect->endpoint, "b.s3.eu-west-1.amazonaws.com");
  EXPECT_EQ(redirect->region, "eu-west-1");

  EXPECT_FALSE(IsErrorDocument(""));
  EXPECT_FALSE(IsErrorDocument("<CompleteMultipartUploadResult><ETag>x</ETag>"
                               "</CompleteMultipartUploadResult>"));
  EXPECT_FALSE(IsErrorDocument("<Error>never closed"));
  EXPECT_FALSE(IsErrorDocument(std::string(100 << 10, 'x')));
  EXPECT_EQ(ParseErrorDocument("<html>502 Bad Gateway</html>").err(), EIO);
  EXPECT_EQ(ParseErrorDocument("not xml").err(), EIO);
}

TEST(S3XmlTest, CompleteMultipartUploadBody) {
  const std::string body = BuildCompleteMultipartUpload({"\"etag1\"", "\"e<2>&\""});
  EXPECT_EQ(body,
            "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
            "<Part><PartNumber>1</PartNumber><ETag>&quot;etag1&quot;</ETag></Part>"
            "<Part><PartNumber>2</PartNumber><ETag>&quot;e&lt;2&gt;&amp;&quot;</ETag></Part>"
            "</CompleteMultipartUpload>");
  // Our own reader reads it back.
  Result<XmlElement> root = ParseXml(body);
  ASSERT_TRUE(root.ok());
  ASSERT_EQ(root->children.size(), 2u);
  EXPECT_EQ(root->children[1].ChildText("ETag"), "\"e<2>&\"");
}

TEST(S3XmlTest, DeleteBodyEscapesKeys) {
  const std::string body = BuildDeleteObjects({"a&b", "<x>", "q\"'", "sp ace/\xC3\xBC", "cr\r"},
                                              /*quiet=*/true);
  EXPECT_EQ(body,
            "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Quiet>true</Quiet>"
            "<Object><Key>a&amp;b</Key></Object><Object><Key>&lt;x&gt;</Key></Object>"
            "<Object><Key>q&quot;&apos;</Key></Object>"
            "<Object><Key>sp ace/\xC3\xBC</Key></Object><Object><Key>cr&#13;</Key></Object>"
            "</Delete>");
  Result<XmlElement> root = ParseXml(body);
  ASSERT_TRUE(root.ok());
  ASSERT_EQ(root->children.size(), 6u);
  EXPECT_EQ(root->children[1].ChildText("Key"), "a&b");
  EXPECT_EQ(root->children[5].ChildText("Key"), "cr\r");
  EXPECT_EQ(BuildDeleteObjects({"k"}, false),
            "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Object><Key>k</Key>"
            "</Object></Delete>");
}

TEST(S3XmlTest, FormUrlDecode) {
  EXPECT_EQ(*FormUrlDecode("a+b%20c%2Bd%2fe"), "a b c+d/e");
  EXPECT_EQ(*FormUrlDecode(""), "");
  EXPECT_EQ(FormUrlDecode("%").err(), EIO);
  EXPECT_EQ(FormUrlDecode("%4").err(), EIO);
  EXPECT_EQ(FormUrlDecode("%G0").err(), EIO);
}

}  // namespace
}  // namespace ckptfs
