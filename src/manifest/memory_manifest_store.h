// An in-memory ManifestStore for tests, with fault injection in the manner of
// LevelDB's fault_injection_test. It keeps two states: the visible one that
// Get and Scan read, and the durable one that a power loss would leave. A
// batch written with sync = false lands in the visible state and in a log of
// unsynced batches; a sync = true write makes everything before it durable.
// SimulateCrash() then plays a power loss that keeps only a prefix of the
// unsynced log, as RocksDB's point-in-time WAL recovery does.
//
// Thread safety: every method may be called from any thread. Scan calls fn
// without holding the lock, over a copy of the matching entries taken at the
// start, so fn may call back into the store (and sees a snapshot).
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "manifest/manifest_store.h"

namespace ckptfs {

class MemoryManifestStore final : public ManifestStore {
 public:
  MemoryManifestStore() = default;
  MemoryManifestStore(const MemoryManifestStore&) = delete;
  MemoryManifestStore& operator=(const MemoryManifestStore&) = delete;

  Status Write(const ManifestBatch& batch, bool sync) override;
  Result<std::optional<std::string>> Get(KeySpace space, std::string_view key) override;
  Status Scan(KeySpace space, std::string_view prefix, const ScanFn& fn) override;
  Status ScanRange(KeySpace space, std::string_view begin, std::string_view end,
                   const ScanFn& fn) override;

  // Power loss: the visible state becomes the durable state plus the first
  // keep_unsynced unsynced batches (all of them when there are fewer), and
  // that becomes durable, as it would be after recovery. The log is cleared.
  void SimulateCrash(size_t keep_unsynced);
  // Batches written with sync = false since the last synced write or crash
  // (empty ones change nothing and are not counted).
  size_t unsynced_batches() const;

  // The (n+1)-th and every later Write from now on fails with err and
  // applies nothing, until ClearFailure(). Reads keep working.
  void FailWritesAfter(int n, int err);
  void ClearFailure();

 private:
  using Space = std::map<std::string, std::string, std::less<>>;
  using State = std::vector<Space>;  // indexed by KeySpace

  static void Apply(const ManifestBatch& batch, State* state);

  mutable Mutex mu_;
  State visible_ GUARDED_BY(mu_){static_cast<size_t>(KeySpace::kCount)};
  State durable_ GUARDED_BY(mu_){static_cast<size_t>(KeySpace::kCount)};
  std::vector<ManifestBatch> unsynced_ GUARDED_BY(mu_);
  // Writes still allowed before failing with fail_err_; -1 = no failure set.
  int writes_before_failure_ GUARDED_BY(mu_) = -1;
  int fail_err_ GUARDED_BY(mu_) = 0;
};

}  // namespace ckptfs
