// Completeness checks per format (see step_completeness.h for the rules).
#include "formats/step_completeness.h"

#include <exception>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "formats/dcp_metadata.h"
#include "formats/safetensors_header.h"

namespace ckptfs {
namespace {

using Verdict = Completeness::Verdict;
using nlohmann::json;

Completeness Make(Verdict v, std::string reason) {
  Completeness c;
  c.verdict = v;
  c.reason = std::move(reason);
  c.lists_every_file = v == Verdict::kComplete;  // the metadata-driven checks; others clear it
  return c;
}

std::string Bytes(uint64_t have, uint64_t need, bool at_least) {
  return " (" + std::to_string(have) + " of " + (at_least ? "at least " : "") +
         std::to_string(need) + " bytes)";
}

// Outcomes of the files of one check: the first broken file wins; otherwise
// the first waiting one is named, with a count of the others.
class Findings {
 public:
  void Wait(std::string reason) {
    if (waiting_++ == 0) first_waiting_ = std::move(reason);
  }
  void Break(std::string reason) {
    if (broken_.empty()) broken_ = std::move(reason);
  }
  bool settled() const { return !broken_.empty() || waiting_ > 0; }
  // Only when settled().
  Completeness Outcome() const {
    if (!broken_.empty()) return Make(Verdict::kBroken, broken_);
    std::string reason = first_waiting_;
    if (waiting_ > 1) {
      reason += " and " + std::to_string(waiting_ - 1) + " more file" + (waiting_ > 2 ? "s" : "");
    }
    return Make(Verdict::kWaiting, reason);
  }

 private:
  std::string broken_;
  std::string first_waiting_;
  size_t waiting_ = 0;
};

Result<std::string> ReadWhole(const StepFiles& step, const std::string& path, uint64_t size,
                              uint64_t max_bytes) {
  if (size > max_bytes) {
    return Status::Error(EFBIG, path + " is " + std::to_string(size) +
                                    " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  Result<std::string> data = step.ReadFile(path, max_bytes);
  if (!data.ok()) return data.status().Annotate("cannot read " + path);
  return data;
}

Result<json> ReadJson(const StepFiles& step, const std::string& path, uint64_t size) {
  Result<std::string> text = ReadWhole(step, path, size, kMaxJsonMetadataBytes);
  if (!text.ok()) return text.status();
  json doc = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::Error(EIO, path + " is not valid JSON");
  return doc;
}

// ---- PyTorch DCP -----------------------------------------------------------

Completeness CheckDcp(const StepFiles& step, const std::string& dir) {
  const std::string meta_path = dir + ".metadata";
  std::optional<uint64_t> meta_size = step.FileSize(meta_path);
  if (!meta_size) return Make(Verdict::kWaiting, "waiting for " + meta_path);
  Result<std::string> bytes = ReadWhole(step, meta_path, *meta_size, kMaxDcpMetadataBytes);
  if (!bytes.ok()) return Make(Verdict::kBroken, bytes.status().message());
  Result<DcpMetadata> meta = ParseDcpMetadata(*bytes, DcpParseOptions{.storage_only = true});
  if (!meta.ok())
    return Make(Verdict::kBroken, "cannot parse " + meta_path + ": " + meta.status().message());

  std::map<std::string, uint64_t> needed;  // path -> bytes its items need
  for (const DcpStorageEntry& e : meta->storage) {
    uint64_t& n = needed[e.relative_path];
    n = std::max(n, e.offset + e.length);  // no overflow: checked by the parser
  }
  Findings findings;
  for (const auto& [rel, need] : needed) {
    std::string path = dir + rel;
    std::optional<uint64_t> size = step.FileSize(path);
    if (!size) {
      findings.Wait("waiting for " + path);
    } else if (*size < need) {
      findings.Wait("waiting for " + path + Bytes(*size, need, false));
    }
  }
  if (findings.settled()) return findings.Outcome();
  Completeness c = Make(Verdict::kComplete, "DCP checkpoint " + meta_path + ": " +
                                                std::to_string(needed.size()) + " files, " +
                                                std::to_string(meta->storage.size()) + " items");
  ListedShards listed{ListedShards::Family::kDcp, dir, {}};
  for (const auto& [rel, need] : needed) listed.paths.insert(dir + rel);
  c.listed_shards.push_back(std::move(listed));
  return c;
}

// ---- OLMo-core safetensors format ------------------------------------------

struct ExpectedTensor {
  std::string key;
  std::string dtype;
  std::optional<uint64_t> numel;  // nullopt: the metadata does not say
};

bool AddTo(uint64_t* acc, uint64_t v) { return !__builtin_add_overflow(*acc, v, acc); }
bool MulTo(uint64_t* acc, uint64_t v) { return !__builtin_mul_overflow(*acc, v, acc); }

// Σ(end - start) over [[s, e], ...] (or a single legacy [s, e]).
Result<std::optional<uint64_t>> NumelOfRanges(const json& ranges) {
  if (ranges.is_null()) return std::optional<uint64_t>();
  if (!ranges.is_array()) return Status::Error(EIO, "flattened offsets are not a list");
  auto range_numel = [](const json& r, uint64_t* acc) {
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_unsigned() || !r[1].is_number_unsigned())
      return false;
    uint64_t s = r[0].get<uint64_t>(), e = r[1].get<uint64_t>();
    return e >= s && AddTo(acc, e - s);
  };
  uint64_t total = 0;
  if (!ranges.empty() && ranges[0].is_number()) {
    if (!range_numel(ranges, &total)) return Status::Error(EIO, "bad flattened offsets");
    return std::optional<uint64_t>(total);
  }
  for (const json& r : ranges) {
    if (!range_numel(r, &total)) return Status::Error(EIO, "bad flattened offsets");
  }
  return std::optional<uint64_t>(total);
}

Result<std::optional<uint64_t>> NumelOfSpec(const json& spec) {
  if (!spec.is_object()) return NumelOfRanges(spec);  // legacy flattened_offsets_per_file value
  auto fo = spec.find("flattened_offsets");
  if (fo != spec.end() && !fo->is_null()) return NumelOfRanges(*fo);
  auto ls = spec.find("local_shape");
  if (ls == spec.end() || ls->is_null()) return std::optional<uint64_t>();
  if (!ls->is_array()) return Status::Error(EIO, "local_shape is not a list");
  uint64_t n = 1;
  for (const json& d : *ls) {
    if (!d.is_number_unsigned() || !MulTo(&n, d.get<uint64_t>()))
      return Status::Error(EIO, "bad local_shape");
  }
  return std::optional<uint64_t>(n);
}

void CheckSafetensorsFile(const StepFiles& step, const std::string& path,
                          const std::vector<ExpectedTensor>& expected, Findings* findings) {
  std::optional<uint64_t> size = step.FileSize(path);
  if (!size) return findings->Wait("waiting for " + path);
  if (*size < 8) return findings->Wait("waiting for " + path + Bytes(*size, 8, true));
  Result<std::string> prefix = step.ReadRange(path, 0, 8);
  if (!prefix.ok() || prefix->size() != 8) return findings->Break("cannot read " + path);
  Result<uint64_t> n = ParseSafetensorsHeaderLength(*prefix);
  if (!n.ok()) return findings->Break(path + ": " + n.status().message());
  if (*size < 8 + *n) return findings->Wait("waiting for " + path + Bytes(*size, 8 + *n, true));
  Result<std::string> text = step.ReadRange(path, 8, *n);
  if (!text.ok() || text->size() != *n) return findings->Break("cannot read the header of " + path);
  Result<SafetensorsHeader> header = ParseSafetensorsHeader(*n, *text);
  if (!header.ok()) return findings->Break(path + ": " + header.status().message());
  if (*size < header->file_size()) {
    return findings->Wait("waiting for " + path + Bytes(*size, header->file_size(), false));
  }
  if (*size > header->file_size()) {
    return findings->Break(path + " is " + std::to_string(*size) + " bytes, its header describes " +
                           std::to_string(header->file_size()));
  }
  for (const ExpectedTensor& want : expected) {
    if (want.numel == uint64_t{0}) continue;  // an empty shard need not be stored
    const SafetensorsTensor* t = header->Find(want.key);
    if (t == nullptr)
      return findings->Break(path + " lacks tensor '" + want.key + "' named in metadata.json");
    if (t->dtype != want.dtype) {
      return findings->Break(path + " holds '" + want.key + "' as " + t->dtype +
                             ", metadata.json says " + want.dtype);
    }
    uint64_t numel = 1;
    for (uint64_t d : t->shape) numel *= d;  // fits: the header check bounded it by the file size
    if (want.numel && numel != *want.numel) {
      return findings->Break(path + " holds " + std::to_string(numel) + " elements of '" +
                             want.key + "', metadata.json says " + std::to_string(*want.numel));
    }
  }
}

Completeness CheckOlmoSafetensors(const StepFiles& step, const std::string& dir,
                                  const json& tensors) {
  const std::string meta_path = dir + "metadata.json";
  auto broken = [&](const std::string& why) {
    return Make(Verdict::kBroken, meta_path + ": " + why);
  };
  if (!tensors.is_object()) return broken("\"tensors\" is not an object");
  std::map<std::string, std::vector<ExpectedTensor>> per_file;
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    const std::string where = "tensor '" + it.key() + "'";
    if (!it->is_object()) return broken(where + " is not an object");
    auto dtype = it->find("dtype");
    if (dtype == it->end() || !dtype->is_string()) return broken(where + " has no dtype");
    auto specs = it->find("shard_spec_per_file");
    if (specs == it->end() || specs->is_null()) specs = it->find("flattened_offsets_per_file");
    if (specs == it->end() || !specs->is_object()) return broken(where + " names no files");
    for (auto f = specs->begin(); f != specs->end(); ++f) {
      if (!IsSafeRelativePath(f.key()))
        return broken(where + " names an unsafe path '" + f.key() + "'");
      Result<std::optional<uint64_t>> numel = NumelOfSpec(*f);
      if (!numel.ok()) return broken(where + " in " + f.key() + ": " + numel.status().message());
      per_file[f.key()].push_back(ExpectedTensor{it.key(), dtype->get<std::string>(), *numel});
    }
  }
  Findings findings;
  for (const auto& [file, expected] : per_file) {
    CheckSafetensorsFile(step, dir + file, expected, &findings);
  }
  if (findings.settled()) return findings.Outcome();
  Completeness c = Make(Verdict::kComplete, "OLMo-core safetensors checkpoint " + meta_path + ": " +
                                                std::to_string(per_file.size()) + " files, " +
                                                std::to_string(tensors.size()) + " tensors");
  ListedShards listed{ListedShards::Family::kSafetensorsRank, dir, {}};
  for (const auto& [file, expected] : per_file) listed.paths.insert(dir + file);
  c.listed_shards.push_back(std::move(listed));
  return c;
}

// `dir`metadata.json: OLMo-core safetensors, Megatron torch_dist, or unknown.
Completeness CheckMetadataJson(const StepFiles& step, const std::string& dir, uint64_t size) {
  const std::string meta_path = dir + "metadata.json";
  Result<json> doc = ReadJson(step, meta_path, size);
  if (!doc.ok()) return Make(Verdict::kBroken, doc.status().message());
  if (!doc->is_object()) return Make(Verdict::kUnknownFormat, meta_path + " is not a JSON object");
  if (auto tensors = doc->find("tensors"); tensors != doc->end()) {
    return CheckOlmoSafetensors(step, dir, *tensors);
  }
  if (auto backend = doc->find("sharded_backend"); backend != doc->end()) {
    if (*backend != "torch_dist") {
      return Make(Verdict::kUnknownFormat,
                  meta_path + ": unsupported Megatron backend " + backend->dump());
    }
    if (!step.FileSize(dir + ".metadata"))
      return Make(Verdict::kWaiting, "waiting for " + dir + ".metadata");
    return CheckDcp(step, dir);
  }
  return Make(Verdict::kUnknownFormat, meta_path + " is neither OLMo-core's nor Megatron's");
}

// ---- OLMo-core trainer -----------------------------------------------------

Completeness CheckOlmoTrainer(const StepFiles& step, uint64_t size) {
  Result<json> doc = ReadJson(step, ".metadata.json", size);
  if (!doc.ok()) return Make(Verdict::kBroken, doc.status().message());
  if (!doc->is_object() || (!doc->contains("version") && !doc->contains("ephemeral"))) {
    return Make(Verdict::kUnknownFormat, ".metadata.json is not OLMo-core checkpoint metadata");
  }
  Completeness dcp = CheckDcp(step, "model_and_optim/");
  if (dcp.verdict != Verdict::kComplete) return dcp;
  if (!step.FileSize("train/rank0.pt"))
    return Make(Verdict::kWaiting, "waiting for train/rank0.pt");
  Completeness done = Make(Verdict::kComplete, "OLMo-core trainer checkpoint; " + dcp.reason);
  done.listed_shards = std::move(dcp.listed_shards);
  const auto eph = doc->find("ephemeral");
  done.ephemeral = eph != doc->end() && eph->is_boolean() && eph->get<bool>();
  return done;
}

// model/ and optim/ of save_model_and_optim_state; nullopt when neither has a
// metadata.json.
std::optional<Completeness> CheckOlmoModelAndOptim(const StepFiles& step) {
  std::optional<Completeness> waiting;
  std::string done;
  std::vector<ListedShards> listed;
  bool any = false;
  for (const std::string dir : {"model/", "optim/"}) {
    Completeness c;
    if (std::optional<uint64_t> size = step.FileSize(dir + "metadata.json")) {
      any = true;
      c = CheckMetadataJson(step, dir, *size);
    } else if (step.FileSize(dir + "rank_0.safetensors")) {
      c = Make(Verdict::kWaiting, "waiting for " + dir + "metadata.json");
    } else {
      continue;
    }
    if (c.verdict == Verdict::kBroken) return c;
    if (c.verdict == Verdict::kWaiting && !waiting) waiting = c;
    if (c.verdict == Verdict::kUnknownFormat) return c;
    if (c.verdict == Verdict::kComplete) {
      done += (done.empty() ? "" : "; ") + c.reason;
      for (auto& l : c.listed_shards) listed.push_back(std::move(l));
    }
  }
  if (!any) return std::nullopt;
  if (waiting) return waiting;
  if (!step.FileSize("optim/metadata.json")) {
    // save_model_and_optim_state writes model/ and only then optim/.
    Completeness c = Make(Verdict::kWaiting, "waiting for optim/metadata.json (model/ is complete)");
    c.layout_only = true;
    return c;
  }
  Completeness complete = Make(Verdict::kComplete, done);
  complete.listed_shards = std::move(listed);
  return complete;
}

// ---- RecIS -----------------------------------------------------------------

Completeness CheckRecis(const StepFiles& step, uint64_t size) {
  constexpr uint64_t kMaxShards = 1 << 20;
  Result<std::string> text = ReadWhole(step, "io_state_count", size, 64);
  if (!text.ok()) return Make(Verdict::kBroken, text.status().message());
  std::string digits = *text;
  while (!digits.empty() && (digits.back() == '\n' || digits.back() == ' ')) digits.pop_back();
  if (digits.empty() || digits.size() > 7 || digits.find_first_not_of("0123456789") != std::string::npos ||
      std::stoull(digits) == 0 || std::stoull(digits) > kMaxShards) {
    return Make(Verdict::kBroken, "io_state_count holds '" + digits + "', not a number of shards");
  }
  const uint64_t shards = std::stoull(digits);
  Findings findings;
  for (uint64_t i = 0; i < shards; ++i) {
    const std::string path = "io_state_" + std::to_string(i) + ".pt";
    if (!step.FileSize(path)) findings.Wait("waiting for " + path);
  }
  if (findings.settled()) return findings.Outcome();
  Completeness c = Make(Verdict::kComplete, "RecIS checkpoint: " + std::to_string(shards) + " io_state shards");
  c.lists_every_file = false;  // model.pt, extra.pt and sparse files are named nowhere
  ListedShards listed{ListedShards::Family::kRecisIoState, "", {}};
  for (uint64_t i = 0; i < shards; ++i)
    listed.paths.insert("io_state_" + std::to_string(i) + ".pt");
  c.listed_shards.push_back(std::move(listed));
  return c;
}

// ---- Hugging Face Trainer --------------------------------------------------

Completeness CheckHfTrainer(const StepFiles& step, uint64_t size) {
  Completeness c = Make(Verdict::kComplete, "Hugging Face Trainer checkpoint (trainer_state.json written last)");
  c.lists_every_file = false;
  // trainer_state.json names no files; it is only read for the best
  // checkpoint (the hf retention preset). Unreadable, it is just a marker.
  Result<json> doc = ReadJson(step, "trainer_state.json", size);
  if (!doc.ok() || !doc->is_object()) return c;
  auto best = doc->find("best_model_checkpoint");
  if (best != doc->end() && best->is_string()) {
    std::string path = best->get<std::string>();
    while (!path.empty() && path.back() == '/') path.pop_back();
    const size_t slash = path.rfind('/');
    c.best_ref = slash == std::string::npos ? path : path.substr(slash + 1);
  }
  return c;
}

Completeness Check(const StepFiles& step) {
  if (step.FileSize(".metadata")) return CheckDcp(step, "");
  if (std::optional<uint64_t> size = step.FileSize(".metadata.json"))
    return CheckOlmoTrainer(step, *size);
  if (std::optional<uint64_t> size = step.FileSize("metadata.json"))
    return CheckMetadataJson(step, "", *size);
  if (std::optional<Completeness> c = CheckOlmoModelAndOptim(step)) return *c;
  if (step.FileSize("model_and_optim/.metadata") || step.FileSize("train/rank0.pt")) {
    return Make(Verdict::kWaiting, "waiting for .metadata.json (OLMo-core writes it last)");
  }
  if (std::optional<uint64_t> size = step.FileSize("io_state_count")) return CheckRecis(step, *size);
  if (std::optional<uint64_t> size = step.FileSize("trainer_state.json")) return CheckHfTrainer(step, *size);
  return Make(Verdict::kUnknownFormat, "no known checkpoint metadata");
}

}  // namespace

namespace {

// name (no '/') as <prefix><digits><middle><digits><suffix>, middle "" meaning
// a single run of digits.
bool NumberedName(std::string_view name, std::string_view prefix, std::string_view middle,
                  std::string_view suffix) {
  auto digits = [&](std::string_view* s) {
    size_t n = 0;
    while (n < s->size() && (*s)[n] >= '0' && (*s)[n] <= '9') n++;
    if (n == 0 || n > 9) return false;
    s->remove_prefix(n);
    return true;
  };
  if (name.substr(0, prefix.size()) != prefix) return false;
  name.remove_prefix(prefix.size());
  if (!digits(&name)) return false;
  if (!middle.empty()) {
    if (name.substr(0, middle.size()) != middle) return false;
    name.remove_prefix(middle.size());
    if (!digits(&name)) return false;
  }
  return name == suffix;
}

}  // namespace

bool IsUnlistedShard(const std::vector<ListedShards>& shards, const std::string& rel_path) {
  for (const ListedShards& l : shards) {
    if (rel_path.compare(0, l.dir.size(), l.dir) != 0) continue;
    const std::string_view name = std::string_view(rel_path).substr(l.dir.size());
    if (name.find('/') != std::string_view::npos) continue;
    bool of_family = false;
    switch (l.family) {
      case ListedShards::Family::kDcp:
        of_family = NumberedName(name, "__", "_", ".distcp");
        break;
      case ListedShards::Family::kSafetensorsRank:
        of_family = NumberedName(name, "rank_", "", ".safetensors");
        break;
      case ListedShards::Family::kRecisIoState:
        of_family = NumberedName(name, "io_state_", "", ".pt");
        break;
    }
    if (of_family && !l.paths.count(rel_path)) return true;
  }
  return false;
}

const char* CompletenessVerdictName(Completeness::Verdict verdict) {
  switch (verdict) {
    case Verdict::kComplete: return "complete";
    case Verdict::kWaiting: return "waiting";
    case Verdict::kBroken: return "broken";
    case Verdict::kUnknownFormat: return "unknown format";
  }
  return "?";
}

Completeness CheckStepCompleteness(const StepFiles& step) {
  try {
    return Check(step);
  } catch (const std::exception& e) {  // nlohmann or allocation failures: report, never escape
    return Make(Verdict::kBroken, std::string("completeness check failed: ") + e.what());
  }
}

}  // namespace ckptfs
