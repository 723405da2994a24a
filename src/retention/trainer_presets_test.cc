// Trainer presets: parsing (every preset, list continuation, every error),
// the policy-level rules (a preset is never mixed with union rules), and
// hand-checked scenarios of each preset through PlanRetention, safety rules
// included. trainer_presets_property_test.cc checks them against models of
// the trainers' own code.
#include "retention/trainer_presets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "retention/retention_planner.h"

namespace ckptfs {
namespace {

RetentionPreset Parse(const std::string& text) {
  Result<RetentionPreset> p = ParseRetentionPreset(text);
  EXPECT_TRUE(p.ok()) << text << ": " << p.status().message();
  return p.ok() ? *p : RetentionPreset{};
}

// The message of a refused preset ("" if it was accepted).
std::string Refusal(const std::string& text) {
  Result<RetentionPreset> p = ParseRetentionPreset(text);
  if (p.ok()) return "";
  EXPECT_EQ(p.status().err(), EINVAL) << text;
  return p.status().message();
}

// ---- Parsing ----

TEST(PresetParseTest, OlmoCoreWithEveryKey) {
  RetentionPreset p = Parse("olmo-core:save_interval=1000,ephemeral=100,fixed=150,2500,remove=all_non_permanent");
  EXPECT_EQ(p.kind, PresetKind::kOlmoCore);
  EXPECT_EQ(p.save_interval, 1000);
  EXPECT_EQ(p.ephemeral, 100);
  EXPECT_EQ(p.fixed, (std::vector<int64_t>{150, 2500}));
  EXPECT_EQ(p.remove, OlmoRemoval::kAllNonPermanent);
}

TEST(PresetParseTest, OlmoCoreDefaults) {
  RetentionPreset p = Parse("olmo-core:save_interval=250");
  EXPECT_EQ(p.save_interval, 250);
  EXPECT_FALSE(p.ephemeral);
  EXPECT_TRUE(p.fixed.empty());
  EXPECT_EQ(p.remove, OlmoRemoval::kEphemeralOnly);  // OLMo-core's default
  EXPECT_EQ(Parse("olmo-core:save_interval=250,remove=never").remove, OlmoRemoval::kNever);
  EXPECT_EQ(Parse("olmo-core:save_interval=250,remove=ephemeral_only").remove, OlmoRemoval::kEphemeralOnly);
}

TEST(PresetParseTest, ListContinuationSortsAndDropsDuplicates) {
  EXPECT_EQ(Parse("olmo-core:fixed=7,3,3,0,save_interval=10").fixed, (std::vector<int64_t>{0, 3, 7}));
  EXPECT_EQ(Parse("olmo-core: save_interval = 10 , fixed = 5 , 1 ").fixed, (std::vector<int64_t>{1, 5}));
}

TEST(PresetParseTest, TheLimitPresets) {
  RetentionPreset t = Parse("torchtitan:keep_latest_k=3");
  EXPECT_EQ(t.kind, PresetKind::kTorchtitan);
  EXPECT_EQ(t.limit, 3);
  RetentionPreset h = Parse("hf:save_total_limit=1");
  EXPECT_EQ(h.kind, PresetKind::kHf);
  EXPECT_EQ(h.limit, 1);
  RetentionPreset r = Parse("recis:max_keep=5");
  EXPECT_EQ(r.kind, PresetKind::kRecis);
  EXPECT_EQ(r.limit, 5);
}

TEST(PresetParseTest, FormatRoundTrips) {
  for (const char* text : {"olmo-core:save_interval=1000,ephemeral=100,fixed=150,2500,remove=all_non_permanent",
                           "olmo-core:save_interval=7", "olmo-core:save_interval=7,remove=never",
                           "torchtitan:keep_latest_k=3", "hf:save_total_limit=2", "recis:max_keep=1"}) {
    RetentionPreset p = Parse(text);
    EXPECT_EQ(FormatRetentionPreset(p), text);
    EXPECT_EQ(Parse(FormatRetentionPreset(p)), p);
  }
  EXPECT_EQ(FormatRetentionPreset(Parse("olmo-core:fixed=9,2,save_interval=5")), "olmo-core:save_interval=5,fixed=2,9");
}

TEST(PresetParseTest, ErrorsNameTheTextAndTheBadPart) {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case kCases[] = {
      {"", "unknown preset ''"},
      {"keras:max_to_keep=3", "unknown preset 'keras'"},
      {"OLMo-core:save_interval=3", "unknown preset 'OLMo-core'"},
      {"torchtitan", "missing keep_latest_k=N"},
      {"torchtitan:", "empty item"},
      {"hf:", "empty item"},
      {"recis:max_keep=2,", "empty item"},
      {"recis:,max_keep=2", "empty item"},
      {"olmo-core:save_interval=10,,ephemeral=2", "empty item"},
      {"hf:3", "'3' is not key=value"},
      {"hf:=3", "'=3' has no key"},
      {"hf:save_total_limit=2,save_total_limit=3", "save_total_limit is given twice"},
      {"hf:save_total_limit=2,3", "save_total_limit takes one value, not '2,3'"},
      {"hf:keep_latest_k=2", "unknown key 'keep_latest_k' for hf (keys: save_total_limit)"},
      {"torchtitan:keep_last=2", "unknown key 'keep_last' for torchtitan"},
      {"recis:max_keep=0", "max_keep takes a positive integer, not '0'"},
      {"recis:max_keep=-1", "max_keep takes a positive integer, not '-1'"},
      {"recis:max_keep=", "max_keep takes a positive integer, not ''"},
      {"recis:max_keep=two", "max_keep takes a positive integer, not 'two'"},
      {"recis:max_keep=99999999999999999999", "max_keep takes a positive integer"},
      {"torchtitan:keep_latest_k=1.5", "keep_latest_k takes a positive integer, not '1.5'"},
      {"hf:save_total_limit=0", "save_total_limit takes a positive integer, not '0'"},
      {"olmo-core:ephemeral=10", "missing save_interval=N"},
      {"olmo-core:save_interval=0", "save_interval takes a positive integer, not '0'"},
      {"olmo-core:save_interval=100,ephemeral=0", "ephemeral takes a positive integer, not '0'"},
      {"olmo-core:save_interval=100,ephemeral=100", "ephemeral (100) must be less than save_interval (100)"},
      {"olmo-core:save_interval=100,ephemeral=250", "must be less than save_interval"},
      {"olmo-core:save_interval=100,fixed=5,x", "fixed takes step numbers (non-negative integers), not 'x'"},
      {"olmo-core:save_interval=100,fixed=-5", "not '-5'"},
      {"olmo-core:save_interval=100,fixed=", "fixed takes step numbers"},
      {"olmo-core:save_interval=100,remove=all", "remove takes ephemeral_only, all_non_permanent or never, not 'all'"},
      {"olmo-core:save_interval=100,ephemeral=10,20", "ephemeral takes one value, not '10,20'"},
      {"olmo-core:save_interval=100,keep_latest_k=2", "unknown key 'keep_latest_k' for olmo-core"},
  };
  for (const Case& c : kCases) {
    const std::string msg = Refusal(c.text);
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.text << " -> " << msg;
    EXPECT_NE(msg.find("retention preset '" + std::string(c.text) + "'"), std::string::npos) << msg;
  }
}

// ---- Policy level: the "retention" rule ----

TEST(PresetPolicyTest, RetentionIsARuleNameAndAnEmptyValueClearsIt) {
  RetentionPolicy p;
  ASSERT_TRUE(SetPolicyRule("retention", "torchtitan:keep_latest_k=2", &p).ok());
  ASSERT_TRUE(p.preset);
  EXPECT_EQ(p.preset->limit, 2);
  EXPECT_FALSE(p.empty());
  EXPECT_FALSE(p.has_rules());
  ASSERT_TRUE(SetPolicyRule("retention", "hf:save_total_limit=4", &p).ok());  // replaces
  EXPECT_EQ(p.preset->kind, PresetKind::kHf);
  ASSERT_TRUE(SetPolicyRule("retention", "", &p).ok());
  EXPECT_FALSE(p.preset);
  EXPECT_TRUE(p.empty());
}

TEST(PresetPolicyTest, BadPresetLeavesThePolicyUnchanged) {
  RetentionPolicy p;
  ASSERT_TRUE(SetPolicyRule("retention", "recis:max_keep=2", &p).ok());
  Status st = SetPolicyRule("retention", "recis:max_keep=0", &p);
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("'recis:max_keep=0'"), std::string::npos) << st.message();
  EXPECT_EQ(p.preset->limit, 2);
}

TEST(PresetPolicyTest, APresetIsNeverMixedWithRulesInEitherOrder) {
  for (const auto& [rule, value] : std::vector<std::pair<std::string, std::string>>{
           {"keep_last", "3"}, {"keep_every", "10"}, {"keep_steps", "5"}, {"ephemeral_every", "2"},
           {"keep_interval", "1h"}, {"keep_best", "1"}, {"score_mode", "max"}}) {
    RetentionPolicy rules_first;
    ASSERT_TRUE(SetPolicyRule(rule, value, &rules_first).ok());
    Status st = SetPolicyRule("retention", "torchtitan:keep_latest_k=2", &rules_first);
    EXPECT_EQ(st.err(), EINVAL) << rule;
    EXPECT_NE(st.message().find("cannot be combined with the rules already set (" + rule + ")"), std::string::npos)
        << st.message();
    EXPECT_FALSE(rules_first.preset);

    RetentionPolicy preset_first;
    ASSERT_TRUE(SetPolicyRule("retention", "torchtitan:keep_latest_k=2", &preset_first).ok());
    st = SetPolicyRule(rule, value, &preset_first);
    EXPECT_EQ(st.err(), EINVAL) << rule;
    EXPECT_NE(st.message().find(rule + ": '" + value + "' cannot be combined with the retention preset "
                                       "'torchtitan:keep_latest_k=2'"),
              std::string::npos)
        << st.message();
    EXPECT_FALSE(preset_first.has_rules());
    // Clearing a rule is no conflict.
    EXPECT_TRUE(SetPolicyRule(rule, "", &preset_first).ok()) << rule;
  }
}

// ---- Scenarios through PlanRetention ----

StepFacts Step(int64_t step, const std::string& prefix = "step", uint64_t session = 0, const std::string& best = "") {
  StepFacts f;
  f.id = static_cast<uint64_t>(1000 + step);
  f.step = step;
  f.phase = StepPhase::kCommitted;
  f.committed_at_s = 1'000'000 + step;
  f.persisted = true;
  f.name = prefix + std::to_string(step);
  f.session = session;
  f.best_ref = best;
  return f;
}

RetentionPolicy PresetPolicy(const std::string& text) {
  RetentionPolicy p;
  Status st = SetPolicyRule("retention", text, &p);
  EXPECT_TRUE(st.ok()) << st.message();
  return p;
}

std::set<int64_t> Kept(const std::vector<StepDecision>& d) {
  std::set<int64_t> out;
  for (const StepDecision& x : d) {
    if (x.keep) out.insert(x.step);
  }
  return out;
}

std::string ReasonFor(const std::vector<StepDecision>& d, int64_t step) {
  for (const StepDecision& x : d) {
    if (x.step == step) return x.reason;
  }
  return "<none>";
}

std::vector<StepFacts> Steps(std::initializer_list<int64_t> numbers) {
  std::vector<StepFacts> v;
  for (int64_t n : numbers) v.push_back(Step(n));
  return v;
}

// OLMo-core steps; `marked` are those the trainer saved as ephemeral
// ("ephemeral": true in .metadata.json).
std::vector<StepFacts> OlmoSteps(std::initializer_list<int64_t> numbers, std::set<int64_t> marked) {
  std::vector<StepFacts> v;
  for (int64_t n : numbers) {
    v.push_back(Step(n));
    v.back().ephemeral = marked.count(n) != 0;
  }
  return v;
}

TEST(PresetPlanTest, OlmoCoreKeepsTheNewestEphemeralAcrossAPermanentSave) {
  const RetentionPolicy p = PresetPolicy("olmo-core:save_interval=1000,ephemeral=100");
  // 900 is the newest ephemeral step; the permanent save at 1000 keeps it
  // (OLMo-core only removes at the next ephemeral save).
  auto d = PlanRetention(p, OlmoSteps({0, 800, 900, 1000}, {800, 900}), 0);
  EXPECT_EQ(Kept(d), (std::set<int64_t>{0, 900, 1000}));
  EXPECT_EQ(ReasonFor(d, 800), "olmo-core: ephemeral, superseded by the ephemeral save at step 900");
  EXPECT_EQ(ReasonFor(d, 900), "olmo-core: ephemeral, no newer ephemeral save");
  EXPECT_EQ(ReasonFor(d, 1000), "olmo-core: permanent (multiple of save_interval)");
  EXPECT_EQ(ReasonFor(d, 0), "olmo-core: permanent (step 0)");
  d = PlanRetention(p, OlmoSteps({0, 900, 1000, 1100}, {900, 1100}), 0);
  EXPECT_EQ(Kept(d), (std::set<int64_t>{0, 1000, 1100}));
}

TEST(PresetPlanTest, OlmoCoreFinalCheckpointAndRemovalStrategies) {
  // 1234: the post-train final checkpoint of a run (not a multiple of 100);
  // 1300: an ephemeral save of the next run.
  auto kept = [](const std::string& preset, std::initializer_list<int64_t> steps, std::set<int64_t> marked) {
    return Kept(PlanRetention(PresetPolicy(preset), OlmoSteps(steps, marked), 0));
  };
  EXPECT_EQ(kept("olmo-core:save_interval=1000,ephemeral=100", {0, 1000, 1100, 1234, 1300}, {1100, 1300}),
            (std::set<int64_t>{0, 1000, 1234, 1300}));
  EXPECT_EQ(kept("olmo-core:save_interval=1000,ephemeral=100,remove=all_non_permanent", {0, 1000, 1100, 1234, 1300},
                 {1100, 1300}),
            (std::set<int64_t>{0, 1000, 1300}));
  EXPECT_EQ(kept("olmo-core:save_interval=1000,ephemeral=100,remove=never", {0, 1000, 1100, 1234, 1300}, {1100, 1300}),
            (std::set<int64_t>{0, 1000, 1100, 1234, 1300}));
  // A fixed step is permanent (the trainer saves it as such).
  EXPECT_EQ(kept("olmo-core:save_interval=1000,ephemeral=100,fixed=1100", {0, 1000, 1100, 1200, 1300}, {1200, 1300}),
            (std::set<int64_t>{0, 1000, 1100, 1300}));
  // A final checkpoint at a multiple of ephemeral (the trainer did not mark
  // it) is ephemeral once a later run makes an ephemeral save.
  EXPECT_EQ(kept("olmo-core:save_interval=1000,ephemeral=100", {0, 1000, 1200, 1300}, {1300}),
            (std::set<int64_t>{0, 1000, 1300}));
}

TEST(PresetPlanTest, OlmoCoreRemoveNeverStillRemovesEphemeralSavesOfTheSameRun) {
  // remove= is only about checkpoints found in the folder: within a run,
  // each ephemeral save still removes the run's previous one.
  const RetentionPolicy p = PresetPolicy("olmo-core:save_interval=100,ephemeral=20,remove=never");
  std::vector<StepFacts> steps = OlmoSteps({0, 20, 40, 50, 60, 80}, {20, 40, 60, 80});
  for (StepFacts& f : steps) f.session = f.step <= 50 ? 1 : 2;  // 50: run 1's final save
  auto d = PlanRetention(p, steps, 0);
  EXPECT_EQ(Kept(d), (std::set<int64_t>{0, 40, 50, 80}));
  EXPECT_EQ(ReasonFor(d, 20), "olmo-core: ephemeral, superseded by the ephemeral save at step 40 of the same run");
  EXPECT_EQ(ReasonFor(d, 40), "olmo-core: ephemeral, no newer ephemeral save in its run");
  EXPECT_EQ(ReasonFor(d, 50), "olmo-core: remove=never");
  // With ephemeral_only, run 2 removes run 1's 40 (found in the folder).
  EXPECT_EQ(Kept(PlanRetention(PresetPolicy("olmo-core:save_interval=100,ephemeral=20"), steps, 0)),
            (std::set<int64_t>{0, 50, 80}));
  // Runs unknown (session 0): nothing is removed with never.
  for (StepFacts& f : steps) f.session = 0;
  d = PlanRetention(p, steps, 0);
  EXPECT_EQ(Kept(d), (std::set<int64_t>{0, 20, 40, 50, 60, 80}));
  EXPECT_EQ(ReasonFor(d, 20), "olmo-core: ephemeral, its run unknown");
}

TEST(PresetPlanTest, OlmoCoreRemovesOnlyAtSavesTheTrainerMarkedEphemeral) {
  const RetentionPolicy p = PresetPolicy("olmo-core:save_interval=100,ephemeral=20");
  // 40 is a final save after a cooldown: a multiple of 20, but not marked.
  // It removes nothing; a later ephemeral save removes both.
  auto d = PlanRetention(p, OlmoSteps({0, 20, 40}, {20}), 0);
  EXPECT_EQ(Kept(d), (std::set<int64_t>{0, 20, 40}));
  EXPECT_EQ(Kept(PlanRetention(p, OlmoSteps({0, 20, 40, 60}, {20, 60}), 0)), (std::set<int64_t>{0, 60}));
  // A marked step that is no multiple of ephemeral (the trainer runs with
  // other intervals) is not found by the resume scan: it goes only at a
  // later ephemeral save of its own run.
  std::vector<StepFacts> other = OlmoSteps({0, 50, 60}, {50, 60});
  d = PlanRetention(p, other, 0);
  EXPECT_EQ(Kept(d), (std::set<int64_t>{0, 50, 60}));
  EXPECT_EQ(ReasonFor(d, 50), "olmo-core: ephemeral, its run unknown");
  for (StepFacts& f : other) f.session = 5;
  EXPECT_EQ(Kept(PlanRetention(p, other, 0)), (std::set<int64_t>{0, 60}));
  // Without the trainer's marks nothing goes.
  d = PlanRetention(p, OlmoSteps({0, 20, 40, 60, 70}, {}), 0);
  EXPECT_EQ(Kept(d), (std::set<int64_t>{0, 20, 40, 60, 70}));
  EXPECT_EQ(ReasonFor(d, 20), "olmo-core: ephemeral, no newer ephemeral save");
  EXPECT_EQ(ReasonFor(d, 70), "olmo-core: not a multiple of ephemeral, never removed");
  d = PlanRetention(PresetPolicy("olmo-core:save_interval=100"), OlmoSteps({0, 20, 40}, {}), 0);
  EXPECT_EQ(ReasonFor(d, 20), "olmo-core: no ephemeral interval, never removed");
}

TEST(PresetPlanTest, TorchtitanKeepsTheKNewestCommitted) {
  std::vector<StepFacts> steps = Steps({10, 20, 30, 40});
  steps.push_back(Step(50));
  steps.back().phase = StepPhase::kWriting;  // an async save in progress is not counted
  auto d = PlanRetention(PresetPolicy("torchtitan:keep_latest_k=2"), steps, 0);
  EXPECT_EQ(Kept(d), (std::set<int64_t>{30, 40, 50}));
  EXPECT_EQ(ReasonFor(d, 20), "torchtitan keep_latest_k=2: older than the 2 newest");
  EXPECT_EQ(ReasonFor(d, 40), "torchtitan keep_latest_k=2: among the newest");
  EXPECT_EQ(ReasonFor(d, 50), "being written");
}

std::vector<StepFacts> HfSteps(std::initializer_list<int64_t> numbers, const std::string& best) {
  std::vector<StepFacts> v;
  for (int64_t n : numbers) v.push_back(Step(n, "checkpoint-", 0, best));
  return v;
}

TEST(PresetPlanTest, HfCountsTheBestInsideTheLimit) {
  const RetentionPolicy two = PresetPolicy("hf:save_total_limit=2");
  EXPECT_EQ(Kept(PlanRetention(two, HfSteps({100, 200, 300}, ""), 0)), (std::set<int64_t>{200, 300}));
  auto d = PlanRetention(two, HfSteps({100, 200, 300, 400}, "checkpoint-100"), 0);
  EXPECT_EQ(Kept(d), (std::set<int64_t>{100, 400}));
  EXPECT_EQ(ReasonFor(d, 100), "hf save_total_limit=2: best checkpoint");
  EXPECT_EQ(ReasonFor(d, 300), "hf save_total_limit=2: beyond the limit");
  const RetentionPolicy three = PresetPolicy("hf:save_total_limit=3");
  EXPECT_EQ(Kept(PlanRetention(three, HfSteps({100, 200, 300, 400, 500}, "checkpoint-200"), 0)),
            (std::set<int64_t>{200, 400, 500}));
  // The best is the newest: the limit counts as usual.
  EXPECT_EQ(Kept(PlanRetention(two, HfSteps({100, 200, 300}, "checkpoint-300"), 0)), (std::set<int64_t>{200, 300}));
}

TEST(PresetPlanTest, HfLimitOneWithABestThatIsNotTheNewestKeepsTwo) {
  const RetentionPolicy one = PresetPolicy("hf:save_total_limit=1");
  EXPECT_EQ(Kept(PlanRetention(one, HfSteps({100, 200, 300}, "checkpoint-100"), 0)), (std::set<int64_t>{100, 300}));
  EXPECT_EQ(Kept(PlanRetention(one, HfSteps({100, 200, 300}, "checkpoint-300"), 0)), (std::set<int64_t>{300}));
  EXPECT_EQ(Kept(PlanRetention(one, HfSteps({100, 200, 300}, ""), 0)), (std::set<int64_t>{300}));
  // transformers raises the limit whenever best_model_checkpoint is set and
  // is not the newest, even when that directory is gone.
  EXPECT_EQ(Kept(PlanRetention(one, HfSteps({100, 200, 300}, "checkpoint-50"), 0)), (std::set<int64_t>{200, 300}));
}

TEST(PresetPlanTest, HfRotationFollowsTransformers) {
  const std::vector<std::string> names = {"checkpoint-1", "checkpoint-2", "checkpoint-3", "checkpoint-4"};
  EXPECT_EQ(HfRotationDeletes(names, "", 2), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(HfRotationDeletes(names, "checkpoint-1", 2), (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(HfRotationDeletes(names, "checkpoint-3", 2), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(HfRotationDeletes(names, "checkpoint-2", 3), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(HfRotationDeletes(names, "checkpoint-2", 1), (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(HfRotationDeletes(names, "checkpoint-4", 1), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(HfRotationDeletes(names, "checkpoint-2", 4), (std::vector<bool>{false, false, false, false}));
  EXPECT_EQ(HfRotationDeletes(names, "checkpoint-2", 0), (std::vector<bool>(4, false)));  // rotation off
  EXPECT_TRUE(HfRotationDeletes({}, "checkpoint-2", 1).empty());
}

TEST(PresetPlanTest, HfTheBestIsWhatTheNewestStepRecorded) {
  // Older steps recorded older bests; only the newest step's record counts,
  // as the trainer's state at its last save does.
  std::vector<StepFacts> steps = HfSteps({100, 200, 300}, "checkpoint-100");
  steps.push_back(Step(400, "checkpoint-", 0, "checkpoint-300"));
  EXPECT_EQ(Kept(PlanRetention(PresetPolicy("hf:save_total_limit=2"), steps, 0)), (std::set<int64_t>{300, 400}));
}

TEST(PresetPlanTest, RecisOnlyPrunesWhatTheNewestStepsProcessSaved) {
  const RetentionPolicy p = PresetPolicy("recis:max_keep=2");
  std::vector<StepFacts> steps = {Step(10, "ckpt_", 7), Step(20, "ckpt_", 7), Step(30, "ckpt_", 9),
                                  Step(40, "ckpt_", 9), Step(50, "ckpt_", 9)};
  auto d = PlanRetention(p, steps, 0);
  EXPECT_EQ(Kept(d), (std::set<int64_t>{10, 20, 40, 50}));
  EXPECT_EQ(ReasonFor(d, 10), "recis max_keep=2: saved by an earlier trainer process");
  EXPECT_EQ(ReasonFor(d, 30), "recis max_keep=2: older than this trainer process's 2 newest");
}

TEST(PresetPlanTest, RecisWithAnUnknownSessionRemovesNothingOfIt) {
  const RetentionPolicy p = PresetPolicy("recis:max_keep=1");
  // The newest step's process is unknown: nothing is counted.
  std::vector<StepFacts> steps = {Step(10, "ckpt_", 7), Step(20, "ckpt_", 7), Step(30, "ckpt_", 0)};
  auto d = PlanRetention(p, steps, 0);
  EXPECT_EQ(Kept(d), (std::set<int64_t>{10, 20, 30}));
  EXPECT_EQ(ReasonFor(d, 10), "recis max_keep=1: the newest step's trainer process is unknown, nothing counted");
  // Unknown steps never join a known process's list.
  steps = {Step(10, "ckpt_", 0), Step(20, "ckpt_", 7), Step(30, "ckpt_", 7)};
  d = PlanRetention(p, steps, 0);
  EXPECT_EQ(Kept(d), (std::set<int64_t>{10, 30}));
  EXPECT_EQ(ReasonFor(d, 10), "recis max_keep=1: trainer process unknown");
}

TEST(PresetPlanTest, SafetyRulesAndPinsWinOverAPreset) {
  const RetentionPolicy p = PresetPolicy("torchtitan:keep_latest_k=1");
  std::vector<StepFacts> steps = Steps({1, 2, 3, 4, 5});
  steps[0].pinned = true;
  steps[2].open_for_writing = true;
  for (StepFacts& s : steps) s.persisted = s.step <= 2;  // 2 is the newest persisted
  std::vector<StepFacts> more = steps;
  more.push_back(Step(3));
  more.back().id = 9003;
  more.back().phase = StepPhase::kIncomplete;
  StepFacts old_broken = Step(0);
  old_broken.id = 9000;
  old_broken.phase = StepPhase::kBroken;
  more.push_back(old_broken);
  auto d = PlanRetention(p, more, 0);
  std::map<uint64_t, StepDecision> by_id;
  for (const StepDecision& x : d) by_id[x.id] = x;
  EXPECT_EQ(by_id[1001].reason, "pinned");
  EXPECT_TRUE(by_id[1002].keep);
  EXPECT_EQ(by_id[1002].reason, "newest persisted step");
  EXPECT_EQ(by_id[1003].reason, "being written");
  EXPECT_FALSE(by_id[1004].keep);
  EXPECT_EQ(by_id[1005].reason, "torchtitan keep_latest_k=1: among the newest");
  EXPECT_FALSE(by_id[9000].keep);  // broken, older than the newest committed step
  EXPECT_FALSE(by_id[9003].keep);  // incomplete, likewise
}

TEST(PresetPlanTest, AHandBuiltPresetWithoutALimitKeepsEverything) {
  RetentionPolicy p;
  p.preset = RetentionPreset{};
  p.preset->kind = PresetKind::kRecis;
  p.preset->limit = 0;  // the parser refuses this; the planner must not trust it
  EXPECT_EQ(Kept(PlanRetention(p, Steps({1, 2, 3}), 0)), (std::set<int64_t>{1, 2, 3}));
  p.preset->kind = PresetKind::kOlmoCore;
  p.preset->save_interval = 0;
  p.preset->ephemeral = 0;
  EXPECT_EQ(Kept(PlanRetention(p, Steps({1, 2, 3}), 0)), (std::set<int64_t>{1, 2, 3}));
}

TEST(PresetPlanTest, PlanDoesNotDependOnInputOrder) {
  const RetentionPolicy p = PresetPolicy("olmo-core:save_interval=10,ephemeral=3,fixed=7");
  std::vector<StepFacts> steps = OlmoSteps({0, 3, 6, 7, 9, 10, 12, 13}, {3, 6, 9, 12});
  std::set<int64_t> want = Kept(PlanRetention(p, steps, 0));
  std::reverse(steps.begin(), steps.end());
  EXPECT_EQ(Kept(PlanRetention(p, steps, 0)), want);
  EXPECT_EQ(want, (std::set<int64_t>{0, 7, 10, 12, 13}));
}

}  // namespace
}  // namespace ckptfs
