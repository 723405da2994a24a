// Decides whether a checkpoint step directory holds every file its metadata
// names, for the commit logic (SPEC.md section 3: "Where the format is known,
// commit checks completeness first"). It only reads: small metadata files
// whole, safetensors headers by range, and file sizes.
//
// Formats, tried in this order (the first marker found decides):
//  1. `.metadata` (PyTorch DCP: torch.distributed.checkpoint, torchtitan
//     step-N, OLMo-core weights-only, Megatron torch_dist): every
//     relative_path in storage_data must exist with size >= the largest
//     offset + length of its items. Larger files are fine (DCP never says how
//     long a file is). Item bytes are not inspected: TORCH_SAVE zips, zstd
//     streams, SAFETENSORS-format items and ByteCheckpoint raw items all look
//     different, and a false "broken" would stop `latest` from moving.
//  2. `.metadata.json` (OLMo-core trainer, FORMATS.md 4.2): a JSON object with
//     "version" or "ephemeral" (CheckpointMetadata). It names no files; the
//     trainer writes it last, after model_and_optim/ (a DCP checkpoint, checked
//     as in 1) and train/rank0.pt, so both must be present. Any other JSON
//     object is kUnknownFormat; invalid JSON is kBroken.
//  3. `metadata.json`: with "tensors", OLMo-core's safetensors format
//     (FORMATS.md 4.1): every file named in a tensor's shard_spec_per_file (or
//     legacy flattened_offsets_per_file) must exist with a valid safetensors
//     header (see safetensors_header.h) and exactly the size the header
//     describes, and must hold each tensor it is named for (non-empty shards)
//     with the same dtype and the numel the offsets imply. With
//     "sharded_backend": "torch_dist" it is Megatron's, whose `.metadata` has
//     not arrived yet: kWaiting. Otherwise kUnknownFormat.
//  4. `model/metadata.json` and/or `optim/metadata.json` (OLMo-core's
//     save_model_and_optim_state into the step dir): each checked as in 3; a
//     group whose rank_0.safetensors exists without its metadata.json waits.
//     A complete model/ without optim/ waits too ("layout only": OLMo-core
//     writes model/ then optim/, but nothing lists optim/'s files).
//  5. OLMo-core trainer layout without `.metadata.json` (`train/rank0.pt` or
//     `model_and_optim/.metadata`): the Checkpointer renames step<N>-tmp
//     into place and only then writes .metadata.json (with save_async even
//     before model_and_optim/ is written): kWaiting for .metadata.json.
//  6. `io_state_count` (RecIS Saver): it holds the number of shards N, and
//     io_state_0.pt .. io_state_<N-1>.pt must exist; other files are not
//     listed anywhere (kComplete without lists_every_file).
//  7. `trainer_state.json` (Hugging Face Trainer, written after every other
//     file of checkpoint-<N>): kComplete without lists_every_file; its
//     best_model_checkpoint is reported as best_ref.
//  Nothing of the above: kUnknownFormat (the daemon commits without a check).
//  Not recognised, so kUnknownFormat: DCP without collectives (`__R.metadata`
//  per rank, no `.metadata`), Hugging Face `*.safetensors` + index dirs,
//  DeepSpeed, ByteCheckpoint's model/ + optimizer/ split.
//
// Verdicts: a missing file, or one shorter than the metadata needs, is
// kWaiting ("waiting for __3_0.distcp", "waiting for __3_0.distcp (1024 of
// 4096 bytes)"), naming the first such file in path order and how many more
// there are. Metadata that cannot be parsed, a named file that contradicts it
// (invalid safetensors header, a tensor missing or of the wrong dtype/numel,
// trailing bytes), an unsafe path, or a failed read is kBroken: a broken step
// is reported, never silently committed. When both apply, kBroken wins. Paths
// in reasons are relative to the step directory.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace ckptfs {

// What the daemon can see of a step directory: regular files by path relative
// to the step dir ("model_and_optim/.metadata"). Implementations must be safe
// to call from the thread running the check; nothing is cached here.
class StepFiles {
 public:
  virtual ~StepFiles() = default;
  virtual std::optional<uint64_t> FileSize(
      const std::string& rel_path) const = 0;  // nullopt = absent
  // The whole file; may fail when it is larger than max_bytes.
  virtual Result<std::string> ReadFile(const std::string& rel_path, uint64_t max_bytes) const = 0;
  // Exactly `length` bytes at `offset`, or an error.
  virtual Result<std::string> ReadRange(const std::string& rel_path, uint64_t offset,
                                        uint64_t length) const = 0;
};

// The shard files a format's metadata names in one directory (SPEC section 9,
// "one save, one step"): a file there whose name is of the family's pattern
// but that the metadata does not name is a shard of another save of the step
// (an abandoned attempt with more ranks), never of this one.
struct ListedShards {
  enum class Family {
    kDcp,              // __<rank>_<n>.distcp, named by .metadata
    kSafetensorsRank,  // rank_<n>.safetensors, named by OLMo-core's metadata.json
    kRecisIoState,     // io_state_<n>.pt, counted by io_state_count
  } family;
  std::string dir;              // relative to the step, "" or ending in '/'
  std::set<std::string> paths;  // relative to the step
};

// Whether rel_path (relative to the step) is a shard of a family in shards,
// in its directory, that its metadata does not name.
bool IsUnlistedShard(const std::vector<ListedShards>& shards, const std::string& rel_path);

struct Completeness {
  enum class Verdict { kComplete, kWaiting, kBroken, kUnknownFormat } verdict;
  // Why: for kWaiting/kBroken the text for user.ckptfs.error and events; for
  // kComplete/kUnknownFormat a short description of what was (not) checked.
  std::string reason;
  // The trainer itself marked the checkpoint ephemeral (OLMo-core's
  // .metadata.json {"ephemeral": true}); retention removes it once a newer
  // step commits, when the run has a retention policy.
  bool ephemeral = false;
  // kComplete: the metadata names every file of the step (DCP, OLMo-core),
  // so the commit needs no wait for stragglers. False for layouts that
  // list nothing (Hugging Face, RecIS beyond io_state, unknown).
  bool lists_every_file = false;
  // kWaiting only because the layout suggests more is coming (no metadata
  // names the missing part); an explicit or idle commit goes ahead anyway.
  bool layout_only = false;
  // The checkpoint the trainer calls best, as this step recorded it
  // (Hugging Face best_model_checkpoint, directory name only); "" = none.
  std::string best_ref;
  // kComplete: the shards the metadata names, per directory and family.
  std::vector<ListedShards> listed_shards;
};

const char* CompletenessVerdictName(Completeness::Verdict verdict);

// Size limits for files read whole; larger ones make the step kBroken.
inline constexpr uint64_t kMaxDcpMetadataBytes = uint64_t{512} << 20;
inline constexpr uint64_t kMaxJsonMetadataBytes = uint64_t{256} << 20;

Completeness CheckStepCompleteness(const StepFiles& step);

}  // namespace ckptfs
