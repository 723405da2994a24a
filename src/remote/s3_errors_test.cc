// The S3 error table: each row of s3_errors.h, and what the messages say.
#include "remote/s3_errors.h"

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

S3ErrorContext Ctx() {
  S3ErrorContext ctx;
  ctx.bucket = "ckpt-bucket";
  ctx.endpoint = "http://127.0.0.1:4568";
  ctx.upload_id = "upload-123";
  return ctx;
}

S3ErrorDocument Doc(std::string code, std::string message) {
  S3ErrorDocument d;
  d.code = std::move(code);
  d.message = std::move(message);
  return d;
}

TEST(S3ErrorsTest, NotFound) {
  Status st = MapS3Error(404, Doc("NoSuchKey", "The specified key does not exist."), Ctx());
  EXPECT_EQ(st.err(), ENOENT);
  EXPECT_NE(st.message().find("NoSuchKey"), std::string::npos) << st.message();

  st = MapS3Error(404, S3ErrorDocument{}, Ctx());  // HEAD: no body
  EXPECT_EQ(st.err(), ENOENT);
  EXPECT_NE(st.message().find("HTTP 404"), std::string::npos) << st.message();

  st = MapS3Error(404, Doc("NoSuchBucket", "The specified bucket does not exist"), Ctx());
  EXPECT_EQ(st.err(), ENOENT);
  EXPECT_NE(st.message().find("bucket ckpt-bucket does not exist at http://127.0.0.1:4568"),
            std::string::npos)
      << st.message();

  st = MapS3Error(404, Doc("NoSuchUpload", "The specified upload does not exist."), Ctx());
  EXPECT_EQ(st.err(), ENOENT);
  EXPECT_NE(st.message().find("upload-123"), std::string::npos) << st.message();
}

TEST(S3ErrorsTest, AccessProblemsAreEaccesWithS3sWords) {
  for (const char* code : {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                           "ExpiredToken", "RequestTimeTooSkewed"}) {
    Status st = MapS3Error(403, Doc(code, "Some explanation."), Ctx());
    EXPECT_EQ(st.err(), EACCES) << code;
    EXPECT_NE(st.message().find(std::string(code) + ": Some explanation. (HTTP 403)"),
              std::string::npos)
        << st.message();
  }
  EXPECT_EQ(MapS3Error(403, S3ErrorDocument{}, Ctx()).err(), EACCES);  // HEAD
  EXPECT_EQ(MapS3Error(403, S3ErrorDocument{}, Ctx()).message(), "HTTP 403");
}

TEST(S3ErrorsTest, WrongRegionSaysWhichRegion) {
  S3ErrorContext ctx = Ctx();
  ctx.bucket_region = "eu-central-1";
  Status st = MapS3Error(301, Doc("PermanentRedirect", "The bucket you are attempting to access "
                                                       "must be addressed using the specified "
                                                       "endpoint."),
                         ctx);
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("region eu-central-1"), std::string::npos) << st.message();

  S3ErrorDocument doc = Doc("AuthorizationHeaderMalformed", "the region 'us-east-1' is wrong");
  doc.region = "ap-south-1";
  st = MapS3Error(400, doc, Ctx());
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("region ap-south-1"), std::string::npos) << st.message();

  st = MapS3Error(301, S3ErrorDocument{}, Ctx());  // HEAD, no region header
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("region or endpoint"), std::string::npos) << st.message();
}

TEST(S3ErrorsTest, TheRestOfTheTable) {
  struct Row {
    int status;
    const char* code;
    int err;
  };
  for (const Row& r : {Row{400, "EntityTooSmall", EINVAL}, Row{400, "InvalidPart", EINVAL},
                       Row{400, "InvalidPartOrder", EINVAL}, Row{400, "MalformedXML", EINVAL},
                       Row{400, "InvalidArgument", EINVAL}, Row{400, "EntityTooLarge", EFBIG},
                       Row{400, "RequestTimeout", ETIMEDOUT}, Row{503, "SlowDown", EAGAIN},
                       Row{503, "", EAGAIN}, Row{429, "", EAGAIN},
                       Row{405, "MethodNotAllowed", EOPNOTSUPP},
                       Row{501, "NotImplemented", EOPNOTSUPP}, Row{500, "InternalError", EIO},
                       Row{200, "InternalError", EIO}, Row{409, "OperationAborted", EIO},
                       Row{400, "SomethingNew", EIO}, Row{502, "", EIO}}) {
    Status st = MapS3Error(r.status, Doc(r.code, "msg"), Ctx());
    EXPECT_EQ(st.err(), r.err) << r.status << " " << r.code << ": " << st.message();
    EXPECT_NE(st.message().find("HTTP " + std::to_string(r.status)), std::string::npos);
  }
  // A code without a message still reads well.
  EXPECT_EQ(MapS3Error(500, Doc("InternalError", ""), Ctx()).message(),
            "InternalError (HTTP 500)");
}

}  // namespace
}  // namespace ckptfs
