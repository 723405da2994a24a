// Tests for retention planning: policy parsing, each rule and its reason, the
// scenarios the trainers' own retention schemes produce, and properties that
// must hold for every random history (the safety rules above all).
#include "retention/retention_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <set>

namespace ckptfs {
namespace {

StepFacts Committed(int64_t step, int64_t committed_at_s = -1) {
  StepFacts f;
  f.id = static_cast<uint64_t>(1000 + step);
  f.step = step;
  f.phase = StepPhase::kCommitted;
  f.committed_at_s = committed_at_s >= 0 ? committed_at_s : 1'000'000 + step * 60;
  return f;
}

StepFacts InPhase(int64_t step, StepPhase phase) {
  StepFacts f = Committed(step);
  f.id = static_cast<uint64_t>(5000 + step);
  f.phase = phase;
  f.committed_at_s = 0;
  return f;
}

std::vector<StepFacts> CommittedRange(int64_t first, int64_t last, int64_t stride = 1) {
  std::vector<StepFacts> v;
  for (int64_t s = first; s <= last; s += stride) v.push_back(Committed(s));
  return v;
}

RetentionPolicy Policy(const std::vector<std::pair<std::string, std::string>>& rules) {
  RetentionPolicy p;
  for (const auto& [name, value] : rules) {
    Status st = SetPolicyRule(name, value, &p);
    EXPECT_TRUE(st.ok()) << name << "=" << value << ": " << st.message();
  }
  return p;
}

std::set<int64_t> Survivors(const std::vector<StepDecision>& d) {
  std::set<int64_t> s;
  for (const StepDecision& x : d) {
    if (x.keep) s.insert(x.step);
  }
  return s;
}

// The decision for the (first) input with this step number.
StepDecision For(const std::vector<StepDecision>& d, int64_t step) {
  for (const StepDecision& x : d) {
    if (x.step == step) return x;
  }
  ADD_FAILURE() << "no decision for step " << step;
  return {};
}

// ---- Parsing ----

TEST(RetentionPolicyTest, RuleNames) {
  EXPECT_EQ(PolicyRuleNames(), (std::vector<std::string>{"keep_last", "keep_every", "keep_steps", "ephemeral_every",
                                                         "keep_interval", "keep_best", "score_mode",
                                                         "retention"}));
}

TEST(RetentionPolicyTest, EmptyIgnoresScoreMode) {
  RetentionPolicy p;
  EXPECT_TRUE(p.empty());
  p.score_mode = ScoreMode::kMax;
  EXPECT_TRUE(p.empty());
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"keep_last", "1"}, {"keep_every", "1"}, {"keep_steps", "0"}, {"ephemeral_every", "1"},
           {"keep_interval", "1"}, {"keep_best", "1"}}) {
    EXPECT_FALSE(Policy({{name, value}}).empty()) << name;
    EXPECT_TRUE(Policy({{name, value}, {name, ""}}).empty()) << name << " cleared by an empty value";
  }
}

TEST(RetentionPolicyTest, PositiveIntegerRules) {
  for (std::string name : {"keep_last", "keep_every", "ephemeral_every", "keep_best"}) {
    RetentionPolicy p;
    ASSERT_TRUE(SetPolicyRule(name, "3", &p).ok());
    ASSERT_TRUE(SetPolicyRule(name, "9223372036854775807", &p).ok()) << name;
    ASSERT_TRUE(SetPolicyRule(name, "7", &p).ok());
    for (std::string bad : {"-3", "0", "3x", " 3", "3 ", "+3", "0x10", "1e3", "3.0", "x",
                            "9223372036854775808", "99999999999999999999"}) {
      RetentionPolicy before = p;
      Status st = SetPolicyRule(name, bad, &p);
      EXPECT_EQ(st.err(), EINVAL) << name << "=" << bad;
      EXPECT_EQ(st.message(), name + ": '" + bad + "' is not a positive integer");
      EXPECT_EQ(p.keep_last, before.keep_last);
      EXPECT_EQ(p.keep_every, before.keep_every);
      EXPECT_EQ(p.ephemeral_every, before.ephemeral_every);
      EXPECT_EQ(p.keep_best, before.keep_best);
    }
  }
  RetentionPolicy p = Policy({{"keep_last", "3"}, {"keep_every", "10"}, {"ephemeral_every", "2"}, {"keep_best", "4"}});
  EXPECT_EQ(p.keep_last, 3);
  EXPECT_EQ(p.keep_every, 10);
  EXPECT_EQ(p.ephemeral_every, 2);
  EXPECT_EQ(p.keep_best, 4);
  EXPECT_EQ(SetPolicyRule("keep_last", "-3", &p).message(), "keep_last: '-3' is not a positive integer");
  ASSERT_TRUE(SetPolicyRule("keep_last", "", &p).ok());
  EXPECT_FALSE(p.keep_last.has_value());
  EXPECT_EQ(p.keep_every, 10);  // other rules untouched
}

TEST(RetentionPolicyTest, KeepSteps) {
  RetentionPolicy p = Policy({{"keep_steps", "10,20,30"}});
  EXPECT_EQ(p.keep_steps, (std::vector<int64_t>{10, 20, 30}));
  p = Policy({{"keep_steps", " 30 , 0,10 ,10"}});
  EXPECT_EQ(p.keep_steps, (std::vector<int64_t>{0, 10, 30}));
  for (std::string bad : {"10,,20", "10,", ",10", "10,-1", "a", "10;20", "1 0", "99999999999999999999", ","}) {
    RetentionPolicy q = p;
    Status st = SetPolicyRule("keep_steps", bad, &q);
    EXPECT_EQ(st.err(), EINVAL) << bad;
    EXPECT_NE(st.message().find("keep_steps: '" + bad + "'"), std::string::npos) << st.message();
    EXPECT_EQ(q.keep_steps, p.keep_steps);
  }
  ASSERT_TRUE(SetPolicyRule("keep_steps", "", &p).ok());
  EXPECT_TRUE(p.keep_steps.empty());
  EXPECT_TRUE(p.empty());
}

TEST(RetentionPolicyTest, KeepInterval) {
  const std::vector<std::pair<std::string, int64_t>> good = {
      {"3600", 3600}, {"1", 1}, {"90s", 90}, {"30m", 1800}, {"6h", 21600}, {"2d", 172800}};
  for (const auto& [text, seconds] : good) {
    EXPECT_EQ(Policy({{"keep_interval", text}}).keep_interval_s, seconds) << text;
  }
  RetentionPolicy p = Policy({{"keep_interval", "1h"}});
  for (std::string bad : {"0", "0s", "0d", "1.5h", "h", "s", "10x", "-5m", "5 m", "5M", "1hh", " 1h",
                          "999999999999999999d", "99999999999999999999"}) {
    Status st = SetPolicyRule("keep_interval", bad, &p);
    EXPECT_EQ(st.err(), EINVAL) << bad;
    EXPECT_EQ(st.message().rfind("keep_interval: '" + bad + "' is not a duration", 0), 0u) << st.message();
    EXPECT_EQ(p.keep_interval_s, 3600);
  }
  ASSERT_TRUE(SetPolicyRule("keep_interval", "", &p).ok());
  EXPECT_FALSE(p.keep_interval_s.has_value());
}

TEST(RetentionPolicyTest, ScoreModeAndUnknownRule) {
  RetentionPolicy p = Policy({{"score_mode", "max"}});
  EXPECT_EQ(p.score_mode, ScoreMode::kMax);
  Status st = SetPolicyRule("score_mode", "MAX", &p);
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_EQ(st.message(), "score_mode: 'MAX' is not 'min' or 'max'");
  EXPECT_EQ(p.score_mode, ScoreMode::kMax);
  ASSERT_TRUE(SetPolicyRule("score_mode", "min", &p).ok());
  EXPECT_EQ(p.score_mode, ScoreMode::kMin);
  p.score_mode = ScoreMode::kMax;
  ASSERT_TRUE(SetPolicyRule("score_mode", "", &p).ok());
  EXPECT_EQ(p.score_mode, ScoreMode::kMin);

  st = SetPolicyRule("keep_latest", "3", &p);
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("keep_latest"), std::string::npos);
  EXPECT_TRUE(p.empty());
}

// ---- Single rules ----

TEST(PlanRetentionTest, EmptyInputAndOrder) {
  EXPECT_TRUE(PlanRetention(Policy({{"keep_last", "1"}}), {}, 0).empty());
  std::vector<StepFacts> in = {Committed(3), Committed(1), InPhase(4, StepPhase::kWriting), Committed(2)};
  std::vector<StepDecision> d = PlanRetention(Policy({{"keep_last", "1"}}), in, 0);
  ASSERT_EQ(d.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(d[i].id, in[i].id);
    EXPECT_EQ(d[i].step, in[i].step);
  }
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{3, 4}));
}

TEST(PlanRetentionTest, EmptyPolicyKeepsEveryCommittedStep) {
  std::vector<StepFacts> in = CommittedRange(1, 5);
  in[1].ephemeral = true;  // marked by the trainer: still no rule, so still kept
  RetentionPolicy p;
  p.score_mode = ScoreMode::kMax;
  std::vector<StepDecision> d = PlanRetention(p, in, 0);
  ASSERT_EQ(d.size(), 5u);
  for (const StepDecision& x : d) {
    EXPECT_TRUE(x.keep);
    EXPECT_EQ(x.reason, "no retention policy");
  }
}

TEST(PlanRetentionTest, KeepLastCountsOnlyCommittedSteps) {
  std::vector<StepFacts> in = CommittedRange(1, 5);
  in.push_back(InPhase(6, StepPhase::kWriting));
  in.push_back(InPhase(7, StepPhase::kIncomplete));
  std::vector<StepDecision> d = PlanRetention(Policy({{"keep_last", "2"}}), in, 0);
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(For(d, 4).reason, "keep_last");
  EXPECT_EQ(For(d, 5).reason, "keep_last");
  EXPECT_EQ(For(d, 3).reason, "not kept by any rule");
  EXPECT_FALSE(For(d, 1).keep);
  // More than there are.
  EXPECT_EQ(Survivors(PlanRetention(Policy({{"keep_last", "50"}}), CommittedRange(1, 5), 0)).size(), 5u);
}

TEST(PlanRetentionTest, PermanentSteps) {
  std::vector<StepDecision> d =
      PlanRetention(Policy({{"keep_every", "10"}, {"keep_steps", "15, 3"}}), CommittedRange(1, 25), 0);
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{3, 10, 15, 20, 25}));
  EXPECT_EQ(For(d, 10).reason, "keep_every");
  EXPECT_EQ(For(d, 3).reason, "keep_steps");
  EXPECT_EQ(For(d, 25).reason, "newest committed step");
  EXPECT_EQ(For(d, 24).reason, "not kept by any rule");
}

TEST(PlanRetentionTest, NewestPersistedKeptUntilANewerIsPersisted) {
  std::vector<StepFacts> in = CommittedRange(1, 5);
  in[1].persisted = in[2].persisted = true;  // steps 2 and 3
  RetentionPolicy p = Policy({{"keep_last", "1"}});
  std::vector<StepDecision> d = PlanRetention(p, in, 0);
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{3, 5}));
  EXPECT_EQ(For(d, 3).reason, "newest persisted step");
  in[4].persisted = true;
  EXPECT_EQ(Survivors(PlanRetention(p, in, 0)), (std::set<int64_t>{5}));
  // A persisted step that is not committed does not count.
  in[4].persisted = false;
  in.push_back(InPhase(0, StepPhase::kBroken));
  in.back().persisted = true;
  d = PlanRetention(p, in, 0);
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{3, 5}));
}

TEST(PlanRetentionTest, WritingOpenAndPinnedStepsKept) {
  std::vector<StepFacts> in = CommittedRange(1, 6);
  in[0].pinned = true;
  in[1].open_for_writing = true;
  in.push_back(InPhase(3, StepPhase::kWriting));  // older than the newest committed
  in.push_back(InPhase(4, StepPhase::kIncomplete));
  in.back().open_for_writing = true;
  in.push_back(InPhase(5, StepPhase::kBroken));
  in.back().pinned = true;
  std::vector<StepDecision> d = PlanRetention(Policy({{"keep_last", "1"}}), in, 0);
  ASSERT_EQ(d.size(), 9u);
  EXPECT_TRUE(d[0].keep);
  EXPECT_EQ(d[0].reason, "pinned");
  EXPECT_TRUE(d[1].keep);
  EXPECT_EQ(d[1].reason, "being written");
  EXPECT_FALSE(d[2].keep);
  EXPECT_TRUE(d[6].keep);
  EXPECT_EQ(d[6].reason, "being written");
  EXPECT_TRUE(d[7].keep);
  EXPECT_EQ(d[7].reason, "being written");
  EXPECT_TRUE(d[8].keep);
  EXPECT_EQ(d[8].reason, "pinned");
}

TEST(PlanRetentionTest, IncompleteAndBrokenSteps) {
  std::vector<StepFacts> in = {Committed(10), InPhase(5, StepPhase::kIncomplete), InPhase(6, StepPhase::kBroken),
                               InPhase(10, StepPhase::kIncomplete), InPhase(11, StepPhase::kIncomplete),
                               InPhase(12, StepPhase::kBroken)};
  std::vector<StepDecision> d = PlanRetention(RetentionPolicy{}, in, 0);  // even with an empty policy
  EXPECT_TRUE(d[0].keep);
  EXPECT_FALSE(d[1].keep);
  EXPECT_EQ(d[1].reason, "incomplete and older than the newest committed step");
  EXPECT_FALSE(d[2].keep);
  EXPECT_EQ(d[2].reason, "broken and older than the newest committed step");
  EXPECT_TRUE(d[3].keep);
  EXPECT_EQ(d[3].reason, "incomplete, same step number as the newest committed step");
  EXPECT_TRUE(d[4].keep);
  EXPECT_EQ(d[4].reason, "incomplete, newer than every committed step");
  EXPECT_TRUE(d[5].keep);
  EXPECT_EQ(d[5].reason, "broken, newer than every committed step");

  // With no committed step, nothing goes, whatever the policy.
  in.erase(in.begin());
  d = PlanRetention(Policy({{"keep_last", "1"}, {"keep_best", "1"}}), in, 0);
  for (const StepDecision& x : d) EXPECT_TRUE(x.keep) << x.step << ": " << x.reason;
}

TEST(PlanRetentionTest, KeepBest) {
  std::vector<StepFacts> in = CommittedRange(1, 8);
  const std::vector<std::optional<double>> scores = {0.5, 0.2, std::nullopt, 0.9, 0.2, NAN, 0.1, std::nullopt};
  for (size_t i = 0; i < in.size(); ++i) in[i].score = scores[i];
  std::vector<StepDecision> d = PlanRetention(Policy({{"keep_best", "2"}, {"score_mode", "min"}}), in, 0);
  // 0.1 (step 7) and the newer of the two 0.2s (step 5); step 8 is the newest.
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{5, 7, 8}));
  EXPECT_EQ(For(d, 7).reason, "keep_best");
  EXPECT_EQ(For(d, 5).reason, "keep_best");
  EXPECT_EQ(For(d, 8).reason, "newest committed step");
  d = PlanRetention(Policy({{"keep_best", "2"}, {"score_mode", "max"}}), in, 0);
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{1, 4, 8}));  // 0.9 and 0.5; NaN never counts
  // Steps without a score are never counted, even when too few have one.
  d = PlanRetention(Policy({{"keep_best", "100"}}), in, 0);
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{1, 2, 4, 5, 7, 8}));
  EXPECT_EQ(For(d, 3).reason, "not kept by any rule");
}

TEST(PlanRetentionTest, KeepIntervalWalksCommitTime) {
  // Step numbers out of commit-time order on purpose: the walk follows time.
  std::vector<StepFacts> in = {Committed(1, 100), Committed(2, 130), Committed(3, 159), Committed(4, 160),
                               Committed(6, 200), Committed(5, 220), Committed(7, 221)};
  std::vector<StepDecision> d = PlanRetention(Policy({{"keep_interval", "60"}}), in, 0);
  // Kept at t=100, 160 (>= 160), 220 (>= 220); step 7 is the newest.
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{1, 4, 5, 7}));
  EXPECT_EQ(For(d, 1).reason, "keep_interval");
  EXPECT_EQ(For(d, 4).reason, "keep_interval");
  EXPECT_EQ(For(d, 5).reason, "keep_interval");
  EXPECT_EQ(For(d, 7).reason, "newest committed step");
  // Equal commit times: the lower step number comes first.
  in = {Committed(9, 500), Committed(8, 500), Committed(10, 505)};
  EXPECT_EQ(Survivors(PlanRetention(Policy({{"keep_interval", "1m"}}), in, 0)), (std::set<int64_t>{8, 10}));
}

TEST(PlanRetentionTest, EphemeralSteps) {
  std::vector<StepFacts> in = CommittedRange(1, 6);
  in[2].ephemeral = true;  // step 3, marked by the trainer
  RetentionPolicy p = Policy({{"keep_last", "10"}, {"ephemeral_every", "2"}, {"keep_every", "4"}});
  std::vector<StepDecision> d = PlanRetention(p, in, 0);
  // keep_last would keep all of them; ephemeral wins over it; 4 is permanent.
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{1, 4, 5, 6}));
  EXPECT_EQ(For(d, 2).reason, "ephemeral, superseded by step 3");
  EXPECT_EQ(For(d, 3).reason, "ephemeral, superseded by step 4");
  EXPECT_EQ(For(d, 4).reason, "keep_every");
  EXPECT_EQ(For(d, 6).reason, "ephemeral, newest");
  // Safety rules still win: pinned, newest persisted.
  in[1].pinned = true;
  in[2].persisted = true;
  d = PlanRetention(p, in, 0);
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(For(d, 2).reason, "pinned");
  EXPECT_EQ(For(d, 3).reason, "newest persisted step");
  // Superseded only by a committed step, not by one still being written.
  in = {Committed(2), InPhase(4, StepPhase::kWriting)};
  d = PlanRetention(Policy({{"ephemeral_every", "2"}}), in, 0);
  EXPECT_EQ(For(d, 2).reason, "ephemeral, newest");
}

TEST(PlanRetentionTest, HandBuiltBadPolicyValuesAreIgnored) {
  RetentionPolicy p;
  p.keep_every = 0;
  p.ephemeral_every = -2;
  p.keep_last = 0;
  p.keep_interval_s = 0;
  p.keep_best = -1;
  p.keep_steps = {7, 3};  // unsorted
  std::vector<StepDecision> d = PlanRetention(p, CommittedRange(1, 8), 0);
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{3, 7, 8}));
}

// ---- Scenarios ----

TEST(PlanRetentionScenarioTest, KeepLastKeepEveryAndPin) {
  std::vector<StepFacts> in = CommittedRange(1, 30);
  in[6].pinned = true;  // step 7
  std::vector<StepDecision> d = PlanRetention(Policy({{"keep_last", "3"}, {"keep_every", "10"}}), in, 0);
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{7, 10, 20, 28, 29, 30}));
  EXPECT_EQ(For(d, 7).reason, "pinned");
  EXPECT_EQ(For(d, 30).reason, "keep_every");
  EXPECT_EQ(For(d, 29).reason, "keep_last");
}

TEST(PlanRetentionScenarioTest, OlmoCoreEphemeralAndPermanent) {
  RetentionPolicy p = Policy({{"keep_every", "10"}, {"ephemeral_every", "2"}});
  EXPECT_EQ(Survivors(PlanRetention(p, CommittedRange(2, 50, 2), 0)), (std::set<int64_t>{10, 20, 30, 40, 50}));
  // Evaluated after each commit, as the filesystem does.
  std::vector<StepFacts> live;
  for (int64_t k = 2; k <= 50; k += 2) {
    live.push_back(Committed(k));
    std::vector<StepDecision> d = PlanRetention(p, live, 0);
    std::set<int64_t> want = {k};
    for (int64_t s = 10; s <= k; s += 10) want.insert(s);
    ASSERT_EQ(Survivors(d), want) << "after step " << k;
    std::vector<StepFacts> next;
    for (size_t i = 0; i < live.size(); ++i) {
      if (d[i].keep) next.push_back(live[i]);
    }
    live = std::move(next);
  }
}

TEST(PlanRetentionScenarioTest, KeepBestMinLoss) {
  std::vector<StepFacts> in = CommittedRange(100, 600, 100);
  const double loss[] = {2.0, 1.5, 1.7, 1.2, 1.9, 1.8};
  for (size_t i = 0; i < in.size(); ++i) in[i].score = loss[i];
  std::vector<StepDecision> d = PlanRetention(Policy({{"keep_best", "2"}, {"score_mode", "min"}}), in, 0);
  EXPECT_EQ(Survivors(d), (std::set<int64_t>{200, 400, 600}));
  EXPECT_EQ(For(d, 600).reason, "newest committed step");
}

TEST(PlanRetentionScenarioTest, ThousandStepsIsFast) {
  std::mt19937_64 rng(7);
  std::vector<StepFacts> in;
  for (int64_t s = 1; s <= 1000; ++s) {
    in.push_back(Committed(s, 1'000'000 + s * 37));
    in.back().score = static_cast<double>(rng() % 1000);
    in.back().persisted = s < 990;
  }
  std::shuffle(in.begin(), in.end(), rng);
  RetentionPolicy p = Policy({{"keep_last", "5"}, {"keep_every", "100"}, {"keep_steps", "1,2,3,500,777"},
                              {"ephemeral_every", "3"}, {"keep_interval", "1h"}, {"keep_best", "10"}});
  auto start = std::chrono::steady_clock::now();
  std::vector<StepDecision> d;
  for (int i = 0; i < 10; ++i) d = PlanRetention(p, in, 0);
  auto per_pass = (std::chrono::steady_clock::now() - start) / 10;
  EXPECT_LT(per_pass, std::chrono::milliseconds(20)) << "a retention pass over 1,000 steps is too slow";
  EXPECT_EQ(d.size(), 1000u);
}

// ---- Properties over random histories ----

struct Random {
  std::mt19937_64 rng;
  int64_t Int(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
  bool Chance(int percent) { return Int(0, 99) < percent; }
};

std::vector<StepFacts> RandomHistory(Random& r) {
  std::vector<StepFacts> v;
  const int64_t n = r.Int(0, 60);
  for (int64_t i = 0; i < n; ++i) {
    StepFacts f;
    f.id = static_cast<uint64_t>(r.Int(0, 1) ? i : 1000 - i);  // unique, not in step order
    f.step = r.Chance(10) ? r.Int(0, 5) : r.Int(0, 120);        // some duplicate step numbers
    const int64_t phase = r.Int(0, 99);
    f.phase = phase < 65 ? StepPhase::kCommitted
              : phase < 77 ? StepPhase::kWriting
              : phase < 89 ? StepPhase::kIncomplete
                           : StepPhase::kBroken;
    f.committed_at_s = f.phase == StepPhase::kCommitted ? 1'000'000 + f.step * 50 + r.Int(-200, 200) : 0;
    f.persisted = r.Chance(f.phase == StepPhase::kCommitted ? 40 : 5);
    f.pinned = r.Chance(8);
    f.ephemeral = r.Chance(10);
    f.open_for_writing = r.Chance(5);
    if (r.Chance(60)) f.score = static_cast<double>(r.Int(0, 10));
    v.push_back(f);
  }
  return v;
}

RetentionPolicy RandomPolicy(Random& r) {
  RetentionPolicy p;
  if (r.Chance(30)) return p;
  if (r.Chance(40)) p.keep_last = r.Int(1, 8);
  if (r.Chance(30)) p.keep_every = r.Int(1, 25);
  if (r.Chance(20)) {
    for (int64_t k = r.Int(0, 4); k > 0; --k) p.keep_steps.push_back(r.Int(0, 120));
  }
  if (r.Chance(30)) p.ephemeral_every = r.Int(1, 6);
  if (r.Chance(30)) p.keep_interval_s = r.Int(1, 2000);
  if (r.Chance(30)) p.keep_best = r.Int(1, 5);
  p.score_mode = r.Chance(50) ? ScoreMode::kMin : ScoreMode::kMax;
  return p;
}

bool Newer(const StepFacts& a, const StepFacts& b) { return a.step != b.step ? a.step > b.step : a.id > b.id; }

TEST(PlanRetentionPropertyTest, RandomHistories) {
  Random r{std::mt19937_64(20240601)};
  int removed_total = 0, kept_total = 0;
  for (int iter = 0; iter < 500; ++iter) {
    SCOPED_TRACE("history " + std::to_string(iter));
    const std::vector<StepFacts> in = RandomHistory(r);
    const RetentionPolicy p = RandomPolicy(r);
    const std::vector<StepDecision> d = PlanRetention(p, in, 2'000'000);
    ASSERT_EQ(d.size(), in.size());

    const StepFacts* newest = nullptr;
    const StepFacts* newest_persisted = nullptr;
    std::vector<size_t> committed;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].phase != StepPhase::kCommitted) continue;
      committed.push_back(i);
      if (newest == nullptr || Newer(in[i], *newest)) newest = &in[i];
      if (in[i].persisted && (newest_persisted == nullptr || Newer(in[i], *newest_persisted))) {
        newest_persisted = &in[i];
      }
    }
    std::sort(committed.begin(), committed.end(), [&](size_t a, size_t b) { return Newer(in[a], in[b]); });

    for (size_t i = 0; i < in.size(); ++i) {
      const StepFacts& s = in[i];
      SCOPED_TRACE("step " + std::to_string(s.step) + " id " + std::to_string(s.id) + ": " + d[i].reason);
      ASSERT_EQ(d[i].id, s.id);
      ASSERT_EQ(d[i].step, s.step);
      EXPECT_FALSE(d[i].reason.empty());
      (d[i].keep ? kept_total : removed_total)++;
      if (&s == newest || &s == newest_persisted) {
        EXPECT_TRUE(d[i].keep);
      }
      if (s.phase == StepPhase::kWriting || s.open_for_writing || s.pinned) {
        EXPECT_TRUE(d[i].keep);
      }
      if (newest == nullptr) {
        EXPECT_TRUE(d[i].keep);
      }
      const bool leftover = s.phase == StepPhase::kIncomplete || s.phase == StepPhase::kBroken;
      if (leftover && !s.pinned && !s.open_for_writing) {
        EXPECT_EQ(d[i].keep, newest == nullptr || s.step >= newest->step);
      }
      if (s.phase == StepPhase::kCommitted && p.empty()) {
        EXPECT_TRUE(d[i].keep);
      }
      if (s.phase == StepPhase::kCommitted &&
          ((p.keep_every && s.step % *p.keep_every == 0) ||
           std::find(p.keep_steps.begin(), p.keep_steps.end(), s.step) != p.keep_steps.end())) {
        EXPECT_TRUE(d[i].keep);
      }
      if (!d[i].keep && s.phase == StepPhase::kCommitted) {
        EXPECT_TRUE(d[i].reason == "not kept by any rule" || d[i].reason.rfind("ephemeral, superseded by step ", 0) == 0);
      }
    }

    // keep_last N: the N newest committed steps stay unless ephemeral removes them.
    if (p.keep_last) {
      size_t kept = 0, expected = std::min<size_t>(static_cast<size_t>(*p.keep_last), committed.size());
      for (size_t k = 0; k < expected; ++k) {
        const StepDecision& x = d[committed[k]];
        if (x.keep) ++kept;
        else EXPECT_EQ(x.reason.rfind("ephemeral, superseded", 0), 0u) << "step " << x.step << ": " << x.reason;
      }
      size_t kept_committed = 0;
      for (size_t i : committed) kept_committed += d[i].keep;
      EXPECT_GE(kept_committed, kept);
    }

    // Deterministic and independent of input order.
    EXPECT_EQ(Survivors(PlanRetention(p, in, 2'000'000)), Survivors(d));
    std::vector<StepFacts> shuffled = in;
    std::shuffle(shuffled.begin(), shuffled.end(), r.rng);
    const std::vector<StepDecision> d2 = PlanRetention(p, shuffled, 2'000'000);
    std::map<uint64_t, const StepDecision*> by_id;
    for (const StepDecision& x : d) by_id[x.id] = &x;
    ASSERT_EQ(d2.size(), d.size());
    for (size_t i = 0; i < d2.size(); ++i) {
      ASSERT_EQ(d2[i].id, shuffled[i].id);
      const StepDecision* first = by_id.at(d2[i].id);
      EXPECT_EQ(d2[i].keep, first->keep) << "id " << d2[i].id;
      EXPECT_EQ(d2[i].reason, first->reason) << "id " << d2[i].id;
    }
  }
  // The generator must exercise both outcomes, or the properties prove little.
  EXPECT_GT(removed_total, 1000);
  EXPECT_GT(kept_total, 1000);
}

}  // namespace
}  // namespace ckptfs
