// Tests for LoadAwsCredentials and RedactedDescription: source order, profile
// selection, file syntax, and that no error or description leaks a secret.
#include "remote/aws_credentials.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace ckptfs {
namespace {

constexpr char kId[] = "AKIAIOSFODNN7EXAMPLE";
constexpr char kSecret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
constexpr char kToken[] = "FwoGZXIvYXdzEXAMPLETOKEN";

class AwsCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/awscredsXXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    home_ = tmpl;
    ASSERT_EQ(mkdir((home_ + "/.aws").c_str(), 0700), 0);
  }
  void TearDown() override {
    std::remove((home_ + "/.aws/credentials").c_str());
    std::remove((home_ + "/other").c_str());
    rmdir((home_ + "/.aws").c_str());
    rmdir(home_.c_str());
  }
  void WriteFile(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  void WriteCredentials(const std::string& text) { WriteFile(home_ + "/.aws/credentials", text); }
  CredentialSources Sources() { return CredentialSources{{{"HOME", home_}}}; }

  // Every failure message must be free of secret material.
  static void ExpectNoSecrets(const Status& st) {
    EXPECT_EQ(st.message().find(kSecret), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find(kId), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find(kToken), std::string::npos) << st.message();
  }

  std::string home_;
};

TEST_F(AwsCredentialsTest, EnvironmentWins) {
  WriteCredentials("[default]\naws_access_key_id = FILEID\naws_secret_access_key = FILESECRET\n");
  CredentialSources src = Sources();
  src.env["AWS_ACCESS_KEY_ID"] = kId;
  src.env["AWS_SECRET_ACCESS_KEY"] = kSecret;
  src.env["AWS_SESSION_TOKEN"] = kToken;
  auto creds = LoadAwsCredentials(src);
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key_id, kId);
  EXPECT_EQ(creds->secret_access_key, kSecret);
  EXPECT_EQ(creds->session_token, kToken);
}

TEST_F(AwsCredentialsTest, DefaultProfileFromFileWithCommentsAndSpacing) {
  WriteCredentials(
      "# written by aws configure\n"
      "; another comment\n"
      "\n"
      "[other]\n"
      "aws_access_key_id=OTHERID\n"
      "aws_secret_access_key=OTHERSECRET\n"
      "  [ default ]  \r\n"
      "  AWS_Access_Key_ID   =   " +
      std::string(kId) +
      "  # work account\r\n"
      "\taws_secret_access_key\t=\t" +
      kSecret +
      "\n"
      "region = us-east-1\n");
  auto creds = LoadAwsCredentials(Sources());
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key_id, kId);
  EXPECT_EQ(creds->secret_access_key, kSecret);
  EXPECT_EQ(creds->session_token, "");
}

TEST_F(AwsCredentialsTest, ProfileSelectionAndExplicitFile) {
  WriteFile(home_ + "/other",
            "[default]\naws_access_key_id=DEFAULTID\naws_secret_access_key=DEFAULTSECRET\n"
            "[train]\naws_access_key_id=" +
                std::string(kId) + "\naws_secret_access_key=" + kSecret +
                "\naws_session_token=" + kToken + "\n");
  CredentialSources src = Sources();
  src.env["AWS_SHARED_CREDENTIALS_FILE"] = "~/other";
  src.env["AWS_PROFILE"] = "train";
  // Only half of the environment pair: ignored in favour of the file.
  src.env["AWS_ACCESS_KEY_ID"] = "HALFSET";
  auto creds = LoadAwsCredentials(src);
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ(creds->access_key_id, kId);
  EXPECT_EQ(creds->secret_access_key, kSecret);
  EXPECT_EQ(creds->session_token, kToken);
}

TEST_F(AwsCredentialsTest, MissingProfile) {
  WriteCredentials("[default]\naws_access_key_id=" + std::string(kId) +
                   "\naws_secret_access_key=" + kSecret + "\n");
  CredentialSources src = Sources();
  src.env["AWS_PROFILE"] = "prod";
  auto creds = LoadAwsCredentials(src);
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.err(), ENOENT);
  EXPECT_NE(creds.status().message().find("'prod'"), std::string::npos);
  ExpectNoSecrets(creds.status());
}

TEST_F(AwsCredentialsTest, NoSourcesAtAll) {
  auto creds = LoadAwsCredentials(Sources());
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.err(), ENOENT);
  EXPECT_EQ(creds.status().message(),
            "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or add profile "
            "'default' to " +
                home_ + "/.aws/credentials");

  CredentialSources half;
  half.env["AWS_SECRET_ACCESS_KEY"] = kSecret;  // no HOME, no id
  auto none = LoadAwsCredentials(half);
  EXPECT_EQ(none.err(), ENOENT);
  EXPECT_NE(none.status().message().find("AWS_ACCESS_KEY_ID is not"), std::string::npos);
  ExpectNoSecrets(none.status());
}

TEST_F(AwsCredentialsTest, MalformedFileNamesLineNotContents) {
  WriteCredentials("[default]\naws_access_key_id=" + std::string(kId) + "\n" + kSecret + "\n");
  auto creds = LoadAwsCredentials(Sources());
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.err(), EINVAL);
  EXPECT_NE(creds.status().message().find("credentials:3:"), std::string::npos)
      << creds.status().message();
  ExpectNoSecrets(creds.status());

  for (const std::string& bad :
       {std::string("aws_access_key_id=x\n[default]\n"), std::string("[default\n"),
        std::string("[]\n"), std::string("[default]\n= " + std::string(kSecret) + "\n")}) {
    WriteCredentials(bad);
    auto r = LoadAwsCredentials(Sources());
    EXPECT_EQ(r.err(), EINVAL) << bad;
    ExpectNoSecrets(r.status());
  }
}

TEST_F(AwsCredentialsTest, ProfileLackingSecret) {
  WriteCredentials("[default]\naws_access_key_id=" + std::string(kId) + "\n");
  auto creds = LoadAwsCredentials(Sources());
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.err(), EINVAL);
  EXPECT_NE(creds.status().message().find("lacks aws_secret_access_key"), std::string::npos);
  ExpectNoSecrets(creds.status());
}

TEST_F(AwsCredentialsTest, UnreadableFileKeepsErrno) {
  CredentialSources src = Sources();
  src.env["AWS_SHARED_CREDENTIALS_FILE"] = home_;  // a directory: reading fails
  auto creds = LoadAwsCredentials(src);
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.err(), EISDIR) << creds.status().ToString();
}

TEST(RedactedDescriptionTest, NeverShowsSecrets) {
  std::string d = RedactedDescription(AwsCredentials{kId, kSecret, kToken});
  EXPECT_EQ(d, "AKIA\u2026(20 chars), secret set, session token set");
  EXPECT_EQ(d.find(kSecret), std::string::npos);
  EXPECT_EQ(d.find(kToken), std::string::npos);
  EXPECT_EQ(RedactedDescription(AwsCredentials{"SHORTID", "", ""}),
            "\u2026(7 chars), no secret, no session token");
  EXPECT_EQ(RedactedDescription(AwsCredentials{}), "no access key id, no secret, no session token");
}

TEST(CredentialSourcesTest, FromEnvironmentReadsOnlyNamedVariables) {
  const char* old = std::getenv("AWS_PROFILE");
  std::string saved = old ? old : "";
  ASSERT_EQ(setenv("AWS_PROFILE", "ckptfs-test-profile", 1), 0);
  CredentialSources src = CredentialSourcesFromEnvironment();
  if (old) {
    setenv("AWS_PROFILE", saved.c_str(), 1);
  } else {
    unsetenv("AWS_PROFILE");
  }
  EXPECT_EQ(src.env["AWS_PROFILE"], "ckptfs-test-profile");
  EXPECT_EQ(src.env.count("PATH"), 0u);
}

}  // namespace
}  // namespace ckptfs
