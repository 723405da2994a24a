// Headroom for the manifest on the cache filesystem. Backing files and the
// RocksDB manifest share one disk; if file data may take the last free
// byte, the next mkdir, setxattr or commit cannot be recorded. New file data
// is therefore refused with ENOSPC once free space would fall below a
// reserve, which only the manifest (and RocksDB's flushes and compactions)
// may use.
//
// Free space comes from DataStore::Capacity (fstatvfs), asked at most every
// kRecheckNs or every kRecheckBytes of admitted data, never per write: in
// between, the last answer minus what was admitted since is the estimate.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "data/data_store.h"

namespace ckptfs {

// The reserve is the larger of min_bytes and percent of the filesystem's
// size; both 0 turns it off (--metadata-reserve 0).
struct MetadataReserveSpec {
  uint64_t min_bytes = uint64_t{64} << 20;
  double percent = 1.0;
};

class MetadataReserve {
 public:
  static constexpr int64_t kRecheckNs = 100'000'000;           // 100 ms
  static constexpr uint64_t kRecheckBytes = uint64_t{8} << 20;  // 8 MiB

  // data and clock must outlive this object.
  MetadataReserve(MetadataReserveSpec spec, DataStore* data, const Clock* clock);
  MetadataReserve(const MetadataReserve&) = delete;
  MetadataReserve& operator=(const MetadataReserve&) = delete;

  // Admits n more bytes of file data (0: a new file), or ENOSPC when that
  // would leave less free space than the reserve. An error reading the free
  // space admits the data: the write itself will tell.
  Status Admit(uint64_t n);
  // Admit(0) from a fresh look at the filesystem: for a file the kernel
  // will write without the daemon (passthrough), whose bytes no Admit saw.
  Status AdmitFresh();

  // The reserve in bytes as of the last look at the filesystem (0 = off or
  // not looked yet), for status.json.
  uint64_t reserve_bytes() const;
  bool enabled() const { return spec_.min_bytes > 0 || spec_.percent > 0; }

 private:
  void RefreshLocked(int64_t now) REQUIRES(mu_);

  const MetadataReserveSpec spec_;
  DataStore* const data_;
  const Clock* const clock_;

  mutable Mutex mu_;
  bool known_ GUARDED_BY(mu_) = false;  // avail_ holds an answer
  uint64_t avail_ GUARDED_BY(mu_) = 0;  // bytes free at the last look
  uint64_t reserve_ GUARDED_BY(mu_) = 0;
  uint64_t admitted_since_ GUARDED_BY(mu_) = 0;  // bytes admitted since then
  int64_t looked_ns_ GUARDED_BY(mu_) = 0;
};

}  // namespace ckptfs
