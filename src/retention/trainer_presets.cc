// Trainer retention presets (see trainer_presets.h). Each Decide* function
// below states which trainer code it reproduces and where ckptfs must differ.
// What is common to all of them:
//  * ckptfs decides at each commit; the trainers decide right after they
//    save (torchtitan, Hugging Face, RecIS) or at the next training batch
//    (OLMo-core). At the commit of a step both have seen the same saves, so
//    the sets of steps agree there (the property tests compare exactly at
//    those points).
//  * Only committed steps are counted. The trainers list every directory,
//    one still being written (async saves) or left over from a crash
//    included; ckptfs never counts or removes a step being written, and
//    removes incomplete steps older than the newest committed one by its
//    own safety rule. So ckptfs may briefly keep one checkpoint more than
//    the trainer, never one fewer.
#include "retention/trainer_presets.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <string_view>

#include "retention/retention_planner.h"

namespace ckptfs {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

struct PresetName {
  PresetKind kind;
  const char* name;
  std::vector<std::string> keys;  // the first one of torchtitan/hf/recis is its limit
};

const std::vector<PresetName>& PresetNames() {
  static const std::vector<PresetName> kNames = {
      {PresetKind::kOlmoCore, "olmo-core", {"save_interval", "ephemeral", "fixed", "remove"}},
      {PresetKind::kTorchtitan, "torchtitan", {"keep_latest_k"}},
      {PresetKind::kHf, "hf", {"save_total_limit"}},
      {PresetKind::kRecis, "recis", {"max_keep"}},
  };
  return kNames;
}

const PresetName& NameOf(PresetKind kind) {
  for (const PresetName& n : PresetNames()) {
    if (n.kind == kind) return n;
  }
  return PresetNames().front();
}

const char* RemovalName(OlmoRemoval r) {
  switch (r) {
    case OlmoRemoval::kEphemeralOnly: return "ephemeral_only";
    case OlmoRemoval::kAllNonPermanent: return "all_non_permanent";
    case OlmoRemoval::kNever: return "never";
  }
  return "ephemeral_only";
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

}  // namespace

Result<RetentionPreset> ParseRetentionPreset(const std::string& text) {
  auto bad = [&](const std::string& what) {
    return Status::Error(EINVAL, "retention preset '" + text + "': " + what);
  };
  const std::string_view all = Trim(text);
  const size_t colon = all.find(':');
  const std::string name(Trim(all.substr(0, colon)));
  const PresetName* known = nullptr;
  for (const PresetName& n : PresetNames()) {
    if (name == n.name) known = &n;
  }
  if (!known) return bad("unknown preset '" + name + "' (known: olmo-core, torchtitan, hf, recis)");

  // key -> its values, in the order given.
  std::vector<std::pair<std::string, std::vector<std::string>>> items;
  if (colon != std::string_view::npos) {
    std::string_view rest = all.substr(colon + 1);
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view item = Trim(rest.substr(0, comma));
      if (item.empty()) return bad("empty item (a stray comma?)");
      const size_t eq = item.find('=');
      if (eq == std::string_view::npos) {
        // "fixed=150,2500": 2500 continues fixed's list.
        if (items.empty()) return bad("'" + std::string(item) + "' is not key=value");
        items.back().second.emplace_back(item);
      } else {
        const std::string key(Trim(item.substr(0, eq)));
        if (key.empty()) return bad("'" + std::string(item) + "' has no key");
        for (const auto& [k, v] : items) {
          if (k == key) return bad(key + " is given twice");
        }
        items.push_back({key, {std::string(Trim(item.substr(eq + 1)))}});
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }

  RetentionPreset p;
  p.kind = known->kind;
  bool has_limit = false, has_interval = false;
  for (const auto& [key, values] : items) {
    if (std::find(known->keys.begin(), known->keys.end(), key) == known->keys.end()) {
      return bad("unknown key '" + key + "' for " + known->name + " (keys: " + Join(known->keys, ", ") + ")");
    }
    if (key != "fixed" && values.size() != 1) {
      return bad(key + " takes one value, not '" + Join(values, ",") + "'");
    }
    const std::string& value = values.front();
    if (key == "fixed") {
      for (const std::string& v : values) {
        std::optional<int64_t> n = ParseNonNegative(v);
        if (!n) return bad("fixed takes step numbers (non-negative integers), not '" + v + "'");
        p.fixed.push_back(*n);
      }
      std::sort(p.fixed.begin(), p.fixed.end());
      p.fixed.erase(std::unique(p.fixed.begin(), p.fixed.end()), p.fixed.end());
    } else if (key == "remove") {
      if (value == "ephemeral_only") p.remove = OlmoRemoval::kEphemeralOnly;
      else if (value == "all_non_permanent") p.remove = OlmoRemoval::kAllNonPermanent;
      else if (value == "never") p.remove = OlmoRemoval::kNever;
      else return bad("remove takes ephemeral_only, all_non_permanent or never, not '" + value + "'");
    } else {
      std::optional<int64_t> n = ParseNonNegative(value);
      if (!n || *n < 1) return bad(key + " takes a positive integer, not '" + value + "'");
      if (key == "save_interval") {
        p.save_interval = *n;
        has_interval = true;
      } else if (key == "ephemeral") {
        p.ephemeral = *n;
      } else {
        p.limit = *n;
        has_limit = true;
      }
    }
  }
  if (p.kind == PresetKind::kOlmoCore) {
    if (!has_interval) return bad("missing save_interval=N");
    if (p.ephemeral && *p.ephemeral >= p.save_interval) {
      // CheckpointerCallback.__post_init__ refuses this configuration.
      return bad("ephemeral (" + std::to_string(*p.ephemeral) + ") must be less than save_interval (" +
                 std::to_string(p.save_interval) + "), as in OLMo-core");
    }
  } else if (!has_limit) {
    return bad("missing " + known->keys.front() + "=N");
  }
  return p;
}

std::string FormatRetentionPreset(const RetentionPreset& p) {
  const PresetName& n = NameOf(p.kind);
  std::string out = std::string(n.name) + ":";
  if (p.kind != PresetKind::kOlmoCore) return out + n.keys.front() + "=" + std::to_string(p.limit);
  out += "save_interval=" + std::to_string(p.save_interval);
  if (p.ephemeral) out += ",ephemeral=" + std::to_string(*p.ephemeral);
  if (!p.fixed.empty()) {
    out += ",fixed=";
    for (size_t i = 0; i < p.fixed.size(); ++i) out += (i ? "," : "") + std::to_string(p.fixed[i]);
  }
  if (p.remove != OlmoRemoval::kEphemeralOnly) out += std::string(",remove=") + RemovalName(p.remove);
  return out;
}

namespace {

// OLMo-core CheckpointerCallback (ephemeral_save_interval, fixed_steps,
// remove). What the callback does, one instance per training run (process):
//  * post_train_batch saves a permanent checkpoint at a fixed step or a
//    multiple of save_interval, else an ephemeral one at a multiple of
//    ephemeral_save_interval (unless a cooldown or the trainer blocks it).
//    Only an ephemeral save schedules removals: of every checkpoint the
//    callback tracks as ephemeral but the one just saved, whatever `remove`
//    says. A permanent save removes nothing, so the newest ephemeral
//    checkpoint survives it. Scheduled removals run at the next batch.
//  * The callback tracks its own ephemeral saves, and from pre_train on the
//    checkpoints of earlier runs it finds in the folder (up to the step it
//    resumes from) that are not step 0, not fixed and not a multiple of
//    save_interval: with remove=ephemeral_only those at a multiple of
//    ephemeral_save_interval, with all_non_permanent all of them, with never
//    none (`remove` is only about checkpoints found in the folder).
//  * post_train's final save is not ephemeral (ephemeral=False in its
//    .metadata.json) and removes nothing.
//
// So ckptfs uses three facts, each for what OLMo-core uses it for:
//  * what an ephemeral save is: a committed step the trainer marked
//    ephemeral itself ("ephemeral": true in .metadata.json,
//    StepRecord::ephemeral). Step arithmetic cannot tell it from a final save
//    that lands on a multiple of ephemeral_save_interval (after a cooldown or
//    a blocked ephemeral save), which removes nothing;
//  * which checkpoints of earlier runs go: pre_train's step-number
//    arithmetic, a pure function of the step and the preset, the same on
//    every mount and after every restart;
//  * which ephemeral saves belong to the same run: the session (trainer
//    process) that committed them; 0 (unknown) never matches.
// A non-permanent step X goes once a marked ephemeral step Y > X is
// committed, if X is in pre_train's class for `remove`, or if X is itself a
// marked ephemeral save of Y's session. That save Y is the one at which
// OLMo-core removes X (in the same run, or after resuming from the newest
// checkpoint). Within one run every ephemeral save is in the class of
// ephemeral_only and all_non_permanent, so the session matters for never
// (and for a preset whose intervals differ from the trainer's).
// Where OLMo-core never ran a removal it had scheduled (the run ended or
// crashed right after the ephemeral save), ckptfs has done it at the commit;
// OLMo-core removes it after resuming at its next ephemeral save (with
// never: not at all, it stays behind).
// Without the trainer's marks (steps committed without their
// .metadata.json) nothing is removed: errs towards keeping.
std::vector<PresetVerdict> DecideOlmoCore(const RetentionPreset& p, const std::vector<PresetStep>& committed) {
  const std::string tag = "olmo-core: ";
  auto permanent_why = [&](int64_t s) -> const char* {
    if (s == 0) return "step 0";
    if (std::binary_search(p.fixed.begin(), p.fixed.end(), s)) return "fixed step";
    if (p.save_interval >= 1 && s % p.save_interval == 0) return "multiple of save_interval";
    return nullptr;
  };
  const bool has_ephemeral = p.ephemeral && *p.ephemeral >= 1;
  // Marked ephemeral saves, ascending as committed is: all, and by session.
  std::vector<int64_t> saves;
  std::map<uint64_t, std::vector<int64_t>> saves_of;
  for (const PresetStep& c : committed) {
    if (!c.ephemeral) continue;
    saves.push_back(c.step);
    saves_of[c.session].push_back(c.step);
  }
  auto first_after = [](const std::vector<int64_t>& v, int64_t step) -> std::optional<int64_t> {
    auto it = std::upper_bound(v.begin(), v.end(), step);
    return it == v.end() ? std::nullopt : std::optional<int64_t>(*it);
  };
  std::vector<PresetVerdict> out;
  out.reserve(committed.size());
  for (const PresetStep& c : committed) {
    if (const char* why = permanent_why(c.step)) {
      out.push_back({true, tag + "permanent (" + why + ")"});
      continue;
    }
    const bool ephemeral_class = has_ephemeral && c.step % *p.ephemeral == 0;
    const bool found_class = p.remove == OlmoRemoval::kAllNonPermanent ||
                             (p.remove == OlmoRemoval::kEphemeralOnly && ephemeral_class);
    if (found_class) {
      if (std::optional<int64_t> y = first_after(saves, c.step)) {
        out.push_back({false, tag + (ephemeral_class ? "ephemeral" : "not permanent") +
                                  ", superseded by the ephemeral save at step " + std::to_string(*y)});
        continue;
      }
    }
    if (c.ephemeral && c.session != 0) {
      if (std::optional<int64_t> y = first_after(saves_of[c.session], c.step)) {
        out.push_back({false, tag + "ephemeral, superseded by the ephemeral save at step " + std::to_string(*y) +
                                  " of the same run"});
        continue;
      }
    }
    if (found_class) {
      out.push_back({true, tag + (ephemeral_class ? "ephemeral" : "not permanent") + ", no newer ephemeral save"});
    } else if (c.ephemeral) {
      out.push_back({true, tag + (c.session != 0 ? "ephemeral, no newer ephemeral save in its run"
                                                 : "ephemeral, its run unknown")});
    } else if (p.remove == OlmoRemoval::kNever) {
      out.push_back({true, tag + "remove=never"});
    } else {
      out.push_back({true, tag + (has_ephemeral ? "not a multiple of ephemeral" : "no ephemeral interval") +
                               ", never removed"});
    }
  }
  return out;
}

// torchtitan CheckpointManager._purge_stale_checkpoints, after every save:
// every step-N entry of the folder sorted by N, all but the keep_latest_k
// newest deleted.
std::vector<PresetVerdict> DecideTorchtitan(const RetentionPreset& p, const std::vector<PresetStep>& committed) {
  const std::string tag = "torchtitan keep_latest_k=" + std::to_string(p.limit) + ": ";
  std::vector<PresetVerdict> out;
  const size_t n = committed.size();
  const size_t keep_from = static_cast<uint64_t>(p.limit) >= n ? 0 : n - static_cast<size_t>(p.limit);
  for (size_t i = 0; i < n; ++i) {
    if (i >= keep_from) out.push_back({true, tag + "among the newest"});
    else out.push_back({false, tag + "older than the " + std::to_string(p.limit) + " newest"});
  }
  return out;
}

// Hugging Face Trainer: the checkpoint the trainer calls best is the newest
// committed step's best_ref (trainer_state.json's best_model_checkpoint, as
// saved in the very checkpoint whose save triggers the rotation).
std::vector<PresetVerdict> DecideHf(const RetentionPreset& p, const std::vector<PresetStep>& committed) {
  const std::string tag = "hf save_total_limit=" + std::to_string(p.limit) + ": ";
  std::vector<std::string> names;
  for (const PresetStep& c : committed) names.push_back(c.name);
  const std::string best = committed.empty() ? "" : committed.back().best_ref;
  const std::vector<bool> deletes = HfRotationDeletes(names, best, p.limit);
  std::vector<PresetVerdict> out;
  for (size_t i = 0; i < committed.size(); ++i) {
    if (deletes[i]) out.push_back({false, tag + "beyond the limit"});
    else if (!best.empty() && names[i] == best) out.push_back({true, tag + "best checkpoint"});
    else out.push_back({true, tag + "within the limit"});
  }
  return out;
}

// RecIS Saver.save: each Saver (one per trainer process) appends the id it
// saved to its own list and, once the list is longer than max_keep, deletes
// the oldest id of that list. Checkpoints of earlier processes are never in
// the list, so never deleted. ckptfs reproduces the list with the session
// that committed each step: the steps of the newest committed step's
// session, keeping its max_keep newest. A session of 0 means ckptfs does
// not know which process committed the step (an idle, rename or explicit
// commit); such a step belongs to no list, and if the newest step is one,
// nothing is removed: deleting a checkpoint RecIS would not delete is worse
// than keeping one it would.
std::vector<PresetVerdict> DecideRecis(const RetentionPreset& p, const std::vector<PresetStep>& committed) {
  const std::string tag = "recis max_keep=" + std::to_string(p.limit) + ": ";
  std::vector<PresetVerdict> out(committed.size());
  const uint64_t session = committed.empty() ? 0 : committed.back().session;
  int64_t own_newer = 0;  // steps of the session newer than the one at hand
  for (size_t k = committed.size(); k-- > 0;) {
    const PresetStep& c = committed[k];
    if (session == 0) {
      out[k] = {true, tag + "the newest step's trainer process is unknown, nothing counted"};
    } else if (c.session != session) {
      out[k] = {true, tag + (c.session == 0 ? "trainer process unknown" : "saved by an earlier trainer process")};
    } else if (own_newer++ < p.limit) {
      out[k] = {true, tag + "among this trainer process's newest"};
    } else {
      out[k] = {false, tag + "older than this trainer process's " + std::to_string(p.limit) + " newest"};
    }
  }
  return out;
}

}  // namespace

// transformers' Trainer._sorted_checkpoints and _rotate_checkpoints:
//  * checkpoints sorted by the step number in their name;
//  * if best_model_checkpoint is set and among them, it is swapped towards
//    the end until it is second to last (a best that is already last stays
//    last), so the newest and the best survive and the best counts inside
//    the limit;
//  * with save_total_limit == 1, a best_model_checkpoint that is set and not
//    the last of the sorted list (present or not) raises the limit to 2, so
//    the newest survives for resuming;
//  * the first len - limit of the list are deleted.
// Not reproduced: at the end of training with save_total_limit == 1 and a
// best, the Trainer also deletes every checkpoint but the best; ckptfs does
// not know that training ended and always keeps the newest committed step.
std::vector<bool> HfRotationDeletes(const std::vector<std::string>& sorted_names, const std::string& best,
                                    int64_t save_total_limit) {
  const size_t n = sorted_names.size();
  std::vector<bool> deletes(n, false);
  if (save_total_limit <= 0) return deletes;  // rotation off
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  if (!best.empty()) {
    auto it = std::find(sorted_names.begin(), sorted_names.end(), best);
    if (it != sorted_names.end()) {
      for (size_t i = static_cast<size_t>(it - sorted_names.begin()); i + 2 < n; ++i) std::swap(order[i], order[i + 1]);
    }
  }
  int64_t limit = save_total_limit;
  if (!best.empty() && save_total_limit == 1 && n > 0 && sorted_names[order.back()] != best) limit = 2;
  if (static_cast<int64_t>(n) <= limit) return deletes;
  const size_t count = n - static_cast<size_t>(limit);
  for (size_t k = 0; k < count; ++k) deletes[order[k]] = true;
  return deletes;
}

std::vector<PresetVerdict> DecideByPreset(const RetentionPreset& preset, const std::vector<PresetStep>& committed) {
  // A hand-built preset the parser would refuse keeps everything rather
  // than being trusted (a max_keep of 0 would delete each step as it lands).
  if (preset.kind != PresetKind::kOlmoCore && preset.limit < 1) {
    return std::vector<PresetVerdict>(committed.size(), PresetVerdict{true, "preset without a valid limit"});
  }
  switch (preset.kind) {
    case PresetKind::kOlmoCore: return DecideOlmoCore(preset, committed);
    case PresetKind::kTorchtitan: return DecideTorchtitan(preset, committed);
    case PresetKind::kHf: return DecideHf(preset, committed);
    case PresetKind::kRecis: return DecideRecis(preset, committed);
  }
  return std::vector<PresetVerdict>(committed.size(), PresetVerdict{true, "unknown preset"});
}

}  // namespace ckptfs
