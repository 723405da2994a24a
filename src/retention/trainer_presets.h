// Trainer retention presets: each reproduces one trainer's own checkpoint
// removal rules, so a user can turn the trainer's pruning off and let ckptfs
// prune instead (SPEC section 5, docs/operations.md "Retention presets").
// A preset replaces the union rules (keep_last, keep_every...) of its level;
// the planner's safety rules and pins still win over it.
//
// Pure: parsing and the per-trainer decisions take values and return values,
// like the rest of the planner.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace ckptfs {

enum class PresetKind { kOlmoCore, kTorchtitan, kHf, kRecis };

// OLMo-core's CheckpointRemovalStrategy.
enum class OlmoRemoval { kEphemeralOnly, kAllNonPermanent, kNever };

struct RetentionPreset {
  PresetKind kind = PresetKind::kTorchtitan;
  // olmo-core: save_interval (required), ephemeral (ephemeral_save_interval,
  // less than save_interval), fixed (fixed_steps, sorted, no duplicates),
  // remove (default ephemeral_only, as in OLMo-core).
  int64_t save_interval = 0;
  std::optional<int64_t> ephemeral;
  std::vector<int64_t> fixed;
  OlmoRemoval remove = OlmoRemoval::kEphemeralOnly;
  // torchtitan keep_latest_k, hf save_total_limit, recis max_keep (>= 1).
  int64_t limit = 0;

  bool operator==(const RetentionPreset&) const = default;
};

// Parses "NAME:key=value,key=value". An item without '=' continues the list
// of the key before it ("olmo-core:save_interval=1000,fixed=150,2500").
// Presets and keys:
//   olmo-core:save_interval=S[,ephemeral=E][,fixed=a,b,...]
//             [,remove=ephemeral_only|all_non_permanent|never]
//   torchtitan:keep_latest_k=K
//   hf:save_total_limit=L
//   recis:max_keep=M
// EINVAL with a message naming the preset text and the bad part for unknown
// presets and keys, missing required keys, repeated keys, empty items, and
// numbers that are not positive (fixed steps: not non-negative), and for
// ephemeral >= save_interval (OLMo-core refuses that configuration itself).
Result<RetentionPreset> ParseRetentionPreset(const std::string& text);

// The canonical text of a preset: ParseRetentionPreset(Format(p)) == p.
std::string FormatRetentionPreset(const RetentionPreset& preset);

// One committed step as the presets see it.
struct PresetStep {
  int64_t step = 0;
  std::string name;      // the step directory's name (hf compares it with best_ref)
  uint64_t session = 0;  // the trainer process that committed it; 0 = unknown
  std::string best_ref;  // the trainer's best checkpoint as this step recorded it; "" = none
  bool ephemeral = false;  // the trainer marked it ephemeral itself (OLMo-core .metadata.json)
};

struct PresetVerdict {
  bool keep = true;
  std::string reason;  // begins with the preset's name, e.g. "torchtitan: ..."
};

// What the preset's trainer would keep of these committed steps, oldest
// first (by step number; the caller breaks ties). One verdict per step, in
// the same order. The caller applies the safety rules afterwards.
std::vector<PresetVerdict> DecideByPreset(const RetentionPreset& preset, const std::vector<PresetStep>& committed);

// Hugging Face Trainer's rotation (Trainer._sorted_checkpoints followed by
// _rotate_checkpoints), on checkpoint names sorted by step number, oldest
// first: which of them it deletes. `best` is state.best_model_checkpoint's
// basename ("" = None). Kept apart so it can follow transformers closely.
std::vector<bool> HfRotationDeletes(const std::vector<std::string>& sorted_names, const std::string& best,
                                    int64_t save_total_limit);

}  // namespace ckptfs
