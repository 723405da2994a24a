#include "formats/olmo_metadata.h"

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

TEST(OlmoMetadataTest, BothShardSpecFormsAndTheLegacyOne) {
  Result<OlmoMetadata> m = ParseOlmoMetadata(R"({"tensors": {
    "w": {"shape": [4, 3], "is_sharded": true, "dtype": "F32", "shard_spec_per_file": {
      "rank_1.safetensors": {"flattened_offsets": [[2, 5], [9, 12]], "local_shape": null, "global_offset": null},
      "rank_0.safetensors": {"flattened_offsets": null, "local_shape": [1, 2], "global_offset": [3, 1]}}},
    "c": {"shape": [5], "dtype": "I64", "flattened_offsets_per_file": {
      "rank_0.safetensors": [0, 5], "rank_2.safetensors": [[0, 0]]}}}})");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->tensors.size(), 2u);
  const OlmoTensor& c = m->tensors[0];  // key order
  EXPECT_EQ(c.key, "c");
  ASSERT_EQ(c.shards.size(), 2u);
  EXPECT_EQ(c.shards[0].numel(), 5u);
  EXPECT_EQ(c.shards[1].numel(), 0u);
  EXPECT_TRUE(c.shards[1].ranges.empty());
  const OlmoTensor& w = m->tensors[1];
  EXPECT_EQ(w.shape, (std::vector<int64_t>{4, 3}));
  EXPECT_TRUE(w.shards[0].is_box);
  EXPECT_EQ(w.shards[0].global_offset, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(w.shards[0].numel(), 2u);
  EXPECT_EQ(w.shards[1].ranges, (std::vector<std::pair<uint64_t, uint64_t>>{{2, 5}, {9, 12}}));
  EXPECT_EQ(m->files, (std::vector<std::string>{"rank_0.safetensors", "rank_1.safetensors", "rank_2.safetensors"}));
}

TEST(OlmoMetadataTest, MalformedInputSaysWhatAndWhere) {
  struct Case {
    const char* json;
    const char* message;
  } cases[] = {
      {"{\"tensors\": ", "not valid JSON"},
      {"[]", "not a JSON object"},
      {"{}", "no \"tensors\""},
      {R"({"tensors": []})", "\"tensors\" is not an object"},
      {R"({"tensors": {"w": {"shape": [2]}}})", "tensor 'w': no dtype"},
      {R"({"tensors": {"w": {"dtype": "F32", "shard_spec_per_file": {}}}})", "tensor 'w': no shape"},
      {R"({"tensors": {"w": {"dtype": "F32", "shape": [-1], "shard_spec_per_file": {}}}})", "not a size"},
      {R"({"tensors": {"w": {"dtype": "F32", "shape": [2]}}})", "names no files"},
      {R"({"tensors": {"w": {"dtype": "F32", "shape": [2], "shard_spec_per_file": {"../x": {}}}}})",
       "unsafe path '../x'"},
      {R"({"tensors": {"w": {"dtype": "F32", "shape": [6], "shard_spec_per_file": {
          "r": {"flattened_offsets": [[3, 1]]}}}}})", "is outside the tensor"},
      {R"({"tensors": {"w": {"dtype": "F32", "shape": [6], "shard_spec_per_file": {
          "r": {"flattened_offsets": [[0, 7]]}}}}})", "is outside the tensor"},
      {R"({"tensors": {"w": {"dtype": "F32", "shape": [6], "shard_spec_per_file": {
          "r": {"flattened_offsets": [[0, 6], [0, 6]]}}}}})", "more elements than the tensor"},
      {R"({"tensors": {"w": {"dtype": "F32", "shape": [2, 2], "shard_spec_per_file": {
          "r": {"local_shape": [2, 2], "global_offset": [1, 0]}}}}})", "outside the tensor"},
      {R"({"tensors": {"w": {"dtype": "F32", "shape": [2, 2], "shard_spec_per_file": {
          "r": {"local_shape": [2], "global_offset": [0]}}}}})", "2 dimensions"},
      {R"({"tensors": {"w": {"dtype": "F32", "shape": [2, 2], "shard_spec_per_file": {
          "r": {"local_shape": null}}}}})", "neither flattened_offsets nor local_shape"},
      {R"({"tensors": {"w": {"dtype": "F32", "shape": [4611686018427387905, 4],
          "shard_spec_per_file": {}}}})", "not a size"},
      {R"({"tensors": {"w": {"dtype": "F32", "shape": [4611686018427387903, 4611686018427387903],
          "shard_spec_per_file": {}}}})", "overflows"},
  };
  for (const Case& c : cases) {
    Result<OlmoMetadata> m = ParseOlmoMetadata(c.json);
    ASSERT_FALSE(m.ok()) << c.json;
    EXPECT_EQ(m.status().err(), EIO);
    EXPECT_NE(m.status().message().find(c.message), std::string::npos) << m.status().ToString();
  }
}

}  // namespace
}  // namespace ckptfs
