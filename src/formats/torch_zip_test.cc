// Tests of the torch.save container reader: every tensor item of the real
// torch 1.13 and 2.14 checkpoints in tests/fixtures/dcp (located through
// their .metadata) and the plain torch.save files are rebuilt and compared
// byte for byte with expected/; containers built here cover what the real
// files lack (ZIP64 extras, comments, parameters, odd strides) and every
// kind of malformed input.
#include "formats/torch_zip.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "formats/dcp_metadata.h"
#include "formats/formats_test_util.h"

namespace ckptfs {
namespace {

using testing::DcpTestdata;
using testing::ReadTestFile;
using Dims = std::vector<int64_t>;

std::string ReadOrDie(const std::string& path) {
  std::string s;
  EXPECT_TRUE(ReadTestFile(path, &s)) << path;
  return s;
}

// The tensor's logical elements in row-major order, gathered through its
// strides from the bytes of the source.
std::string Gather(const std::string& source, const TorchTensorInfo& t) {
  std::string out;
  uint64_t n = t.numel();
  if (n == 0) return out;
  std::vector<int64_t> idx(t.shape.size(), 0);
  for (uint64_t e = 0; e < n; ++e) {
    uint64_t at = t.data_position();
    for (size_t d = 0; d < idx.size(); ++d) at += uint64_t(idx[d] * t.stride[d]) * t.element_size;
    out.append(source, at, t.element_size);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// ---- Real checkpoints ----------------------------------------------------

// DCP cases whose items are plain torch.save zips (dcp_zstd's are zstd
// streams, which the caller decodes before this reader sees them).
const char* const kPlainDcpCases[] = {
    "torch-1.13/ckpt113",     "torch-1.13/ckpt113b",    "torch-1.13/ckpt113c",
    "torch-2.14/dcp_default", "torch-2.14/dcp_threads", "torch-2.14/dcp_zero",
};

TEST(TorchZipTest, RealDcpTensorItemsRebuildToTheExpectedTensors) {
  int chunks_checked = 0;
  for (const char* c : kPlainDcpCases) {
    SCOPED_TRACE(c);
    std::string dir = DcpTestdata(c);
    Result<DcpMetadata> m = ParseDcpMetadata(ReadOrDie(dir + "/.metadata"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    std::map<std::string, std::string> files;
    for (const DcpStorageEntry& e : m->storage) {
      if (!files.count(e.relative_path))
        files[e.relative_path] = ReadOrDie(dir + "/" + e.relative_path);
    }
    for (const DcpTensor& t : m->tensors) {
      SCOPED_TRACE(t.fqn);
      std::optional<uint32_t> es = TorchDtypeElementSize(t.dtype);
      ASSERT_TRUE(es.has_value()) << t.dtype;
      uint64_t numel = 1;
      for (int64_t d : t.size) numel *= uint64_t(d);
      // Assemble by hand (not with the planner) and check every byte is written.
      std::string full(numel * *es, '\xa5');
      std::vector<bool> written(numel, false);
      for (const DcpChunk& ch : t.chunks) {
        const DcpStorageEntry* e = nullptr;
        for (const DcpStorageEntry& s : m->storage) {
          if (s.fqn == t.fqn && s.chunk_offsets == ch.offsets) e = &s;
        }
        ASSERT_NE(e, nullptr);
        ASSERT_TRUE(e->transform_descriptors.empty());
        const std::string& file = files[e->relative_path];
        StringByteSource src(file);
        Result<TorchTensorInfo> info = ReadTorchSaveTensor(src, e->offset, e->length);
        ASSERT_TRUE(info.ok()) << info.status().ToString();
        EXPECT_EQ(info->dtype, t.dtype);
        EXPECT_EQ(info->element_size, *es);
        EXPECT_EQ(info->shape, ch.sizes);
        EXPECT_GE(info->storage_position, e->offset);
        EXPECT_LE(info->storage_position + info->storage_bytes, e->offset + e->length);
        // Records are 64-byte aligned relative to the item (FORMATS.md 2).
        EXPECT_EQ((info->storage_position - e->offset) % 64, 0u);
        std::string local = Gather(file, *info);
        ASSERT_EQ(local.size(), info->numel() * *es);
        // Scatter into the full tensor at the chunk's offsets.
        std::vector<int64_t> idx(ch.sizes.size(), 0);
        for (uint64_t k = 0; k < info->numel(); ++k) {
          uint64_t flat = 0;
          for (size_t d = 0; d < idx.size(); ++d)
            flat = flat * uint64_t(t.size[d]) + uint64_t(ch.offsets[d] + idx[d]);
          EXPECT_FALSE(written[flat]);
          written[flat] = true;
          full.replace(flat * *es, *es, local, k * *es, *es);
          for (size_t d = idx.size(); d-- > 0;) {
            if (++idx[d] < ch.sizes[d]) break;
            idx[d] = 0;
          }
        }
        ++chunks_checked;
      }
      EXPECT_EQ(std::count(written.begin(), written.end(), false), 0);
      EXPECT_EQ(full, ReadOrDie(dir + "/expected/" + t.fqn + ".bin"));
    }
  }
  EXPECT_GE(chunks_checked, 25);
}

TEST(TorchZipTest, RealItemsKeepTheirStridesAndDtypes) {
  auto item = [](const std::string& c, const std::string& fqn) -> Result<TorchTensorInfo> {
    std::string dir = DcpTestdata(c);
    Result<DcpMetadata> m = ParseDcpMetadata(ReadOrDie(dir + "/.metadata"));
    if (!m.ok()) return m.status();
    for (const DcpStorageEntry& e : m->storage) {
      if (e.fqn != fqn) continue;
      std::string file = ReadOrDie(dir + "/" + e.relative_path);
      StringByteSource src(file);
      return ReadTorchSaveTensor(src, e.offset, e.length);
    }
    return Status::Error(ENOENT, fqn);
  };
  Result<TorchTensorInfo> t = item("torch-1.13/ckpt113c", "t");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape, (Dims{3, 2}));
  EXPECT_EQ(t->stride, (Dims{1, 3}));
  EXPECT_FALSE(t->IsContiguous());
  Result<TorchTensorInfo> v = item("torch-1.13/ckpt113b", "view");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->storage_bytes, 48u);  // trimmed to the view's 12 elements
  EXPECT_TRUE(v->IsContiguous());
  // Item at 431; data/0's local header at 234 in it, data padded to 320.
  EXPECT_EQ(v->data_position(), 751u);
  Result<TorchTensorInfo> f8 = item("torch-2.14/dcp_default", "model.fp8");
  ASSERT_TRUE(f8.ok()) << f8.status().ToString();
  EXPECT_EQ(f8->dtype, "float8_e4m3fn");
  EXPECT_EQ(f8->element_size, 1u);
  Result<TorchTensorInfo> u16 = item("torch-2.14/dcp_default", "model.u16");
  ASSERT_TRUE(u16.ok()) << u16.status().ToString();
  EXPECT_EQ(u16->dtype, "uint16");
  EXPECT_EQ(u16->storage_bytes, 6u);
  Result<TorchTensorInfo> pt = item("torch-2.14/dcp_default", "model.plain_t");
  ASSERT_TRUE(pt.ok()) << pt.status().ToString();
  EXPECT_EQ(pt->stride, (Dims{1, 3}));
  // dcp_zero: rank 1's chunk is (0, 4) with a 0-byte storage; either chunk
  // may come first in storage_data, so check both through the metadata.
  std::string dir = DcpTestdata("torch-2.14/dcp_zero");
  Result<DcpMetadata> m = ParseDcpMetadata(ReadOrDie(dir + "/.metadata"));
  ASSERT_TRUE(m.ok());
  int empty = 0;
  for (const DcpStorageEntry& e : m->storage) {
    std::string file = ReadOrDie(dir + "/" + e.relative_path);
    StringByteSource src(file);
    Result<TorchTensorInfo> z = ReadTorchSaveTensor(src, e.offset, e.length);
    ASSERT_TRUE(z.ok()) << z.status().ToString();
    if (z->numel() == 0) {
      ++empty;
      EXPECT_EQ(z->shape, (Dims{0, 4}));
      EXPECT_EQ(z->storage_bytes, 0u);
    }
  }
  EXPECT_EQ(empty, 1);
}

TEST(TorchZipTest, RealBytesItemIsAZipWithoutATensor) {
  std::string dir = DcpTestdata("torch-2.14/dcp_default");
  Result<DcpMetadata> m = ParseDcpMetadata(ReadOrDie(dir + "/.metadata"));
  ASSERT_TRUE(m.ok());
  const DcpStorageEntry* step = nullptr;
  for (const DcpStorageEntry& e : m->storage) {
    if (e.fqn == "optim.step") step = &e;
  }
  ASSERT_NE(step, nullptr);
  std::string file = ReadOrDie(dir + "/" + step->relative_path);
  StringByteSource src(file);
  Result<TorchZipArchive> z = TorchZipArchive::Open(src, step->offset, step->length);
  ASSERT_TRUE(z.ok()) << z.status().ToString();
  EXPECT_EQ(z->prefix(), "archive");
  EXPECT_EQ(z->records().front().name, "archive/data.pkl");
  const TorchZipRecord* pkl = z->Find("data.pkl");
  ASSERT_NE(pkl, nullptr);
  Result<std::string> bytes = z->ReadRecord(src, *pkl, 1 << 20);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, std::string("\x80\x02K\x07.", 5));
  Result<TorchTensorInfo> t = ReadTorchSaveTensor(src, step->offset, step->length);
  EXPECT_EQ(t.err(), EIO);
  Result<TorchSaveContents> all = ReadTorchSaveTensors(src, step->offset, step->length);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_TRUE(all->tensors.empty());
}

TEST(TorchZipTest, PlainTorchSaveFilesListEveryTensor) {
  for (const char* c : {"torch-2.14/plain_save/plain_save", "torch-2.14/converted/converted"}) {
    SCOPED_TRACE(c);
    std::string path = DcpTestdata(std::string(c) + ".pt");
    std::string dir = path.substr(0, path.rfind('/'));
    std::string file = ReadOrDie(path);
    StringByteSource src(file);
    Result<TorchSaveContents> all = ReadTorchSaveTensors(src, 0, file.size());
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    EXPECT_TRUE(all->skipped.empty());
    nlohmann::json index = nlohmann::json::parse(ReadOrDie(dir + "/expected/index.json"));
    size_t want = 0;
    for (const auto& [key, v] : index.items()) want += v.contains("dtype") ? 1 : 0;
    EXPECT_EQ(all->tensors.size(), want);
    for (const TorchSaveTensor& t : all->tensors) {
      SCOPED_TRACE(t.key);
      ASSERT_TRUE(index.contains(t.key));
      EXPECT_EQ(index[t.key]["dtype"], t.info.dtype);
      EXPECT_EQ(index[t.key]["shape"].get<Dims>(), t.info.shape);
      EXPECT_TRUE(t.info.IsContiguous());
      EXPECT_EQ(Gather(file, t.info), ReadOrDie(dir + "/expected/" + t.key + ".bin"));
    }
  }
}

TEST(TorchZipTest, EveryTruncationOfARealItemIsEio) {
  std::string file = ReadOrDie(DcpTestdata("torch-1.13/ckpt113c/__0_0.distcp"));
  StringByteSource whole(file);
  ASSERT_TRUE(ReadTorchSaveTensor(whole, 0, file.size()).ok());
  for (size_t n = 0; n < file.size(); ++n) {
    std::string cut = file.substr(0, n);
    StringByteSource src(cut);
    EXPECT_EQ(ReadTorchSaveTensor(src, 0, n).err(), EIO) << n;
    // The same bytes claimed as a longer container than the source holds.
    EXPECT_EQ(ReadTorchSaveTensor(src, 0, file.size()).err(), EIO) << n;
  }
  for (size_t k = 1; k < file.size(); ++k) {
    EXPECT_EQ(ReadTorchSaveTensor(whole, k, file.size() - k).err(), EIO) << k;
  }
}

TEST(TorchZipTest, ByteFlipsInARealItemNeverCrash) {
  std::string file = ReadOrDie(DcpTestdata("torch-2.14/dcp_default/__0_0.distcp"));
  std::mt19937 rng(7);
  int failures = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bad = file;
    for (int k = 0; k < 3; ++k) bad[rng() % 1577] ^= static_cast<char>(1 + rng() % 255);
    StringByteSource src(bad);
    Result<TorchSaveContents> r = ReadTorchSaveTensors(src, 0, 1577);
    if (!r.ok()) {
      EXPECT_EQ(r.err(), EIO) << r.status().ToString();
      ++failures;
    }
  }
  EXPECT_GT(failures, 100);  // headers and pickle are a large part of the item
}

// ---- Containers built here ----------------------------------------------

void Put(std::string* s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s->push_back(i < 8 ? static_cast<char>((v >> (8 * i)) & 0xff) : '\0');
}

struct ZipEntry {
  std::string name;
  std::string data;
  uint16_t method = 0;
  uint16_t flags = 0x0808;
};

struct ZipShape {
  bool zip64_end = true;     // torch always writes the ZIP64 end records
  bool zip64_extra = false;  // sizes and offsets only in ZIP64 extras
  std::string comment;
};

// A zip as torch writes it: stored records, data 64-byte aligned by an 'FB'
// local extra, zero CRCs and local sizes, data descriptors.
std::string MakeZip(const std::vector<ZipEntry>& entries, const ZipShape& shape = {}) {
  std::string z;
  std::vector<uint64_t> lho;
  for (const ZipEntry& e : entries) {
    lho.push_back(z.size());
    size_t pad = (64 - (z.size() + 30 + e.name.size() + 4) % 64) % 64;
    Put(&z, 0x04034b50, 4);
    Put(&z, 20, 2);
    Put(&z, e.flags, 2);
    Put(&z, e.method, 2);
    Put(&z, 0, 16);  // time, date, crc, sizes
    Put(&z, e.name.size(), 2);
    Put(&z, 4 + pad, 2);
    z += e.name;
    Put(&z, 0x4246, 2);
    Put(&z, pad, 2);
    z.append(pad, 'Z');
    z += e.data;
    Put(&z, 0x08074b50, 4);
    Put(&z, 0, 4);
    Put(&z, e.data.size(), 4);
    Put(&z, e.data.size(), 4);
  }
  uint64_t cd = z.size();
  for (size_t i = 0; i < entries.size(); ++i) {
    const ZipEntry& e = entries[i];
    uint64_t big = shape.zip64_extra ? 0xffffffff : 0;
    Put(&z, 0x02014b50, 4);
    Put(&z, 0x031e, 2);
    Put(&z, 20, 2);
    Put(&z, e.flags, 2);
    Put(&z, e.method, 2);
    Put(&z, 0, 8);  // time, date, crc
    Put(&z, big ? big : e.data.size(), 4);
    Put(&z, big ? big : e.data.size(), 4);
    Put(&z, e.name.size(), 2);
    Put(&z, shape.zip64_extra ? 28 : 0, 2);
    Put(&z, 0, 8);  // comment length, disk, attributes
    Put(&z, 0, 2);
    Put(&z, big ? big : lho[i], 4);
    z += e.name;
    if (shape.zip64_extra) {
      Put(&z, 1, 2);
      Put(&z, 24, 2);
      Put(&z, e.data.size(), 8);
      Put(&z, e.data.size(), 8);
      Put(&z, lho[i], 8);
    }
  }
  uint64_t cd_size = z.size() - cd;
  if (shape.zip64_end) {
    uint64_t z64 = z.size();
    Put(&z, 0x06064b50, 4);
    Put(&z, 44, 8);
    Put(&z, 0x031e, 2);
    Put(&z, 45, 2);
    Put(&z, 0, 8);
    Put(&z, entries.size(), 8);
    Put(&z, entries.size(), 8);
    Put(&z, cd_size, 8);
    Put(&z, cd, 8);
    Put(&z, 0x07064b50, 4);
    Put(&z, 0, 4);
    Put(&z, z64, 8);
    Put(&z, 1, 4);
  }
  Put(&z, 0x06054b50, 4);
  Put(&z, 0, 4);
  Put(&z, entries.size(), 2);
  Put(&z, entries.size(), 2);
  Put(&z, cd_size, 4);
  Put(&z, cd, 4);
  Put(&z, shape.comment.size(), 2);
  return z + shape.comment;
}

// Protocol-2 pickles as torch writes data.pkl.
class Pickle {
 public:
  Pickle() : s_("\x80\x02", 2) {}
  Pickle& Op(char c) {
    s_ += c;
    return *this;
  }
  Pickle& Global(const std::string& m, const std::string& n) {
    s_ += "c" + m + "\n" + n + "\n";
    return *this;
  }
  Pickle& Str(const std::string& v) {
    s_ += 'X';
    Put(&s_, v.size(), 4);
    s_ += v;
    return *this;
  }
  Pickle& Int(int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) {
      s_ += 'J';
      Put(&s_, uint64_t(v), 4);
    } else {
      s_ += "\x8a\x08";
      Put(&s_, uint64_t(v), 8);
    }
    return *this;
  }
  Pickle& Ints(const Dims& v) {
    Op('(');
    for (int64_t x : v) Int(x);
    return Op('t');
  }
  std::string Done() { return s_ + "."; }

 private:
  std::string s_;
};

struct Storage {
  std::string cls = "FloatStorage";  // or "UntypedStorage" (module torch.storage)
  std::string key = "0";
  int64_t numel = 0;
};

// _rebuild_tensor_v2 (or _v3 when dtype is given) of one storage.
void Tensor(Pickle& p, const Storage& s, int64_t offset, const Dims& size, const Dims& stride,
            const std::string& v3_dtype = "") {
  p.Global("torch._utils", v3_dtype.empty() ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3").Op('(');
  p.Op('(').Str("storage");
  if (s.cls == "UntypedStorage") {
    p.Global("torch.storage", "UntypedStorage");
  } else {
    p.Global("torch", s.cls);
  }
  p.Str(s.key).Str("cpu").Int(s.numel).Op('t').Op('Q');
  p.Int(offset).Ints(size).Ints(stride).Op('\x89');
  p.Global("collections", "OrderedDict").Op(')').Op('R');
  if (!v3_dtype.empty()) p.Global("torch", v3_dtype);
  p.Op('t').Op('R');
}

std::string Floats(int n, float start = 0) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    float f = start + float(i);
    out.append(reinterpret_cast<const char*>(&f), 4);
  }
  return out;
}

// A torch.save zip with archive name "arch": data.pkl, byteorder, data/<k>, version.
std::string TorchSave(const std::string& pkl, const std::map<std::string, std::string>& storages,
                      const ZipShape& shape = {}, const std::string& byteorder = "little") {
  std::vector<ZipEntry> e{{"arch/data.pkl", pkl}};
  if (!byteorder.empty()) e.push_back({"arch/byteorder", byteorder});
  for (const auto& [k, v] : storages) e.push_back({"arch/data/" + k, v});
  e.push_back({"arch/version", "3\n"});
  return MakeZip(e, shape);
}

std::string SimpleTensorPickle(int64_t numel = 6, int64_t offset = 0, Dims size = {2, 3},
                               Dims stride = {3, 1}) {
  Pickle p;
  Tensor(p, {"FloatStorage", "0", numel}, offset, size, stride);
  return p.Done();
}

Result<TorchTensorInfo> ReadAll(const std::string& z, const TorchZipLimits& limits = {}) {
  StringByteSource src(z);
  return ReadTorchSaveTensor(src, 0, z.size(), limits);
}

std::string ErrorOf(const std::string& z, const TorchZipLimits& limits = {}) {
  Result<TorchTensorInfo> r = ReadAll(z, limits);
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.err(), EIO) << r.status().ToString();
  return r.status().message();
}

TEST(TorchZipTest, BuiltContainerInsideALargerSource) {
  std::string z = TorchSave(SimpleTensorPickle(), {{"0", Floats(6, 10)}});
  std::string file = std::string(1000, 'x') + z + std::string(77, 'y');
  StringByteSource src(file);
  Result<TorchTensorInfo> t = ReadTorchSaveTensor(src, 1000, z.size());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->dtype, "float32");
  EXPECT_EQ(t->shape, (Dims{2, 3}));
  EXPECT_TRUE(t->IsContiguous());
  EXPECT_EQ(t->storage_key, "0");
  EXPECT_EQ((t->storage_position - 1000) % 64, 0u);
  EXPECT_EQ(file.substr(t->data_position(), t->nbytes()), Floats(6, 10));
}

TEST(TorchZipTest, Zip64ExtrasCommentsAndPlainEndRecordsAllRead) {
  std::string pkl = SimpleTensorPickle();
  for (ZipShape shape : {ZipShape{true, true, ""}, ZipShape{false, false, ""},
                         ZipShape{false, false, "a comment"}, ZipShape{true, false, "c"}}) {
    std::string z = TorchSave(pkl, {{"0", Floats(6, 1)}}, shape);
    Result<TorchTensorInfo> t = ReadAll(z);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(z.substr(t->data_position(), t->nbytes()), Floats(6, 1));
  }
}

TEST(TorchZipTest, OffsetsStridesV3AndZeroDimTensors) {
  // A transposed view starting at element 2 of its storage.
  Result<TorchTensorInfo> t =
      ReadAll(TorchSave(SimpleTensorPickle(8, 2, {3, 2}, {1, 3}), {{"0", Floats(8)}}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->storage_offset, 2);
  EXPECT_EQ(t->data_position(), t->storage_position + 8);
  EXPECT_FALSE(t->IsContiguous());
  // Size-1 dims may carry any stride and still be contiguous.
  t = ReadAll(TorchSave(SimpleTensorPickle(3, 0, {1, 3}, {7, 1}), {{"0", Floats(3)}}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->IsContiguous());
  // v3: dtype from the argument, numel counts bytes.
  Pickle p3;
  Tensor(p3, {"UntypedStorage", "0", 6}, 0, {3}, {1}, "uint16");
  t = ReadAll(TorchSave(p3.Done(), {{"0", std::string("\x01\x00\x02\x00\x03\x00", 6)}}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->dtype, "uint16");
  EXPECT_EQ(t->element_size, 2u);
  EXPECT_EQ(t->nbytes(), 6u);
  // 0-d and empty tensors.
  t = ReadAll(TorchSave(SimpleTensorPickle(1, 0, {}, {}), {{"0", Floats(1)}}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->numel(), 1u);
  t = ReadAll(TorchSave(SimpleTensorPickle(0, 0, {0, 4}, {4, 1}), {{"0", ""}}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->numel(), 0u);
}

TEST(TorchZipTest, StateDictWalkFlattensKeysAndUnwrapsParameters) {
  Pickle p;
  p.Op('}').Op('(');
  p.Str("model").Global("collections", "OrderedDict").Op(')').Op('R').Op('(');
  p.Str("w").Global("torch._utils", "_rebuild_parameter").Op('(');
  Tensor(p, {"FloatStorage", "0", 6}, 0, {2, 3}, {3, 1});
  p.Op('\x89').Global("collections", "OrderedDict").Op(')').Op('R').Op('t').Op('R');
  p.Str("q").Global("torch._utils", "_rebuild_qtensor").Op(')').Op('R');
  p.Op('u');
  p.Str("extra").Op(']').Op('(');
  Tensor(p, {"FloatStorage", "1", 2}, 0, {2}, {1});
  p.Int(3).Op('(').Int(5).Op('t').Op('e');
  p.Str("by_int").Op('}').Int(4);
  Tensor(p, {"FloatStorage", "1", 2}, 1, {1}, {1});
  p.Op('s');
  p.Op('u');
  std::string z = TorchSave(p.Done(), {{"0", Floats(6)}, {"1", Floats(2, 100)}});
  StringByteSource src(z);
  Result<TorchSaveContents> all = ReadTorchSaveTensors(src, 0, z.size());
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  std::vector<std::string> keys;
  for (const TorchSaveTensor& t : all->tensors) keys.push_back(t.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"model.w", "extra.0", "by_int.4"}));
  EXPECT_EQ(all->tensors[2].info.data_position(), all->tensors[1].info.data_position() + 4);
  ASSERT_EQ(all->skipped.size(), 1u);
  EXPECT_NE(all->skipped[0].find("model.q"), std::string::npos);
  // A root tensor has the empty key.
  std::string one = TorchSave(SimpleTensorPickle(), {{"0", Floats(6)}});
  StringByteSource src1(one);
  all = ReadTorchSaveTensors(src1, 0, one.size());
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->tensors.size(), 1u);
  EXPECT_EQ(all->tensors[0].key, "");
}

TEST(TorchZipTest, SharedAndCyclicPicklesAreBounded) {
  // A list holding itself, and a list of 40 levels each holding the previous
  // one twice (2^40 paths): both end with EIO, quickly.
  Pickle cyc;
  cyc.Op(']').Op('q').Op('\x00').Op('h').Op('\x00').Op('a');
  std::string z = TorchSave(cyc.Done(), {});
  StringByteSource src(z);
  Result<TorchSaveContents> r = ReadTorchSaveTensors(src, 0, z.size());
  EXPECT_EQ(r.err(), EIO);
  Pickle dag;
  dag.Op(']');
  for (int i = 0; i < 40; ++i)
    dag.Op('q').Op('\x00').Op('(').Op('h').Op('\x00').Op('h').Op('\x00').Op('l');
  z = TorchSave(dag.Done(), {});
  StringByteSource src2(z);
  r = ReadTorchSaveTensors(src2, 0, z.size());
  EXPECT_EQ(r.err(), EIO);
}

TEST(TorchZipTest, MalformedContainersAreEio) {
  const std::string pkl = SimpleTensorPickle();
  const std::string good = TorchSave(pkl, {{"0", Floats(6)}});
  ASSERT_TRUE(ReadAll(good).ok());

  // Compressed storage record.
  {
    std::vector<ZipEntry> e{{"arch/data.pkl", pkl}, {"arch/data/0", Floats(6), 8}};
    EXPECT_NE(ErrorOf(MakeZip(e)).find("compressed (method 8)"), std::string::npos);
  }
  // Encrypted record.
  EXPECT_NE(ErrorOf(MakeZip({{"arch/data.pkl", pkl, 0, 0x0809}})).find("encrypted"),
            std::string::npos);
  // Bad central directory signature.
  {
    std::string z = good;
    z[z.find(std::string("PK\x01\x02", 4))] = 'Q';
    EXPECT_NE(ErrorOf(z).find("central directory entry 0"), std::string::npos);
  }
  // Central directory offset pointing past the container (ZIP64 end record).
  {
    std::string z = good;
    size_t z64 = z.find(std::string("PK\x06\x06", 4));
    std::string patched = z.substr(0, z64 + 48);
    Put(&patched, uint64_t{1} << 40, 8);
    patched += z.substr(z64 + 56);
    EXPECT_NE(ErrorOf(patched).find("outside the container"), std::string::npos);
  }
  // Huge record counts: in the ZIP64 record, and against the limits.
  {
    std::string z = good;
    size_t z64 = z.find(std::string("PK\x06\x06", 4));
    std::string patched = z.substr(0, z64 + 24);
    Put(&patched, uint64_t{1} << 40, 8);
    Put(&patched, uint64_t{1} << 40, 8);
    patched += z.substr(z64 + 40);
    EXPECT_NE(ErrorOf(patched).find("exceed the limit"), std::string::npos);
    EXPECT_NE(ErrorOf(good, TorchZipLimits{.max_records = 2}).find("exceed the limit"),
              std::string::npos);
    EXPECT_NE(
        ErrorOf(good, TorchZipLimits{.max_central_directory_bytes = 100}).find("exceeds the limit"),
        std::string::npos);
    EXPECT_NE(ErrorOf(good, TorchZipLimits{.max_pickle_bytes = 10}).find("limit"),
              std::string::npos);
  }
  // 32-bit end record deferring to a ZIP64 record that is not there.
  {
    std::string z = MakeZip({{"arch/data.pkl", pkl}}, ZipShape{false, false, ""});
    z[z.size() - 22 + 10] = '\xff';
    z[z.size() - 22 + 11] = '\xff';
    EXPECT_EQ(ReadAll(z).err(), EIO);
  }
  // Not a zip at all; an empty zip.
  EXPECT_NE(ErrorOf(std::string(4096, 'x')).find("end-of-central-directory"), std::string::npos);
  EXPECT_NE(ErrorOf(MakeZip({})).find("no records"), std::string::npos);
  // Local header naming another record; local extra running into the directory.
  {
    std::string z = good;
    size_t at = z.find("arch/data/0");  // the local header's name comes first
    z[at + 10] = '9';
    EXPECT_NE(ErrorOf(z).find("names another record"), std::string::npos);
    z = good;
    at = z.find("arch/data/0");
    z[at - 2] = '\xff';
    z[at - 1] = '\xff';
    EXPECT_NE(ErrorOf(z).find("runs into the central directory"), std::string::npos);
  }
  // Records without a folder, duplicated, or missing.
  EXPECT_NE(ErrorOf(MakeZip({{"data.pkl", pkl}})).find("no archive folder"), std::string::npos);
  EXPECT_NE(ErrorOf(MakeZip({{"arch/data.pkl", pkl}, {"arch/data.pkl", pkl}})).find("twice"),
            std::string::npos);
  EXPECT_NE(ErrorOf(MakeZip({{"arch/version", "3\n"}})).find("no arch/data.pkl"),
            std::string::npos);
  EXPECT_NE(ErrorOf(TorchSave(pkl, {})).find("data/0 is missing"), std::string::npos);
  // Storage size disagreeing with the persistent id; a view reaching past it.
  EXPECT_NE(ErrorOf(TorchSave(pkl, {{"0", Floats(5)}})).find("persistent id says 24"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf(TorchSave(SimpleTensorPickle(6, 1), {{"0", Floats(6)}})).find("past its storage"),
      std::string::npos);
  EXPECT_NE(ErrorOf(TorchSave(SimpleTensorPickle(6, 0, {3, 3}, {2, 1}), {{"0", Floats(6)}}))
                .find("past its storage"),
            std::string::npos);
  EXPECT_NE(ErrorOf(TorchSave(SimpleTensorPickle(6, 7, {0, 3}, {3, 1}), {{"0", Floats(6)}}))
                .find("past its storage"),
            std::string::npos);
  // Overflowing shapes with zero strides.
  EXPECT_NE(
      ErrorOf(TorchSave(SimpleTensorPickle(1, 0, {int64_t{1} << 40, int64_t{1} << 40}, {0, 0}),
                        {{"0", Floats(1)}}))
          .find("2^62"),
      std::string::npos);
  // Big-endian archives, bad pickles, unsupported storages and dtypes.
  EXPECT_NE(ErrorOf(TorchSave(pkl, {{"0", Floats(6)}}, {}, "big")).find("byteorder"),
            std::string::npos);
  EXPECT_NE(ErrorOf(TorchSave("\x80\x02(", {{"0", Floats(6)}})).find("data.pkl"),
            std::string::npos);
  {
    Pickle p;
    Tensor(p, {"QInt8Storage", "0", 6}, 0, {6}, {1});
    EXPECT_NE(ErrorOf(TorchSave(p.Done(), {{"0", std::string(6, 'x')}})).find("QInt8Storage"),
              std::string::npos);
    Pickle q;
    Tensor(q, {"UntypedStorage", "0", 6}, 0, {6}, {1}, "float4_e8m8");
    EXPECT_NE(ErrorOf(TorchSave(q.Done(), {{"0", std::string(6, 'x')}})).find("dtype"),
              std::string::npos);
    Pickle r;
    Tensor(r, {"UntypedStorage", "0", 6}, 0, {6}, {1});
    EXPECT_NE(ErrorOf(TorchSave(r.Done(), {{"0", std::string(6, 'x')}})).find("no dtype"),
              std::string::npos);
  }
  // Every truncation of a built container, with and without ZIP64 records.
  for (ZipShape shape : {ZipShape{}, ZipShape{false, true, "xyz"}}) {
    std::string z = TorchSave(pkl, {{"0", Floats(6)}}, shape);
    ASSERT_TRUE(ReadAll(z).ok());
    for (size_t n = 0; n < z.size(); ++n) EXPECT_EQ(ReadAll(z.substr(0, n)).err(), EIO) << n;
  }
}

// A source that fails every read: errors pass through with their errno.
class FailingSource final : public ByteSource {
 public:
  Result<size_t> ReadAt(uint64_t, void*, size_t) const override {
    return Status::Error(ENETDOWN, "remote tier unreachable");
  }
  uint64_t Size() const override { return 4096; }
};

TEST(TorchZipTest, SourceErrorsPassThrough) {
  FailingSource src;
  Result<TorchTensorInfo> r = ReadTorchSaveTensor(src, 0, 4096);
  EXPECT_EQ(r.err(), ENETDOWN);
}

TEST(TorchZipTest, DtypeSizes) {
  EXPECT_EQ(TorchDtypeElementSize("bfloat16"), 2u);
  EXPECT_EQ(TorchDtypeElementSize("float8_e5m2"), 1u);
  EXPECT_EQ(TorchDtypeElementSize("complex128"), 16u);
  EXPECT_EQ(TorchDtypeElementSize("int64"), 8u);
  EXPECT_FALSE(TorchDtypeElementSize("float").has_value());  // aliases are not pickled names
}

}  // namespace
}  // namespace ckptfs
