// Property tests: each preset against an executable model of its trainer's
// own checkpoint code (../shared/seeds and transformers' Trainer), written
// here independently of trainer_presets.cc. Each model runs a training
// loop over many random configurations (seeded std::mt19937), with several
// runs or processes, crashes and resumes; every checkpoint it saves is also
// committed, in order, to a model of ckptfs that runs PlanRetention with the
// preset after each commit (all steps committed and persisted, so the
// safety rules never interfere). Where both have acted on the same saves,
// the steps ckptfs keeps must be exactly the trainer's checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "retention/retention_planner.h"
#include "retention/trainer_presets.h"

namespace ckptfs {
namespace {

constexpr int kCases = 300;

std::string Show(const std::set<int64_t>& s) {
  std::ostringstream out;
  out << "{";
  for (int64_t x : s) out << (x == *s.begin() ? "" : " ") << x;
  out << "}";
  return out.str();
}

// ckptfs as the presets see it: each saved step commits, then the run's
// plan is applied, as FileSystemCore::ApplyRetentionLocked does in the commit.
class CkptfsModel {
 public:
  explicit CkptfsModel(const std::string& preset) {
    Status st = SetPolicyRule("retention", preset, &policy_);
    EXPECT_TRUE(st.ok()) << preset << ": " << st.message();
  }

  void Commit(int64_t step, const std::string& name, uint64_t session = 0, const std::string& best_ref = "",
              bool ephemeral = false) {
    StepFacts f;
    f.id = next_id_++;
    f.step = step;
    f.phase = StepPhase::kCommitted;
    f.committed_at_s = static_cast<int64_t>(f.id);
    f.persisted = true;
    f.name = name;
    f.session = session;
    f.best_ref = best_ref;
    f.ephemeral = ephemeral;
    steps_.push_back(f);
    std::set<uint64_t> gone;
    for (const StepDecision& d : PlanRetention(policy_, steps_, 0)) {
      if (!d.keep) gone.insert(d.id);
    }
    std::erase_if(steps_, [&](const StepFacts& s) { return gone.count(s.id) != 0; });
  }

  std::set<int64_t> Kept() const {
    std::set<int64_t> out;
    for (const StepFacts& s : steps_) out.insert(s.step);
    return out;
  }

 private:
  RetentionPolicy policy_;
  std::vector<StepFacts> steps_;
  uint64_t next_id_ = 1;
};

int64_t Uniform(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}
bool Chance(std::mt19937& rng, double p) { return std::bernoulli_distribution(p)(rng); }

// ---------------------------------------------------------------------------
// OLMo-core: CheckpointerCallback (olmo-core-checkpointer-callback.txt),
// synchronous saves. One object per training run, as the callback is; the
// save folder outlives the runs.
struct OlmoConfig {
  int64_t save_interval = 0;
  std::optional<int64_t> ephemeral_save_interval;
  std::vector<int64_t> fixed_steps;
  OlmoRemoval remove = OlmoRemoval::kEphemeralOnly;
  std::optional<int64_t> ephemeral_cooldown;
  std::optional<bool> pre_train_checkpoint;
};

class OlmoCallbackModel {
 public:
  // on_save(step, ephemeral): the checkpoint is complete, its
  // .metadata.json says whether it is ephemeral.
  OlmoCallbackModel(const OlmoConfig& c, std::set<int64_t>* folder, std::function<void(int64_t, bool)> on_save)
      : c_(c), folder_(folder), on_save_(std::move(on_save)) {}

  int64_t step = 0;
  bool checkpoint_loaded = false;
  bool block_ephemeral_checkpoints = false;
  bool saved = false;  // set by each save; the driver compares after the hook

  const std::deque<int64_t>& ephemeral_checkpoints() const { return ephemeral_; }
  const std::vector<int64_t>& to_remove() const { return to_remove_; }

  void pre_train() {
    if (step == 0 && (c_.pre_train_checkpoint == true || (!c_.pre_train_checkpoint && !checkpoint_loaded))) {
      save_checkpoint(false);
    }
    if (c_.remove != OlmoRemoval::kNever) {
      std::vector<int64_t> found;
      for (int64_t s : *folder_) {  // find_checkpoints; sorted by step number below
        if (s == 0 || s > step || Fixed(s) || s % c_.save_interval == 0) continue;
        if ((c_.remove == OlmoRemoval::kEphemeralOnly && c_.ephemeral_save_interval &&
             s % *c_.ephemeral_save_interval == 0) ||
            c_.remove == OlmoRemoval::kAllNonPermanent) {
          found.push_back(s);
        }
      }
      std::sort(found.begin(), found.end());
      ephemeral_.assign(found.begin(), found.end());
    }
  }

  void post_train_batch() {
    remove_old_checkpoints();  // synchronous saves: never a checkpoint pending
    if (Fixed(step)) {
      save_checkpoint(false);
    } else if (step % c_.save_interval == 0) {
      save_checkpoint(false);
    } else if (c_.ephemeral_save_interval && step % *c_.ephemeral_save_interval == 0 &&
               !block_ephemeral_checkpoints) {
      if (c_.ephemeral_cooldown && step - latest_checkpoint_step_ < *c_.ephemeral_cooldown) return;
      ephemeral_.push_back(save_checkpoint(true));
      while (ephemeral_.size() > 1) {
        to_remove_.push_back(ephemeral_.front());
        ephemeral_.pop_front();
      }
    }
  }

  void post_train() {
    if (step > latest_checkpoint_step_) save_checkpoint(false);
  }

 private:
  bool Fixed(int64_t s) const {
    return std::find(c_.fixed_steps.begin(), c_.fixed_steps.end(), s) != c_.fixed_steps.end();
  }
  int64_t save_checkpoint(bool ephemeral) {
    folder_->insert(step);
    latest_checkpoint_step_ = step;
    saved = true;
    on_save_(step, ephemeral);
    return step;
  }
  void remove_old_checkpoints() {
    for (int64_t s : to_remove_) folder_->erase(s);
    to_remove_.clear();
  }

  OlmoConfig c_;
  std::set<int64_t>* folder_;
  std::function<void(int64_t, bool)> on_save_;
  int64_t latest_checkpoint_step_ = -1;
  std::deque<int64_t> ephemeral_;
  std::vector<int64_t> to_remove_;
};

std::string OlmoPresetText(const OlmoConfig& c) {
  RetentionPreset p;
  p.kind = PresetKind::kOlmoCore;
  p.save_interval = c.save_interval;
  p.ephemeral = c.ephemeral_save_interval;
  p.fixed = c.fixed_steps;
  std::sort(p.fixed.begin(), p.fixed.end());
  p.fixed.erase(std::unique(p.fixed.begin(), p.fixed.end()), p.fixed.end());
  p.remove = c.remove;
  return FormatRetentionPreset(p);
}

TEST(PresetPropertyTest, OlmoCoreMatchesTheCheckpointerCallback) {
  std::mt19937 rng(20240611);
  int compared = 0;
  for (int n = 0; n < kCases; ++n) {
    OlmoConfig c;
    c.save_interval = Uniform(rng, 2, 40);
    if (Chance(rng, 0.85)) c.ephemeral_save_interval = Uniform(rng, 1, c.save_interval - 1);
    for (int64_t k = Uniform(rng, 0, 3); k > 0; --k) c.fixed_steps.push_back(Uniform(rng, 1, 200));
    c.remove = std::array{OlmoRemoval::kEphemeralOnly, OlmoRemoval::kAllNonPermanent,
                          OlmoRemoval::kNever}[Uniform(rng, 0, 2)];
    if (c.ephemeral_save_interval && Chance(rng, 0.2)) c.ephemeral_cooldown = Uniform(rng, 1, 2 * *c.ephemeral_save_interval);
    if (Chance(rng, 0.3)) c.pre_train_checkpoint = Chance(rng, 0.5);
    const std::string preset = OlmoPresetText(c);
    SCOPED_TRACE("case " + std::to_string(n) + ": " + preset);

    std::set<int64_t> folder;  // the save folder, across runs
    CkptfsModel ckptfs(preset);
    // Removals a run scheduled but never ran (it ended or crashed right
    // after the ephemeral save that scheduled them). OLMo-core finds them
    // again at the next pre_train and removes them at its next ephemeral
    // save (with remove=never it leaves them behind); ckptfs removed them at
    // the commit. Inherent timing difference: they count as removed in the
    // comparison, and the model must show the trainer still means to remove
    // them.
    std::set<int64_t> scheduled_by_an_earlier_run;
    int64_t max_steps = 0;
    for (int run = 0, runs = static_cast<int>(Uniform(rng, 1, 4)); run < runs; ++run) {
      // Each run is one trainer process: its own session.
      const uint64_t session = static_cast<uint64_t>(run) + 1;
      OlmoCallbackModel cb(c, &folder, [&](int64_t step, bool ephemeral) {
        ckptfs.Commit(step, "step" + std::to_string(step), session, "", ephemeral);
      });
      if (!folder.empty()) {  // resume from the newest checkpoint
        cb.step = *folder.rbegin();
        cb.checkpoint_loaded = true;
      }
      cb.block_ephemeral_checkpoints = Chance(rng, 0.15);
      max_steps = std::max(max_steps, cb.step) + Uniform(rng, 1, 120);
      // A crash between two batches. A first run crashes only after its
      // first permanent save: resumed at step 0 with pre_train_checkpoint
      // set, OLMo-core would save step 0 a second time into the same
      // directory, which is no retention question.
      const int64_t crash_from = cb.step == 0 ? c.save_interval : cb.step;
      const int64_t crash_at =  // -1: no crash
          crash_from <= max_steps && Chance(rng, 0.3) ? Uniform(rng, crash_from, max_steps) : -1;

      auto compare = [&](const char* where) {
        if (!cb.saved) return;
        cb.saved = false;
        for (auto it = scheduled_by_an_earlier_run.begin(); it != scheduled_by_an_earlier_run.end();) {
          if (!folder.count(*it)) {
            it = scheduled_by_an_earlier_run.erase(it);
            continue;
          }
          // Tracked as ephemeral and not the newest such: the next
          // ephemeral save schedules it.
          const auto& eph = cb.ephemeral_checkpoints();
          const bool tracked = eph.size() > 1 && std::find(eph.begin(), eph.end() - 1, *it) != eph.end() - 1;
          const bool scheduled = std::count(cb.to_remove().begin(), cb.to_remove().end(), *it) != 0;
          if (c.remove != OlmoRemoval::kNever) {
            EXPECT_TRUE(tracked || scheduled) << "the resumed trainer lost track of " << *it;
          }
          ++it;
        }
        std::set<int64_t> trainer = folder;
        for (int64_t s : cb.to_remove()) trainer.erase(s);
        for (int64_t s : scheduled_by_an_earlier_run) trainer.erase(s);
        ASSERT_EQ(Show(ckptfs.Kept()), Show(trainer)) << where << " at step " << cb.step;
        ++compared;
      };

      cb.pre_train();
      compare("pre_train");
      bool crashed = false;
      while (cb.step < max_steps) {
        if (cb.step == crash_at) {
          crashed = true;
          break;
        }
        ++cb.step;
        cb.post_train_batch();
        compare("post_train_batch");
        if (HasFatalFailure()) return;
      }
      if (!crashed) {
        cb.post_train();
        compare("post_train");
      }
      if (HasFatalFailure()) return;
      for (int64_t s : cb.to_remove()) scheduled_by_an_earlier_run.insert(s);
    }
  }
  EXPECT_GT(compared, 5000);
}

// ---------------------------------------------------------------------------
// torchtitan: CheckpointManager.save and _purge_stale_checkpoints
// (torchtitan-checkpoint.txt), synchronous saves, interval_type steps.
TEST(PresetPropertyTest, TorchtitanMatchesPurgeStaleCheckpoints) {
  std::mt19937 rng(7);
  int compared = 0;
  for (int n = 0; n < kCases; ++n) {
    const int64_t keep_latest_k = Uniform(rng, 1, 6);
    const int64_t interval = Uniform(rng, 1, 20);
    const std::string preset = "torchtitan:keep_latest_k=" + std::to_string(keep_latest_k);
    SCOPED_TRACE("case " + std::to_string(n) + ": " + preset + ", interval " + std::to_string(interval));
    std::set<int64_t> folder;
    CkptfsModel ckptfs(preset);
    auto save = [&](int64_t step) {
      folder.insert(step);  // dcp.save into step-N
      // _purge_stale_checkpoints: every step-N entry sorted, all but the
      // keep_latest_k newest deleted.
      std::vector<int64_t> discovered(folder.begin(), folder.end());
      for (size_t i = 0; i + static_cast<size_t>(keep_latest_k) < discovered.size(); ++i) folder.erase(discovered[i]);
      ckptfs.Commit(step, "step-" + std::to_string(step));
      ASSERT_EQ(Show(ckptfs.Kept()), Show(folder)) << "after saving step " << step;
      ++compared;
    };
    int64_t training_steps = 0;
    for (int run = 0, runs = static_cast<int>(Uniform(rng, 1, 4)); run < runs; ++run) {
      // load(): the newest step-N with a .metadata; else a fresh start,
      // sometimes from a seed checkpoint (step 0, saved with force).
      int64_t step = folder.empty() ? 0 : *folder.rbegin();
      if (folder.empty() && Chance(rng, 0.3)) save(0);
      training_steps = std::max(training_steps, step) + Uniform(rng, 1, 100);
      const int64_t stop = Chance(rng, 0.3) ? Uniform(rng, step, training_steps) : training_steps;  // a crash
      while (step < stop) {
        ++step;
        const bool force = step == training_steps;
        if (force || step % interval == 0) save(step);
        if (HasFatalFailure()) return;
      }
    }
  }
  EXPECT_GT(compared, 2000);
}

// ---------------------------------------------------------------------------
// Hugging Face Trainer (transformers): evaluation tracks the best metric,
// _save_checkpoint saves the model, sets best_model_checkpoint to the best
// step's checkpoint if that directory exists, writes trainer_state.json (the
// last file: the step commits with the state's best_model_checkpoint), then
// _rotate_checkpoints. Resuming restores the state from the newest
// checkpoint's trainer_state.json. Not modelled: the deletion at the end of
// training with save_total_limit == 1 (see HfRotationDeletes).
struct HfState {
  int64_t global_step = 0;
  std::optional<double> best_metric;
  int64_t best_global_step = 0;
  std::string best_model_checkpoint;  // "" = None
};

// transformers' _sorted_checkpoints + _rotate_checkpoints, on the folder.
void HfRotate(std::map<int64_t, HfState>* folder, const HfState& state, int64_t save_total_limit) {
  if (save_total_limit <= 0) return;
  std::vector<std::string> checkpoints_sorted;
  for (const auto& [step, _] : *folder) checkpoints_sorted.push_back("checkpoint-" + std::to_string(step));
  const std::string& best = state.best_model_checkpoint;
  if (!best.empty()) {
    auto it = std::find(checkpoints_sorted.begin(), checkpoints_sorted.end(), best);
    if (it != checkpoints_sorted.end()) {
      const int64_t best_model_index = it - checkpoints_sorted.begin();
      for (int64_t i = best_model_index; i < static_cast<int64_t>(checkpoints_sorted.size()) - 2; ++i) {
        std::swap(checkpoints_sorted[i], checkpoints_sorted[i + 1]);
      }
    }
  }
  if (static_cast<int64_t>(checkpoints_sorted.size()) <= save_total_limit) return;
  int64_t limit = save_total_limit;
  if (!best.empty() && save_total_limit == 1 && checkpoints_sorted.back() != best) limit = 2;
  const int64_t to_delete = std::max<int64_t>(0, static_cast<int64_t>(checkpoints_sorted.size()) - limit);
  for (int64_t i = 0; i < to_delete; ++i) {
    folder->erase(std::stoll(checkpoints_sorted[i].substr(std::string("checkpoint-").size())));
  }
}

TEST(PresetPropertyTest, HfMatchesRotateCheckpoints) {
  std::mt19937 rng(42);
  int compared = 0, with_best = 0;
  for (int n = 0; n < kCases; ++n) {
    const int64_t limit = Uniform(rng, 1, 4);
    const int64_t save_steps = Uniform(rng, 1, 10);
    const bool track_best = Chance(rng, 0.7);  // metric_for_best_model set
    const int64_t eval_steps = Chance(rng, 0.6) ? save_steps : Uniform(rng, 1, 10);
    const std::string preset = "hf:save_total_limit=" + std::to_string(limit);
    SCOPED_TRACE("case " + std::to_string(n) + ": " + preset + ", save_steps " + std::to_string(save_steps) +
                 ", eval_steps " + std::to_string(eval_steps) + (track_best ? ", best" : ""));
    std::map<int64_t, HfState> folder;  // checkpoint-N -> its trainer_state.json
    CkptfsModel ckptfs(preset);
    int64_t max_steps = 0;
    for (int run = 0, runs = static_cast<int>(Uniform(rng, 1, 4)); run < runs; ++run) {
      HfState state = folder.empty() ? HfState{} : folder.rbegin()->second;  // resume_from_checkpoint
      max_steps = std::max(max_steps, state.global_step) + Uniform(rng, 1, 80);
      const int64_t stop = Chance(rng, 0.3) ? Uniform(rng, state.global_step, max_steps) : max_steps;
      while (state.global_step < stop) {
        const int64_t step = ++state.global_step;
        if (track_best && step % eval_steps == 0) {
          const double metric = static_cast<double>(Uniform(rng, 0, 1000));  // eval loss: lower is better
          if (!state.best_metric || metric < *state.best_metric) {
            state.best_metric = metric;
            state.best_global_step = step;
          }
        }
        if (step % save_steps != 0) continue;
        const std::string name = "checkpoint-" + std::to_string(step);
        folder[step] = state;  // save_model: the directory exists now
        if (state.best_global_step && folder.count(state.best_global_step)) {
          state.best_model_checkpoint = "checkpoint-" + std::to_string(state.best_global_step);
        }
        folder[step] = state;  // trainer_state.json, the last file: the step commits
        ckptfs.Commit(step, name, 0, state.best_model_checkpoint);
        HfRotate(&folder, state, limit);
        std::set<int64_t> trainer;
        for (const auto& [s, _] : folder) trainer.insert(s);
        ASSERT_EQ(Show(ckptfs.Kept()), Show(trainer)) << "after saving " << name << ", best '"
                                                     << state.best_model_checkpoint << "'";
        ++compared;
        with_best += !state.best_model_checkpoint.empty() && state.best_model_checkpoint != name;
      }
    }
  }
  EXPECT_GT(compared, 1500);
  EXPECT_GT(with_best, 300);  // the best is often not the newest checkpoint
}

// ---------------------------------------------------------------------------
// RecIS: Saver.save keeps a per-process list of the ids it saved and
// deletes the oldest of them beyond max_keep; CheckpointManager.step saves
// ckpt_<global_step> every save_interval steps; restore() loads the newest
// id of the run directory's `checkpoint` index (recis-saver.txt). Several
// processes one after the other, each a session of its own.
TEST(PresetPropertyTest, RecisMatchesTheSaversOwnList) {
  std::mt19937 rng(99);
  int compared = 0, spared = 0;
  for (int n = 0; n < kCases; ++n) {
    const int64_t max_keep = Uniform(rng, 1, 5);
    const int64_t save_interval = Uniform(rng, 1, 10);
    const std::string preset = "recis:max_keep=" + std::to_string(max_keep);
    SCOPED_TRACE("case " + std::to_string(n) + ": " + preset + ", save_interval " + std::to_string(save_interval));
    std::set<int64_t> folder;
    std::vector<std::string> index;  // the `checkpoint` file's lines
    CkptfsModel ckptfs(preset);
    for (uint64_t process = 1, processes = static_cast<uint64_t>(Uniform(rng, 1, 5)); process <= processes; ++process) {
      const uint64_t session = 1000 + process;
      std::deque<std::string> checkpoint_version_list;  // this Saver's own
      int64_t global_step = index.empty() ? 0 : std::stoll(index.back().substr(5));  // restore()
      auto saver_save = [&](const std::string& ckpt_id) {
        const int64_t step = std::stoll(ckpt_id.substr(5));
        folder.insert(step);
        index.push_back(ckpt_id);
        checkpoint_version_list.push_back(ckpt_id);
        if (static_cast<int64_t>(checkpoint_version_list.size()) > max_keep) {
          const std::string to_remove = checkpoint_version_list.front();
          folder.erase(std::stoll(to_remove.substr(5)));
          std::erase(index, to_remove);
          checkpoint_version_list.pop_front();
        }
        ckptfs.Commit(step, ckpt_id, session);
        ASSERT_EQ(Show(ckptfs.Kept()), Show(folder)) << "process " << process << " saved " << ckpt_id;
        ++compared;
      };
      const int64_t steps = Uniform(rng, 0, 60);
      for (int64_t i = 0; i < steps; ++i) {
        ++global_step;  // CheckpointManager.step()
        if (global_step % save_interval == 0) saver_save("ckpt_" + std::to_string(global_step));
        if (HasFatalFailure()) return;
      }
      // A final CheckpointManager.save() where the last step did not save
      // (the same id twice would be a second save into one checkpoint).
      if (steps > 0 && global_step % save_interval != 0 && Chance(rng, 0.5)) saver_save("ckpt_" + std::to_string(global_step));
      if (HasFatalFailure()) return;
    }
    // Earlier processes' checkpoints beyond max_keep stay, as with RecIS.
    spared += static_cast<int>(folder.size()) > max_keep;
  }
  EXPECT_GT(compared, 1000);
  EXPECT_GT(spared, 50);
}

}  // namespace
}  // namespace ckptfs
