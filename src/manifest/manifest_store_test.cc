// The ManifestStore contract, run against both implementations, then what is
// particular to each: RocksDB's persistence and locking, and the memory
// store's crash simulation and failure injection.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/temp_dir_for_test.h"
#include "manifest/memory_manifest_store.h"
#include "manifest/rocksdb_manifest_store.h"

namespace ckptfs {
namespace {

using TempDir = TempDirForTest;

struct MemoryFactory {
  std::unique_ptr<ManifestStore> Open() { return std::make_unique<MemoryManifestStore>(); }
};

struct RocksDbFactory {
  TempDir dir;
  std::unique_ptr<ManifestStore> Open() {
    Result<std::unique_ptr<ManifestStore>> store = OpenRocksDbManifestStore(dir.path() + "/db");
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }
};

template <typename Factory>
class ManifestStoreContractTest : public testing::Test {
 protected:
  void SetUp() override {
    store_ = factory_.Open();
    ASSERT_NE(store_, nullptr);
  }

  void Put(KeySpace space, const std::string& key, const std::string& value, bool sync = false) {
    ManifestBatch batch;
    batch.Put(space, key, value);
    ASSERT_TRUE(store_->Write(batch, sync).ok());
  }

  std::optional<std::string> Get(KeySpace space, const std::string& key) {
    Result<std::optional<std::string>> r = store_->Get(space, key);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::nullopt;
  }

  std::vector<std::pair<std::string, std::string>> ScanAll(KeySpace space,
                                                           std::string_view prefix) {
    std::vector<std::pair<std::string, std::string>> out;
    Status s = store_->Scan(space, prefix, [&](std::string_view k, std::string_view v) {
      out.emplace_back(k, v);
      return true;
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }

  Factory factory_;
  std::unique_ptr<ManifestStore> store_;
};

using Factories = testing::Types<MemoryFactory, RocksDbFactory>;
TYPED_TEST_SUITE(ManifestStoreContractTest, Factories);

TYPED_TEST(ManifestStoreContractTest, PutGetDelete) {
  EXPECT_EQ(this->Get(KeySpace::kInodes, "k"), std::nullopt);
  this->Put(KeySpace::kInodes, "k", "v1");
  EXPECT_EQ(this->Get(KeySpace::kInodes, "k"), "v1");
  this->Put(KeySpace::kInodes, "k", "v2", /*sync=*/true);
  EXPECT_EQ(this->Get(KeySpace::kInodes, "k"), "v2");
  ManifestBatch del;
  del.Delete(KeySpace::kInodes, "k");
  del.Delete(KeySpace::kInodes, "never-there");  // deleting nothing is fine
  ASSERT_TRUE(this->store_->Write(del, false).ok());
  EXPECT_EQ(this->Get(KeySpace::kInodes, "k"), std::nullopt);
}

TYPED_TEST(ManifestStoreContractTest, KeySpacesAreSeparate) {
  for (int i = 0; i < static_cast<int>(KeySpace::kCount); i++) {
    this->Put(static_cast<KeySpace>(i), "same", KeySpaceName(static_cast<KeySpace>(i)));
  }
  for (int i = 0; i < static_cast<int>(KeySpace::kCount); i++) {
    const auto space = static_cast<KeySpace>(i);
    EXPECT_EQ(this->Get(space, "same"), KeySpaceName(space));
    EXPECT_EQ(this->ScanAll(space, "").size(), 1u);
  }
}

TYPED_TEST(ManifestStoreContractTest, BinaryKeysAndEmptyValues) {
  const std::string key("\0\xff\0", 3);
  this->Put(KeySpace::kXattrs, key, "");
  this->Put(KeySpace::kXattrs, std::string("\0", 1), std::string("\0v\0", 3));
  EXPECT_EQ(this->Get(KeySpace::kXattrs, key), "");
  EXPECT_EQ(this->Get(KeySpace::kXattrs, std::string("\0", 1)), std::string("\0v\0", 3));
  EXPECT_EQ(this->Get(KeySpace::kXattrs, std::string("\0\xff", 2)), std::nullopt);
}

TYPED_TEST(ManifestStoreContractTest, BatchOpsApplyInOrder) {
  ManifestBatch batch;
  batch.Put(KeySpace::kDentries, "a", "1");
  batch.Delete(KeySpace::kDentries, "a");
  batch.Delete(KeySpace::kDentries, "b");
  batch.Put(KeySpace::kDentries, "b", "2");
  batch.Put(KeySpace::kDentries, "c", "old");
  batch.Put(KeySpace::kDentries, "c", "new");
  batch.Put(KeySpace::kSteps, "s", "x");
  ASSERT_TRUE(this->store_->Write(batch, true).ok());
  EXPECT_EQ(this->Get(KeySpace::kDentries, "a"), std::nullopt);
  EXPECT_EQ(this->Get(KeySpace::kDentries, "b"), "2");
  EXPECT_EQ(this->Get(KeySpace::kDentries, "c"), "new");
  EXPECT_EQ(this->Get(KeySpace::kSteps, "s"), "x");
}

TYPED_TEST(ManifestStoreContractTest, EmptyBatchIsOk) {
  EXPECT_TRUE(this->store_->Write(ManifestBatch(), false).ok());
  EXPECT_TRUE(this->store_->Write(ManifestBatch(), true).ok());
}

TYPED_TEST(ManifestStoreContractTest, ScanReturnsPrefixInKeyOrder) {
  for (const char* key : {"b2", "a", "b10", "b", "c", "b1", "ba"}) {
    this->Put(KeySpace::kDentries, key, std::string("v") + key);
  }
  using KV = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(this->ScanAll(KeySpace::kDentries, "b"),
            (KV{{"b", "vb"}, {"b1", "vb1"}, {"b10", "vb10"}, {"b2", "vb2"}, {"ba", "vba"}}));
  EXPECT_EQ(this->ScanAll(KeySpace::kDentries, "b1"), (KV{{"b1", "vb1"}, {"b10", "vb10"}}));
  EXPECT_EQ(this->ScanAll(KeySpace::kDentries, "").size(), 7u);
  EXPECT_TRUE(this->ScanAll(KeySpace::kDentries, "bb").empty());
  EXPECT_TRUE(this->ScanAll(KeySpace::kDentries, "d").empty());
  EXPECT_TRUE(this->ScanAll(KeySpace::kInodes, "").empty());
}

TYPED_TEST(ManifestStoreContractTest, ScanPrefixEndingInFF) {
  // The prefix's upper bound cannot just bump its last byte here.
  const std::string p("\x01\xff\xff", 3);
  this->Put(KeySpace::kInodes, std::string("\x01\xff\xfe", 3), "before");
  this->Put(KeySpace::kInodes, p, "exact");
  this->Put(KeySpace::kInodes, p + '\0', "in0");
  this->Put(KeySpace::kInodes, p + "\xff\xff", "inff");
  this->Put(KeySpace::kInodes, std::string("\x02", 1), "after");
  const auto got = this->ScanAll(KeySpace::kInodes, p);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].second, "exact");
  EXPECT_EQ(got[1].second, "in0");
  EXPECT_EQ(got[2].second, "inff");
  EXPECT_EQ(this->ScanAll(KeySpace::kInodes, std::string("\xff", 1)).size(), 0u);
}

TYPED_TEST(ManifestStoreContractTest, ScanRangeReturnsKeysFromBeginToBeforeEnd) {
  for (const char* key : {"a", "b", "b1", "c", "c0", "d"}) this->Put(KeySpace::kObjects, key, key);
  std::vector<std::string> seen;
  auto scan = [&](std::string_view begin, std::string_view end) {
    seen.clear();
    Status s = this->store_->ScanRange(KeySpace::kObjects, begin, end,
                                       [&](std::string_view k, std::string_view v) {
                                         EXPECT_EQ(k, v);
                                         seen.emplace_back(k);
                                         return true;
                                       });
    EXPECT_TRUE(s.ok()) << s.ToString();
    return seen;
  };
  EXPECT_EQ(scan("b", "c0"), (std::vector<std::string>{"b", "b1", "c"}));
  EXPECT_EQ(scan("", "b"), (std::vector<std::string>{"a"}));
  EXPECT_EQ(scan("c0", std::string("\xff", 1)), (std::vector<std::string>{"c0", "d"}));
  EXPECT_TRUE(scan("b2", "b3").empty());
  EXPECT_TRUE(scan("c", "c").empty());
}

TYPED_TEST(ManifestStoreContractTest, ScanStopsWhenTold) {
  for (int i = 0; i < 10; i++) this->Put(KeySpace::kSteps, "k" + std::to_string(i), "v");
  std::vector<std::string> seen;
  Status s = this->store_->Scan(KeySpace::kSteps, "k", [&](std::string_view k, std::string_view) {
    seen.emplace_back(k);
    return seen.size() < 3;
  });
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"k0", "k1", "k2"}));
}

TYPED_TEST(ManifestStoreContractTest, ScanCallbackMayReadTheStore) {
  this->Put(KeySpace::kDentries, "a", "x");
  this->Put(KeySpace::kDentries, "b", "y");
  this->Put(KeySpace::kInodes, "x", "inode-x");
  int found = 0;
  Status s = this->store_->Scan(KeySpace::kDentries, "", [&](std::string_view, std::string_view v) {
    Result<std::optional<std::string>> r = this->store_->Get(KeySpace::kInodes, v);
    if (r.ok() && r->has_value()) found++;
    return true;
  });
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(found, 1);
}

TYPED_TEST(ManifestStoreContractTest, ManyKeys) {
  ManifestBatch batch;
  for (int i = 0; i < 5000; i++) batch.Put(KeySpace::kInodes, "ino" + std::to_string(i), "v");
  ASSERT_TRUE(this->store_->Write(batch, true).ok());
  EXPECT_EQ(this->ScanAll(KeySpace::kInodes, "ino").size(), 5000u);
  EXPECT_EQ(this->ScanAll(KeySpace::kInodes, "ino12").size(), 111u);  // 12, 120-129, 1200-1299
}

TYPED_TEST(ManifestStoreContractTest, ReadersNeverSeeHalfABatch) {
  // Writers update two keys together; a scan must always see them equal.
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 300; i++) {
      ManifestBatch batch;
      batch.Put(KeySpace::kSteps, "pair/a", std::to_string(i));
      batch.Put(KeySpace::kSteps, "pair/b", std::to_string(i));
      EXPECT_TRUE(this->store_->Write(batch, false).ok());
    }
    done = true;
  });
  int torn = 0;
  while (!done) {
    const auto kv = this->ScanAll(KeySpace::kSteps, "pair/");
    if (kv.size() == 2 && kv[0].second != kv[1].second) torn++;
    if (kv.size() == 1) torn++;
  }
  writer.join();
  EXPECT_EQ(torn, 0);
  EXPECT_EQ(this->Get(KeySpace::kSteps, "pair/b"), "299");
}

TYPED_TEST(ManifestStoreContractTest, InvalidKeySpaceIsEinval) {
  ManifestBatch batch;
  batch.Put(KeySpace::kInodes, "ok", "v");
  batch.Put(KeySpace::kCount, "bad", "v");
  EXPECT_EQ(this->store_->Write(batch, true).err(), EINVAL);
  EXPECT_EQ(this->Get(KeySpace::kInodes, "ok"), std::nullopt);  // nothing applied
  EXPECT_EQ(this->store_->Get(KeySpace::kCount, "k").err(), EINVAL);
  EXPECT_EQ(this->store_->Scan(KeySpace::kCount, "", [](auto, auto) { return true; }).err(),
            EINVAL);
}

// ---- RocksDB: persistence, layout, locking ----

Result<std::optional<std::string>> GetFrom(ManifestStore* store, KeySpace space,
                                           const std::string& key) {
  return store->Get(space, key);
}

TEST(RocksDbManifestStoreTest, ReopenKeepsSyncedAndUnsyncedData) {
  TempDir dir;
  const std::string path = dir.path() + "/nested/db";  // parents are created too
  {
    Result<std::unique_ptr<ManifestStore>> store = OpenRocksDbManifestStore(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ManifestBatch batch;
    batch.Put(KeySpace::kMeta, "format", "1");
    batch.Put(KeySpace::kInodes, "a", "synced");
    ASSERT_TRUE((*store)->Write(batch, true).ok());
    ManifestBatch later;
    later.Put(KeySpace::kInodes, "b", "unsynced");
    later.Delete(KeySpace::kInodes, "a");
    later.Put(KeySpace::kSteps, "s", "x");
    ASSERT_TRUE((*store)->Write(later, false).ok());
  }
  Result<std::unique_ptr<ManifestStore>> store = OpenRocksDbManifestStore(path);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(*GetFrom(store->get(), KeySpace::kMeta, "format"), "1");
  EXPECT_EQ(*GetFrom(store->get(), KeySpace::kInodes, "a"), std::nullopt);
  EXPECT_EQ(*GetFrom(store->get(), KeySpace::kInodes, "b"), "unsynced");
  EXPECT_EQ(*GetFrom(store->get(), KeySpace::kSteps, "s"), "x");
}

TEST(RocksDbManifestStoreTest, OneColumnFamilyPerKeySpace) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  ASSERT_TRUE(OpenRocksDbManifestStore(path).ok());
  std::vector<std::string> families;
  ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &families).ok());
  std::sort(families.begin(), families.end());
  EXPECT_EQ(families,
            (std::vector<std::string>{"checksums", "default", "dentries", "gc", "inodes", "objects", "remote_gc",
                                      "steps", "uploads", "xattrs"}));
}

TEST(RocksDbManifestStoreTest, SecondOpenInThisProcessIsBusy) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  Result<std::unique_ptr<ManifestStore>> first = OpenRocksDbManifestStore(path);
  ASSERT_TRUE(first.ok());
  Result<std::unique_ptr<ManifestStore>> second = OpenRocksDbManifestStore(path);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.err(), EBUSY) << second.status().ToString();
  EXPECT_NE(second.status().message().find("manifest " + path + " is in use by this process"),
            std::string::npos);
  // The failed open must not disturb the first one.
  ManifestBatch batch;
  batch.Put(KeySpace::kInodes, "k", "v");
  EXPECT_TRUE((*first)->Write(batch, true).ok());
  first->reset();
  EXPECT_TRUE(OpenRocksDbManifestStore(path).ok());
}

TEST(RocksDbManifestStoreTest, LockHeldByAnotherProcessIsBusy) {
  TempDir dir;
  const std::string path = dir.path() + "/db";
  ASSERT_TRUE(OpenRocksDbManifestStore(path).ok());  // creates db/LOCK

  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const std::string lock_path = path + "/LOCK";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Only async-signal-safe calls here: RocksDB threads exist in the parent.
    // RocksDB locks with fcntl(F_SETLK), so take the same kind of lock.
    ::close(ready[0]);
    ::close(release[1]);  // or the read below would never see end of file
    const int fd = ::open(lock_path.c_str(), O_RDWR);
    struct flock fl{};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    const char ok = (fd >= 0 && ::fcntl(fd, F_SETLK, &fl) == 0) ? 'y' : 'n';
    (void)!::write(ready[1], &ok, 1);
    char c;
    (void)!::read(release[0], &c, 1);  // returns when the parent closes its end
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(release[0]);
  char locked = 0;
  ASSERT_EQ(::read(ready[0], &locked, 1), 1);
  EXPECT_EQ(locked, 'y');

  Result<std::unique_ptr<ManifestStore>> store = OpenRocksDbManifestStore(path);
  EXPECT_EQ(store.err(), EBUSY) << store.status().ToString();
  EXPECT_NE(store.status().message().find("in use by another process"), std::string::npos);

  ::close(release[1]);
  ::close(ready[0]);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(OpenRocksDbManifestStore(path).ok());  // the lock died with the child
}

TEST(RocksDbManifestStoreTest, OpenOnAFileFails) {
  TempDir dir;
  const std::string path = dir.path() + "/file";
  { std::ofstream(path) << "not a database"; }
  Result<std::unique_ptr<ManifestStore>> store = OpenRocksDbManifestStore(path);
  EXPECT_FALSE(store.ok());
  EXPECT_NE(store.err(), EBUSY);
}

// ---- MemoryManifestStore: crash simulation and failure injection ----

class MemoryManifestStoreTest : public testing::Test {
 protected:
  void Put(const std::string& key, const std::string& value, bool sync) {
    ManifestBatch batch;
    batch.Put(KeySpace::kInodes, key, value);
    ASSERT_TRUE(store_.Write(batch, sync).ok());
  }
  void Delete(const std::string& key, bool sync) {
    ManifestBatch batch;
    batch.Delete(KeySpace::kInodes, key);
    ASSERT_TRUE(store_.Write(batch, sync).ok());
  }
  std::optional<std::string> Get(const std::string& key) {
    Result<std::optional<std::string>> r = store_.Get(KeySpace::kInodes, key);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : std::nullopt;
  }

  MemoryManifestStore store_;
};

TEST_F(MemoryManifestStoreTest, CrashDropsUnsyncedKeepsSynced) {
  Put("synced", "1", true);
  Put("unsynced", "2", false);
  EXPECT_EQ(store_.unsynced_batches(), 1u);
  EXPECT_EQ(Get("unsynced"), "2");  // visible before the crash
  store_.SimulateCrash(0);
  EXPECT_EQ(Get("synced"), "1");
  EXPECT_EQ(Get("unsynced"), std::nullopt);
  EXPECT_EQ(store_.unsynced_batches(), 0u);
}

TEST_F(MemoryManifestStoreTest, CrashUndoesUnsyncedDeletesAndOverwrites) {
  Put("a", "old", true);
  Put("b", "keep", true);
  Put("a", "new", false);
  Delete("b", false);
  store_.SimulateCrash(0);
  EXPECT_EQ(Get("a"), "old");
  EXPECT_EQ(Get("b"), "keep");
}

TEST_F(MemoryManifestStoreTest, CrashKeepsAPrefixOfUnsyncedBatches) {
  Put("1", "a", false);
  Put("2", "b", false);
  Delete("1", false);
  Put("3", "c", false);
  EXPECT_EQ(store_.unsynced_batches(), 4u);
  store_.SimulateCrash(2);
  EXPECT_EQ(Get("1"), "a");  // the delete was the third batch: lost
  EXPECT_EQ(Get("2"), "b");
  EXPECT_EQ(Get("3"), std::nullopt);

  // What survived is now durable: a second crash keeps it.
  Put("4", "d", false);
  store_.SimulateCrash(0);
  EXPECT_EQ(Get("1"), "a");
  EXPECT_EQ(Get("2"), "b");
  EXPECT_EQ(Get("4"), std::nullopt);
}

TEST_F(MemoryManifestStoreTest, KeepingMoreThanLoggedKeepsEverything) {
  Put("1", "a", false);
  Put("2", "b", false);
  store_.SimulateCrash(100);
  EXPECT_EQ(Get("1"), "a");
  EXPECT_EQ(Get("2"), "b");
}

TEST_F(MemoryManifestStoreTest, SyncedWriteMakesEarlierBatchesDurable) {
  Put("1", "a", false);
  Delete("0", false);
  Put("2", "b", false);
  ASSERT_EQ(store_.unsynced_batches(), 3u);
  ASSERT_TRUE(store_.Write(ManifestBatch(), true).ok());  // an empty synced batch counts
  EXPECT_EQ(store_.unsynced_batches(), 0u);
  Put("3", "c", true);
  Put("4", "d", false);
  store_.SimulateCrash(0);
  EXPECT_EQ(Get("1"), "a");
  EXPECT_EQ(Get("2"), "b");
  EXPECT_EQ(Get("3"), "c");
  EXPECT_EQ(Get("4"), std::nullopt);
}

TEST_F(MemoryManifestStoreTest, CrashAppliesToEveryKeySpace) {
  ManifestBatch batch;
  batch.Put(KeySpace::kDentries, "d", "1");
  batch.Put(KeySpace::kSteps, "s", "1");
  ASSERT_TRUE(store_.Write(batch, false).ok());
  store_.SimulateCrash(0);
  EXPECT_EQ(*store_.Get(KeySpace::kDentries, "d"), std::nullopt);
  EXPECT_EQ(*store_.Get(KeySpace::kSteps, "s"), std::nullopt);
}

TEST_F(MemoryManifestStoreTest, FailWritesAfterFailsAndAppliesNothing) {
  store_.FailWritesAfter(1, ENOSPC);
  Put("first", "ok", false);
  ManifestBatch batch;
  batch.Put(KeySpace::kInodes, "second", "x");
  batch.Delete(KeySpace::kInodes, "first");
  EXPECT_EQ(store_.Write(batch, true).err(), ENOSPC);
  EXPECT_EQ(store_.Write(batch, false).err(), ENOSPC);  // and every later one
  EXPECT_EQ(Get("first"), "ok");
  EXPECT_EQ(Get("second"), std::nullopt);
  EXPECT_EQ(store_.unsynced_batches(), 1u);  // failed writes are not logged

  store_.ClearFailure();
  EXPECT_TRUE(store_.Write(batch, true).ok());
  EXPECT_EQ(Get("second"), "x");
  EXPECT_EQ(Get("first"), std::nullopt);
}

TEST_F(MemoryManifestStoreTest, FailWritesAfterZeroFailsTheNextWrite) {
  store_.FailWritesAfter(0, 0);  // errno 0 still fails, as EIO
  ManifestBatch batch;
  batch.Put(KeySpace::kInodes, "k", "v");
  EXPECT_EQ(store_.Write(batch, false).err(), EIO);
  EXPECT_EQ(Get("k"), std::nullopt);
}

TEST(KeySpaceTest, Names) {
  EXPECT_STREQ(KeySpaceName(KeySpace::kMeta), "meta");
  EXPECT_STREQ(KeySpaceName(KeySpace::kInodes), "inodes");
  EXPECT_STREQ(KeySpaceName(KeySpace::kDentries), "dentries");
  EXPECT_STREQ(KeySpaceName(KeySpace::kXattrs), "xattrs");
  EXPECT_STREQ(KeySpaceName(KeySpace::kSteps), "steps");
}

}  // namespace
}  // namespace ckptfs
