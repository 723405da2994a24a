// Tests of the DCP .metadata parser against the real torch 1.13 and 2.14
// checkpoints in tests/fixtures/dcp (values from its README and
// expected/index.json), the LONG1 fixture, and hand-built malformed pickles.
#include "formats/dcp_metadata.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "formats/formats_test_util.h"

namespace ckptfs {
namespace {

using testing::DcpTestdata;
using testing::ReadTestFile;
using Dims = std::vector<int64_t>;

DcpMetadata ParseCase(const std::string& rel, bool storage_only = false) {
  std::string bytes;
  EXPECT_TRUE(ReadTestFile(DcpTestdata(rel + "/.metadata"), &bytes)) << rel;
  Result<DcpMetadata> m = ParseDcpMetadata(bytes, DcpParseOptions{.storage_only = storage_only});
  EXPECT_TRUE(m.ok()) << rel << ": " << m.status().ToString();
  return m.ok() ? std::move(m).value() : DcpMetadata{};
}

const DcpStorageEntry* FindEntry(const DcpMetadata& m, const std::string& fqn,
                                 const std::optional<Dims>& offsets) {
  for (const DcpStorageEntry& e : m.storage) {
    if (e.fqn == fqn && e.chunk_offsets == offsets) return &e;
  }
  return nullptr;
}

const DcpTensor* FindTensor(const DcpMetadata& m, const std::string& fqn) {
  for (const DcpTensor& t : m.tensors) {
    if (t.fqn == fqn) return &t;
  }
  return nullptr;
}

// Invariants every real checkpoint satisfies.
TEST(DcpMetadataTest, RealCheckpointsAreConsistentWithTheirFilesAndExpectations) {
  for (const char* c : testing::kDcpCases) {
    SCOPED_TRACE(c);
    DcpMetadata m = ParseCase(c);
    ASSERT_FALSE(m.storage.empty());
    // Items are appended, so each file ends exactly at its last item.
    std::map<std::string, uint64_t> end;
    for (const DcpStorageEntry& e : m.storage) {
      end[e.relative_path] = std::max(end[e.relative_path], e.offset + e.length);
    }
    for (const auto& [rel, need] : end) {
      std::error_code ec;
      uint64_t size = std::filesystem::file_size(DcpTestdata(std::string(c) + "/" + rel), ec);
      ASSERT_FALSE(ec) << rel;
      EXPECT_EQ(size, need) << rel;
    }
    // Tensors and bytes items match expected/index.json; every chunk and bytes
    // item has its storage entry; chunks tile their tensor.
    std::string index_text;
    ASSERT_TRUE(ReadTestFile(DcpTestdata(std::string(c) + "/expected/index.json"), &index_text));
    nlohmann::json index = nlohmann::json::parse(index_text);
    EXPECT_EQ(m.tensors.size() + m.byte_items.size(), index.size());
    for (const DcpTensor& t : m.tensors) {
      ASSERT_TRUE(index.contains(t.fqn)) << t.fqn;
      EXPECT_EQ(index[t.fqn]["dtype"], t.dtype) << t.fqn;
      EXPECT_EQ(index[t.fqn]["shape"].get<Dims>(), t.size) << t.fqn;
      int64_t volume = 0;
      for (const DcpChunk& ch : t.chunks) {
        EXPECT_NE(FindEntry(m, t.fqn, ch.offsets), nullptr) << t.fqn;
        int64_t v = 1;
        for (int64_t s : ch.sizes) v *= s;
        volume += v;
      }
      int64_t want = 1;
      for (int64_t s : t.size) want *= s;
      EXPECT_EQ(volume, want) << t.fqn;
    }
    for (const std::string& b : m.byte_items) {
      ASSERT_TRUE(index.contains(b)) << b;
      EXPECT_FALSE(index[b].contains("dtype")) << b;
      EXPECT_NE(FindEntry(m, b, std::nullopt), nullptr) << b;
    }
    // storage_only gives the same storage index and skips the rest.
    DcpMetadata s = ParseCase(c, /*storage_only=*/true);
    EXPECT_EQ(s.storage.size(), m.storage.size());
    EXPECT_TRUE(s.tensors.empty());
  }
}

TEST(DcpMetadataTest, Torch214Default) {
  DcpMetadata m = ParseCase("torch-2.14/dcp_default");
  EXPECT_EQ(m.version, "1.0.0");
  EXPECT_EQ(m.storage.size(), 15u);  // w, emb, colsharded: 2 chunks each; 5 single chunks; 4 bytes
  EXPECT_EQ(m.tensors.size(), 8u);
  EXPECT_EQ(m.byte_items.size(), 4u);
  const DcpStorageEntry* w0 = FindEntry(m, "model.w", Dims{0, 0});
  ASSERT_NE(w0, nullptr);
  EXPECT_EQ(w0->relative_path, "__0_0.distcp");
  EXPECT_EQ(w0->offset, 0u);
  EXPECT_EQ(w0->length, 1577u);
  EXPECT_EQ(w0->index_hint, 0);
  EXPECT_TRUE(w0->transform_descriptors.empty());
  const DcpStorageEntry* w1 = FindEntry(m, "model.w", Dims{3, 0});
  ASSERT_NE(w1, nullptr);
  EXPECT_EQ(w1->relative_path, "__1_0.distcp");
  EXPECT_EQ(w1->index_hint, 1);
  EXPECT_NE(FindEntry(m, "model.colsharded", Dims{0, 2}), nullptr);
  // Replicated and non-tensor items were all written by rank 1.
  for (const char* fqn :
       {"optim.step", "extra.1", "optim.param_groups.0.lr", "optim.param_groups.0.params"}) {
    const DcpStorageEntry* e = FindEntry(m, fqn, std::nullopt);
    ASSERT_NE(e, nullptr) << fqn;
    EXPECT_EQ(e->relative_path, "__1_0.distcp");
    EXPECT_FALSE(e->index_hint.has_value());
  }
  EXPECT_EQ(FindEntry(m, "model.rep", Dims{0})->relative_path, "__1_0.distcp");
  const DcpTensor* emb = FindTensor(m, "model.emb");
  ASSERT_NE(emb, nullptr);
  ASSERT_EQ(emb->chunks.size(), 2u);
  EXPECT_EQ(emb->chunks[1].offsets, (Dims{3, 0}));
  EXPECT_EQ(emb->chunks[1].sizes, (Dims{2, 3}));  // uneven split
  EXPECT_EQ(FindTensor(m, "model.fp8")->dtype, "float8_e4m3fn");
}

TEST(DcpMetadataTest, Torch214VariantsAndZeroSizeChunks) {
  DcpMetadata z = ParseCase("torch-2.14/dcp_zstd");
  for (const DcpStorageEntry& e : z.storage) {
    EXPECT_EQ(e.transform_descriptors, std::vector<std::string>{"stream.zstd/1"}) << e.fqn;
  }
  DcpMetadata t = ParseCase("torch-2.14/dcp_threads");
  std::set<std::string> files;
  for (const DcpStorageEntry& e : t.storage) files.insert(e.relative_path);
  EXPECT_EQ(files, (std::set<std::string>{"__0_0.distcp", "__0_1.distcp", "__1_0.distcp",
                                          "__1_1.distcp"}));
  DcpMetadata zero = ParseCase("torch-2.14/dcp_zero");
  const DcpTensor* row = FindTensor(zero, "one_row");
  ASSERT_NE(row, nullptr);
  ASSERT_EQ(row->chunks.size(), 2u);
  EXPECT_EQ(row->chunks[1].offsets, (Dims{1, 0}));  // offset == dim size
  EXPECT_EQ(row->chunks[1].sizes, (Dims{0, 4}));
  EXPECT_EQ(FindEntry(zero, "one_row", Dims{1, 0})->relative_path, "__1_0.distcp");
}

TEST(DcpMetadataTest, Torch113) {
  DcpMetadata a = ParseCase("torch-1.13/ckpt113");
  EXPECT_FALSE(a.version.has_value());
  ASSERT_EQ(a.storage.size(), 4u);  // FindTensor below must find something
  std::set<std::string> files;
  for (const DcpStorageEntry& e : a.storage) files.insert(e.relative_path);
  EXPECT_EQ(files, (std::set<std::string>{"__0_0.distcp", "__0_1.distcp", "__0_2.distcp",
                                          "__0_3.distcp"}));
  EXPECT_EQ(FindTensor(a, "b")->dtype, "bfloat16");
  EXPECT_EQ(FindTensor(a, "b")->size, (Dims{5}));
  EXPECT_NE(FindEntry(a, "nested_obj", std::nullopt), nullptr);  // 1.13 keeps the dict as one item

  DcpMetadata b = ParseCase("torch-1.13/ckpt113b");
  ASSERT_EQ(b.storage.size(), 3u);
  EXPECT_EQ(FindEntry(b, "step", std::nullopt)->offset, 0u);
  EXPECT_EQ(FindEntry(b, "step", std::nullopt)->length, 431u);
  EXPECT_EQ(FindEntry(b, "view", Dims{0, 0})->offset, 431u);
  EXPECT_EQ(FindEntry(b, "i64", Dims{0})->offset, 1178u);
  EXPECT_EQ(FindTensor(b, "i64")->dtype, "int64");

  DcpMetadata c = ParseCase("torch-1.13/ckpt113c");
  ASSERT_NE(FindTensor(c, "t"), nullptr);
  EXPECT_EQ(FindTensor(c, "t")->size, (Dims{3, 2}));
}

TEST(DcpMetadataTest, LargeOffsetsNeedLong1) {
  std::string bytes;
  ASSERT_TRUE(ReadTestFile(testing::Fixture("dcp_large_p2.metadata"), &bytes));
  Result<DcpMetadata> m = ParseDcpMetadata(bytes);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const DcpStorageEntry* w = FindEntry(*m, "w", Dims{0, 0});
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->offset, (uint64_t{1} << 32) + 5);
  EXPECT_EQ(w->length, (uint64_t{1} << 34) + 3);
  EXPECT_EQ(FindTensor(*m, "w")->size, (Dims{(int64_t{1} << 31) + 6, 2}));
  EXPECT_EQ(FindEntry(*m, "step", std::nullopt)->relative_path, "__0_0.distcp");
}

// Writes protocol-2 style pickles by hand.
class P {
 public:
  P& Raw(const std::string& s) {
    out_ += s;
    return *this;
  }
  P& Str(const std::string& s) {
    out_ += 'X';
    for (int i = 0; i < 4; ++i) out_ += static_cast<char>((s.size() >> (8 * i)) & 0xff);
    out_ += s;
    return *this;
  }
  P& Int(int64_t v) {  // LONG1, 8 bytes
    out_ += "\x8a\x08";
    for (int i = 0; i < 8; ++i)
      out_ += static_cast<char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
    return *this;
  }
  P& Obj(const std::string& module, const std::string& name) {
    out_ += "c" + module + "\n" + name + "\n)\x81";
    return *this;
  }
  std::string str() const { return out_; }

 private:
  std::string out_;
};

const char kM[] = "torch.distributed.checkpoint.metadata";

// Metadata(storage_data={MetadataIndex{index items}: _StorageInfo{info items}}).
std::string OneEntry(const std::string& index_items, const std::string& info_items) {
  return P()
      .Obj(kM, "Metadata")
      .Raw("}(")
      .Str("state_dict_metadata")
      .Raw("}")
      .Str("storage_data")
      .Raw("}(")
      .Obj(kM, "MetadataIndex")
      .Raw("}(")
      .Raw(index_items)
      .Raw("ub")
      .Obj("torch.distributed.checkpoint.filesystem", "_StorageInfo")
      .Raw("}(")
      .Raw(info_items)
      .Raw("ub")
      .Raw("uub.")
      .str();
}
std::string Fqn(const std::string& f) { return P().Str("fqn").Str(f).str(); }
std::string Info(const std::string& path, int64_t offset, int64_t length) {
  return P()
      .Str("relative_path")
      .Str(path)
      .Str("offset")
      .Int(offset)
      .Str("length")
      .Int(length)
      .str();
}

std::string ErrorOf(const std::string& bytes) {
  Result<DcpMetadata> m = ParseDcpMetadata(bytes);
  EXPECT_FALSE(m.ok());
  if (m.ok()) return "";
  EXPECT_EQ(m.err(), EIO);
  return m.status().message();
}

TEST(DcpMetadataTest, HandBuiltEntries) {
  Result<DcpMetadata> ok = ParseDcpMetadata(OneEntry(Fqn("a.b"), Info("sub/__0_0.distcp", 7, 9)));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->storage.size(), 1u);
  EXPECT_EQ(ok->storage[0].fqn, "a.b");
  EXPECT_EQ(ok->storage[0].relative_path, "sub/__0_0.distcp");
  EXPECT_EQ(ok->storage[0].offset, 7u);
  EXPECT_EQ(ok->storage[0].length, 9u);
  // An offset given as a plain tuple (other writers), transform_descriptors None.
  std::string idx = Fqn("t") + P().Str("offset").Raw("(").Int(1).Int(2).Raw("t").str();
  std::string info = Info("f", 0, 1) + P().Str("transform_descriptors").Raw("N").str();
  Result<DcpMetadata> tuple = ParseDcpMetadata(OneEntry(idx, info));
  ASSERT_TRUE(tuple.ok()) << tuple.status().ToString();
  EXPECT_EQ(tuple->storage[0].chunk_offsets, (Dims{1, 2}));
}

TEST(DcpMetadataTest, MalformedMetadataIsEio) {
  for (const char* bad : {"../x", "/abs", "", "a//b", "a/./b", "a/.."}) {
    EXPECT_NE(ErrorOf(OneEntry(Fqn("w"), Info(bad, 0, 1))).find("not a path inside"),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(ErrorOf(OneEntry(Fqn("w"), Info("f", -1, 1))).find("offset is negative"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf(OneEntry(Fqn("w"), P().Str("relative_path").Str("f").Str("offset").Int(0).str()))
          .find("has no length"),
      std::string::npos);
  EXPECT_NE(ErrorOf(OneEntry(Fqn("w"), P().Str("relative_path").Int(3).str())).find("not a str"),
            std::string::npos);
  EXPECT_NE(ErrorOf(OneEntry("", Info("f", 0, 1))).find("has no fqn"), std::string::npos);
  EXPECT_NE(ErrorOf(OneEntry(Fqn("w") + P().Str("offset").Str("x").str(), Info("f", 0, 1)))
                .find("not a shape"),
            std::string::npos);
  EXPECT_NE(ErrorOf(OneEntry(Fqn("w"),
                             Info("f", 0, 1) +
                                 P().Str("transform_descriptors").Raw("(").Int(1).Raw("l").str()))
                .find("holds a non-str"),
            std::string::npos);
  EXPECT_NE(ErrorOf("K\x01.").find("top-level value is a int"), std::string::npos);
  EXPECT_NE(ErrorOf(P().Obj(kM, "Metadata").Raw("}b.").str()).find("has no storage_data"),
            std::string::npos);
  EXPECT_NE(ErrorOf(P().Obj(kM, "Metadata").Raw("}").Str("storage_data").Raw("]sb.").str())
                .find("not a dict"),
            std::string::npos);
  EXPECT_NE(ErrorOf(P().Obj(kM, "Metadata")
                        .Raw("}")
                        .Str("storage_data")
                        .Raw("}")
                        .Str("k")
                        .Str("v")
                        .Raw("ssb.")
                        .str())
                .find("key is not a MetadataIndex"),
            std::string::npos);
  EXPECT_NE(ErrorOf("garbage").find("DCP .metadata: pickle:"), std::string::npos);
}

TEST(DcpMetadataTest, SharedStringsCannotAmplifyTheOutput) {
  // One MetadataIndex with a 100 KB fqn and one _StorageInfo, memoized, then
  // referenced by 2,000 entries for 4 bytes each: 200 MB of fqn copies.
  std::string key =
      P().Obj(kM, "MetadataIndex").Raw("}(").Raw(Fqn(std::string(100000, 'x'))).Raw("ub").str();
  std::string val = P().Obj("fs", "_StorageInfo").Raw("}(").Raw(Info("f", 0, 1)).Raw("ub").str();
  std::string pairs;
  for (int i = 0; i < 2000; ++i) pairs += "h\x01h\x02";
  std::string bytes = P().Obj(kM, "Metadata")
                          .Raw("}(")
                          .Str("storage_data")
                          .Raw("}(")
                          .Raw(key)
                          .Raw("q\x01")
                          .Raw(val)
                          .Raw("q\x02")
                          .Raw(pairs)
                          .Raw("uub.")
                          .str();
  EXPECT_NE(ErrorOf(bytes).find("far larger than the file"), std::string::npos);
}

std::vector<std::string> RealMetadata() {
  std::vector<std::string> out;
  for (const char* c : testing::kDcpCases) {
    std::string data;
    // A missing fixture is a failure naming it, and is left out: the tests
    // below index into the bytes and must not get an empty string.
    if (!ReadTestFile(DcpTestdata(std::string(c) + "/.metadata"), &data)) {
      ADD_FAILURE() << "cannot read fixture " << DcpTestdata(std::string(c) + "/.metadata");
      continue;
    }
    out.push_back(data);
  }
  return out;
}

TEST(DcpMetadataTest, EveryTruncationOfRealFilesFails) {
  for (const std::string& data : RealMetadata()) {
    for (size_t n = 0; n < data.size(); ++n) {
      Result<DcpMetadata> m = ParseDcpMetadata(std::string_view(data).substr(0, n));
      ASSERT_FALSE(m.ok()) << "prefix of " << n << " bytes parsed";
      ASSERT_EQ(m.err(), EIO);
    }
  }
}

TEST(DcpMetadataTest, RandomByteFlipsNeverCrash) {
  std::mt19937 rng(777);
  size_t ok = 0, failed = 0;
  for (const std::string& data : RealMetadata()) {
    for (int round = 0; round < 1500; ++round) {
      std::string m = data;
      for (int i = 0, n = 1 + static_cast<int>(rng() % 3); i < n; ++i) {
        m[rng() % m.size()] = static_cast<char>(rng());
      }
      Result<DcpMetadata> r = ParseDcpMetadata(m);
      if (!r.ok()) {
        ++failed;
      } else {
        ++ok;
        for (const DcpStorageEntry& e : r->storage)
          EXPECT_TRUE(IsSafeRelativePath(e.relative_path));
      }
    }
  }
  EXPECT_GT(failed, 0u);
  EXPECT_GT(ok, 0u);  // flips in strings and sizes still parse
}

TEST(DcpMetadataTest, SafeRelativePaths) {
  EXPECT_TRUE(IsSafeRelativePath("__0_0.distcp"));
  EXPECT_TRUE(IsSafeRelativePath("a/b.c"));
  EXPECT_TRUE(IsSafeRelativePath("..hidden"));
  EXPECT_FALSE(IsSafeRelativePath(""));
  EXPECT_FALSE(IsSafeRelativePath("/x"));
  EXPECT_FALSE(IsSafeRelativePath("x/"));
  EXPECT_FALSE(IsSafeRelativePath(".."));
  EXPECT_FALSE(IsSafeRelativePath("a/../b"));
  EXPECT_FALSE(IsSafeRelativePath("."));
  EXPECT_FALSE(IsSafeRelativePath(std::string("a\0b", 3)));
}

}  // namespace
}  // namespace ckptfs
