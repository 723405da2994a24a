// RocksDB behind the ManifestStore seam; see rocksdb_manifest_store.h.
#include "manifest/rocksdb_manifest_store.h"

#include <fcntl.h>
#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <filesystem>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace ckptfs {

const char* KeySpaceName(KeySpace space) {
  switch (space) {
    case KeySpace::kMeta:
      return "meta";
    case KeySpace::kInodes:
      return "inodes";
    case KeySpace::kDentries:
      return "dentries";
    case KeySpace::kXattrs:
      return "xattrs";
    case KeySpace::kSteps:
      return "steps";
    case KeySpace::kGc:
      return "gc";
    case KeySpace::kUploads:
      return "uploads";
    case KeySpace::kObjects:
      return "objects";
    case KeySpace::kRemoteGc:
      return "remote_gc";
    case KeySpace::kChecksums:
      return "checksums";
    case KeySpace::kCount:
      break;
  }
  return "invalid";
}

namespace {

constexpr size_t kSpaces = static_cast<size_t>(KeySpace::kCount);

// RocksDB insists on a "default" column family; the singletons use it rather
// than leaving it empty beside a "meta" one.
std::string ColumnFamilyName(KeySpace space) {
  return space == KeySpace::kMeta ? rocksdb::kDefaultColumnFamilyName : KeySpaceName(space);
}

rocksdb::Slice ToSlice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }

Status ToStatus(const rocksdb::Status& s, const std::string& context) {
  if (s.ok()) return Status::Ok();
  const int err = s.IsNoSpace() ? ENOSPC : EIO;
  return Status::Error(err, context + ": " + s.ToString());
}

// The smallest key greater than every key starting with prefix, or "" when
// there is none (the prefix is empty or all 0xff).
std::string PrefixUpperBound(std::string_view prefix) {
  std::string bound(prefix);
  while (!bound.empty() && static_cast<uint8_t>(bound.back()) == 0xff) bound.pop_back();
  if (!bound.empty()) bound.back() = static_cast<char>(static_cast<uint8_t>(bound.back()) + 1);
  return bound;
}

Status BadSpace(KeySpace space) {
  return Status::Error(EINVAL, "no manifest key space " + std::to_string(static_cast<int>(space)));
}

// RocksDB's own info LOG, written with plain write(2) whose errors are
// ignored. RocksDB 7.8's file logger goes through a WritableFileWriter that,
// after one failed append (ENOSPC on a full cache disk), fails an assert on
// the next line it logs: in Debian's build, asserts are on, so the daemon
// (and every later open of the manifest, which logs first thing) aborted.
// A lost log line costs nothing; the file is cut back to empty past kMaxBytes
// so it cannot fill the disk either.
class ManifestInfoLog final : public rocksdb::Logger {
 public:
  static constexpr off_t kMaxBytes = 8 << 20;

  explicit ManifestInfoLog(const std::string& path)
      : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL),
        fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)) {
    struct stat st{};
    if (fd_ >= 0 && ::fstat(fd_, &st) == 0) size_ = st.st_size;
  }
  ~ManifestInfoLog() override {
    if (fd_ >= 0) ::close(fd_);
  }

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    if (fd_ < 0) return;
    char line[1024];
    const int n = std::vsnprintf(line, sizeof(line) - 1, format, ap);
    if (n < 0) return;
    size_t len = std::min(static_cast<size_t>(n), sizeof(line) - 2);
    line[len++] = '\n';
    MutexLock lock(&mu_);
    if (size_ + static_cast<off_t>(len) > kMaxBytes && ::ftruncate(fd_, 0) == 0) size_ = 0;
    const ssize_t w = ::write(fd_, line, len);
    if (w > 0) size_ += w;
  }

 private:
  const int fd_;
  // Also keeps each truncate-and-append to fd_ whole across RocksDB's threads.
  Mutex mu_;
  off_t size_ GUARDED_BY(mu_) = 0;
};

rocksdb::DBOptions MakeDbOptions(const std::string& dir) {
  rocksdb::DBOptions options;
  options.info_log = std::make_shared<ManifestInfoLog>(dir + "/LOG");
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  // The manifest is small; its info LOGs and WALs should not fill the cache
  // disk. With several column families a WAL lives until every family that
  // wrote to it is flushed; the cap forces those flushes.
  options.keep_log_file_num = 4;
  options.max_log_file_size = 16 << 20;
  options.max_total_wal_size = 64 << 20;
  options.max_background_jobs = 2;
  // Memory: each of the ten families has its own memtables, and a soak of
  // many small steps grew the daemon by ~2.6 MB a round up to ~140 MB as they
  // filled towards their flush size. One budget for all families' memtables
  // (the largest is flushed when it is reached) bounds that.
  options.db_write_buffer_size = 8 << 20;
  return options;
}

rocksdb::ColumnFamilyOptions MakeColumnFamilyOptions() {
  rocksdb::ColumnFamilyOptions options;
  options.write_buffer_size = 4 << 20;
  // One block cache for every family (without it each family's table
  // factory makes its own 8 MB cache); the manifest's working set is the
  // records of live inodes, which recovery reads once.
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(8 << 20);
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

}  // namespace

struct RocksDbManifestStore::Rep {
  std::string dir;
  std::unique_ptr<rocksdb::DB> db;
  std::array<rocksdb::ColumnFamilyHandle*, kSpaces> spaces{};
  // Every handle Open returned, including families a newer version may have
  // added that this one does not use; all must be destroyed before the DB.
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  // A write failed: RocksDB holds a background error and refuses writes
  // until it recovers (by itself for ENOSPC, once its SstFileManager sees
  // free space, or through Resume()). Atomic: read and set without a lock.
  std::atomic<bool> write_failed{false};
  bool read_only = false;  // OpenReadOnly

  ~Rep() {
    if (!db) return;
    // A clean close leaves the memtables in table files: the next open then
    // replays no log (about a tenth of a remount's time, issue 29). A failed
    // flush loses nothing; the log still holds every batch.
    if (!read_only && !write_failed.load()) {
      rocksdb::FlushOptions flush;
      flush.wait = true;
      (void)db->Flush(flush, handles);
    }
    for (rocksdb::ColumnFamilyHandle* h : handles) (void)db->DestroyColumnFamilyHandle(h);
    // Close releases the LOCK. Its status changes nothing for us: synced
    // batches are already durable and unsynced ones are in the WAL either way.
    (void)db->Close();
  }

  // nullptr for a KeySpace outside the enum (a caller's bug, reported as EINVAL).
  rocksdb::ColumnFamilyHandle* Family(KeySpace space) const {
    const auto i = static_cast<size_t>(space);
    return i < kSpaces ? spaces[i] : nullptr;
  }
};

Result<std::unique_ptr<RocksDbManifestStore>> RocksDbManifestStore::OpenReadOnly(const std::string& dir) {
  rocksdb::DBOptions db_options = MakeDbOptions(dir);
  db_options.create_if_missing = false;
  db_options.create_missing_column_families = false;
  // Even the info LOG stays untouched: the disk may be full.
  db_options.info_log = std::make_shared<ManifestInfoLog>("/dev/null");
  const rocksdb::ColumnFamilyOptions cf_options = MakeColumnFamilyOptions();
  std::vector<std::string> existing;
  rocksdb::Status s = rocksdb::DB::ListColumnFamilies(db_options, dir, &existing);
  if (!s.ok()) return ToStatus(s, "list the column families of manifest " + dir);
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (size_t i = 0; i < kSpaces; i++) {
    const std::string name = ColumnFamilyName(static_cast<KeySpace>(i));
    if (std::find(existing.begin(), existing.end(), name) == existing.end()) {
      return Status::Error(EINVAL, "manifest " + dir + " has no key space " + name);
    }
    descriptors.emplace_back(name, cf_options);
  }
  auto rep = std::make_unique<Rep>();
  rep->dir = dir;
  rep->read_only = true;
  rocksdb::DB* db = nullptr;
  s = rocksdb::DB::OpenForReadOnly(db_options, dir, descriptors, &rep->handles, &db);
  if (!s.ok()) return ToStatus(s, "open manifest " + dir + " read-only");
  rep->db.reset(db);
  for (size_t i = 0; i < kSpaces; i++) rep->spaces[i] = rep->handles[i];
  return std::unique_ptr<RocksDbManifestStore>(new RocksDbManifestStore(std::move(rep)));
}

Result<std::unique_ptr<RocksDbManifestStore>> RocksDbManifestStore::Open(const std::string& dir) {
  // RocksDB creates the directory itself but not its parents.
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::FromErrno(ec.value(), "create manifest directory " + dir);

  const rocksdb::DBOptions db_options = MakeDbOptions(dir);
  const rocksdb::ColumnFamilyOptions cf_options = MakeColumnFamilyOptions();

  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (size_t i = 0; i < kSpaces; i++) {
    descriptors.emplace_back(ColumnFamilyName(static_cast<KeySpace>(i)), cf_options);
  }
  // RocksDB refuses to open a database without naming all its families. A
  // missing database fails ListColumnFamilies; then ours are all there is.
  std::vector<std::string> existing;
  if (rocksdb::DB::ListColumnFamilies(db_options, dir, &existing).ok()) {
    for (const std::string& name : existing) {
      const bool known = std::any_of(descriptors.begin(), descriptors.end(),
                                     [&](const auto& d) { return d.name == name; });
      if (!known) descriptors.emplace_back(name, cf_options);
    }
  }

  auto rep = std::make_unique<Rep>();
  rep->dir = dir;
  rocksdb::DB* db = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(db_options, dir, descriptors, &rep->handles, &db);
  if (!s.ok()) {
    // RocksDB reports a held LOCK as an IOError naming the LOCK file: "While
    // lock file: <dir>/LOCK: Resource temporarily unavailable" when another
    // process holds it, "lock hold by current process" when this one does.
    const std::string msg = s.ToString();
    if (s.IsIOError() && msg.find("/LOCK") != std::string::npos) {
      if (msg.find("While lock file") != std::string::npos) {
        return Status::Error(EBUSY,
                             "manifest " + dir + " is in use by another process (" + msg + ")");
      }
      if (msg.find("lock hold by current process") != std::string::npos) {
        return Status::Error(EBUSY, "manifest " + dir + " is in use by this process (" + msg + ")");
      }
    }
    return ToStatus(s, "open manifest " + dir);
  }
  rep->db.reset(db);
  for (size_t i = 0; i < kSpaces; i++) rep->spaces[i] = rep->handles[i];
  return std::unique_ptr<RocksDbManifestStore>(new RocksDbManifestStore(std::move(rep)));
}

RocksDbManifestStore::RocksDbManifestStore(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}

RocksDbManifestStore::~RocksDbManifestStore() = default;

Status RocksDbManifestStore::Write(const ManifestBatch& batch, bool sync) {
  if (batch.empty() && !sync) return Status::Ok();
  if (rep_->read_only) return Status::Error(EROFS, "manifest " + rep_->dir + " is open read-only");
  if (rep_->write_failed.load()) {
    // Resume() returns at once when RocksDB already recovered by itself and
    // "busy" while its own recovery waits for space; either way the write
    // below reports the background error if there still is one.
    (void)rep_->db->Resume();
  }
  rocksdb::WriteBatch wb;
  // An empty synced batch makes every earlier one durable. Not SyncWAL():
  // on a WAL whose last append failed it trips the same assert as the
  // info LOG (see ManifestInfoLog); a synced write goes through the error
  // checks first. The log-data record changes no key.
  if (batch.empty()) (void)wb.PutLogData("sync");
  for (const ManifestBatch::Op& op : batch.ops()) {
    rocksdb::ColumnFamilyHandle* cf = rep_->Family(op.space);
    if (cf == nullptr) return BadSpace(op.space);
    const rocksdb::Status s = op.value ? wb.Put(cf, op.key, *op.value) : wb.Delete(cf, op.key);
    if (!s.ok()) return ToStatus(s, "build manifest batch");
  }
  rocksdb::WriteOptions options;
  options.sync = sync;
  const rocksdb::Status s = rep_->db->Write(options, &wb);
  rep_->write_failed.store(!s.ok());
  return ToStatus(s, "write manifest " + rep_->dir);
}

Result<std::optional<std::string>> RocksDbManifestStore::Get(KeySpace space,
                                                             std::string_view key) {
  if (rep_->Family(space) == nullptr) return BadSpace(space);
  std::string value;
  const rocksdb::Status s =
      rep_->db->Get(rocksdb::ReadOptions(), rep_->Family(space), ToSlice(key), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return ToStatus(s, std::string("read manifest ") + KeySpaceName(space));
  return std::optional<std::string>(std::move(value));
}

Status RocksDbManifestStore::Scan(KeySpace space, std::string_view prefix, const ScanFn& fn) {
  if (rep_->Family(space) == nullptr) return BadSpace(space);
  // The upper bound lets RocksDB stop at the end of the prefix without a
  // prefix extractor; the starts_with check below is what guarantees it.
  const std::string bound = PrefixUpperBound(prefix);
  const rocksdb::Slice bound_slice(bound);
  rocksdb::ReadOptions options;
  if (!bound.empty()) options.iterate_upper_bound = &bound_slice;

  std::unique_ptr<rocksdb::Iterator> it(rep_->db->NewIterator(options, rep_->Family(space)));
  for (it->Seek(ToSlice(prefix)); it->Valid(); it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    if (!key.starts_with(prefix)) break;
    if (!fn(key, std::string_view(it->value().data(), it->value().size()))) break;
  }
  return ToStatus(it->status(), std::string("scan manifest ") + KeySpaceName(space));
}

Status RocksDbManifestStore::ScanRange(KeySpace space, std::string_view begin, std::string_view end,
                                       const ScanFn& fn) {
  if (rep_->Family(space) == nullptr) return BadSpace(space);
  const rocksdb::Slice bound(ToSlice(end));
  rocksdb::ReadOptions options;
  options.iterate_upper_bound = &bound;
  std::unique_ptr<rocksdb::Iterator> it(rep_->db->NewIterator(options, rep_->Family(space)));
  for (it->Seek(ToSlice(begin)); it->Valid(); it->Next()) {
    if (!fn(std::string_view(it->key().data(), it->key().size()),
            std::string_view(it->value().data(), it->value().size()))) {
      break;
    }
  }
  return ToStatus(it->status(), std::string("scan manifest ") + KeySpaceName(space));
}

Result<std::unique_ptr<ManifestStore>> OpenRocksDbManifestStore(const std::string& dir) {
  Result<std::unique_ptr<RocksDbManifestStore>> store = RocksDbManifestStore::Open(dir);
  if (!store.ok()) return store.status();
  return std::unique_ptr<ManifestStore>(std::move(store).value());
}

}  // namespace ckptfs
