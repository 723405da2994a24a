// Tests of the pickle VM: values from real Python pickles (protocols 2-5),
// hand-written opcode sequences, malformed input (every truncation, random
// byte flips, limits) and hostile graphs (cycles, deep nesting).
#include "formats/pickle_reader.h"

#include <gtest/gtest.h>

#include <random>

#include "formats/formats_test_util.h"

namespace ckptfs {
namespace {

using Kind = PickleValue::Kind;
using testing::DcpTestdata;
using testing::Fixture;
using testing::ReadTestFile;
using namespace std::string_literals;

std::string B(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

const PickleValue& Parse(const std::string& data, PickleDocument* keep) {
  Result<PickleDocument> r = Unpickle(data);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) {
    static PickleValue none(Kind::kNone);
    return none;
  }
  *keep = std::move(r).value();
  return keep->root();
}

std::string ErrorOf(const std::string& data, const PickleLimits& limits = {}) {
  Result<PickleDocument> r = Unpickle(data, limits);
  EXPECT_FALSE(r.ok()) << "parsed: " << (r.ok() ? DescribePickleValue(r->root()) : "");
  if (r.ok()) return "";
  EXPECT_EQ(r.err(), EIO);
  return r.status().message();
}

int64_t IntAt(const PickleValue& dict, const char* key) {
  const PickleValue* v = dict.Get(key);
  EXPECT_NE(v, nullptr) << key;
  if (v == nullptr) return 0;
  EXPECT_EQ(v->kind, Kind::kInt) << key;
  return v->int_value;
}

class ValuesFixtureTest : public ::testing::TestWithParam<int> {};

TEST_P(ValuesFixtureTest, DecodesEveryKind) {
  const int proto = GetParam();
  std::string data;
  ASSERT_TRUE(ReadTestFile(Fixture("values_p" + std::to_string(proto) + ".pickle"), &data));
  Result<PickleDocument> doc = Unpickle(data);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ(doc->protocol(), proto);
  const PickleValue& d = doc->root();
  ASSERT_EQ(d.kind, Kind::kDict);

  EXPECT_EQ(d.Get("none")->kind, Kind::kNone);
  EXPECT_TRUE(d.Get("true")->is(Kind::kBool) && d.Get("true")->bool_value);
  EXPECT_TRUE(d.Get("false")->is(Kind::kBool) && !d.Get("false")->bool_value);
  EXPECT_EQ(IntAt(d, "small"), 7);
  EXPECT_EQ(IntAt(d, "medium"), 300);
  EXPECT_EQ(IntAt(d, "neg"), -5);
  EXPECT_EQ(IntAt(d, "int32"), -70000);
  EXPECT_EQ(IntAt(d, "big"), int64_t{1} << 40);
  EXPECT_EQ(IntAt(d, "min"), INT64_MIN);
  EXPECT_EQ(IntAt(d, "max"), INT64_MAX);
  EXPECT_EQ(d.Get("float")->float_value, 1.5);
  EXPECT_EQ(d.Get("str")->text, "h\xc3\xa9llo");
  EXPECT_EQ(d.Get("long_str")->text, std::string(300, 'x'));
  const PickleValue* bytes = d.Get("bytes");
  if (proto >= 3) {
    EXPECT_EQ(bytes->kind, Kind::kBytes);
    EXPECT_EQ(bytes->text, B({0x00, 0xff}));
  } else {  // protocol 2 pickles bytes as _codecs.encode(str, 'latin1')
    EXPECT_TRUE(bytes->IsA("_codecs", "encode"));
    EXPECT_EQ(bytes->args->items.at(1)->text, "latin1");
  }
  EXPECT_EQ(d.Get("tuple0")->kind, Kind::kTuple);
  EXPECT_TRUE(d.Get("tuple0")->items.empty());
  EXPECT_EQ(d.Get("tuple1")->items.size(), 1u);
  EXPECT_EQ(d.Get("tuple3")->items.at(2)->int_value, 3);
  EXPECT_EQ(d.Get("tuple4")->items.at(3)->int_value, 4);
  ASSERT_EQ(d.Get("list")->kind, Kind::kList);
  EXPECT_EQ(d.Get("list")->items.size(), 3u);
  EXPECT_EQ(IntAt(*d.Get("nested")->Get("a")->items.at(0), "b"), 1);
  if (proto >= 4) {
    EXPECT_EQ(d.Get("set")->kind, Kind::kSet);
    EXPECT_EQ(d.Get("set")->items.at(0)->int_value, 1);
    EXPECT_EQ(d.Get("frozen")->kind, Kind::kSet);
    EXPECT_EQ(d.Get("frozen")->items.at(0)->int_value, 2);
  } else {
    EXPECT_TRUE(d.Get("set")->IsA("builtins", "set"));
    EXPECT_TRUE(d.Get("frozen")->IsA("builtins", "frozenset"));
  }
  const PickleValue* obj = d.Get("obj");
  EXPECT_TRUE(obj->IsA("__main__", "Point"));
  EXPECT_EQ(obj->Attr("x")->int_value, 1);
  EXPECT_EQ(obj->Attr("y")->text, "a");
  EXPECT_EQ(obj->Attr("z"), nullptr);
  const PickleValue* od = d.Get("od");
  EXPECT_TRUE(od->IsA("collections", "OrderedDict"));
  EXPECT_EQ(IntAt(*od, "k"), 1);  // SETITEMS on the OrderedDict object
  const PickleValue* shared = d.Get("shared");
  ASSERT_EQ(shared->items.size(), 2u);
  EXPECT_EQ(shared->items[0], shared->items[1]);  // one node through the memo
  const PickleValue* many = d.Get("many");
  ASSERT_EQ(many->items.size(), 260u);
  EXPECT_EQ(many->items[259]->text, "m259");
  EXPECT_EQ(DescribePickleValue(*d.Get("tuple3")), "(1, 2, 3)");
}

INSTANTIATE_TEST_SUITE_P(Protocols, ValuesFixtureTest, ::testing::Values(2, 3, 4, 5));

TEST(PickleReaderTest, HandWrittenOpcodes) {
  PickleDocument keep = std::move(Unpickle("N.").value());
  // BINUNICODE8, BINBYTES, BINBYTES8, BYTEARRAY8, SHORT_BINSTRING, BINSTRING in a LIST.
  std::string data = "\x80\x05(" + B({0x8d, 2, 0, 0, 0, 0, 0, 0, 0}) + "ab" + B({'B', 1, 0, 0, 0}) +
                     "c" + B({0x8e, 1, 0, 0, 0, 0, 0, 0, 0}) + "d" +
                     B({0x96, 1, 0, 0, 0, 0, 0, 0, 0}) + "e" + B({'U', 1}) + "f" +
                     B({'T', 1, 0, 0, 0}) + "g" + "l.";
  const PickleValue& l = Parse(data, &keep);
  ASSERT_EQ(l.kind, Kind::kList);
  ASSERT_EQ(l.items.size(), 6u);
  EXPECT_EQ(l.items[0]->text, "ab");
  EXPECT_EQ(l.items[1]->kind, Kind::kBytes);
  EXPECT_EQ(l.items[3]->text, "e");
  EXPECT_EQ(l.items[4]->kind, Kind::kString);
  EXPECT_EQ(l.items[5]->text, "g");

  // LONG1 / LONG4 / BININT sign handling.
  data = "(" + B({0x8a, 0}) + B({0x8a, 1, 0xff}) + B({0x8a, 2, 0x00, 0x80}) +
         B({0x8a, 8, 0, 0, 0, 0, 0, 0, 0, 0x80}) + B({0x8b, 2, 0, 0, 0, 0x34, 0x12}) +
         B({'J', 0xfe, 0xff, 0xff, 0xff}) + B({'M', 0xff, 0xff}) + "t.";
  const PickleValue& t = Parse(data, &keep);
  ASSERT_EQ(t.items.size(), 7u);
  EXPECT_EQ(t.items[0]->int_value, 0);
  EXPECT_EQ(t.items[1]->int_value, -1);
  EXPECT_EQ(t.items[2]->int_value, -32768);
  EXPECT_EQ(t.items[3]->int_value, INT64_MIN);
  EXPECT_EQ(t.items[4]->int_value, 0x1234);
  EXPECT_EQ(t.items[5]->int_value, -2);
  EXPECT_EQ(t.items[6]->int_value, 65535);

  // DUP, POP, POP_MARK, DICT, SETITEM, BINFLOAT (big-endian).
  data =
      "K\x01"
      "2"
      "0"
      "(K\x02K\x03"
      "1"
      "(X\x01\x00\x00\x00kG"s +
      B({0x3f, 0xf8, 0, 0, 0, 0, 0, 0}) + "d" +
      "X\x01\x00\x00\x00zNs"s
      "\x86.";
  const PickleValue& dup = Parse(data, &keep);
  ASSERT_EQ(dup.kind, Kind::kTuple);
  EXPECT_EQ(dup.items[0]->int_value, 1);
  EXPECT_EQ(dup.items[1]->Get("k")->float_value, 1.5);
  EXPECT_EQ(dup.items[1]->Get("z")->kind, Kind::kNone);

  // GLOBAL, NEWOBJ_EX with kwargs, two BUILDs merging, BINPERSID, EMPTY_SET + ADDITEMS.
  data =
      "cmy.mod\nKlass\n)}X\x01\x00\x00\x00"s
      "aK\x01s" +
      B({0x92}) + "}X\x01\x00\x00\x00xK\x01sb"s +
      "}(X\x01\x00\x00\x00xK\x02X\x01\x00\x00\x00yK\x03"s
      "ub" +
      "0" + "X\x03\x00\x00\x00pidQ"s + "0" + B({0x8f}) + "(K\x01K\x02" + B({0x90}) + ".";
  const PickleValue& set = Parse(data, &keep);
  EXPECT_EQ(set.kind, Kind::kSet);
  EXPECT_EQ(set.items.size(), 2u);

  data =
      "cmy.mod\nKlass\n)}X\x01\x00\x00\x00"s
      "aK\x01s" +
      B({0x92}) + "}X\x01\x00\x00\x00xK\x01sb"s +
      "}(X\x01\x00\x00\x00xK\x02X\x01\x00\x00\x00yK\x03"s
      "ub.";
  const PickleValue& obj = Parse(data, &keep);
  EXPECT_TRUE(obj.IsA("my.mod", "Klass"));
  EXPECT_EQ(obj.kwargs->Get("a")->int_value, 1);
  EXPECT_EQ(obj.Attr("x")->int_value, 2);  // the later BUILD wins
  EXPECT_EQ(obj.Attr("y")->int_value, 3);

  const PickleValue& pid = Parse("X\x03\x00\x00\x00pidQ."s, &keep);
  EXPECT_EQ(pid.kind, Kind::kPersistentId);
  EXPECT_EQ(pid.args->text, "pid");

  // BUILD with a (dict, slots) tuple state; Attr looks in both.
  data =
      "cm\nC\n)\x81}X\x01\x00\x00\x00"s
      "aK\x01s}X\x01\x00\x00\x00"s
      "bK\x02s\x86"
      "b.";
  const PickleValue& slots = Parse(data, &keep);
  EXPECT_EQ(slots.Attr("a")->int_value, 1);
  EXPECT_EQ(slots.Attr("b")->int_value, 2);

  // Unknown globals are opaque objects, REDUCE on an object result works.
  data = "\x80\x04\x8c\x03zzz\x8c\x01Q\x93)R\x8c\x01x\x85R.";
  const PickleValue& r = Parse(data, &keep);
  EXPECT_EQ(r.kind, Kind::kObject);
  EXPECT_EQ(r.callable->kind, Kind::kObject);
  EXPECT_EQ(r.module(), "");
  EXPECT_EQ(DescribePickleValue(r), "<zzz.Q()>('x')");

  // Bytes after STOP are ignored, as Python does.
  EXPECT_EQ(Parse("K\x05.garbage", &keep).int_value, 5);
}

TEST(PickleReaderTest, MalformedInputsGiveEioWithOffset) {
  EXPECT_NE(ErrorOf("").find("no STOP"), std::string::npos);
  EXPECT_NE(ErrorOf("K\x01").find("no STOP"), std::string::npos);
  EXPECT_NE(ErrorOf("K\x01\xff.").find("unknown opcode (opcode 0xff at byte 2)"),
            std::string::npos);
  EXPECT_NE(ErrorOf("\x80\x06N.").find("unsupported protocol 6"), std::string::npos);
  EXPECT_NE(ErrorOf("I01\n.").find("unsupported opcode (INT at byte 0)"), std::string::npos);
  EXPECT_NE(ErrorOf(B({0x97}) + ".").find("NEXT_BUFFER"), std::string::npos);
  EXPECT_NE(ErrorOf(B({0x82, 1}) + ".").find("EXT1"), std::string::npos);
  EXPECT_NE(ErrorOf("a.").find("stack underflow (APPEND at byte 0)"), std::string::npos);
  EXPECT_NE(ErrorOf("K\x01(a.").find("stack underflow"), std::string::npos);  // below the mark
  EXPECT_NE(ErrorOf("K\x01(\x85.").find("stack underflow"), std::string::npos);
  EXPECT_NE(ErrorOf(".").find("stack underflow (STOP"), std::string::npos);
  EXPECT_NE(ErrorOf("h\x07.").find("memo entry 7 is not set"), std::string::npos);
  EXPECT_NE(ErrorOf("q\x00."s).find("stack underflow (BINPUT"), std::string::npos);
  EXPECT_NE(ErrorOf("K\x01t.").find("no MARK"), std::string::npos);
  EXPECT_NE(ErrorOf("(K\x01"
                    "d.")
                .find("odd number"),
            std::string::npos);
  EXPECT_NE(ErrorOf("}(K\x01u.").find("odd number"), std::string::npos);
  EXPECT_NE(ErrorOf("(K\x01u.").find("below MARK"), std::string::npos);
  EXPECT_NE(ErrorOf("K\x01K\x02"
                    "a.")
                .find("APPEND to a non-list"),
            std::string::npos);
  EXPECT_NE(ErrorOf("K\x01(K\x02"
                    "e.")
                .find("cannot add items to a int"),
            std::string::npos);
  EXPECT_NE(ErrorOf("]K\x01K\x02s.").find("SETITEM on a non-dict"), std::string::npos);
  EXPECT_NE(ErrorOf("}}b.").find("BUILD on a dict"), std::string::npos);
  EXPECT_NE(ErrorOf("K\x01)R.").find("cannot call a int"), std::string::npos);
  EXPECT_NE(ErrorOf("cm\nC\nK\x01R.").find("arguments are not a tuple"), std::string::npos);
  EXPECT_NE(ErrorOf("K\x01K\x02\x93.").find("not strings"), std::string::npos);
  EXPECT_NE(ErrorOf("cmodule_only\n").find("unterminated line"), std::string::npos);
  EXPECT_NE(
      ErrorOf(B({0x95, 100, 0, 0, 0, 0, 0, 0, 0}) + "N.").find("frame of 100 bytes is truncated"),
      std::string::npos);
  EXPECT_NE(ErrorOf("X\xff\xff\xff\xff"
                    "abc.")
                .find("truncated: needs 4294967295 bytes"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf(B({0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) + ".").find("truncated"),
      std::string::npos);
  EXPECT_NE(ErrorOf("T\xff\xff\xff\xff.").find("negative length"), std::string::npos);
  EXPECT_NE(ErrorOf(B({0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0, 1}) + ".").find("does not fit in int64"),
            std::string::npos);
  EXPECT_NE(ErrorOf(B({0x8b, 0xff, 0xff, 0xff, 0xff}) + ".").find("negative length"),
            std::string::npos);
  EXPECT_NE(ErrorOf("1.").find("no MARK"), std::string::npos);
}

TEST(PickleReaderTest, LimitsAreEnforced) {
  PickleLimits memo;
  memo.max_memo_entries = 2;
  EXPECT_NE(ErrorOf("N\x94\x94\x94.", memo).find("memo larger"), std::string::npos);
  EXPECT_TRUE(Unpickle("N\x94\x94.", memo).ok());
  PickleLimits stack;
  stack.max_stack_size = 3;
  EXPECT_NE(ErrorOf("NNNN.", stack).find("stack larger"), std::string::npos);
  PickleLimits marks;
  marks.max_marks = 2;
  EXPECT_NE(ErrorOf("(((", marks).find("too many nested MARKs"), std::string::npos);
  PickleLimits input;
  input.max_input_bytes = 1;
  EXPECT_NE(ErrorOf("N.", input).find("larger than the limit"), std::string::npos);
  PickleLimits nodes;
  nodes.max_nodes = 3;
  EXPECT_NE(ErrorOf("]]]].", nodes).find("more values than the limit"), std::string::npos);
  EXPECT_TRUE(Unpickle("NNNNK\x01K\x01)))).", nodes).ok());  // shared immutable values
}

TEST(PickleReaderTest, RepeatedBuildsCannotAmplifyMemory) {
  // An object BUILT again and again with the same memoized 1,000-entry dict.
  std::string state = "}q\x01(";
  for (int i = 0; i < 1000; ++i) state += "M" + B({i & 0xff, i >> 8}) + "N";
  state += "u";
  std::string data = "cm\nC\n)\x81" + state + "b";
  for (int i = 0; i < 5000; ++i)
    data +=
        "h\x01"
        "b";
  EXPECT_NE(ErrorOf(data + ".").find("BUILD merges more state than the input holds"),
            std::string::npos);
}

TEST(PickleReaderTest, CyclesAndDeepNestingAreSafe) {
  // A list appended to itself through the memo.
  PickleDocument keep = std::move(Unpickle("N.").value());
  const PickleValue& cyc = Parse(
      "]q\x00h\x00"s
      "a.",
      &keep);
  EXPECT_EQ(cyc.items.at(0), &cyc);
  EXPECT_EQ(DescribePickleValue(cyc, 3), "[[[...]]]");

  // 200,000 nested lists: neither parsing, describing nor destroying recurses.
  const size_t depth = 200000;
  std::string deep = std::string(depth, ']') + std::string(depth - 1, 'a') + ".";
  Result<PickleDocument> doc = Unpickle(deep);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  EXPECT_EQ(doc->node_count(), depth);
  EXPECT_EQ(DescribePickleValue(doc->root(), 2), "[[...]]");
  // Wide containers are cut too.
  std::string wide = "(" + std::string(100, 'N') + "l.";
  ASSERT_TRUE(Unpickle(wide).ok());
  EXPECT_EQ(DescribePickleValue(Unpickle(wide)->root(), 4, 2), "[None, None, ...]");
}

std::vector<std::string> RealPickles() {
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
  for (const char* f : {"values_p2.pickle", "values_p5.pickle", "dcp_large_p2.metadata"}) {
    std::string data;
    if (!ReadTestFile(Fixture(f), &data)) {
      ADD_FAILURE() << "cannot read fixture " << Fixture(f);
      continue;
    }
    out.push_back(data);
  }
  return out;
}

TEST(PickleReaderTest, RealFilesParseAndEveryTruncationFails) {
  for (const std::string& data : RealPickles()) {
    ASSERT_FALSE(data.empty());
    ASSERT_TRUE(Unpickle(data).ok()) << Unpickle(data).status().ToString();
    for (size_t n = 0; n < data.size(); ++n) {
      Result<PickleDocument> r = Unpickle(std::string_view(data).substr(0, n));
      ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
      ASSERT_EQ(r.err(), EIO);
    }
  }
}

TEST(PickleReaderTest, RandomByteFlipsNeverCrash) {
  std::mt19937 rng(12345);
  size_t ok = 0, failed = 0;
  for (const std::string& data : RealPickles()) {
    for (int round = 0; round < 1500; ++round) {
      std::string m = data;
      int flips = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < flips; ++i) {
        size_t at = rng() % m.size();
        m[at] = static_cast<char>(rng() % 3 == 0 ? (m[at] ^ (1 << (rng() % 8))) : rng());
      }
      Result<PickleDocument> r = Unpickle(m);
      if (r.ok()) {
        ++ok;
        (void)DescribePickleValue(r->root(), 6);
      } else {
        ++failed;
        EXPECT_EQ(r.err(), EIO);
      }
    }
  }
  EXPECT_GT(failed, 0u);
  EXPECT_GT(ok + failed, 10000u);
}

}  // namespace
}  // namespace ckptfs
