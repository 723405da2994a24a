// Tests of safetensors header validation: the real DCP-written shards of
// tests/fixtures/dcp/torch-2.14/hf_sharded, generated files, and each
// rule of the format.
#include "formats/safetensors_header.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "formats/formats_test_util.h"

namespace ckptfs {
namespace {

using testing::MakeSafetensors;
using testing::TestTensor;

Result<SafetensorsHeader> ParseFile(const std::string& file) {
  Result<uint64_t> n = ParseSafetensorsHeaderLength(file);
  if (!n.ok()) return n.status();
  if (file.size() < 8 + *n) return Status::Error(EIO, "short");
  return ParseSafetensorsHeader(*n, std::string_view(file).substr(8, *n));
}

std::string ErrorOfJson(const std::string& json) {
  Result<SafetensorsHeader> h = ParseSafetensorsHeader(json.size(), json);
  EXPECT_FALSE(h.ok()) << json;
  return h.ok() ? "" : h.status().message();
}

TEST(SafetensorsHeaderTest, RealDcpWrittenShards) {
  const std::string dir = testing::DcpTestdata("torch-2.14/hf_sharded/");
  std::string file;
  ASSERT_TRUE(testing::ReadTestFile(dir + "shard-00001-model-00001-of-00001.safetensors", &file));
  Result<SafetensorsHeader> h = ParseFile(file);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->header_length, 384u);
  EXPECT_EQ(h->file_size(), file.size());
  ASSERT_EQ(h->tensors.size(), 3u);  // sorted by offsets, not by JSON order
  EXPECT_EQ(h->tensors[0].name, "colsharded");
  EXPECT_EQ(h->tensors[0].shape, (std::vector<uint64_t>{6, 2}));
  EXPECT_EQ(h->tensors[2].name, "emb");
  EXPECT_EQ(h->tensors[2].dtype, "BF16");
  EXPECT_EQ(h->Find("w")->begin, 48u);
  EXPECT_EQ(h->Find("missing"), nullptr);
  bool has_version = false;
  for (const auto& [k, v] : h->metadata) has_version |= k == "DCP_VERSION" && v == "1.0";
  EXPECT_TRUE(has_version);

  ASSERT_TRUE(testing::ReadTestFile(dir + "shard-00002-model-00001-of-00001.safetensors", &file));
  h = ParseFile(file);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->file_size(), file.size());
  EXPECT_EQ(h->Find("fp8")->dtype, "F8_E4M3");
  EXPECT_EQ(h->Find("u16")->end - h->Find("u16")->begin, 6u);
}

TEST(SafetensorsHeaderTest, EveryTruncationOfARealHeaderFails) {
  std::string file;
  ASSERT_TRUE(testing::ReadTestFile(
      testing::DcpTestdata("torch-2.14/hf_sharded/shard-00002-model-00001-of-00001.safetensors"),
      &file));
  uint64_t n = ParseSafetensorsHeaderLength(file).value();
  std::string json = file.substr(8, n);
  size_t close = json.find_last_of('}');
  for (size_t k = 0; k <= close; ++k) {
    Result<SafetensorsHeader> h = ParseSafetensorsHeader(k, std::string_view(json).substr(0, k));
    ASSERT_FALSE(h.ok()) << k;
    ASSERT_EQ(h.err(), EIO);
  }
  for (size_t k = 0; k < 8; ++k) EXPECT_FALSE(ParseSafetensorsHeaderLength(file.substr(0, k)).ok());
}

TEST(SafetensorsHeaderTest, GeneratedFilesAndEdgeCases) {
  std::string f = MakeSafetensors({{"a", "F32", {2, 3}},
                                   {"empty", "BF16", {0, 4}},
                                   {"scalar", "I64", {}},
                                   {"nib", "F4", {4}},
                                   {"new", "F99_FUTURE", {5}}},
                                  {{"format", "pt"}});
  Result<SafetensorsHeader> h = ParseFile(f);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->header_length % 8, 0u);
  EXPECT_EQ(h->file_size(), f.size());
  EXPECT_EQ(h->data_size, 24u + 0 + 8 + 2 + 5);  // the unknown dtype is taken as it comes
  EXPECT_EQ(h->Find("nib")->end - h->Find("nib")->begin, 2u);
  EXPECT_EQ(SafetensorsDtypeBits("F6_E2M3"), 6u);
  EXPECT_FALSE(SafetensorsDtypeBits("f32").has_value());
  // No tensors at all is valid.
  EXPECT_TRUE(ParseSafetensorsHeader(2, "{}").ok());
}

TEST(SafetensorsHeaderTest, RulesViolations) {
  std::string big(8, '\0');
  big[4] = 1;  // 2^32
  EXPECT_NE(ParseSafetensorsHeaderLength(big).status().message().find("exceeds the limit"),
            std::string::npos);
  EXPECT_NE(ParseSafetensorsHeaderLength("abc").status().message().find("shorter than"),
            std::string::npos);
  EXPECT_FALSE(ParseSafetensorsHeader(5, "{}").ok());  // length disagrees with the bytes
  EXPECT_NE(ErrorOfJson(" {}").find("does not start with '{'"), std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"a\":").find("not valid JSON"), std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"__metadata__\":{\"k\":1}}").find("is not a string"), std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"__metadata__\":[]}").find("not an object"), std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"a\":1}").find("is not an object"), std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}").find("no dtype"),
            std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}").find("no shape"),
            std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}")
                .find("data_offsets"),
            std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-1,3]}}")
                .find("data_offsets"),
            std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}")
                .find("ends before"),
            std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}")
                .find("non-size"),
            std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}")
                .find("need 8"),
            std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}")
                .find("whole bytes"),
            std::string::npos);
  EXPECT_NE(
      ErrorOfJson(
          "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}")
          .find("overflows"),
      std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}")
                .find("leaving a hole"),
            std::string::npos);
  EXPECT_NE(ErrorOfJson("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                        "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}")
                .find("overlapping"),
            std::string::npos);
}

}  // namespace
}  // namespace ckptfs
