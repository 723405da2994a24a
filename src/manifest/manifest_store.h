// The manifest's storage seam: an ordered key-value store with separate key
// spaces and atomic, optionally synced batches. RocksDbManifestStore is the
// real one (one column family per key space); MemoryManifestStore keeps
// everything in memory and can simulate a crash that drops unsynced batches,
// as LevelDB's fault_injection_test does. Nothing above this interface sees
// RocksDB types.
#pragma once

#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ckptfs {

enum class KeySpace : int {
  kMeta = 0,   // format version and other singletons
  kInodes,     // ino -> InodeRecord
  kDentries,   // (parent ino, name) -> DentryRecord
  kXattrs,     // (ino, name) -> value
  kSteps,      // step directory ino -> StepRecord
  kGc,         // ino -> "" : backing files of removed steps still to delete
  kUploads,    // ino -> UploadRecord : files whose contents must reach the remote
  kObjects,    // ino -> ObjectRecord : files whose contents the remote holds
  kRemoteGc,   // RemoteGcKey -> "" : remote objects still to delete
  kChecksums,  // ino -> ChecksumRecord : size and CRC32C a fast-path writer reported
  kCount,
};

const char* KeySpaceName(KeySpace space);

// An ordered list of puts and deletes applied atomically by Write().
class ManifestBatch {
 public:
  struct Op {
    KeySpace space;
    std::string key;
    std::optional<std::string> value;  // nullopt = delete
  };

  void Put(KeySpace space, std::string key, std::string value) {
    ops_.push_back(Op{space, std::move(key), std::move(value)});
  }
  void Delete(KeySpace space, std::string key) {
    ops_.push_back(Op{space, std::move(key), std::nullopt});
  }
  void Append(const ManifestBatch& other) {
    ops_.insert(ops_.end(), other.ops_.begin(), other.ops_.end());
  }
  // The same, taking other's ops (an rm -rf's tens of thousands are not copied).
  void Append(ManifestBatch&& other) {
    if (ops_.empty()) {
      ops_.swap(other.ops_);
    } else {
      ops_.insert(ops_.end(), std::make_move_iterator(other.ops_.begin()),
                  std::make_move_iterator(other.ops_.end()));
    }
    other.ops_.clear();
  }
  bool empty() const { return ops_.empty(); }
  size_t size() const { return ops_.size(); }
  const std::vector<Op>& ops() const { return ops_; }

 private:
  std::vector<Op> ops_;
};

// Every method is safe to call from several threads at once.
class ManifestStore {
 public:
  virtual ~ManifestStore() = default;

  // Applies every op of the batch or none. With sync = true the batch, and
  // every batch written before it, survives a crash or power loss once this
  // returns ok. Unsynced batches survive a process crash (kill -9) but may be
  // lost on power loss; if any is lost, every later one is lost too (a prefix
  // of the write order survives).
  virtual Status Write(const ManifestBatch& batch, bool sync) = 0;

  // nullopt when the key is absent.
  virtual Result<std::optional<std::string>> Get(KeySpace space, std::string_view key) = 0;

  // Calls fn(key, value) for every key starting with prefix, in key order.
  // fn returns false to stop early.
  using ScanFn = std::function<bool(std::string_view key, std::string_view value)>;
  virtual Status Scan(KeySpace space, std::string_view prefix, const ScanFn& fn) = 0;
  // The same for every key in [begin, end): one pass over a run of
  // neighbouring records (a step's inodes) instead of a lookup each.
  virtual Status ScanRange(KeySpace space, std::string_view begin, std::string_view end,
                           const ScanFn& fn) = 0;
};

// Opens (creating if needed) the RocksDB manifest in dir.
Result<std::unique_ptr<ManifestStore>> OpenRocksDbManifestStore(const std::string& dir);

}  // namespace ckptfs
