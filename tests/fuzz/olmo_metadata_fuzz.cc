// libFuzzer target: OLMo-core's metadata.json reader
// (src/formats/olmo_metadata.h).
//
// Input: the text of a metadata.json. Checks:
//  - a failure is EIO with a "metadata.json" message;
//  - tensors are in key order with unique keys, shapes are non-negative and
//    their element count does not overflow;
//  - each tensor's shards are in file-name order, name safe relative paths
//    (IsSafeRelativePath), and either hold ranges with start < end <= numel
//    whose total fits the tensor, or (is_box) a box of the tensor's rank
//    inside it; numel() matches;
//  - `files` is exactly the sorted, de-duplicated set of the shards' files.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "formats/dcp_metadata.h"  // IsSafeRelativePath
#include "formats/olmo_metadata.h"
#include "fuzz_check.h"

namespace ckptfs {
namespace {

void CheckTensor(const OlmoTensor& t, std::set<std::string>* files) {
  const char* key = t.key.c_str();
  unsigned __int128 numel = 1;
  for (int64_t d : t.shape) {
    FUZZ_CHECK(d >= 0, "tensor '%s': negative dimension", key);
    numel *= static_cast<uint64_t>(d);
    if (numel > UINT64_MAX) numel = UINT64_MAX + static_cast<unsigned __int128>(1);
  }
  FUZZ_CHECK(numel <= UINT64_MAX, "tensor '%s': the shape's element count overflows", key);
  for (size_t i = 0; i < t.shards.size(); ++i) {
    const OlmoShardSpec& s = t.shards[i];
    const char* file = s.file.c_str();
    FUZZ_CHECK(IsSafeRelativePath(s.file), "tensor '%s': unsafe path '%s'", key, file);
    if (i > 0) {
      FUZZ_CHECK(t.shards[i - 1].file < s.file, "tensor '%s': shards not in file-name order",
                 key);
    }
    files->insert(s.file);
    unsigned __int128 held = 0;
    if (s.is_box) {
      FUZZ_CHECK(s.ranges.empty(), "tensor '%s' in %s: a box with ranges", key, file);
      FUZZ_CHECK(s.local_shape.size() == t.shape.size() &&
                     s.global_offset.size() == t.shape.size(),
                 "tensor '%s' in %s: box rank differs from the tensor's", key, file);
      held = 1;
      for (size_t d = 0; d < t.shape.size(); ++d) {
        FUZZ_CHECK(s.local_shape[d] >= 0 && s.global_offset[d] >= 0 &&
                       s.global_offset[d] <= t.shape[d] &&
                       s.local_shape[d] <= t.shape[d] - s.global_offset[d],
                   "tensor '%s' in %s: box outside the tensor in dimension %zu", key, file, d);
        held *= static_cast<uint64_t>(s.local_shape[d]);
      }
    } else {
      FUZZ_CHECK(s.local_shape.empty() && s.global_offset.empty(),
                 "tensor '%s' in %s: ranges with a box shape", key, file);
      for (const auto& [start, end] : s.ranges) {
        FUZZ_CHECK(start <= end && end <= numel, "tensor '%s' in %s: range [%llu, %llu) outside",
                   key, file, static_cast<unsigned long long>(start),
                   static_cast<unsigned long long>(end));
        held += end - start;
      }
    }
    FUZZ_CHECK(held <= numel, "tensor '%s' in %s: holds more elements than the tensor", key,
               file);
    FUZZ_CHECK(held == s.numel(), "tensor '%s' in %s: numel() %llu", key, file,
               static_cast<unsigned long long>(s.numel()));
  }
}

}  // namespace
}  // namespace ckptfs

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptfs;
  Result<OlmoMetadata> m = ParseOlmoMetadata(fuzz::AsText(data, size));
  if (!m.ok()) {
    fuzz::CheckError(m.status(), "metadata.json");
    return 0;
  }
  std::set<std::string> files;
  for (size_t i = 0; i < m->tensors.size(); ++i) {
    if (i > 0) {
      FUZZ_CHECK(m->tensors[i - 1].key < m->tensors[i].key, "tensors not in key order at '%s'",
                 m->tensors[i].key.c_str());
    }
    CheckTensor(m->tensors[i], &files);
  }
  FUZZ_CHECK(std::set<std::string>(m->files.begin(), m->files.end()) == files &&
                 m->files.size() == files.size(),
             "files is not the set of the shards' files");
  for (size_t i = 1; i < m->files.size(); ++i) {
    FUZZ_CHECK(m->files[i - 1] < m->files[i], "files not sorted");
  }
  return 0;
}
