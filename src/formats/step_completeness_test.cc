// Tests of the commit-time completeness check with an in-memory StepFiles:
// real DCP checkpoints (complete, missing, short, broken metadata), the
// OLMo-core trainer layout, OLMo-core's safetensors format (generated files and
// the real hf_sharded shards), Megatron's metadata.json, unknown layouts.
#include "formats/step_completeness.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "formats/formats_test_util.h"

namespace ckptfs {
namespace {

using Verdict = Completeness::Verdict;
using testing::MakeSafetensors;
using testing::TestTensor;

class FakeStep : public StepFiles {
 public:
  std::map<std::string, std::string> files;
  std::set<std::string> unreadable;
  std::map<std::string, uint64_t> size_override;

  std::optional<uint64_t> FileSize(const std::string& p) const override {
    if (auto o = size_override.find(p); o != size_override.end()) return o->second;
    auto it = files.find(p);
    if (it == files.end()) return std::nullopt;
    return it->second.size();
  }
  Result<std::string> ReadFile(const std::string& p, uint64_t max_bytes) const override {
    auto it = files.find(p);
    if (it == files.end() || unreadable.count(p)) return Status::Error(EIO, "injected read error");
    if (it->second.size() > max_bytes) return Status::Error(EFBIG, "too large");
    return it->second;
  }
  Result<std::string> ReadRange(const std::string& p, uint64_t offset,
                                uint64_t length) const override {
    auto it = files.find(p);
    if (it == files.end() || unreadable.count(p)) return Status::Error(EIO, "injected read error");
    if (offset > it->second.size() || length > it->second.size() - offset)
      return Status::Error(EIO, "past EOF");
    return it->second.substr(offset, length);
  }

  // Copies a real checkpoint case (without expected/) under `prefix`.
  void AddCase(const std::string& rel, const std::string& prefix = "") {
    const std::string dir = testing::DcpTestdata(rel);
    std::string meta;
    ASSERT_TRUE(testing::ReadTestFile(dir + "/.metadata", &meta)) << dir;
    files[prefix + ".metadata"] = meta;
    for (const char* f : {"__0_0.distcp", "__0_1.distcp", "__0_2.distcp", "__0_3.distcp",
                          "__1_0.distcp", "__1_1.distcp"}) {
      std::string data;
      if (testing::ReadTestFile(dir + "/" + f, &data)) files[prefix + f] = data;
    }
  }
};

void ExpectVerdict(const StepFiles& step, Verdict verdict, const std::string& reason_part) {
  Completeness c = CheckStepCompleteness(step);
  EXPECT_EQ(CompletenessVerdictName(c.verdict), std::string(CompletenessVerdictName(verdict)))
      << c.reason;
  EXPECT_NE(c.reason.find(reason_part), std::string::npos) << "reason: " << c.reason;
}

TEST(StepCompletenessTest, RealDcpCheckpointsAreComplete) {
  for (const char* c : testing::kDcpCases) {
    SCOPED_TRACE(c);
    FakeStep step;
    step.AddCase(c);
    ExpectVerdict(step, Verdict::kComplete, "DCP checkpoint .metadata");
  }
  FakeStep step;
  step.AddCase("torch-2.14/dcp_default");
  ExpectVerdict(step, Verdict::kComplete, "2 files, 15 items");
  step.files["__1_0.distcp"] += "trailing bytes are fine";
  ExpectVerdict(step, Verdict::kComplete, "");
}

TEST(StepCompletenessTest, DcpMissingAndShortFilesWait) {
  FakeStep step;
  step.AddCase("torch-2.14/dcp_default");
  step.files.erase("__1_0.distcp");
  Completeness c = CheckStepCompleteness(step);
  EXPECT_EQ(c.verdict, Verdict::kWaiting);
  EXPECT_EQ(c.reason, "waiting for __1_0.distcp");

  step.AddCase("torch-2.14/dcp_default");
  step.files["__1_0.distcp"].resize(1024);
  c = CheckStepCompleteness(step);
  EXPECT_EQ(c.verdict, Verdict::kWaiting);
  EXPECT_EQ(c.reason, "waiting for __1_0.distcp (1024 of 17660 bytes)");

  FakeStep threads;
  threads.AddCase("torch-2.14/dcp_threads");
  threads.files.erase("__1_1.distcp");
  threads.files["__0_1.distcp"].resize(5);
  c = CheckStepCompleteness(threads);
  EXPECT_EQ(c.verdict, Verdict::kWaiting);
  EXPECT_EQ(c.reason, "waiting for __0_1.distcp (5 of 1577 bytes) and 1 more file");
  threads.files.erase("__0_0.distcp");
  ExpectVerdict(threads, Verdict::kWaiting, "waiting for __0_0.distcp and 2 more files");

  // A short file is waited for even when it holds only some items: 1.13 ckpt113b
  // keeps three items in one file.
  FakeStep b;
  b.AddCase("torch-1.13/ckpt113b");
  b.files["__0_0.distcp"].resize(1178);
  ExpectVerdict(b, Verdict::kWaiting, "waiting for __0_0.distcp (1178 of 1925 bytes)");
}

TEST(StepCompletenessTest, DcpBrokenMetadata) {
  FakeStep step;
  step.AddCase("torch-2.14/dcp_default");
  std::string meta = step.files[".metadata"];
  step.files[".metadata"] = meta.substr(0, meta.size() / 2);
  ExpectVerdict(step, Verdict::kBroken,
                "cannot parse .metadata: DCP .metadata: pickle: frame of 3095 bytes is truncated");
  step.files[".metadata"] = "";
  ExpectVerdict(step, Verdict::kBroken, "cannot parse .metadata");
  step.files[".metadata"] = "{\"not\": \"a pickle\"}";
  ExpectVerdict(step, Verdict::kBroken, "unknown opcode");
  step.files[".metadata"] = meta;
  step.unreadable.insert(".metadata");
  ExpectVerdict(step, Verdict::kBroken, "cannot read .metadata: injected read error");
  step.unreadable.clear();
  step.size_override[".metadata"] = kMaxDcpMetadataBytes + 1;
  ExpectVerdict(step, Verdict::kBroken, "more than the limit");
}

TEST(StepCompletenessTest, DcpRandomMetadataCorruptionNeverCrashes) {
  FakeStep step;
  ASSERT_NO_FATAL_FAILURE(step.AddCase("torch-2.14/dcp_threads"));  // flips index into it
  const std::string meta = step.files[".metadata"];
  std::mt19937 rng(99);
  std::map<Verdict, int> seen;
  for (int round = 0; round < 2000; ++round) {
    std::string m = meta;
    for (int i = 0, n = 1 + static_cast<int>(rng() % 3); i < n; ++i)
      m[rng() % m.size()] = static_cast<char>(rng());
    step.files[".metadata"] = m;
    Completeness c = CheckStepCompleteness(step);
    EXPECT_NE(c.verdict, Verdict::kUnknownFormat);
    EXPECT_FALSE(c.reason.empty());
    ++seen[c.verdict];
  }
  EXPECT_GT(seen[Verdict::kBroken], 0);
}

TEST(StepCompletenessTest, OlmoCoreTrainerCheckpoint) {
  FakeStep step;
  step.files[".metadata.json"] = R"({"ephemeral": false, "version": "2.1.0"})";
  ExpectVerdict(step, Verdict::kWaiting, "waiting for model_and_optim/.metadata");
  step.AddCase("torch-2.14/dcp_default", "model_and_optim/");
  ExpectVerdict(step, Verdict::kWaiting, "waiting for train/rank0.pt");
  step.files["train/rank0.pt"] = "zip";
  ExpectVerdict(step, Verdict::kComplete,
                "OLMo-core trainer checkpoint; DCP checkpoint model_and_optim/.metadata");
  step.files["model_and_optim/__0_0.distcp"].resize(100);
  ExpectVerdict(step, Verdict::kWaiting,
                "waiting for model_and_optim/__0_0.distcp (100 of 4731 bytes)");
  step.files["model_and_optim/.metadata"] = "junk";
  ExpectVerdict(step, Verdict::kBroken, "cannot parse model_and_optim/.metadata");
  step.files[".metadata.json"] = "{\"ephemeral\": ";
  ExpectVerdict(step, Verdict::kBroken, ".metadata.json is not valid JSON");
  step.files[".metadata.json"] = R"({"something": "else"})";
  ExpectVerdict(step, Verdict::kUnknownFormat, "not OLMo-core checkpoint metadata");

  // The Checkpointer renames step<N>-tmp into place before .metadata.json
  // exists (save_async: before model_and_optim/ is written): the trainer
  // layout without the marker waits for it, whatever the DCP says.
  FakeStep renamed;
  renamed.files["train/rank0.pt"] = "zip";
  ExpectVerdict(renamed, Verdict::kWaiting, "waiting for .metadata.json");
  EXPECT_FALSE(CheckStepCompleteness(renamed).layout_only);  // never forced through
  renamed.AddCase("torch-2.14/dcp_zero", "model_and_optim/");
  ExpectVerdict(renamed, Verdict::kWaiting, "waiting for .metadata.json");
  renamed.files.erase("train/rank0.pt");
  ExpectVerdict(renamed, Verdict::kWaiting, "waiting for .metadata.json");
  renamed.files[".metadata.json"] = R"({"ephemeral": true, "version": "2.1.0"})";
  renamed.files["train/rank0.pt"] = "zip";
  Completeness done = CheckStepCompleteness(renamed);
  EXPECT_EQ(done.verdict, Verdict::kComplete);
  EXPECT_TRUE(done.ephemeral);
  EXPECT_TRUE(done.lists_every_file);
}

TEST(StepCompletenessTest, RecisIoStateShards) {
  FakeStep step;
  step.files["model.pt"] = "zip";
  step.files["extra.pt"] = "zip";
  step.files["io_state_count"] = "3";
  step.files["io_state_0.pt"] = "zip";
  ExpectVerdict(step, Verdict::kWaiting, "waiting for io_state_1.pt and 1 more file");
  step.files["io_state_1.pt"] = "zip";
  step.files["io_state_2.pt"] = "zip";
  Completeness c = CheckStepCompleteness(step);
  EXPECT_EQ(c.verdict, Verdict::kComplete) << c.reason;
  EXPECT_FALSE(c.lists_every_file);  // model.pt & co. are named nowhere: settle first
  for (const char* bad : {"", "x", "-1", "0", "99999999", "3 4"}) {
    step.files["io_state_count"] = bad;
    ExpectVerdict(step, Verdict::kBroken, "io_state_count holds");
  }
  step.files["io_state_count"] = "3\n";
  EXPECT_EQ(CheckStepCompleteness(step).verdict, Verdict::kComplete);
}

// SPEC section 9, "one save, one step": the shards a format's metadata names,
// so that a shard it does not name (an abandoned attempt with more ranks) is
// known for another save's.
TEST(StepCompletenessTest, ListedShardsAreWhatTheMetadataNames) {
  FakeStep dcp;
  dcp.AddCase("torch-2.14/dcp_default");
  Completeness c = CheckStepCompleteness(dcp);
  ASSERT_EQ(c.verdict, Verdict::kComplete) << c.reason;
  ASSERT_EQ(c.listed_shards.size(), 1u);
  EXPECT_EQ(c.listed_shards[0].family, ListedShards::Family::kDcp);
  EXPECT_EQ(c.listed_shards[0].paths, (std::set<std::string>{"__0_0.distcp", "__1_0.distcp"}));
  EXPECT_TRUE(IsUnlistedShard(c.listed_shards, "__2_0.distcp"));
  EXPECT_TRUE(IsUnlistedShard(c.listed_shards, "__17_3.distcp"));
  for (const char* kept :
       {"__0_0.distcp", "__1_0.distcp", ".metadata", "config.json", "__2_0.distcp.tmp",
        "__x_0.distcp", "__2.distcp", "sub/__2_0.distcp", "io_state_5.pt", "rank_3.safetensors"}) {
    EXPECT_FALSE(IsUnlistedShard(c.listed_shards, kept)) << kept;
  }

  FakeStep olmo;
  olmo.files[".metadata.json"] = R"({"ephemeral": false, "version": "2.1.0"})";
  olmo.AddCase("torch-2.14/dcp_default", "model_and_optim/");
  olmo.files["train/rank0.pt"] = "zip";
  c = CheckStepCompleteness(olmo);
  ASSERT_EQ(c.verdict, Verdict::kComplete) << c.reason;
  EXPECT_TRUE(IsUnlistedShard(c.listed_shards, "model_and_optim/__2_0.distcp"));
  EXPECT_FALSE(IsUnlistedShard(c.listed_shards, "model_and_optim/__1_0.distcp"));
  EXPECT_FALSE(IsUnlistedShard(c.listed_shards, "__2_0.distcp"));  // no DCP at the top
  EXPECT_FALSE(IsUnlistedShard(c.listed_shards, "train/rank1.pt"));

  FakeStep recis;
  recis.files["io_state_count"] = "2";
  recis.files["io_state_0.pt"] = "zip";
  recis.files["io_state_1.pt"] = "zip";
  c = CheckStepCompleteness(recis);
  ASSERT_EQ(c.verdict, Verdict::kComplete) << c.reason;
  EXPECT_TRUE(IsUnlistedShard(c.listed_shards, "io_state_2.pt"));
  EXPECT_FALSE(IsUnlistedShard(c.listed_shards, "io_state_1.pt"));
  EXPECT_FALSE(IsUnlistedShard(c.listed_shards, "model.pt"));

  // Layouts that name no shards list none.
  FakeStep hf;
  hf.files["trainer_state.json"] = "{}";
  EXPECT_TRUE(CheckStepCompleteness(hf).listed_shards.empty());
}

TEST(StepCompletenessTest, HuggingFaceTrainerState) {
  FakeStep step;
  step.files["model.safetensors"] = "x";
  step.files["trainer_state.json"] =
      R"({"global_step": 30, "best_model_checkpoint": "/ckpt/run/checkpoint-20", "log_history": []})";
  Completeness c = CheckStepCompleteness(step);
  EXPECT_EQ(c.verdict, Verdict::kComplete) << c.reason;
  EXPECT_FALSE(c.lists_every_file);
  EXPECT_EQ(c.best_ref, "checkpoint-20");
  step.files["trainer_state.json"] = R"({"best_model_checkpoint": null})";
  EXPECT_EQ(CheckStepCompleteness(step).best_ref, "");
  step.files["trainer_state.json"] = R"({"best_model_checkpoint": "checkpoint-5/"})";
  EXPECT_EQ(CheckStepCompleteness(step).best_ref, "checkpoint-5");
  // Not valid JSON: still HF's marker (never broken), no best.
  step.files["trainer_state.json"] = "{";
  c = CheckStepCompleteness(step);
  EXPECT_EQ(c.verdict, Verdict::kComplete);
  EXPECT_EQ(c.best_ref, "");
}

// OLMo-core safetensors: w (4, 2) F32 split over two ranks by flattened
// offsets, b (3,) BF16 on rank 0 only.
FakeStep OlmoSafetensorsStep(const std::string& dir = "") {
  FakeStep step;
  step.files[dir + "metadata.json"] = R"({"tensors": {
    "w": {"shape": [4, 2], "is_sharded": true, "dtype": "F32", "shard_spec_per_file": {
      "rank_0.safetensors": {"flattened_offsets": [[0, 2], [2, 4]], "local_shape": null,
                             "global_offset": null},
      "rank_1.safetensors": {"flattened_offsets": null, "local_shape": [2, 2],
                             "global_offset": [2, 0]}}},
    "b": {"shape": [3], "is_sharded": false, "dtype": "BF16", "shard_spec_per_file": {
      "rank_0.safetensors": {"flattened_offsets": [[0, 3]], "local_shape": null,
                             "global_offset": null}}}}})";
  step.files[dir + "rank_0.safetensors"] = MakeSafetensors({{"w", "F32", {4}}, {"b", "BF16", {3}}});
  step.files[dir + "rank_1.safetensors"] = MakeSafetensors({{"w", "F32", {4}}});
  return step;
}

TEST(StepCompletenessTest, OlmoSafetensorsCompleteAndWaiting) {
  FakeStep step = OlmoSafetensorsStep();
  ExpectVerdict(step, Verdict::kComplete,
                "OLMo-core safetensors checkpoint metadata.json: 2 files, 2 tensors");
  const auto listed = CheckStepCompleteness(step).listed_shards;
  EXPECT_TRUE(IsUnlistedShard(listed, "rank_2.safetensors"));
  EXPECT_FALSE(IsUnlistedShard(listed, "rank_1.safetensors"));

  step.files.erase("rank_1.safetensors");
  ExpectVerdict(step, Verdict::kWaiting, "waiting for rank_1.safetensors");
  step = OlmoSafetensorsStep();
  std::string& r1 = step.files["rank_1.safetensors"];
  const size_t full = r1.size();
  r1.resize(full - 3);
  ExpectVerdict(step, Verdict::kWaiting,
                "waiting for rank_1.safetensors (" + std::to_string(full - 3) + " of " +
                    std::to_string(full) + " bytes)");
  r1.resize(5);
  ExpectVerdict(step, Verdict::kWaiting, "waiting for rank_1.safetensors (5 of at least 8 bytes)");
  r1 = MakeSafetensors({{"w", "F32", {4}}}).substr(0, 20);
  ExpectVerdict(step, Verdict::kWaiting, "(20 of at least ");
  step.files.erase("rank_0.safetensors");
  ExpectVerdict(step, Verdict::kWaiting, "waiting for rank_0.safetensors and 1 more file");
}

TEST(StepCompletenessTest, OlmoSafetensorsContradictionsAreBroken) {
  auto with_rank1 = [](const std::string& bytes) {
    FakeStep step = OlmoSafetensorsStep();
    step.files["rank_1.safetensors"] = bytes;
    return step;
  };
  std::string valid = MakeSafetensors({{"w", "F32", {4}}});
  std::string bad_json = valid;
  bad_json[8] = '[';
  ExpectVerdict(with_rank1(bad_json), Verdict::kBroken,
                "rank_1.safetensors: safetensors header: does not start");
  std::string huge = valid;
  huge[7] = 1;
  ExpectVerdict(with_rank1(huge), Verdict::kBroken, "exceeds the limit");
  ExpectVerdict(with_rank1(valid + "xx"), Verdict::kBroken, "its header describes");
  ExpectVerdict(with_rank1(MakeSafetensors({{"v", "F32", {4}}})), Verdict::kBroken,
                "rank_1.safetensors lacks tensor 'w' named in metadata.json");
  ExpectVerdict(with_rank1(MakeSafetensors({{"w", "F16", {4}}})), Verdict::kBroken,
                "as F16, metadata.json says F32");
  ExpectVerdict(with_rank1(MakeSafetensors({{"w", "F32", {6}}})), Verdict::kBroken,
                "holds 6 elements of 'w', metadata.json says 4");
  // Broken wins over waiting.
  FakeStep both = with_rank1(bad_json);
  both.files.erase("rank_0.safetensors");
  ExpectVerdict(both, Verdict::kBroken, "rank_1.safetensors");
  FakeStep unreadable = OlmoSafetensorsStep();
  unreadable.unreadable.insert("rank_0.safetensors");
  ExpectVerdict(unreadable, Verdict::kBroken, "cannot read rank_0.safetensors");

  FakeStep meta = OlmoSafetensorsStep();
  meta.files["metadata.json"] = "{\"tensors\": ";
  ExpectVerdict(meta, Verdict::kBroken, "metadata.json is not valid JSON");
  meta.files["metadata.json"] =
      R"({"tensors": {"w": {"dtype": "F32", "shard_spec_per_file": {"../x": {}}}}})";
  ExpectVerdict(meta, Verdict::kBroken, "unsafe path '../x'");
  meta.files["metadata.json"] = R"({"tensors": {"w": {"dtype": "F32"}}})";
  ExpectVerdict(meta, Verdict::kBroken, "tensor 'w' names no files");
  meta.files["metadata.json"] = R"({"tensors": {"w": {"shard_spec_per_file": {}}}})";
  ExpectVerdict(meta, Verdict::kBroken, "tensor 'w' has no dtype");
  meta.files["metadata.json"] = R"({"tensors": {"w": {"dtype": "F32",
      "shard_spec_per_file": {"r": {"flattened_offsets": [[3, 1]]}}}}})";
  ExpectVerdict(meta, Verdict::kBroken, "bad flattened offsets");
  meta.files["metadata.json"] = R"({"tensors": []})";
  ExpectVerdict(meta, Verdict::kBroken, "\"tensors\" is not an object");
}

TEST(StepCompletenessTest, OlmoSafetensorsVariants) {
  // Legacy flattened_offsets_per_file, both value forms; an empty shard whose
  // file lacks the key.
  FakeStep step;
  step.files["metadata.json"] = R"({"tensors": {
    "w": {"shape": [6], "dtype": "I64", "flattened_offsets_per_file": {
      "rank_0.safetensors": [0, 4], "rank_1.safetensors": [[4, 5], [5, 6]]}},
    "e": {"shape": [0], "dtype": "U8", "shard_spec_per_file": {
      "rank_1.safetensors": {"flattened_offsets": [[0, 0]]}}}}})";
  step.files["rank_0.safetensors"] = MakeSafetensors({{"w", "I64", {4}}});
  step.files["rank_1.safetensors"] = MakeSafetensors({{"w", "I64", {2}}});
  ExpectVerdict(step, Verdict::kComplete, "2 files, 2 tensors");

  // Nested model/ and optim/ groups (save_model_and_optim_state into the step).
  FakeStep nested = OlmoSafetensorsStep("model/");
  // model/ first, then optim/: a complete model/ alone waits, but only
  // because of the layout (an explicit commit goes ahead).
  ExpectVerdict(nested, Verdict::kWaiting, "waiting for optim/metadata.json (model/ is complete)");
  EXPECT_TRUE(CheckStepCompleteness(nested).layout_only);
  nested.files["optim/rank_0.safetensors"] = MakeSafetensors({{"state_keys", "U8", {2}}});
  ExpectVerdict(nested, Verdict::kWaiting, "waiting for optim/metadata.json");
  nested.files["optim/metadata.json"] = R"({"tensors": {"state_keys": {"dtype": "U8",
      "shard_spec_per_file": {"rank_0.safetensors": {"flattened_offsets": [[0, 2]]}}}}})";
  ExpectVerdict(nested, Verdict::kComplete, "model/metadata.json: 2 files, 2 tensors; ");
  nested.files.erase("model/rank_1.safetensors");
  ExpectVerdict(nested, Verdict::kWaiting, "waiting for model/rank_1.safetensors");

  // The real DCP-written shards, described as OLMo-core would.
  FakeStep real;
  for (const char* f : {"shard-00001-model-00001-of-00001.safetensors",
                        "shard-00002-model-00001-of-00001.safetensors"}) {
    ASSERT_TRUE(testing::ReadTestFile(
        testing::DcpTestdata(std::string("torch-2.14/hf_sharded/") + f), &real.files[f]));
  }
  real.files["metadata.json"] = R"({"tensors": {
    "w": {"dtype": "F32", "shard_spec_per_file": {
      "shard-00001-model-00001-of-00001.safetensors": {"local_shape": [3, 4]},
      "shard-00002-model-00001-of-00001.safetensors": {"flattened_offsets": [[12, 24]]}}},
    "fp8": {"dtype": "F8_E4M3", "shard_spec_per_file": {
      "shard-00002-model-00001-of-00001.safetensors": {"local_shape": [3]}}}}})";
  ExpectVerdict(real, Verdict::kComplete, "2 files, 2 tensors");
  real.files["shard-00002-model-00001-of-00001.safetensors"].pop_back();
  ExpectVerdict(real, Verdict::kWaiting, "(800 of 801 bytes)");
}

TEST(StepCompletenessTest, MegatronAndUnknownLayouts) {
  FakeStep megatron;
  megatron.files["metadata.json"] =
      R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1})";
  megatron.files["common.pt"] = "zip";
  ExpectVerdict(megatron, Verdict::kWaiting, "waiting for .metadata");
  megatron.AddCase("torch-2.14/dcp_default");
  ExpectVerdict(megatron, Verdict::kComplete, "DCP checkpoint .metadata");
  FakeStep zarr;
  zarr.files["metadata.json"] = R"({"sharded_backend": "zarr"})";
  ExpectVerdict(zarr, Verdict::kUnknownFormat, "unsupported Megatron backend \"zarr\"");

  FakeStep other;
  other.files["metadata.json"] = R"({"hello": 1})";
  ExpectVerdict(other, Verdict::kUnknownFormat, "neither OLMo-core's nor Megatron's");
  other.files["metadata.json"] = "[1, 2]";
  ExpectVerdict(other, Verdict::kUnknownFormat, "not a JSON object");

  FakeStep empty;
  ExpectVerdict(empty, Verdict::kUnknownFormat, "no known checkpoint metadata");
  FakeStep hf;  // HF safetensors shards without any index: not checked
  hf.files["model-00001-of-00001.safetensors"] = MakeSafetensors({{"w", "F32", {1}}});
  hf.files["pytorch_model.bin"] = "zip";
  ExpectVerdict(hf, Verdict::kUnknownFormat, "");
}

TEST(StepCompletenessTest, RandomSafetensorsCorruptionNeverCrashes) {
  std::mt19937 rng(4242);
  const FakeStep base = OlmoSafetensorsStep();
  std::map<Verdict, int> seen;
  for (int round = 0; round < 3000; ++round) {
    FakeStep step = base;
    const char* target = round % 3 == 0 ? "metadata.json" : "rank_0.safetensors";
    std::string& f = step.files[target];
    for (int i = 0, n = 1 + static_cast<int>(rng() % 3); i < n; ++i) {
      size_t at = rng() % std::min<size_t>(f.size(), round % 2 ? 16 : f.size());
      f[at] = static_cast<char>(rng());
    }
    if (round % 7 == 0) f.resize(rng() % f.size());
    Completeness c = CheckStepCompleteness(step);
    EXPECT_FALSE(c.reason.empty());
    ++seen[c.verdict];
  }
  EXPECT_GT(seen[Verdict::kBroken], 0);
  EXPECT_GT(seen[Verdict::kComplete], 0);  // flips inside the data bytes
}

TEST(StepCompletenessTest, VerdictNames) {
  EXPECT_STREQ(CompletenessVerdictName(Verdict::kComplete), "complete");
  EXPECT_STREQ(CompletenessVerdictName(Verdict::kWaiting), "waiting");
  EXPECT_STREQ(CompletenessVerdictName(Verdict::kBroken), "broken");
  EXPECT_STREQ(CompletenessVerdictName(Verdict::kUnknownFormat), "unknown format");
}

}  // namespace
}  // namespace ckptfs
