// Recognises checkpoint step directories by name. The pattern must match the
// whole name and have exactly one capture group: the step number.
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "common/status.h"

namespace ckptfs {

// step100, step-100, step_100, ckpt_100, checkpoint-100, global_step100,
// iter_0000100 (SPEC section 2).
inline constexpr const char* kDefaultStepPattern =
    R"((?:step|step-|step_|ckpt_|checkpoint-|global_step|iter_)([0-9]+))";

class StepPattern {
 public:
  // EINVAL with the regex error when the pattern does not compile or does
  // not have exactly one capture group.
  static Result<StepPattern> Compile(const std::string& pattern);

  // The step number when name is a checkpoint directory name.
  std::optional<int64_t> Match(const std::string& name) const;
  const std::string& source() const { return source_; }

 private:
  StepPattern(std::string source, std::regex re) : source_(std::move(source)), re_(std::move(re)) {}
  std::string source_;
  std::regex re_;
};

// The one parser of a step's path relative to the mount root ("run/step100")
// as a record from the bucket gives it (a cluster step record, a commit
// object): its components, or EINVAL naming what is wrong (an empty, "." or
// ".." component, a NUL, a component over 255 bytes, or the control
// directory as the first). Matching the step pattern is the caller's.
Result<std::vector<std::string>> SplitStepPath(const std::string& step_path);

// Marker files whose close (or rename into place) anywhere inside a step asks
// for the step's commit; the completeness check then decides (DCP .metadata,
// OLMo-core .metadata.json and model/ + optim/ metadata.json, Hugging Face
// Trainer's trainer_state.json, which it writes after every other file).
inline const std::vector<std::string> kDefaultCommitMarkers = {".metadata", ".metadata.json", "metadata.json",
                                                               "trainer_state.json"};

// Run index files: a trainer's own pointer to its checkpoints, kept in the run
// directory beside the steps and written after a save is complete (DeepSpeed
// `latest` holds "global_step100", RecIS `checkpoint` lists
// checkpoint names, Megatron-LM `latest_checkpointed_iteration.txt` holds the
// iteration). Closing or renaming one into place commits the writing steps it
// names: the trainer has just declared them complete.
inline const std::vector<std::string> kRunIndexFiles = {"latest", "checkpoint",
                                                        "latest_checkpointed_iteration.txt"};

}  // namespace ckptfs
