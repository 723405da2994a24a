// The seam between the namespace and the remote tier (src/tiering): what
// FileSystem asks of the tier while it serves requests. RemoteTier
// implements it; without a remote, FileSystem has no hooks and never asks.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "control/metrics.h"
#include "data/data_store.h"

namespace ckptfs {

class TierHooks {
 public:
  virtual ~TierHooks() = default;

  // Uploads were queued: wake the uploader. Called with FileSystem::mu_
  // held, so it must only signal (never call back into FileSystem).
  virtual void UploadsQueued() = 0;
  // Other nodes' uploads of a cluster step were noted: the step may now be
  // persisted, so the tier writes its commit object now rather than at its
  // next periodic pass. Called with FileSystem::mu_ held; only signals.
  virtual void StepsMayPersist() {}

  // Makes bytes [offset, offset + n) of a file whose data is not resident
  // local, fetching them from `key` (size bytes) into `file`. Called without
  // FileSystem::mu_, from the reading thread.
  virtual Status EnsureLocal(uint64_t ino, const std::string& key, uint64_t size, BackingFile* file,
                             uint64_t offset, size_t n) = 0;

  // A write is about to add up to n bytes to the cache: with --cache-size
  // set, waits (bounded) for eviction to make room; ENOSPC when none comes.
  // Called without FileSystem::mu_.
  virtual Status WaitForCacheSpace(uint64_t n) = 0;
  // True with --cache-size: writes must reach the daemon to wait for room.
  virtual bool LimitsCacheSize() const { return false; }

  // The data of ino left the cache (evicted or deleted): forget what was
  // fetched of it. Called with FileSystem::mu_ held; takes only the tier's
  // own locks.
  virtual void Forget(uint64_t ino) = 0;
  // The namespace is unloading ino (its step went back to the manifest):
  // forget what the tier keeps of it. False, keeping everything, while a
  // fetch of it has just completed and waits to be marked resident (the
  // step stays for now). *drop_data is set when only part of the file had
  // been fetched: that data is forgotten, so the caller removes it. Called
  // with FileSystem::mu_ held; takes only the tier's own locks.
  virtual bool ReleaseForUnload(uint64_t ino, bool* drop_data) = 0;

  // The tier's part of status.json ("remote", "cache" and "uploads"). Called
  // with FileSystem::mu_ held; takes only the tier's own locks.
  virtual void AddStatus(nlohmann::json* status) = 0;

  // The tier's metrics (uploads, fetches, cache), in Prometheus text.
  // Called with FileSystem::mu_ held; takes only the tier's own locks.
  virtual void AddMetrics(PrometheusWriter* out) = 0;
};

}  // namespace ckptfs
