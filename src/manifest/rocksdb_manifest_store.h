// The real manifest store: a RocksDB database in the manifest directory with
// one column family per KeySpace (kMeta lives in "default"; the others are
// named by KeySpaceName). Write() is one rocksdb::WriteBatch, so a batch is
// atomic across key spaces, and WriteOptions::sync gives the durability that
// ManifestStore::Write promises; RocksDB's point-in-time WAL recovery keeps a
// prefix of unsynced batches after a crash.
//
// Thread safety: every method may be called from any thread at once (RocksDB
// serialises writers itself). RocksDB runs its own background threads for
// flushes and compactions, shared process-wide through its default Env.
//
// Only one process may have a manifest open: RocksDB's LOCK file enforces
// it and Open reports a held lock as EBUSY. RocksDB types stay in the .cc.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "manifest/manifest_store.h"

namespace ckptfs {

class RocksDbManifestStore final : public ManifestStore {
 public:
  // Opens (creating if missing, with its parents) the database in dir.
  // EBUSY when another
  // process, or another store in this process, has it open.
  static Result<std::unique_ptr<RocksDbManifestStore>> Open(const std::string& dir);
  // Opens an existing database for reading only: nothing is written (no WAL
  // replay into new files, no LOCK taken), so it works on a full disk;
  // Write fails with EROFS. For fsck's checks when Open reports ENOSPC.
  static Result<std::unique_ptr<RocksDbManifestStore>> OpenReadOnly(const std::string& dir);

  RocksDbManifestStore(const RocksDbManifestStore&) = delete;
  RocksDbManifestStore& operator=(const RocksDbManifestStore&) = delete;
  // Closes the database; unsynced batches are already in the WAL and survive.
  ~RocksDbManifestStore() override;

  Status Write(const ManifestBatch& batch, bool sync) override;
  Result<std::optional<std::string>> Get(KeySpace space, std::string_view key) override;
  Status Scan(KeySpace space, std::string_view prefix, const ScanFn& fn) override;
  Status ScanRange(KeySpace space, std::string_view begin, std::string_view end,
                   const ScanFn& fn) override;

 private:
  struct Rep;  // the rocksdb::DB and its column family handles
  explicit RocksDbManifestStore(std::unique_ptr<Rep> rep);

  std::unique_ptr<Rep> rep_;
};

}  // namespace ckptfs
