#include "views/view_names.h"

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

TEST(ViewNamesTest, FileNamesEscapeOnlyWhatAFileNameCannotHold) {
  EXPECT_EQ(ViewFileName("model.layers.0.attn.weight"), "model.layers.0.attn.weight");
  EXPECT_EQ(ViewFileName("a/b%c"), "a%2Fb%25c");
  EXPECT_EQ(ViewFileName(std::string("a\0b", 3)), "a%00b");
  EXPECT_EQ(ViewFileName(""), std::nullopt);
  EXPECT_EQ(ViewFileName("."), std::nullopt);
  EXPECT_EQ(ViewFileName(".."), std::nullopt);
  EXPECT_EQ(ViewFileName(std::string(255, 'x')), std::string(255, 'x'));
  EXPECT_EQ(ViewFileName(std::string(254, 'x') + "/"), std::nullopt);
}

TEST(ViewNamesTest, GroupsAreTheFirstComponent) {
  EXPECT_EQ(SplitGroup("model.w"), std::make_pair(std::string("model"), std::string("w")));
  EXPECT_EQ(SplitGroup("optim.state.0.exp_avg")->second, "state.0.exp_avg");
  EXPECT_EQ(SplitGroup("w"), std::nullopt);
  EXPECT_EQ(SplitGroup(".w"), std::nullopt);
  EXPECT_EQ(SplitGroup("w."), std::nullopt);
}

TEST(ViewNamesTest, DtypeCodesRoundTrip) {
  for (const char* d : {"float32", "bfloat16", "float8_e4m3fn", "float8_e5m2", "uint16", "bool", "int64"}) {
    std::optional<std::string> code = SafetensorsCodeOf(d);
    ASSERT_TRUE(code) << d;
    EXPECT_EQ(TorchDtypeOfCode(*code), d);
  }
  EXPECT_EQ(SafetensorsCodeOf("bfloat16"), "BF16");
  EXPECT_EQ(SafetensorsCodeOf("complex128"), std::nullopt);
  EXPECT_EQ(SafetensorsCodeOf("float4_e2m1fn_x2"), std::nullopt);
  EXPECT_EQ(TorchDtypeOfCode("F4"), std::nullopt);
}

}  // namespace
}  // namespace ckptfs
