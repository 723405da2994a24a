// Retention planning (see retention_planner.h and SPEC section 5).
//
// Semantics, in the order a step's decision is made:
//  1. Writing-phase steps and steps with a file open for writing are kept
//     ("being written"): removing them would pull data from under a writer.
//     Pinned steps are kept next ("pinned"), whatever their phase: a pin is
//     an explicit user request and wins over every automatic rule.
//  2. Incomplete and broken steps whose step number is lower than the newest
//     committed step are removed ("incomplete and older than the newest
//     committed step" / "broken and ..."), even with an empty policy; others
//     are kept. With no committed step at all, every step is kept.
//  3. Committed steps. "Permanent" = step % keep_every == 0 or step in
//     keep_steps: always kept ("keep_every" / "keep_steps").
//     "Ephemeral" = not permanent and (step % ephemeral_every == 0 or marked
//     ephemeral by the trainer). An ephemeral step goes as soon as a committed
//     step with a higher number exists ("ephemeral, superseded by step N", N
//     the next higher committed step), even if keep_last / keep_best /
//     keep_interval would keep it: OLMo-core deletes the previous ephemeral
//     checkpoint when the next one is saved, and ckptfs mirrors that. Until
//     then it is kept ("ephemeral, newest"). With an empty policy even a
//     trainer-marked ephemeral step is kept (SPEC: no rule, nothing removed).
//     Otherwise the rules are a union: keep_last N keeps the N committed steps
//     with the highest numbers; keep_best N keeps the N best scored committed
//     steps (lowest for min, highest for max, ties to the higher step number;
//     a missing or NaN score never counts); keep_interval walks committed
//     steps by committed_at (ties by step number) and keeps the first and each
//     step at least one interval after the last one it kept. Ephemeral steps
//     take part in these counts and walks (they are removed afterwards), so
//     the rules' answers do not depend on the ephemeral marking. An empty
//     policy keeps every committed step ("no retention policy").
//     With a trainer preset (policy.preset), the preset's verdict on the
//     committed steps (trainer_presets.cc) takes the place of rules 3.
//  4. A committed step that rules 3 would remove is still kept if it is the
//     newest committed step, or the newest persisted committed step (only a
//     committed step can have been uploaded whole); else it is removed ("not
//     kept by any rule").
// The reason names the first rule in this order that decides the step, so a
// dry run shows "newest persisted step" only where that is what saves it.
//
// Ties between steps with the same step number are broken by id, so the plan
// does not depend on the order of the input. Policy values the parser would
// reject (a keep_every of 0...) are treated as unset rather than trusted: the
// planner must never divide by zero on a hand-built policy.
#include "retention/retention_planner.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace ckptfs {

bool RetentionPolicy::empty() const {
  // score_mode only says how keep_best reads scores; it keeps nothing itself.
  return !keep_last && !keep_every && keep_steps.empty() && !ephemeral_every && !keep_interval_s &&
         !keep_best && !preset;
}

bool RetentionPolicy::has_rules() const {
  return keep_last || keep_every || !keep_steps.empty() || ephemeral_every || keep_interval_s || keep_best ||
         score_mode == ScoreMode::kMax;
}

const std::vector<std::string>& PolicyRuleNames() {
  static const std::vector<std::string> kNames = {"keep_last",     "keep_every", "keep_steps", "ephemeral_every",
                                                  "keep_interval", "keep_best",  "score_mode", "retention"};
  return kNames;
}

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Status Invalid(const std::string& name, const std::string& value, const std::string& what) {
  return Status::Error(EINVAL, name + ": '" + value + "' " + what);
}

// The union rules set in a policy, for messages.
std::string RulesSet(const RetentionPolicy& p) {
  std::string out;
  auto add = [&](bool set, const char* name) {
    if (set) out += (out.empty() ? "" : ", ") + std::string(name);
  };
  add(p.keep_last.has_value(), "keep_last");
  add(p.keep_every.has_value(), "keep_every");
  add(!p.keep_steps.empty(), "keep_steps");
  add(p.ephemeral_every.has_value(), "ephemeral_every");
  add(p.keep_interval_s.has_value(), "keep_interval");
  add(p.keep_best.has_value(), "keep_best");
  add(p.score_mode == ScoreMode::kMax, "score_mode");
  return out;
}

// "3600", "90s", "30m", "6h", "2d": whole numbers only, so a value reads back
// exactly as the seconds it stands for.
std::optional<int64_t> ParseDuration(std::string_view s) {
  int64_t unit = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 's': unit = 1; break;
      case 'm': unit = 60; break;
      case 'h': unit = 3600; break;
      case 'd': unit = 86400; break;
      default: unit = 0; break;
    }
    if (unit != 0) s.remove_suffix(1);
    else unit = 1;
  }
  std::optional<int64_t> n = ParseNonNegative(s);
  if (!n || *n > std::numeric_limits<int64_t>::max() / unit) return std::nullopt;
  return *n * unit;
}

}  // namespace

// An empty value clears the rule (score_mode goes back to "min"), so
// `setfattr -n user.ckptfs.keep_last -v "" RUN` undoes an earlier setting.
// keep_steps is stored sorted and without duplicates.
std::optional<int64_t> ParseNonNegative(std::string_view s) {
  // Digits only: from_chars alone would accept a leading '-'.
  if (s.empty() || s.front() < '0' || s.front() > '9') return std::nullopt;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

Status SetPolicyRule(const std::string& name, const std::string& value, RetentionPolicy* policy) {
  if (name == "retention") {
    if (value.empty()) {
      policy->preset = std::nullopt;
      return Status::Ok();
    }
    Result<RetentionPreset> preset = ParseRetentionPreset(value);
    if (!preset.ok()) return preset.status();  // names the preset text already
    if (policy->has_rules()) {
      return Invalid(name, value,
                     "cannot be combined with the rules already set (" + RulesSet(*policy) +
                         "): a preset replaces them; use one or the other");
    }
    policy->preset = std::move(preset).value();
    return Status::Ok();
  }
  const bool is_rule = std::find(PolicyRuleNames().begin(), PolicyRuleNames().end(), name) != PolicyRuleNames().end();
  if (is_rule && !value.empty() && policy->preset) {
    return Invalid(name, value,
                   "cannot be combined with the retention preset '" + FormatRetentionPreset(*policy->preset) +
                       "': a preset replaces the rules; use one or the other");
  }
  std::optional<int64_t> RetentionPolicy::*positive = nullptr;
  if (name == "keep_last") positive = &RetentionPolicy::keep_last;
  if (name == "keep_every") positive = &RetentionPolicy::keep_every;
  if (name == "ephemeral_every") positive = &RetentionPolicy::ephemeral_every;
  if (name == "keep_best") positive = &RetentionPolicy::keep_best;
  if (positive != nullptr) {
    if (value.empty()) {
      policy->*positive = std::nullopt;
      return Status::Ok();
    }
    std::optional<int64_t> n = ParseNonNegative(value);
    if (!n || *n < 1) return Invalid(name, value, "is not a positive integer");
    policy->*positive = *n;
    return Status::Ok();
  }
  if (name == "keep_steps") {
    std::vector<int64_t> steps;
    std::string_view rest(value);
    if (!Trim(rest).empty()) {
      while (true) {
        size_t comma = rest.find(',');
        std::optional<int64_t> n = ParseNonNegative(Trim(rest.substr(0, comma)));
        if (!n) return Invalid(name, value, "is not a comma-separated list of non-negative step numbers");
        steps.push_back(*n);
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
    }
    std::sort(steps.begin(), steps.end());
    steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    policy->keep_steps = std::move(steps);
    return Status::Ok();
  }
  if (name == "keep_interval") {
    if (value.empty()) {
      policy->keep_interval_s = std::nullopt;
      return Status::Ok();
    }
    std::optional<int64_t> s = ParseDuration(value);
    if (!s || *s < 1) return Invalid(name, value, "is not a duration of at least 1s (like 3600, 90s, 30m, 6h, 2d)");
    policy->keep_interval_s = *s;
    return Status::Ok();
  }
  if (name == "score_mode") {
    if (value.empty() || value == "min") {
      policy->score_mode = ScoreMode::kMin;
    } else if (value == "max") {
      policy->score_mode = ScoreMode::kMax;
    } else {
      return Invalid(name, value, "is not 'min' or 'max'");
    }
    return Status::Ok();
  }
  return Status::Error(EINVAL, "unknown retention rule '" + name + "'");
}

namespace {

std::optional<int64_t> Positive(const std::optional<int64_t>& v) {
  return v && *v >= 1 ? v : std::nullopt;
}

bool IsBefore(const StepFacts& a, const StepFacts& b) {  // older first
  if (a.step != b.step) return a.step < b.step;
  return a.id < b.id;
}

}  // namespace

std::vector<StepDecision> PlanRetention(const RetentionPolicy& policy, const std::vector<StepFacts>& steps,
                                        [[maybe_unused]] int64_t now_s) {
  // now_s is part of the contract for age-based rules; none uses it yet.
  const size_t n = steps.size();
  std::vector<size_t> committed;  // indices, oldest step number first
  for (size_t i = 0; i < n; ++i) {
    if (steps[i].phase == StepPhase::kCommitted) committed.push_back(i);
  }
  std::sort(committed.begin(), committed.end(),
            [&](size_t a, size_t b) { return IsBefore(steps[a], steps[b]); });
  std::vector<int64_t> committed_steps;  // sorted, for "superseded by"
  for (size_t i : committed) committed_steps.push_back(steps[i].step);

  // Input indices; kNoStep when there is none.
  constexpr size_t kNoStep = std::numeric_limits<size_t>::max();
  const size_t newest_committed = committed.empty() ? kNoStep : committed.back();
  size_t newest_persisted = kNoStep;
  for (size_t i : committed) {
    if (steps[i].persisted) newest_persisted = i;  // ascending order: last one wins
  }

  const std::optional<int64_t> keep_every = Positive(policy.keep_every);
  const std::optional<int64_t> ephemeral_every = Positive(policy.ephemeral_every);
  std::vector<int64_t> keep_steps = policy.keep_steps;  // the caller may not have sorted it
  std::sort(keep_steps.begin(), keep_steps.end());

  // What the counting rules keep, by input index; 0 = none.
  enum : uint8_t { kNone = 0, kLast, kBest, kInterval };
  std::vector<uint8_t> rule(n, kNone);
  if (std::optional<int64_t> last = Positive(policy.keep_last)) {
    size_t count = 0;
    for (auto it = committed.rbegin(); it != committed.rend() && count < static_cast<uint64_t>(*last); ++it, ++count) {
      rule[*it] = kLast;
    }
  }
  if (std::optional<int64_t> best = Positive(policy.keep_best)) {
    std::vector<size_t> scored;
    for (size_t i : committed) {
      if (steps[i].score && !std::isnan(*steps[i].score)) scored.push_back(i);
    }
    const bool max = policy.score_mode == ScoreMode::kMax;
    std::sort(scored.begin(), scored.end(), [&](size_t a, size_t b) {
      double sa = *steps[a].score, sb = *steps[b].score;
      if (sa != sb) return max ? sa > sb : sa < sb;
      return IsBefore(steps[b], steps[a]);  // newer first
    });
    for (size_t k = 0; k < scored.size() && k < static_cast<uint64_t>(*best); ++k) {
      if (rule[scored[k]] == kNone) rule[scored[k]] = kBest;
    }
  }
  if (std::optional<int64_t> interval = Positive(policy.keep_interval_s)) {
    std::vector<size_t> by_time = committed;
    std::sort(by_time.begin(), by_time.end(), [&](size_t a, size_t b) {
      if (steps[a].committed_at_s != steps[b].committed_at_s) return steps[a].committed_at_s < steps[b].committed_at_s;
      return IsBefore(steps[a], steps[b]);
    });
    std::optional<int64_t> last_kept;
    for (size_t i : by_time) {
      int64_t t = steps[i].committed_at_s;
      // Unsigned difference: t >= *last_kept here, and t - *last_kept may not fit int64.
      if (last_kept && static_cast<uint64_t>(t) - static_cast<uint64_t>(*last_kept) < static_cast<uint64_t>(*interval)) {
        continue;
      }
      last_kept = t;
      if (rule[i] == kNone) rule[i] = kInterval;
    }
  }

  // A preset's verdicts, by input index (committed steps only).
  std::vector<PresetVerdict> preset_verdict(n);
  if (policy.preset) {
    std::vector<PresetStep> shown;
    shown.reserve(committed.size());
    for (size_t i : committed) shown.push_back({steps[i].step, steps[i].name, steps[i].session, steps[i].best_ref, steps[i].ephemeral});
    std::vector<PresetVerdict> v = DecideByPreset(*policy.preset, shown);
    for (size_t k = 0; k < committed.size() && k < v.size(); ++k) preset_verdict[committed[k]] = std::move(v[k]);
  }

  const bool any_committed = newest_committed != kNoStep;
  const int64_t newest_step = any_committed ? steps[newest_committed].step : 0;
  std::vector<StepDecision> out(n);
  for (size_t i = 0; i < n; ++i) {
    const StepFacts& s = steps[i];
    StepDecision& d = out[i];
    d.id = s.id;
    d.step = s.step;
    auto keep = [&](std::string why) { d.keep = true; d.reason = std::move(why); };
    auto remove = [&](std::string why) { d.keep = false; d.reason = std::move(why); };

    if (s.phase == StepPhase::kWriting || s.open_for_writing) { keep("being written"); continue; }
    if (s.pinned) { keep("pinned"); continue; }
    if (s.phase == StepPhase::kIncomplete || s.phase == StepPhase::kBroken) {
      const std::string what = s.phase == StepPhase::kIncomplete ? "incomplete" : "broken";
      if (any_committed && s.step < newest_step) {
        remove(what + " and older than the newest committed step");
      } else if (any_committed && s.step == newest_step) {
        keep(what + ", same step number as the newest committed step");
      } else {
        keep(what + ", newer than every committed step");
      }
      continue;
    }

    // Committed. An empty policy keeps them all, trainer-marked ephemeral
    // steps included: SPEC 5 says a run with no rule loses nothing.
    if (policy.empty()) { keep("no retention policy"); continue; }
    const bool newest = newest_committed == i;
    const bool newest_persisted_here = newest_persisted == i;
    auto safety_or_remove = [&](std::string why) {
      if (newest) keep("newest committed step");
      else if (newest_persisted_here) keep("newest persisted step");
      else remove(std::move(why));
    };
    // A preset replaces the rules below; the safety rules above still win.
    if (policy.preset) {
      if (preset_verdict[i].keep) keep(std::move(preset_verdict[i].reason));
      else safety_or_remove(std::move(preset_verdict[i].reason));
      continue;
    }
    if (keep_every && s.step % *keep_every == 0) { keep("keep_every"); continue; }
    if (std::binary_search(keep_steps.begin(), keep_steps.end(), s.step)) { keep("keep_steps"); continue; }
    const bool ephemeral = s.ephemeral || (ephemeral_every && s.step % *ephemeral_every == 0);
    if (ephemeral) {
      auto next = std::upper_bound(committed_steps.begin(), committed_steps.end(), s.step);
      if (next == committed_steps.end()) keep("ephemeral, newest");
      else safety_or_remove("ephemeral, superseded by step " + std::to_string(*next));
      continue;
    }
    switch (rule[i]) {
      case kLast: keep("keep_last"); break;
      case kBest: keep("keep_best"); break;
      case kInterval: keep("keep_interval"); break;
      default: safety_or_remove("not kept by any rule"); break;
    }
  }
  return out;
}

}  // namespace ckptfs
