// `ckptfs fsck`: checks an unmounted cache, its manifest against its backing
// files, and plans the fixes that lose no committed data (what it checks and
// why each fix is safe: docs/operations.md, "fsck").
//
// CheckCache only reads. It returns every finding and, beside them, a repair
// plan in groups; RepairCache applies the plan, each group as ONE synced
// manifest batch followed by the backing-file changes that batch allows
// (data is removed only after the manifest forgot it, as recovery does).
// Nothing here knows about FUSE or RocksDB: both functions work on the
// ManifestStore and DataStore seams, so tests run them on in-memory stores.
//
// The caller must hold the cache exclusively (the RocksDB LOCK): a daemon
// changing the manifest meanwhile would make the findings, and the fixes,
// wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/data_store.h"
#include "manifest/manifest_store.h"
#include "remote/object_store.h"
#include "manifest/records.h"

namespace ckptfs {

enum class FsckSeverity {
  kWarning,  // the cache works; something is left over or slightly off
  kError,    // data is lost or at risk, or the cache may not mount
};
const char* FsckSeverityName(FsckSeverity severity);

struct FsckFinding {
  FsckSeverity severity = FsckSeverity::kWarning;
  // Which pass found it: "records", "tree", "data", "crc", "steps".
  std::string check;
  // Where, inside the mount ("run1/step100/model.pt", "." for the root); a
  // backing file that no inode owns is "data/<16 hex digits>", a manifest
  // record that names nothing is "manifest/<key space>/<key in hex>".
  std::string path;
  uint64_t ino = 0;  // 0 when no inode is involved
  std::string problem;
  // What the operator should do when --repair does not fix it.
  std::string advice;
  // What --repair does about it; empty when it leaves it alone.
  std::string repair;
  bool repaired = false;
  // The repair group that fixes it (an index into FsckReport::plan), or -1.
  int group = -1;
};

struct FsckOptions {
  // Recompute the CRC32C of every committed file that has an object record
  // and compare it with the recorded one. Reads all of that data, so it is
  // opt-in (`--crc`).
  bool verify_crc = false;
  // With verify_crc: the remote the cache's mount uses (`--remote URL`).
  // Each committed file's object is read and checked too, so a bad copy is
  // told from a good one: a corrupt local copy is made remote-only (reads
  // fetch it again), a corrupt remote object is queued for re-upload, both
  // corrupt is reported as lost. Files with no local copy are checked in
  // the remote alone. Without it, a local mismatch is only reported.
  ObjectStore* remote = nullptr;
};

// One group of fixes: a manifest batch written synced, then backing files
// removed and (empty ones) created, then the data directory synced.
struct FsckRepairGroup {
  std::string name;  // "records", "tree", "files", "data"
  ManifestBatch batch;
  std::vector<uint64_t> remove_backing;
  std::vector<uint64_t> create_backing;

  bool empty() const { return batch.empty() && remove_backing.empty() && create_backing.empty(); }
};

struct FsckCounts {
  uint64_t inodes = 0;
  uint64_t directories = 0;
  uint64_t files = 0;  // regular files
  uint64_t symlinks = 0;
  uint64_t steps = 0;
  uint64_t committed_steps = 0;
  uint64_t backing_files = 0;
  uint64_t crc_files = 0;  // files whose CRC32C was recomputed (--crc)
  uint64_t crc_bytes = 0;
  uint64_t remote_crc_files = 0;  // remote objects read and checked (--crc --remote)
  uint64_t remote_crc_bytes = 0;
};

struct FsckReport {
  std::vector<FsckFinding> findings;
  FsckCounts counts;
  std::vector<FsckRepairGroup> plan;  // in the order RepairCache applies them
  // Set when --repair must not touch anything (records that do not decode:
  // a fix planned without them could remove what they describe).
  std::string repair_blocked;

  size_t errors() const;
  size_t warnings() const;
  size_t repaired() const;
  // Findings not repaired (yet).
  size_t remaining() const;
};

// Reads the whole manifest and every backing file's size (and, with
// verify_crc, contents). Non-ok only when the stores cannot be read at all or
// the manifest's format version is not one this ckptfs knows (EINVAL).
Result<FsckReport> CheckCache(ManifestStore* manifest, DataStore* data, const FsckOptions& options);

// Applies report->plan in order and marks the findings it fixed. Stops at the
// first group that fails (the groups before it stay applied: each is
// consistent on its own) and returns that failure. Running CheckCache again
// afterwards plans nothing.
Status RepairCache(ManifestStore* manifest, DataStore* data, FsckReport* report);

}  // namespace ckptfs
