#include "formats/node_name.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ckptfs {
namespace {

TEST(NodeName, AcceptsHostnameLikeNames) {
  for (const std::string& name :
       std::vector<std::string>{"a", "Z", "0", "gpu-017", "node_1.rack-2", "9x", "a..b", "a-", "a_",
                                "GPU-000.cluster.example", std::string(63, 'x')}) {
    EXPECT_TRUE(ValidateNodeName(name).ok()) << name << ": " << ValidateNodeName(name).message();
  }
}

TEST(NodeName, RefusesWhatCannotBeAKeyComponent) {
  const std::string bad[] = {"",
                             ".",
                             "..",
                             "-a",
                             "_a",
                             ".a",
                             "a.",
                             "gpu.017.",
                             "a/b",
                             "a~b",
                             "a b",
                             "a\tb",
                             std::string("a\0b", 3),
                             "é",
                             "a\xc3\xa9",
                             "a:b",
                             "a*",
                             "a\\b",
                             std::string(64, 'x'),
                             "a'b",
                             "a\"b",
                             "~",
                             "/",
                             "a\n"};
  for (const std::string& name : bad) {
    const Status st = ValidateNodeName(name);
    EXPECT_EQ(st.err(), EINVAL) << name;
    // Every refusal says what is allowed.
    EXPECT_NE(st.message().find("A-Z, a-z, 0-9, '.', '_' and '-'"), std::string::npos)
        << st.message();
  }
}

TEST(NodeName, MessagesSayWhatIsWrong) {
  EXPECT_NE(ValidateNodeName("").message().find("empty"), std::string::npos);
  EXPECT_NE(ValidateNodeName(std::string(64, 'x')).message().find("too long (64 characters)"),
            std::string::npos);
  EXPECT_NE(ValidateNodeName(".").message().find("reserved"), std::string::npos);
  EXPECT_NE(ValidateNodeName("..").message().find("reserved"), std::string::npos);
  EXPECT_NE(ValidateNodeName("-a").message().find("starts with '-'"), std::string::npos);
  EXPECT_NE(ValidateNodeName("a~b").message().find("contains '~' at offset 1"), std::string::npos);
  EXPECT_NE(ValidateNodeName("a.").message().find("ends with '.'"), std::string::npos);
  // Bytes that would garble a log line are shown escaped.
  const std::string nul = ValidateNodeName(std::string("a\0b", 3)).message();
  EXPECT_NE(nul.find("'a\\x00b'"), std::string::npos) << nul;
  EXPECT_NE(nul.find("contains 0x00 at offset 1"), std::string::npos) << nul;
  EXPECT_EQ(nul.find('\0'), std::string::npos);
  // A long name is cut in the message.
  const std::string long_msg = ValidateNodeName(std::string(5000, 'y')).message();
  EXPECT_LT(long_msg.size(), 400u);
  EXPECT_NE(long_msg.find("..."), std::string::npos);
}

TEST(NodeName, LengthLimitIs63) {
  EXPECT_EQ(kMaxNodeNameLength, 63u);
  EXPECT_TRUE(ValidateNodeName(std::string(62, 'a') + "9").ok());
  EXPECT_EQ(ValidateNodeName(std::string(63, 'a') + "9").err(), EINVAL);
}

}  // namespace
}  // namespace ckptfs
