#include "formats/cluster_records.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/crc32c_chunks.h"

namespace ckptfs {
namespace {

using nlohmann::json;

PartRecord SamplePart() {
  PartRecord r;
  r.node = "gpu-017";
  r.cache_id = "0b6f3c1e-2a4d-4b8e-9c1f-5d7a8e9f0a1b";
  r.epoch = 3;
  r.step_path = "run/step100";
  r.seq = 7;
  r.staged_as = "step100-tmp";
  r.published_at = 1712345678.123;
  r.open_writers = 2;
  r.last_activity = 1712345678.1;
  r.chunk_size = 4096;
  r.files = {
      {"model_and_optim/__8_0.distcp",
       10000,
       0644,
       1712345678000000001,
       0x1a2b3c4d,
       true,
       {1, 2, 0xffffffff}},
      {"model_and_optim/__9_0.distcp", 5, 0600, -5, std::nullopt, false, {}},
      {"train/rank8.pt", 0, 0640, 0, 0, true, {}},  // empty: no chunks
  };
  r.dirs = {"model_and_optim", "train"};
  r.symlinks = {{"latest.pt", "train/rank8.pt"}};
  r.all_uploaded = false;
  return r;
}

ClusterStepRecord SampleStep() {
  ClusterStepRecord r;
  r.step_path = "run/step100";
  r.step = 100;
  r.proposal = "gpu-000~9f3c0a1b";
  r.committer = "gpu-000";
  r.committed_at = 1712345679.5;
  r.dir_mtime_ns = 1712345679000000000;
  r.ephemeral = true;
  r.best_ref = "checkpoint-100";
  r.parts = {{"gpu-000", {9, 2}}, {"gpu-001", {3, 1}}};
  r.files = {
      {".metadata", "gpu-000", 300, 0xdeadbeef, 0644, 11},
      {"__0_0.distcp", "gpu-000", 1000, std::nullopt, 0644, 12},
      {"__1_0.distcp", "gpu-001", 2000, 0x00000001, 0600, 13},
  };
  r.bytes = 3300;
  r.dirs = {"sub", "sub/deeper"};
  r.symlinks = {{"link", "__0_0.distcp"}};
  return r;
}

// The sample's JSON, changed by `edit`, decoded.
Status DecodeEditedPart(const std::function<void(json&)>& edit) {
  json j = json::parse(EncodePartRecord(SamplePart()));
  edit(j);
  return DecodePartRecord(j.dump()).status();
}
Status DecodeEditedStep(const std::function<void(json&)>& edit) {
  json j = json::parse(EncodeClusterStepRecord(SampleStep()));
  edit(j);
  return DecodeClusterStepRecord(j.dump()).status();
}

// EIO whose message names `field` and, when given, says `why`.
void ExpectRefused(const Status& st, const std::string& field, const std::string& why = "") {
  EXPECT_EQ(st.err(), EIO) << field << ": " << st.ToString();
  EXPECT_NE(st.message().find(field), std::string::npos)
      << "does not name " << field << ": " << st.message();
  if (!why.empty()) {
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
  }
}

// A value of another JSON type than v's.
json OtherType(const json& v) {
  if (v.is_string()) return 12;
  if (v.is_boolean()) return "true";
  if (v.is_null()) return json::array();
  return "12";
}

// --- part records -----------------------------------------------------------

TEST(ClusterRecordPart, RoundTrips) {
  const PartRecord r = SamplePart();
  const std::string bytes = EncodePartRecord(r);
  auto back = DecodePartRecord(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, r);
  EXPECT_EQ(back->files[0].chunks, (std::vector<uint32_t>{1, 2, 0xffffffff}));
  EXPECT_FALSE(back->files[1].crc32c.has_value());
  EXPECT_EQ(back->published_at, 1712345678.123);
  EXPECT_EQ(back->files[1].mtime_ns, -5);
  EXPECT_TRUE(ValidatePartRecord(r).ok());
}

TEST(ClusterRecordPart, EncodingIsCanonical) {
  const PartRecord r = SamplePart();
  const std::string bytes = EncodePartRecord(r);
  EXPECT_EQ(EncodePartRecord(*DecodePartRecord(bytes)), bytes);
  EXPECT_EQ(bytes.back(), '\n');
  EXPECT_EQ(std::count(bytes.begin(), bytes.end(), '\n'), 1);  // compact
  EXPECT_EQ(bytes.rfind("{\"format\":\"ckptfs-part\",\"version\":1,\"node\":\"gpu-017\",", 0), 0u)
      << bytes;
  // Another order of the same entries: the same bytes, and the decoder
  // returns them in path order.
  PartRecord shuffled = r;
  std::reverse(shuffled.files.begin(), shuffled.files.end());
  std::reverse(shuffled.dirs.begin(), shuffled.dirs.end());
  EXPECT_EQ(EncodePartRecord(shuffled), bytes);
  EXPECT_EQ(*DecodePartRecord(EncodePartRecord(shuffled)), r);
  // Two nodes' encoders agree byte for byte on a fixed record (this string
  // is the format: changing it breaks mixed-version clusters).
  PartRecord tiny;
  tiny.node = "n1";
  tiny.cache_id = "c";
  tiny.step_path = "r/s1";
  tiny.seq = 1;
  tiny.published_at = 1.5;
  tiny.last_activity = 2;
  tiny.files = {{"f", 3, 0644, 4, 0xabcdef01, true, {}}};
  tiny.all_uploaded = true;
  tiny.synced = true;
  EXPECT_EQ(
      EncodePartRecord(tiny),
      "{\"format\":\"ckptfs-part\",\"version\":1,\"node\":\"n1\",\"cache_id\":\"c\",\"epoch\":1,"
      "\"step_path\":"
      "\"r/s1\","
      "\"seq\":1,\"staged_as\":\"\",\"published_at\":1.5,\"open_writers\":0,\"last_activity\":2.0,"
      "\"files\":[{\"path\":\"f\",\"size\":3,\"mode\":420,\"mtime_ns\":4,\"crc32c\":\"abcdef01\","
      "\"uploaded\":true,\"chunks\":[]}],\"dirs\":[],\"symlinks\":[],\"chunk_size\":0,\"all_"
      "uploaded\":true,\"synced\":true}\n");
}

TEST(ClusterRecordPart, AcceptsWhatReadersMayIgnoreOrReorder) {
  // Unknown keys (a later minor addition) are ignored; keys in any order.
  json j = json::parse(EncodePartRecord(SamplePart()));
  j["some_future_field"] = {1, 2, 3};
  j["files"][0]["future"] = "x";
  auto back = DecodePartRecord(j.dump(2));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, SamplePart());
  // Times may be integers.
  j["published_at"] = 1712345678;
  back = DecodePartRecord(j.dump());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->published_at, 1712345678.0);
  // An empty part: no files, not staged.
  PartRecord empty = SamplePart();
  empty.files.clear();
  empty.dirs.clear();
  empty.symlinks.clear();
  empty.staged_as.clear();
  empty.all_uploaded = true;
  EXPECT_EQ(*DecodePartRecord(EncodePartRecord(empty)), empty);
}

TEST(ClusterRecordPart, RefusesOtherDocuments) {
  ExpectRefused(DecodePartRecord("").status(), "part record", "not valid JSON");
  ExpectRefused(DecodePartRecord("{\"format\":").status(), "part record", "not valid JSON");
  ExpectRefused(DecodePartRecord("[]").status(), "part record", "not a JSON object");
  ExpectRefused(DecodePartRecord("{}").status(), "format", "missing");
  ExpectRefused(DecodePartRecord(EncodeClusterStepRecord(SampleStep())).status(), "format",
                "is not 'ckptfs-part'");
  ExpectRefused(DecodeEditedPart([](json& j) { j["format"] = "ckptfs-commit"; }), "format");
  ExpectRefused(DecodeEditedPart([](json& j) { j["format"] = 1; }), "format", "must be a string");
  ExpectRefused(DecodeEditedPart([](json& j) { j["version"] = 2; }), "version",
                "2 is not supported");
  ExpectRefused(DecodeEditedPart([](json& j) { j["version"] = "1"; }), "version", "not supported");
  ExpectRefused(DecodeEditedPart([](json& j) { j["version"] = 1.0; }), "version", "not supported");
  ExpectRefused(DecodeEditedPart([](json& j) { j.erase("version"); }), "version", "missing");
}

TEST(ClusterRecordPart, RefusesMissingFieldsAndWrongTypes) {
  const json sample = json::parse(EncodePartRecord(SamplePart()));
  for (const auto& [key, value] : sample.items()) {
    if (key == "format" || key == "version") continue;  // RefusesOtherDocuments
    SCOPED_TRACE(key);
    ExpectRefused(DecodeEditedPart([&](json& j) { j.erase(key); }), key, "missing");
    ExpectRefused(DecodeEditedPart([&](json& j) { j[key] = OtherType(value); }), key, "must be");
  }
  for (const auto& [key, value] : sample["files"][0].items()) {
    SCOPED_TRACE(key);
    ExpectRefused(DecodeEditedPart([&](json& j) { j["files"][0].erase(key); }), "files[0]." + key,
                  "missing");
    ExpectRefused(DecodeEditedPart([&](json& j) { j["files"][0][key] = OtherType(value); }),
                  "files[0]." + key, "must be");
  }
  ExpectRefused(DecodeEditedPart([](json& j) { j["files"][1] = "f"; }), "files[1]",
                "must be an object");
  ExpectRefused(DecodeEditedPart([](json& j) { j["dirs"][1] = 7; }), "dirs[1]", "must be a string");
  ExpectRefused(DecodeEditedPart([](json& j) { j["symlinks"][0].erase("target"); }),
                "symlinks[0].target", "missing");
  ExpectRefused(DecodeEditedPart([](json& j) { j["files"][0]["chunks"][1] = 5; }),
                "files[0].chunks[1]");
  // Numbers of the right kind only.
  ExpectRefused(DecodeEditedPart([](json& j) { j["seq"] = -1; }), "seq", "non-negative integer");
  ExpectRefused(DecodeEditedPart([](json& j) { j["seq"] = 1.5; }), "seq", "non-negative integer");
  ExpectRefused(DecodeEditedPart([](json& j) { j["files"][0]["size"] = -1; }), "files[0].size");
  ExpectRefused(DecodeEditedPart([](json& j) { j["open_writers"] = 4294967296ULL; }),
                "open_writers", "larger than 4294967295");
  ExpectRefused(
      DecodeEditedPart([](json& j) { j["files"][0]["mtime_ns"] = 9223372036854775808ULL; }),
      "files[0].mtime_ns", "64 signed bits");
  ExpectRefused(DecodeEditedPart([](json& j) { j["files"][0]["mode"] = 0100644; }), "files[0].mode",
                "beyond 07777");
  ExpectRefused(DecodeEditedPart([](json& j) { j["published_at"] = -1; }), "published_at", ">= 0");
  ExpectRefused(DecodeEditedPart([](json& j) { j["last_activity"] = true; }), "last_activity",
                "must be a number");
  // A number too large for a double is not JSON to the parser.
  std::string inf = EncodePartRecord(SamplePart());
  inf.replace(inf.find("1712345678.123"), 14, "1e999");
  ExpectRefused(DecodePartRecord(inf).status(), "part record", "not valid JSON");
}

TEST(ClusterRecordPart, RefusesBadCrcsAndChunks) {
  for (const std::string crc : {"1A2B3C4D", "1a2b3c4", "1a2b3c4d0", "xyz12345", ""}) {
    ExpectRefused(DecodeEditedPart([&](json& j) { j["files"][0]["crc32c"] = crc; }),
                  "files[0].crc32c", "8 lower-case hex digits");
  }
  ExpectRefused(DecodeEditedPart([](json& j) { j["files"][0]["chunks"][0] = "ABCDEF01"; }),
                "files[0].chunks[0]");
  ExpectRefused(DecodeEditedPart([](json& j) { j["files"][0]["chunks"].erase(0); }),
                "files[0].chunks", "do not cover 10000 bytes");
  ExpectRefused(DecodeEditedPart([](json& j) { j["files"][2]["chunks"] = {"00000000"}; }),
                "files[2].chunks", "do not cover 0 bytes");
  ExpectRefused(DecodeEditedPart([](json& j) { j["chunk_size"] = 0; }), "files[0].chunks",
                "without a chunk_size");
  ExpectRefused(DecodeEditedPart([](json& j) { j["chunk_size"] = 16; }), "chunk_size",
                "within [4096");
  ExpectRefused(DecodeEditedPart([](json& j) { j["chunk_size"] = kMaxChecksumChunk + 1; }),
                "chunk_size");
  // Uploaded means its CRC32C is known; all_uploaded means every file is.
  ExpectRefused(DecodeEditedPart([](json& j) { j["files"][0]["crc32c"] = nullptr; }),
                "files[0].crc32c", "null for an uploaded file");
  ExpectRefused(DecodeEditedPart([](json& j) { j["all_uploaded"] = true; }), "files[1].uploaded",
                "all_uploaded is true");
  // Durable as named cannot hold while files are still being written.
  ExpectRefused(DecodeEditedPart([](json& j) {
                  j["open_writers"] = 2;
                  j["synced"] = true;
                }),
                "synced", "2 open writer(s)");
  ExpectRefused(DecodeEditedPart([](json& j) { j.erase("synced"); }), "synced");
  // The fencing token: required, and epochs start at 1.
  ExpectRefused(DecodeEditedPart([](json& j) { j["epoch"] = 0; }), "epoch", "is 0");
  ExpectRefused(DecodeEditedPart([](json& j) { j.erase("epoch"); }), "epoch");
}

TEST(ClusterRecordPart, RefusesPathsOutsideTheStep) {
  const std::vector<std::string> escapes = {"../x",
                                            "/abs",
                                            "a//b",
                                            "a/./b",
                                            "",
                                            "x/",
                                            ".",
                                            "..",
                                            "a/..",
                                            "./a",
                                            "a/b/../../..",
                                            std::string("a\0b", 3),
                                            std::string(256, 'c'),
                                            std::string(2100, 'd') + "/" + std::string(2100, 'e'),
                                            "bad\xff"};
  for (const std::string& path : escapes) {
    SCOPED_TRACE(path.substr(0, 40));
    PartRecord r = SamplePart();
    r.files[1].path = path;
    ExpectRefused(ValidatePartRecord(r), "files[1].path");
    ExpectRefused(DecodePartRecord(EncodePartRecord(r)).status(), "files[");
    r = SamplePart();
    r.dirs[0] = path;
    ExpectRefused(DecodePartRecord(EncodePartRecord(r)).status(), "dirs[");
    r = SamplePart();
    r.symlinks[0].path = path;
    ExpectRefused(DecodePartRecord(EncodePartRecord(r)).status(), "symlinks[0].path");
    r = SamplePart();
    r.step_path = path;
    ExpectRefused(DecodePartRecord(EncodePartRecord(r)).status(), "step_path");
    if (!path.empty()) {  // "" = not staged
      r = SamplePart();
      r.staged_as = path;
      ExpectRefused(DecodePartRecord(EncodePartRecord(r)).status(), "staged_as");
    }
  }
  // The messages say what is wrong and what is allowed.
  PartRecord r = SamplePart();
  r.files[0].path = "a/../../etc/passwd";
  const std::string msg = DecodePartRecord(EncodePartRecord(r)).status().message();
  EXPECT_NE(msg.find("has a '..' component"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no leading or trailing '/'"), std::string::npos) << msg;
  // 255-byte components and 4096-byte paths are fine.
  r = SamplePart();
  r.files[1].path = std::string(255, 'c') + "/" + std::string(255, 'd');
  r.dirs.push_back(std::string(255, 'c'));
  EXPECT_TRUE(DecodePartRecord(EncodePartRecord(r)).ok());
  r.files[1].path.clear();
  while (r.files[1].path.size() < kMaxRecordPathLength - 200)
    r.files[1].path += std::string(199, 'p') + "/";
  r.files[1].path += std::string(kMaxRecordPathLength - r.files[1].path.size(), 'q');
  EXPECT_EQ(r.files[1].path.size(), kMaxRecordPathLength);
  EXPECT_TRUE(DecodePartRecord(EncodePartRecord(r)).ok());
  r.files[1].path += "q";
  ExpectRefused(DecodePartRecord(EncodePartRecord(r)).status(), "files[", "4097 bytes long");
}

TEST(ClusterRecordPart, RefusesDuplicatesAndBadIdentity) {
  PartRecord r = SamplePart();
  r.files[2].path = r.files[0].path;
  ExpectRefused(DecodePartRecord(EncodePartRecord(r)).status(), "files[", "duplicate path");
  r = SamplePart();
  r.dirs.push_back("train/rank8.pt");  // a file's path
  ExpectRefused(DecodePartRecord(EncodePartRecord(r)).status(), "dirs[", "duplicate path");
  r = SamplePart();
  r.symlinks.push_back({"model_and_optim", "x"});  // a directory's path
  ExpectRefused(DecodePartRecord(EncodePartRecord(r)).status(), "symlinks[", "duplicate path");
  r = SamplePart();
  r.symlinks[0].target = "";
  ExpectRefused(DecodePartRecord(EncodePartRecord(r)).status(), "symlinks[0].target", "empty");
  for (const std::string& node :
       std::vector<std::string>{"", "-x", "a~b", "a/b", "x.", std::string(64, 'n')}) {
    r = SamplePart();
    r.node = node;
    ExpectRefused(DecodePartRecord(EncodePartRecord(r)).status(), "node", "node name");
  }
  for (const std::string& id : std::vector<std::string>{
           "", "with space", "tab\t", std::string(kMaxRecordStringLength + 1, 'i')}) {
    r = SamplePart();
    r.cache_id = id;
    ExpectRefused(DecodePartRecord(EncodePartRecord(r)).status(), "cache_id");
  }
  // Validate refuses what Encode cannot write faithfully.
  r = SamplePart();
  r.files[0].mode = 0100644;
  ExpectRefused(ValidatePartRecord(r), "files[0].mode", "beyond 07777");
  EXPECT_EQ(json::parse(EncodePartRecord(r))["files"][0]["mode"], 0644);
  r = SamplePart();
  r.published_at = std::nan("");
  ExpectRefused(ValidatePartRecord(r), "published_at", "finite");
  ExpectRefused(DecodePartRecord(EncodePartRecord(r)).status(), "published_at");
}

TEST(ClusterRecordPart, RefusesTooManyFiles) {
  // The count is checked before any entry is looked at: a million and one
  // zeros is enough.
  std::string many = EncodePartRecord(SamplePart());
  const size_t at = many.find("\"files\":[") + 9;
  std::string zeros;
  zeros.reserve(2 * (kMaxRecordEntries + 1));
  for (size_t i = 0; i <= kMaxRecordEntries; ++i) zeros += "0,";
  many.insert(at, zeros);
  ExpectRefused(DecodePartRecord(many).status(), "files", "1000004 entries; at most 1000000");
}

TEST(ClusterRecordPart, NonUtf8NamesAreRefusedNotMangled) {
  PartRecord r = SamplePart();
  r.files[1].path = "latin1-\xe9.bin";
  ExpectRefused(ValidatePartRecord(r), "files[1].path", "not valid UTF-8");
  // Encode never throws, and writes such a string as null: the record does
  // not decode (rather than decoding with another name). "latin1-" sorts
  // first.
  const std::string bytes = EncodePartRecord(r);
  EXPECT_NE(bytes.find("{\"path\":null,"), std::string::npos) << bytes;
  ExpectRefused(DecodePartRecord(bytes).status(), "files[0].path", "must be a string, not null");
  r.files[1].path = "utf8-\xc3\xa9.bin";
  auto back = DecodePartRecord(EncodePartRecord(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->files[2].path, "utf8-\xc3\xa9.bin");
}

// --- step records -----------------------------------------------------------

TEST(ClusterRecordStep, RoundTrips) {
  const ClusterStepRecord r = SampleStep();
  auto back = DecodeClusterStepRecord(EncodeClusterStepRecord(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, r);
  EXPECT_EQ(back->parts.at("gpu-001").seq, 3u);
  EXPECT_FALSE(back->files[1].crc32c.has_value());
  EXPECT_EQ(*back->files[2].crc32c, 1u);
  EXPECT_TRUE(ValidateClusterStepRecord(r).ok());
  std::string node, nonce;
  ASSERT_TRUE(ParseProposal(back->proposal, &node, &nonce));
  EXPECT_EQ(node, "gpu-000");
  EXPECT_EQ(nonce, "9f3c0a1b");
}

TEST(ClusterRecordStep, EncodingIsCanonical) {
  const ClusterStepRecord r = SampleStep();
  const std::string bytes = EncodeClusterStepRecord(r);
  EXPECT_EQ(EncodeClusterStepRecord(*DecodeClusterStepRecord(bytes)), bytes);
  ClusterStepRecord shuffled = r;
  std::rotate(shuffled.files.begin(), shuffled.files.begin() + 1, shuffled.files.end());
  std::reverse(shuffled.dirs.begin(), shuffled.dirs.end());
  EXPECT_EQ(EncodeClusterStepRecord(shuffled), bytes);
  EXPECT_EQ(std::count(bytes.begin(), bytes.end(), '\n'), 1);
  ClusterStepRecord tiny;
  tiny.step_path = "r/s1";
  tiny.step = -1;
  tiny.proposal = "b~1";
  tiny.committer = "b";
  tiny.committed_at = 0.25;
  tiny.parts = {{"b", {2, 1}}, {"a", {1, 0}}};
  tiny.files = {{"f", "b", 3, std::nullopt, 0600, 9}};
  tiny.bytes = 3;
  tiny.dirs = {"d"};
  EXPECT_EQ(EncodeClusterStepRecord(tiny),
            "{\"format\":\"ckptfs-step\",\"version\":1,\"step_path\":\"r/"
            "s1\",\"step\":-1,\"proposal\":\"b~1\","
            "\"committer\":\"b\",\"committed_at\":0.25,\"dir_mtime_ns\":0,\"ephemeral\":false,"
            "\"best_ref\":\"\","
            "\"bytes\":3,\"parts\":{\"a\":{\"seq\":1,\"files\":0},\"b\":{\"seq\":2,\"files\":1}},"
            "\"files\":[{\"path\":\"f\",\"node\":\"b\",\"size\":3,\"crc32c\":null,\"mode\":384,"
            "\"mtime_ns\":9}],"
            "\"dirs\":[\"d\"],\"symlinks\":[]}\n");
}

TEST(ClusterRecordStep, RefusesOtherDocuments) {
  ExpectRefused(DecodeClusterStepRecord("nope").status(), "step record", "not valid JSON");
  ExpectRefused(DecodeClusterStepRecord("\"x\"").status(), "step record", "not a JSON object");
  ExpectRefused(DecodeClusterStepRecord(EncodePartRecord(SamplePart())).status(), "format",
                "is not 'ckptfs-step'");
  ExpectRefused(DecodeEditedStep([](json& j) { j["version"] = 2; }), "version",
                "2 is not supported");
  ExpectRefused(DecodeEditedStep([](json& j) { j["version"] = nullptr; }), "version");
}

TEST(ClusterRecordStep, RefusesMissingFieldsAndWrongTypes) {
  const json sample = json::parse(EncodeClusterStepRecord(SampleStep()));
  for (const auto& [key, value] : sample.items()) {
    if (key == "format" || key == "version") continue;
    SCOPED_TRACE(key);
    ExpectRefused(DecodeEditedStep([&](json& j) { j.erase(key); }), key, "missing");
    ExpectRefused(DecodeEditedStep([&](json& j) { j[key] = OtherType(value); }), key, "must be");
  }
  for (const auto& [key, value] : sample["files"][0].items()) {
    SCOPED_TRACE(key);
    ExpectRefused(DecodeEditedStep([&](json& j) { j["files"][0].erase(key); }), "files[0]." + key,
                  "missing");
    ExpectRefused(DecodeEditedStep([&](json& j) { j["files"][0][key] = OtherType(value); }),
                  "files[0]." + key, "must be");
  }
  for (const char* key : {"seq", "files"}) {
    ExpectRefused(DecodeEditedStep([&](json& j) { j["parts"]["gpu-001"].erase(key); }),
                  std::string("parts['gpu-001'].") + key, "missing");
    ExpectRefused(DecodeEditedStep([&](json& j) { j["parts"]["gpu-001"][key] = -3; }),
                  std::string("parts['gpu-001'].") + key, "non-negative integer");
  }
  ExpectRefused(DecodeEditedStep([](json& j) { j["parts"]["gpu-001"] = 3; }), "parts['gpu-001']",
                "must be an object");
  ExpectRefused(DecodeEditedStep([](json& j) { j["parts"] = json::array(); }), "parts",
                "must be an object");
  ExpectRefused(DecodeEditedStep([](json& j) { j["step"] = 1.5; }), "step", "must be an integer");
  ExpectRefused(DecodeEditedStep([](json& j) { j["dir_mtime_ns"] = -1; }), "dir_mtime_ns",
                "negative");
  ExpectRefused(DecodeEditedStep([](json& j) { j["committed_at"] = "soon"; }), "committed_at",
                "must be a number");
}

TEST(ClusterRecordStep, RefusesInconsistentDecisions) {
  // A file whose node has no part.
  ClusterStepRecord r = SampleStep();
  r.files[2].node = "gpu-002";
  ExpectRefused(DecodeClusterStepRecord(EncodeClusterStepRecord(r)).status(), "files[2].node",
                "'gpu-002' has no entry in parts");
  r = SampleStep();
  r.parts.erase("gpu-001");
  ExpectRefused(ValidateClusterStepRecord(r), "files[2].node", "no entry in parts");
  // Sizes that do not sum to bytes, or overflow.
  r = SampleStep();
  r.bytes = 3301;
  ExpectRefused(DecodeClusterStepRecord(EncodeClusterStepRecord(r)).status(), "bytes",
                "3301 is not the files' total size 3300");
  r = SampleStep();
  r.files[0].size = UINT64_MAX;
  r.bytes = 0;
  ExpectRefused(DecodeClusterStepRecord(EncodeClusterStepRecord(r)).status(), "size", "overflow");
  // Duplicate paths, between files and with the tree.
  r = SampleStep();
  r.files[1].path = ".metadata";
  ExpectRefused(DecodeClusterStepRecord(EncodeClusterStepRecord(r)).status(), "files[",
                "duplicate path");
  r = SampleStep();
  r.dirs.push_back("sub");
  ExpectRefused(DecodeClusterStepRecord(EncodeClusterStepRecord(r)).status(), "dirs[",
                "duplicate path");
  r = SampleStep();
  r.symlinks[0].path = "__1_0.distcp";
  ExpectRefused(DecodeClusterStepRecord(EncodeClusterStepRecord(r)).status(), "symlinks[0].path",
                "duplicate");
  // Paths outside the step.
  for (const std::string path : {"../x", "/abs", "a//b", "a/./b", "", "x/"}) {
    r = SampleStep();
    r.files[0].path = path;
    ExpectRefused(DecodeClusterStepRecord(EncodeClusterStepRecord(r)).status(), "files[");
    r = SampleStep();
    r.step_path = path;
    ExpectRefused(DecodeClusterStepRecord(EncodeClusterStepRecord(r)).status(), "step_path");
  }
  // Identities.
  for (const std::string& proposal :
       std::vector<std::string>{"", "gpu-000", "gpu-000~", "~abc", "gpu 0~abc", "gpu-000~a~b",
                                "gpu-000~" + std::string(65, 'f'), "gpu-000~a/b"}) {
    r = SampleStep();
    r.proposal = proposal;
    ExpectRefused(DecodeClusterStepRecord(EncodeClusterStepRecord(r)).status(), "proposal",
                  "<node>~<nonce>");
  }
  r = SampleStep();
  r.committer = "gpu-000.";
  ExpectRefused(DecodeClusterStepRecord(EncodeClusterStepRecord(r)).status(), "committer",
                "ends with '.'");
  r = SampleStep();
  r.parts["bad node"] = {1, 0};
  ExpectRefused(DecodeClusterStepRecord(EncodeClusterStepRecord(r)).status(), "parts['bad node']",
                "node name");
  r = SampleStep();
  r.best_ref = std::string("a\0b", 3);
  ExpectRefused(DecodeClusterStepRecord(EncodeClusterStepRecord(r)).status(), "best_ref", "NUL");
  r = SampleStep();
  r.files[0].mode = 010000;
  ExpectRefused(ValidateClusterStepRecord(r), "files[0].mode");
}

TEST(ClusterRecordStep, RefusesTooManyFilesAndNodes) {
  std::string many = EncodeClusterStepRecord(SampleStep());
  const size_t at = many.find("\"files\":[") + 9;
  std::string zeros;
  for (size_t i = 0; i < kMaxRecordEntries; ++i) zeros += "0,";
  many.insert(at, zeros);
  ExpectRefused(DecodeClusterStepRecord(many).status(), "files", "at most 1000000");
  json j = json::parse(EncodeClusterStepRecord(SampleStep()));
  for (size_t i = 0; i < kMaxRecordNodes; ++i) j["parts"]["n" + std::to_string(i)] = 0;
  ExpectRefused(DecodeClusterStepRecord(j.dump()).status(), "parts", "at most 65536");
}

// --- keys -------------------------------------------------------------------

TEST(ClusterRecordKeys, PartAndStepKeys) {
  EXPECT_EQ(PartRecordKey("run/step100", "gpu-017"), "run/step100/.ckptfs-parts/gpu-017.json");
  EXPECT_EQ(StepRecordKey("run/step100"), "run/step100/.ckptfs-step.json");
  std::string step, node;
  ASSERT_TRUE(ParsePartRecordKey("run/step100/.ckptfs-parts/gpu-017.json", &step, &node));
  EXPECT_EQ(step, "run/step100");
  EXPECT_EQ(node, "gpu-017");
  ASSERT_TRUE(ParsePartRecordKey("s/.ckptfs-parts/a.json.json", &step, &node));
  EXPECT_EQ(node, "a.json");
  EXPECT_TRUE(ParsePartRecordKey("s/.ckptfs-parts/n.json", nullptr, nullptr));
  // Round trip for any valid step path and node.
  for (const std::string s : {"a", "run/step1", "x/y/z"}) {
    for (const std::string n : {"a", "gpu-0", "n.1_b"}) {
      ASSERT_TRUE(ParsePartRecordKey(PartRecordKey(s, n), &step, &node));
      EXPECT_EQ(step, s);
      EXPECT_EQ(node, n);
    }
  }
  step = node = "unchanged";
  for (const std::string key :
       {"", ".ckptfs-parts/a.json", "/.ckptfs-parts/a.json", "s/.ckptfs-parts/.json",
        "s/.ckptfs-parts/a.jso", "s/.ckptfs-parts/a", "s/.ckptfs-parts/-a.json",
        "s/.ckptfs-parts/a/b.json", "s/.ckptfs-parts/a~1.json", "../s/.ckptfs-parts/a.json",
        "s//.ckptfs-parts/a.json", "s/.ckptfs-step.json", "s/.ckptfs-parts/a.json/x",
        "s/.ckptfs-parts/a..json"}) {
    EXPECT_FALSE(ParsePartRecordKey(key, &step, &node)) << key;
  }
  EXPECT_EQ(step, "unchanged");
  EXPECT_EQ(node, "unchanged");
}

TEST(ClusterRecordKeys, Proposals) {
  std::string node, nonce;
  EXPECT_TRUE(ParseProposal("gpu-000~9f3c0a1b", &node, &nonce));
  EXPECT_EQ(node, "gpu-000");
  EXPECT_EQ(nonce, "9f3c0a1b");
  EXPECT_TRUE(ParseProposal("a~" + std::string(kMaxProposalNonceLength, 'Z'), nullptr, nullptr));
  EXPECT_FALSE(
      ParseProposal("a~" + std::string(kMaxProposalNonceLength + 1, 'Z'), nullptr, nullptr));
  EXPECT_FALSE(ParseProposal("a.~x", &node, &nonce));
}

TEST(ClusterRecordRunFile, RoundTripsCanonically) {
  const RunFileRecord r{.path = "run1/latest",
                        .node = "node-7",
                        .size = 13,
                        .mtime_ns = 1'700'000'000'123'456'789,
                        .crc32c = 0x0a0b0c0d};
  const std::string body = EncodeRunFileRecord(r);
  EXPECT_EQ(
      body,
      R"({"format":"ckptfs-run-file","version":1,"path":"run1/latest","node":"node-7","size":13,)"
      R"("mtime_ns":1700000000123456789,"crc32c":"0a0b0c0d"})"
      "\n");
  auto back = DecodeRunFileRecord(body);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, r);
}

TEST(ClusterRecordRunFile, RefusesWhatAnotherNodeMustNotTrust) {
  auto refused = [](const std::string& body, const std::string& why) {
    auto r = DecodeRunFileRecord(body);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().err(), EIO);
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  const std::string head = R"({"format":"ckptfs-run-file","version":1,)";
  refused(head + R"("path":"../latest","node":"a","size":1,"mtime_ns":1,"crc32c":"00000000"})",
          "run file record: path");
  refused(head + R"("path":"/latest","node":"a","size":1,"mtime_ns":1,"crc32c":"00000000"})",
          "is absolute");
  refused(head + R"("path":"run/latest","node":"a b","size":1,"mtime_ns":1,"crc32c":"00000000"})",
          "node");
  refused(head + R"("path":"run/latest","node":"a","size":-1,"mtime_ns":1,"crc32c":"00000000"})",
          "size");
  refused(head + R"("path":"run/latest","node":"a","size":1,"mtime_ns":1,"crc32c":null})",
          "crc32c");
  refused(head + R"("path":"run/latest","node":"a","size":1,"mtime_ns":1})", "crc32c: missing");
  refused(R"({"format":"ckptfs-part","version":1})", "format");
  refused("not json", "not valid JSON");
}

}  // namespace
}  // namespace ckptfs
