// FullView and ViewFileReader over the real torch 1.13 and 2.14 checkpoints
// in tests/fixtures/dcp (compared with their expected/ full tensors, which
// torch itself produced), over OLMo-core safetensors checkpoints built here,
// and over damaged inputs.
#include "views/full_view.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "formats/formats_test_util.h"
#include "formats/safetensors_header.h"
#include "formats/torch_zip.h"
#include "views/view_reader.h"
#include "views/views_test_util.h"

namespace ckptfs {
namespace {

using nlohmann::json;
using testing::BorrowedShardReader;
using testing::DirShardReader;
using testing::MemShardReader;

std::shared_ptr<FullView> BuildOrDie(ShardReader& files) {
  auto view = FullView::Build(files);
  EXPECT_TRUE(view.ok()) << view.status().ToString();
  if (!view.ok() || !*view) return nullptr;
  return **view;
}

// The whole file, read in pieces of `piece` bytes.
Result<std::string> ReadAll(const std::shared_ptr<FullView>& view, uint32_t node, ShardReader* files,
                            size_t piece = 1 << 20) {
  ViewFileReader reader(view, node, std::make_unique<BorrowedShardReader>(files));
  std::string out;
  std::string buf(piece, '\0');
  for (;;) {
    Result<size_t> n = reader.Read(buf.data(), buf.size(), out.size());
    if (!n.ok()) return n.status();
    if (*n == 0) return out;
    out.append(buf.data(), *n);
  }
}

Result<std::string> ReadNamed(const std::shared_ptr<FullView>& view, const std::string& name,
                              ShardReader* files, uint32_t dir = FullView::kRootNode) {
  std::optional<uint32_t> node = view->Lookup(dir, name);
  if (!node) return Status::Error(ENOENT, name);
  return ReadAll(view, *node, files);
}

class RealDcpTest : public ::testing::TestWithParam<const char*> {};

// The shared cases, then the torch 2.x ones generated for this repository
// (tests/fixtures/torch2, see its README): 2-D meshes, fp8, zstd, threads.
std::vector<const char*> AllCases() {
  std::vector<const char*> cases(std::begin(testing::kDcpCases), std::end(testing::kDcpCases));
  for (const char* c : {"fixtures:mesh2d", "fixtures:fp8", "fixtures:zstd", "fixtures:threads"}) cases.push_back(c);
  return cases;
}

std::string CaseDir(const std::string& name) {
  const std::string prefix = "fixtures:";
  if (name.compare(0, prefix.size(), prefix) == 0) {
    return testing::SourceDir() + "/tests/fixtures/torch2/" + name.substr(prefix.size());
  }
  return testing::DcpTestdata(name);
}

TEST_P(RealDcpTest, EveryFullFileEqualsTorchsFullTensor) {
  const std::string dir = CaseDir(GetParam());
  DirShardReader files(dir);
  std::shared_ptr<FullView> view = BuildOrDie(files);
  ASSERT_TRUE(view);
  EXPECT_EQ(view->format(), ViewFormat::kDcp);
  std::string index_text;
  ASSERT_TRUE(testing::ReadTestFile(dir + "/expected/index.json", &index_text));
  const json expected = json::parse(index_text);
  const json index = json::parse(view->index_json());
  EXPECT_EQ(index["format"], "dcp");

  std::mt19937 rng(7);
  size_t tensors = 0;
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    const std::string key = it.key();
    if (!it->contains("dtype")) {
      // A non-tensor item: bytes/<key>, as stored (a torch.save zip here).
      Result<std::string> item = ReadNamed(view, key, &files, FullView::kBytesDirNode);
      ASSERT_TRUE(item.ok()) << key << ": " << item.status().ToString();
      EXPECT_EQ(item->substr(0, 2), "PK") << key;
      EXPECT_EQ(index["bytes"][key]["bytes"], item->size());
      continue;
    }
    ++tensors;
    std::string want;
    ASSERT_TRUE(testing::ReadTestFile(dir + "/expected/" + key + ".bin", &want));
    std::optional<uint32_t> node = view->Lookup(FullView::kRootNode, key);
    ASSERT_TRUE(node) << key;
    EXPECT_EQ(view->nodes()[*node].size, want.size()) << key;
    EXPECT_EQ(view->Xattr(*node, "user.ckptfs.dtype"), (*it)["dtype"].get<std::string>());
    EXPECT_EQ(view->Xattr(*node, "user.ckptfs.shape"), (*it)["shape"].dump());
    Result<std::string> got = ReadAll(view, *node, &files);
    ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
    EXPECT_EQ(*got, want) << key;
    // Reads at arbitrary offsets and lengths, past the end included.
    ViewFileReader reader(view, *node, std::make_unique<BorrowedShardReader>(&files));
    for (int i = 0; i < 20; ++i) {
      const uint64_t off = rng() % (want.size() + 2);
      const size_t len = 1 + rng() % (want.size() + 3);
      std::string buf(len, '\0');
      Result<size_t> n = reader.Read(buf.data(), len, off);
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      const std::string expect = off < want.size() ? want.substr(off, len) : "";
      EXPECT_EQ(buf.substr(0, *n), expect) << key << " at " << off << "+" << len;
    }
    EXPECT_EQ(index["tensors"][key]["bytes"], want.size());
    EXPECT_EQ(index["tensors"][key]["file"], key);
  }
  EXPECT_GT(tensors, 0u);

  // all.safetensors: valid, and each tensor's bytes are the expected ones.
  Result<std::string> all = ReadNamed(view, "all.safetensors", &files);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  Result<uint64_t> n = ParseSafetensorsHeaderLength(*all);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n % 8, 0u);
  Result<SafetensorsHeader> header = ParseSafetensorsHeader(*n, std::string_view(*all).substr(8, *n));
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->file_size(), all->size());
  for (const SafetensorsTensor& t : header->tensors) {
    std::string want;
    ASSERT_TRUE(testing::ReadTestFile(dir + "/expected/" + t.name + ".bin", &want)) << t.name;
    EXPECT_EQ(all->substr(header->data_start() + t.begin, t.end - t.begin), want) << t.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RealDcpTest, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(FullViewTest, GroupSafetensorsUseNamesRelativeToTheGroup) {
  const std::string dir = testing::DcpTestdata("torch-2.14/dcp_default");
  DirShardReader files(dir);
  std::shared_ptr<FullView> view = BuildOrDie(files);
  ASSERT_TRUE(view);
  std::vector<std::string> root;
  for (uint32_t c : view->Children(FullView::kRootNode)) root.push_back(view->nodes()[c].name);
  EXPECT_EQ(root, (std::vector<std::string>{"all.safetensors", "bytes", "extra.0", "extra.safetensors",
                                            "index.json", "model.colsharded", "model.emb", "model.fp8",
                                            "model.plain_t", "model.rep", "model.safetensors", "model.u16",
                                            "model.w"}));
  Result<std::string> model = ReadNamed(view, "model.safetensors", &files);
  ASSERT_TRUE(model.ok());
  Result<uint64_t> n = ParseSafetensorsHeaderLength(*model);
  ASSERT_TRUE(n.ok());
  Result<SafetensorsHeader> header = ParseSafetensorsHeader(*n, std::string_view(*model).substr(8, *n));
  ASSERT_TRUE(header.ok());
  std::vector<std::string> names;
  for (const auto& t : header->tensors) names.push_back(t.name);
  // Descending alignment, then name, as the safetensors library lays out.
  EXPECT_EQ(names, (std::vector<std::string>{"colsharded", "plain_t", "rep", "w", "emb", "u16", "fp8"}));
  EXPECT_EQ(header->Find("fp8")->dtype, "F8_E4M3");
  std::vector<std::string> items;
  for (uint32_t c : view->Children(FullView::kBytesDirNode)) items.push_back(view->nodes()[c].name);
  EXPECT_EQ(items, (std::vector<std::string>{"extra.1", "optim.param_groups.0.lr",
                                             "optim.param_groups.0.params", "optim.step"}));
  // optim.step = 7: a torch.save zip whose data.pkl is the int.
  Result<std::string> step = ReadNamed(view, "optim.step", &files, FullView::kBytesDirNode);
  ASSERT_TRUE(step.ok());
  StringByteSource src(*step);
  Result<TorchZipArchive> zip = TorchZipArchive::Open(src, 0, step->size());
  ASSERT_TRUE(zip.ok());
  Result<std::string> pkl = zip->ReadRecord(src, *zip->Find("data.pkl"), 1 << 10);
  ASSERT_TRUE(pkl.ok());
  EXPECT_EQ(*pkl, std::string("\x80\x02K\x07.", 5));
}

TEST(FullViewTest, ZstdItemsDecodeToTheSameBytesAsPlainOnes) {
  DirShardReader plain_files(testing::DcpTestdata("torch-2.14/dcp_default"));
  DirShardReader zstd_files(testing::DcpTestdata("torch-2.14/dcp_zstd"));
  std::shared_ptr<FullView> plain = BuildOrDie(plain_files);
  std::shared_ptr<FullView> zstd = BuildOrDie(zstd_files);
  ASSERT_TRUE(plain && zstd);
  for (const char* name : {"all.safetensors", "model.safetensors"}) {
    Result<std::string> a = ReadNamed(plain, name, &plain_files);
    Result<std::string> b = ReadNamed(zstd, name, &zstd_files);
    ASSERT_TRUE(a.ok() && b.ok()) << (b.ok() ? a.status() : b.status()).ToString();
    EXPECT_EQ(*a, *b) << name;
  }
  for (uint32_t c : plain->Children(FullView::kBytesDirNode)) {
    const std::string name = plain->nodes()[c].name;
    Result<std::string> a = ReadNamed(plain, name, &plain_files, FullView::kBytesDirNode);
    Result<std::string> b = ReadNamed(zstd, name, &zstd_files, FullView::kBytesDirNode);
    ASSERT_TRUE(a.ok() && b.ok()) << name;
    EXPECT_EQ(*a, *b) << name;
    EXPECT_EQ(zstd->nodes()[*zstd->Lookup(FullView::kBytesDirNode, name)].size, a->size());
  }
}

// Loads a real case into memory so that tests can damage it.
MemShardReader LoadCase(const std::string& rel, const std::vector<std::string>& names) {
  MemShardReader files;
  for (const std::string& n : names) {
    EXPECT_TRUE(testing::ReadTestFile(testing::DcpTestdata(rel + "/" + n), &files.files[n])) << n;
  }
  return files;
}

TEST(FullViewTest, DamagedItemsFailOnlyTheirOwnTensors) {
  MemShardReader files =
      LoadCase("torch-2.14/dcp_default", {".metadata", "__0_0.distcp", "__1_0.distcp"});
  std::shared_ptr<FullView> view = BuildOrDie(files);
  ASSERT_TRUE(view);
  const json index = json::parse(view->index_json());
  // Garble the zip directory of model.emb's chunk on rank 0 (the end of its item).
  for (const auto& shard : index["tensors"]["model.emb"]["shards"]) {
    if (shard["file"] != "__0_0.distcp") continue;
    const uint64_t end = shard["item_offset"].get<uint64_t>() + shard["item_length"].get<uint64_t>();
    std::string& f = files.files["__0_0.distcp"];
    for (uint64_t i = end - 60; i < end; ++i) f[i] = 'X';
  }
  view = BuildOrDie(files);  // sizes come from the metadata: building still works
  ASSERT_TRUE(view);
  Result<std::string> emb = ReadNamed(view, "model.emb", &files);
  ASSERT_FALSE(emb.ok());
  EXPECT_EQ(emb.status().err(), EIO);
  EXPECT_NE(emb.status().message().find("model.emb"), std::string::npos) << emb.status().ToString();
  EXPECT_FALSE(ReadNamed(view, "model.safetensors", &files).ok());
  EXPECT_TRUE(ReadNamed(view, "model.w", &files).ok());

  // A shard cut short inside model.u16's item: that tensor fails with EIO.
  files = LoadCase("torch-2.14/dcp_default", {".metadata", "__0_0.distcp", "__1_0.distcp"});
  const json& u16_shard = index["tensors"]["model.u16"]["shards"][0];
  files.files[u16_shard["file"]].resize(u16_shard["item_offset"].get<uint64_t>() +
                                        u16_shard["item_length"].get<uint64_t>() - 1);
  view = BuildOrDie(files);
  ASSERT_TRUE(view);
  EXPECT_EQ(ReadNamed(view, "model.u16", &files).status().err(), EIO);
  EXPECT_TRUE(ReadNamed(view, "model.w", &files).ok());

  // A missing shard.
  files = LoadCase("torch-2.14/dcp_default", {".metadata", "__0_0.distcp"});
  view = BuildOrDie(files);
  ASSERT_TRUE(view);
  EXPECT_FALSE(ReadNamed(view, "model.u16", &files).ok());
}

TEST(FullViewTest, MalformedOrForeignMetadata) {
  MemShardReader files;
  files.files[".metadata"] = "\x80\x04garbage";
  auto view = FullView::Build(files);
  ASSERT_FALSE(view.ok());
  EXPECT_EQ(view.status().err(), EIO);
  EXPECT_NE(view.status().message().find(".metadata"), std::string::npos);

  MemShardReader none;
  none.files["notes.txt"] = "hi";
  ASSERT_TRUE(FullView::Build(none).ok());
  EXPECT_FALSE(FullView::Build(none)->has_value());

  MemShardReader megatron;
  megatron.files["metadata.json"] = R"({"sharded_backend": "zarr"})";
  ASSERT_TRUE(FullView::Build(megatron).ok());
  EXPECT_FALSE(FullView::Build(megatron)->has_value());

  MemShardReader bad_olmo;
  bad_olmo.files["metadata.json"] = R"({"tensors": {"w": {"dtype": "F32"}}})";
  EXPECT_EQ(FullView::Build(bad_olmo).status().err(), EIO);
}

// OLMo-core's safetensors format, built here: w (4, 3) F32 with rank 0
// holding flattened ranges [0, 2) and [5, 9) and rank 1 the rest as the
// ranges [2, 5) and [9, 12); b (2, 4) BF16 as two DTensor boxes; c (5,) I64
// in legacy flattened_offsets_per_file form with an empty shard.
struct OlmoCase {
  MemShardReader files;
  std::map<std::string, std::string> expected;  // key -> full tensor bytes
};

std::string Bytes(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed * 31 + i * 7);
  return s;
}

// A safetensors file holding these (name, dtype, 1-D bytes, element size).
std::string SafetensorsOf(const std::vector<std::tuple<std::string, std::string, std::string, int>>& ts) {
  json h = json::object();
  std::string data;
  for (const auto& [name, dtype, bytes, es] : ts) {
    h[name] = {{"dtype", dtype}, {"shape", {bytes.size() / es}}, {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data += bytes;
  }
  std::string text = h.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return out + text + data;
}

OlmoCase MakeOlmoCase() {
  OlmoCase c;
  const std::string w = Bytes(12 * 4, 1), b = Bytes(8 * 2, 2), cc = Bytes(5 * 8, 3);
  c.expected = {{"w", w}, {"b", b}, {"c", cc}};
  auto el = [](const std::string& s, size_t es, size_t from, size_t to) { return s.substr(from * es, (to - from) * es); };
  // b (2, 4): rank 0 holds the box at (0, 0) of shape (2, 2), rank 1 at (0, 2).
  const std::string b0 = el(b, 2, 0, 2) + el(b, 2, 4, 6), b1 = el(b, 2, 2, 4) + el(b, 2, 6, 8);
  c.files.files["rank_0.safetensors"] = SafetensorsOf({{"w", "F32", el(w, 4, 0, 2) + el(w, 4, 5, 9), 4},
                                                       {"b", "BF16", b0, 2},
                                                       {"c", "I64", el(cc, 8, 0, 5), 8}});
  c.files.files["rank_1.safetensors"] = SafetensorsOf({{"w", "F32", el(w, 4, 2, 5) + el(w, 4, 9, 12), 4},
                                                       {"b", "BF16", b1, 2}});
  c.files.files["metadata.json"] = R"({"tensors": {
    "w": {"shape": [4, 3], "is_sharded": true, "dtype": "F32", "shard_spec_per_file": {
      "rank_0.safetensors": {"flattened_offsets": [[0, 2], [5, 9]], "local_shape": null, "global_offset": null},
      "rank_1.safetensors": {"flattened_offsets": [[2, 5], [9, 12]], "local_shape": null, "global_offset": null}}},
    "b": {"shape": [2, 4], "is_sharded": true, "dtype": "BF16", "shard_spec_per_file": {
      "rank_0.safetensors": {"flattened_offsets": null, "local_shape": [2, 2], "global_offset": [0, 0]},
      "rank_1.safetensors": {"flattened_offsets": null, "local_shape": [2, 2], "global_offset": [0, 2]}}},
    "c": {"shape": [5], "is_sharded": false, "dtype": "I64", "flattened_offsets_per_file": {
      "rank_0.safetensors": [0, 5], "rank_1.safetensors": [[0, 0]]}}}})";
  return c;
}

TEST(FullViewTest, OlmoCoreSafetensorsFormat) {
  OlmoCase c = MakeOlmoCase();
  std::shared_ptr<FullView> view = BuildOrDie(c.files);
  ASSERT_TRUE(view);
  EXPECT_EQ(view->format(), ViewFormat::kOlmoSafetensors);
  for (const auto& [key, want] : c.expected) {
    for (size_t piece : {size_t{1}, size_t{3}, size_t{1} << 20}) {
      std::optional<uint32_t> node = view->Lookup(FullView::kRootNode, key);
      ASSERT_TRUE(node) << key;
      Result<std::string> got = ReadAll(view, *node, &c.files, piece);
      ASSERT_TRUE(got.ok()) << key << ": " << got.status().ToString();
      EXPECT_EQ(*got, want) << key << " in pieces of " << piece;
    }
  }
  const auto w = view->Lookup(FullView::kRootNode, "w");
  EXPECT_EQ(view->Xattr(*w, "user.ckptfs.dtype"), "float32");
  EXPECT_EQ(view->Xattr(*w, "user.ckptfs.shape"), "[4,3]");
  const json index = json::parse(view->index_json());
  EXPECT_EQ(index["format"], "olmo-core-safetensors");
  EXPECT_EQ(index["tensors"]["b"]["dtype"], "bfloat16");
  EXPECT_EQ(index["tensors"]["w"]["shards"][0]["flattened_offsets"], json::parse("[[0,2],[5,9]]"));
  // No key has a group: only all.safetensors.
  EXPECT_TRUE(view->Lookup(FullView::kRootNode, "all.safetensors"));
  EXPECT_EQ(index["safetensors"].size(), 1u);
}

TEST(FullViewTest, OlmoCoreShardsThatContradictTheMetadataFailTheirTensor) {
  OlmoCase c = MakeOlmoCase();
  // rank_1 without w: w fails, b (also on rank 1) still needs rank 1 and reads.
  c.files.files["rank_1.safetensors"] = SafetensorsOf({{"b", "BF16", Bytes(8, 9), 2}});
  std::shared_ptr<FullView> view = BuildOrDie(c.files);
  ASSERT_TRUE(view);
  Result<std::string> w = ReadNamed(view, "w", &c.files);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("rank_1.safetensors lacks the tensor"), std::string::npos)
      << w.status().ToString();
  EXPECT_TRUE(ReadNamed(view, "b", &c.files).ok());
  EXPECT_TRUE(ReadNamed(view, "c", &c.files).ok());
  // Overlapping ranges are refused, never served from either shard.
  c = MakeOlmoCase();
  std::string& meta = c.files.files["metadata.json"];
  meta.replace(meta.find("[[2, 5], [9, 12]]"), 17, "[[1, 4], [9, 12]]");
  view = BuildOrDie(c.files);
  ASSERT_TRUE(view);
  EXPECT_EQ(ReadNamed(view, "w", &c.files).status().err(), EIO);
}

}  // namespace
}  // namespace ckptfs
