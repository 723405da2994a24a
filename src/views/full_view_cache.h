// The daemon's built `.full/` views, by format root directory inode, least
// recently used dropped past a capacity: a dropped view is rebuilt from the
// metadata on its next use (node numbers come out the same). Failures are
// kept too, so a malformed checkpoint is parsed once, not on every lookup.
// Thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "views/full_view.h"

namespace ckptfs {

class FullViewCache {
 public:
  // A cached outcome: a view, nullptr (the directory holds no checkpoint a
  // view knows), or the error building it gave.
  using Outcome = Result<std::shared_ptr<const FullView>>;

  explicit FullViewCache(size_t capacity = 64) : capacity_(capacity) {}

  std::optional<Outcome> Get(uint64_t dir_ino);
  void Put(uint64_t dir_ino, Outcome outcome);
  // Whether a view of dir_ino is held (its recency unchanged).
  bool Contains(uint64_t dir_ino);
  // True the first time it is called for key: errors are reported once.
  bool FirstReport(uint64_t key);

 private:
  const size_t capacity_;
  Mutex mu_;
  std::list<std::pair<uint64_t, Outcome>> lru_ GUARDED_BY(mu_);  // newest first
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, Outcome>>::iterator> by_dir_
      GUARDED_BY(mu_);
  std::set<uint64_t> reported_ GUARDED_BY(mu_);
};

}  // namespace ckptfs
