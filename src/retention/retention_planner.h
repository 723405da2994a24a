// RetentionPlanner: decides which steps of one run directory to keep and
// which to remove (SPEC section 5). A pure function of its inputs: no I/O, no
// clock (the caller passes `now`), no global state, so it can be tested
// exhaustively and run inside the commit batch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "retention/trainer_presets.h"

namespace ckptfs {

enum class ScoreMode { kMin, kMax };

// The policy of one run directory. Rules combine as a union: a step is kept
// if any rule keeps it. A policy with no rule set keeps everything.
// A trainer preset (rule name "retention") replaces the union rules: a
// policy holds either a preset or rules, never both (SetPolicyRule refuses
// the mix).
struct RetentionPolicy {
  std::optional<int64_t> keep_last;         // keep the N newest committed steps (N >= 1)
  std::optional<int64_t> keep_every;        // steps divisible by K are permanent (K >= 1)
  std::vector<int64_t> keep_steps;          // these step numbers are permanent
  std::optional<int64_t> ephemeral_every;   // steps divisible by E (not permanent) go once a newer step commits
  std::optional<int64_t> keep_interval_s;   // keep one step per interval of commit time (seconds >= 1)
  std::optional<int64_t> keep_best;         // keep the N best-scored steps (N >= 1)
  ScoreMode score_mode = ScoreMode::kMin;
  std::optional<RetentionPreset> preset;    // a trainer's own rules (trainer_presets.h)

  // No rule and no preset: everything is kept.
  bool empty() const;
  // Some union rule is set (score_mode = max counts: it is only ever given
  // together with keep_best).
  bool has_rules() const;
};

// Parses one rule from its name and text value, as given on the command line
// (--keep-last 3) or as a run directory xattr (user.ckptfs.keep_last = "3"),
// and sets it in *policy. EINVAL with a message naming the rule and the value
// for unknown names and bad values; *policy is unchanged then.
// Names: keep_last, keep_every, keep_steps ("10,20,30"), ephemeral_every,
// keep_interval (a duration: "3600", "90s", "30m", "6h", "2d"), keep_best,
// score_mode ("min" or "max"), retention (a trainer preset,
// "torchtitan:keep_latest_k=3", see ParseRetentionPreset). An empty value
// clears the rule. EINVAL for a preset on a policy with rules, or a rule on a
// policy with a preset: a preset reproduces a trainer exactly and is not
// mixed with rules on the same level.
Status SetPolicyRule(const std::string& name, const std::string& value, RetentionPolicy* policy);
// A rule's number: decimal digits only (no sign, no spaces), nullopt
// otherwise or on overflow. Shared by the rules and the trainer presets.
std::optional<int64_t> ParseNonNegative(std::string_view s);
// The rule names SetPolicyRule accepts, for xattr listing and validation.
const std::vector<std::string>& PolicyRuleNames();

enum class StepPhase {
  kWriting,     // being written, commit not yet done
  kCommitted,
  kIncomplete,  // left over from a crash
  kBroken,      // bad metadata
};

struct StepFacts {
  uint64_t id = 0;      // caller's identifier (the step directory's inode)
  int64_t step = 0;     // step number
  StepPhase phase = StepPhase::kWriting;
  int64_t committed_at_s = 0;  // unix seconds, committed steps only
  bool persisted = false;      // uploaded to the remote tier
  bool pinned = false;         // user.ckptfs.pin = 1
  bool ephemeral = false;      // marked ephemeral by the trainer itself
  std::optional<double> score; // user.ckptfs.score
  bool open_for_writing = false;  // a file of the step is open for writing
  // For trainer presets (StepRecord's fields of the same meaning):
  std::string name;      // the step directory's name
  uint64_t session = 0;  // the trainer process that committed it; 0 = unknown
  std::string best_ref;  // the trainer's best checkpoint (basename) as recorded here
};

struct StepDecision {
  uint64_t id = 0;
  int64_t step = 0;
  bool keep = true;
  // Why: the rule that keeps it ("keep_last", "keep_every", "pinned",
  // "newest committed", "open for writing"...), or why it goes
  // ("not kept by any rule", "ephemeral, superseded by step 12",
  // "incomplete and older than the newest committed step").
  std::string reason;
};

// One decision per input step, in the order of the input. Safety rules no
// policy overrides:
//  * the newest committed step is kept;
//  * the newest persisted step is kept until a newer one is persisted;
//  * a step open for writing, or in the writing phase, is kept;
//  * pinned steps are kept;
//  * incomplete and broken steps older than the newest committed step are
//    removed (even with an empty policy); newer ones are kept;
//  * only committed steps count towards keep_last and keep_best, and only
//    committed steps are shown to a preset.
std::vector<StepDecision> PlanRetention(const RetentionPolicy& policy, const std::vector<StepFacts>& steps,
                                        int64_t now_s);

}  // namespace ckptfs
