// The DataStore contract, run against both implementations, then what is
// particular to each: PosixDataStore's file naming and directory listing,
// and MemoryDataStore's crash simulation.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "common/temp_dir_for_test.h"
#include "data/memory_data_store.h"
#include "data/posix_data_store.h"

namespace ckptfs {
namespace {

using TempDir = TempDirForTest;

struct MemoryFactory {
  std::unique_ptr<DataStore> Open() { return std::make_unique<MemoryDataStore>(); }
};

struct PosixFactory {
  TempDir dir;
  std::unique_ptr<DataStore> Open() {
    Result<std::unique_ptr<DataStore>> store = OpenPosixDataStore(dir.path() + "/data");
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }
};

std::unique_ptr<BackingFile> MustOpen(DataStore* store, uint64_t ino, bool create) {
  Result<std::unique_ptr<BackingFile>> f = store->Open(ino, create);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? std::move(f).value() : nullptr;
}

void Write(BackingFile* f, const std::string& data, uint64_t offset) {
  Result<size_t> n = f->PWrite(data.data(), data.size(), offset);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, data.size());
}

// Reads up to n bytes at offset.
std::string Read(BackingFile* f, size_t n, uint64_t offset) {
  std::string buf(n, '?');
  Result<size_t> got = f->PRead(buf.data(), n, offset);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  buf.resize(got.ok() ? *got : 0);
  return buf;
}

uint64_t SizeOf(BackingFile* f) {
  Result<uint64_t> size = f->Size();
  EXPECT_TRUE(size.ok());
  return size.ok() ? *size : ~uint64_t{0};
}

std::vector<uint64_t> SortedList(DataStore* store) {
  Result<std::vector<uint64_t>> inos = store->List();
  EXPECT_TRUE(inos.ok()) << inos.status().ToString();
  std::vector<uint64_t> out = inos.ok() ? *inos : std::vector<uint64_t>{};
  std::sort(out.begin(), out.end());
  return out;
}

template <typename Factory>
class DataStoreContractTest : public testing::Test {
 protected:
  void SetUp() override {
    store_ = factory_.Open();
    ASSERT_NE(store_, nullptr);
  }
  Factory factory_;
  std::unique_ptr<DataStore> store_;
};

using Factories = testing::Types<MemoryFactory, PosixFactory>;
TYPED_TEST_SUITE(DataStoreContractTest, Factories);

TYPED_TEST(DataStoreContractTest, OpenAbsentWithoutCreateIsEnoent) {
  Result<std::unique_ptr<BackingFile>> f = this->store_->Open(5, false);
  EXPECT_EQ(f.err(), ENOENT);
  EXPECT_TRUE(SortedList(this->store_.get()).empty());
}

TYPED_TEST(DataStoreContractTest, SizeOfSeesWritesAndTruncationsAndAbsence) {
  DataStore* store = this->store_.get();
  auto size_of = [&](uint64_t ino) -> std::string {
    Result<uint64_t> size = store->SizeOf(ino);
    return size.ok() ? std::to_string(*size) : size.status().ToString();
  };
  EXPECT_EQ(store->SizeOf(7).err(), ENOENT);
  auto f = MustOpen(store, 7, true);
  EXPECT_EQ(size_of(7), "0");
  Write(f.get(), "0123456789", 0);
  EXPECT_EQ(size_of(7), "10");
  ASSERT_TRUE(f->Truncate(3).ok());
  EXPECT_EQ(size_of(7), "3");
  ASSERT_TRUE(store->Remove(7).ok());
  EXPECT_EQ(store->SizeOf(7).err(), ENOENT);
}

TYPED_TEST(DataStoreContractTest, CreateWriteReadBack) {
  auto f = MustOpen(this->store_.get(), 5, true);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(SizeOf(f.get()), 0u);
  Write(f.get(), "hello world", 0);
  EXPECT_EQ(SizeOf(f.get()), 11u);
  EXPECT_EQ(Read(f.get(), 5, 6), "world");
  EXPECT_EQ(Read(f.get(), 100, 6), "world");  // short only at end of file
  EXPECT_EQ(Read(f.get(), 10, 11), "");
  EXPECT_EQ(Read(f.get(), 10, 1000), "");
  EXPECT_TRUE(f->Sync().ok());

  // A second handle, opened with or without create, sees the same file.
  auto g = MustOpen(this->store_.get(), 5, false);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(Read(g.get(), 11, 0), "hello world");
  Write(g.get(), "W", 6);
  EXPECT_EQ(Read(f.get(), 11, 0), "hello World");
  auto h = MustOpen(this->store_.get(), 5, true);
  EXPECT_EQ(SizeOf(h.get()), 11u);  // create does not truncate
}

TYPED_TEST(DataStoreContractTest, WritePastEndFillsWithZeros) {
  auto f = MustOpen(this->store_.get(), 1, true);
  Write(f.get(), "ab", 4);
  EXPECT_EQ(SizeOf(f.get()), 6u);
  EXPECT_EQ(Read(f.get(), 6, 0), std::string("\0\0\0\0ab", 6));
}

TYPED_TEST(DataStoreContractTest, TruncateShrinksAndGrows) {
  auto f = MustOpen(this->store_.get(), 1, true);
  Write(f.get(), "0123456789", 0);
  ASSERT_TRUE(f->Truncate(4).ok());
  EXPECT_EQ(SizeOf(f.get()), 4u);
  EXPECT_EQ(Read(f.get(), 10, 0), "0123");
  ASSERT_TRUE(f->Truncate(8).ok());
  EXPECT_EQ(Read(f.get(), 10, 0), std::string("0123\0\0\0\0", 8));
  ASSERT_TRUE(f->Truncate(0).ok());
  EXPECT_EQ(SizeOf(f.get()), 0u);
}

TYPED_TEST(DataStoreContractTest, LargeWritesRoundTrip) {
  std::string data(3 << 20, '\0');
  for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<char>(i * 131 + i / 4096);
  auto f = MustOpen(this->store_.get(), 9, true);
  Write(f.get(), data, 12345);
  EXPECT_EQ(SizeOf(f.get()), data.size() + 12345);
  EXPECT_EQ(Read(f.get(), data.size(), 12345), data);
}

TYPED_TEST(DataStoreContractTest, RemoveAndList) {
  const uint64_t big = std::numeric_limits<uint64_t>::max();
  for (uint64_t ino : {uint64_t{3}, uint64_t{1}, uint64_t{0xabcdef}, big}) {
    ASSERT_NE(MustOpen(this->store_.get(), ino, true), nullptr);
  }
  EXPECT_EQ(SortedList(this->store_.get()), (std::vector<uint64_t>{1, 3, 0xabcdef, big}));
  ASSERT_TRUE(this->store_->Remove(3).ok());
  EXPECT_TRUE(this->store_->Remove(3).ok());   // already gone is fine
  EXPECT_TRUE(this->store_->Remove(77).ok());  // never there is fine
  EXPECT_EQ(this->store_->Open(3, false).err(), ENOENT);
  EXPECT_EQ(SortedList(this->store_.get()), (std::vector<uint64_t>{1, 0xabcdef, big}));
  EXPECT_TRUE(this->store_->SyncDir().ok());

  // Re-creating a removed ino starts empty.
  auto f = MustOpen(this->store_.get(), 3, true);
  EXPECT_EQ(SizeOf(f.get()), 0u);
}

TYPED_TEST(DataStoreContractTest, HandleSurvivesRemove) {
  auto f = MustOpen(this->store_.get(), 4, true);
  Write(f.get(), "data", 0);
  ASSERT_TRUE(this->store_->Remove(4).ok());
  // Like a descriptor of an unlinked file: still readable and writable.
  EXPECT_EQ(Read(f.get(), 4, 0), "data");
  Write(f.get(), "more", 4);
  EXPECT_EQ(SizeOf(f.get()), 8u);
  EXPECT_EQ(this->store_->Open(4, false).err(), ENOENT);
}

TYPED_TEST(DataStoreContractTest, CapacityIsPlausible) {
  Result<DataStore::Space> space = this->store_->Capacity();
  ASSERT_TRUE(space.ok()) << space.status().ToString();
  EXPECT_GT(space->block_size, 0u);
  EXPECT_GT(space->blocks, 0u);
  EXPECT_LE(space->blocks_free, space->blocks);
  EXPECT_LE(space->blocks_avail, space->blocks_free);
}

// Sizes that take each of PosixDataStore's ways: none, one by one, syncfs.
std::vector<uint64_t> FirstInos(size_t n) {
  std::vector<uint64_t> inos;
  for (uint64_t ino = 1; ino <= n; ino++) inos.push_back(ino);
  return inos;
}
constexpr size_t kManyFiles = PosixDataStore::kSyncfsFromFiles + 5;

TYPED_TEST(DataStoreContractTest, SyncFilesOfNoneOneAndMany) {
  for (uint64_t ino : FirstInos(kManyFiles)) {
    Write(MustOpen(this->store_.get(), ino, true).get(), "file " + std::to_string(ino), 0);
  }
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, kManyFiles}) {
    uint64_t failed = 99;
    Status st = this->store_->SyncFiles(FirstInos(n), &failed);
    EXPECT_TRUE(st.ok()) << n << " files: " << st.ToString();
    EXPECT_EQ(failed, 99u) << "set only on failure";
  }
  EXPECT_TRUE(this->store_->SyncFiles(FirstInos(kManyFiles), nullptr).ok());
  EXPECT_EQ(Read(MustOpen(this->store_.get(), 7, false).get(), 100, 0), "file 7");
}

TYPED_TEST(DataStoreContractTest, SyncFilesOfAMissingFileIsEnoentForIt) {
  for (uint64_t ino : FirstInos(kManyFiles)) {
    ASSERT_NE(MustOpen(this->store_.get(), ino, true), nullptr);
  }
  ASSERT_TRUE(this->store_->Remove(3).ok());
  for (size_t n : {size_t{4}, kManyFiles}) {
    uint64_t failed = 0;
    Status st = this->store_->SyncFiles(FirstInos(n), &failed);
    EXPECT_EQ(st.err(), ENOENT) << n << " files: " << st.ToString();
    EXPECT_EQ(failed, 3u) << n << " files";
    EXPECT_EQ(this->store_->SyncFiles(FirstInos(n), nullptr).err(), ENOENT);
  }
}

// ---- PosixDataStore ----

TEST(PosixDataStoreTest, FilesAreNamedBySixteenHexDigits) {
  TempDir dir;
  const std::string data_dir = dir.path() + "/a/b/data";  // parents are created
  Result<std::unique_ptr<DataStore>> store = OpenPosixDataStore(data_dir);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto f = MustOpen(store->get(), 0xab, true);
  ASSERT_NE(f, nullptr);
  EXPECT_GE(f->fd(), 0);
  struct stat st{};
  ASSERT_EQ(::stat((data_dir + "/00000000000000ab").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE((*store)->SyncDir().ok());
  EXPECT_TRUE(f->Sync().ok());
}

TEST(PosixDataStoreTest, SizesOfManyFilesUseThreadsAndKeepTheOrder) {
  TempDir dir;
  auto store = PosixDataStore::OpenDir(dir.path() + "/data");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  // Enough files for several threads; ino 100 is missing.
  std::vector<uint64_t> inos;
  for (uint64_t ino = 1; ino <= 3 * PosixDataStore::kStatsPerThread; ino++) {
    inos.push_back(ino);
    if (ino == 100) continue;
    auto f = MustOpen(store->get(), ino, true);
    ASSERT_NE(f, nullptr);
    if (ino % 7 == 0) Write(f.get(), std::string(ino % 50, 'x'), 0);
  }
  const std::vector<Result<uint64_t>> sizes = (*store)->SizesOf(inos);
  ASSERT_EQ(sizes.size(), inos.size());
  for (size_t i = 0; i < inos.size(); i++) {
    const uint64_t ino = inos[i];
    if (ino == 100) {
      EXPECT_EQ(sizes[i].err(), ENOENT);
      continue;
    }
    ASSERT_TRUE(sizes[i].ok()) << ino << ": " << sizes[i].status().ToString();
    EXPECT_EQ(*sizes[i], ino % 7 == 0 ? ino % 50 : 0u) << ino;
  }
}

TEST(PosixDataStoreTest, ListIgnoresForeignNames) {
  TempDir dir;
  Result<std::unique_ptr<DataStore>> store = OpenPosixDataStore(dir.path());
  ASSERT_TRUE(store.ok());
  ASSERT_NE(MustOpen(store->get(), 0x10, true), nullptr);
  for (const char* junk : {"foo", "00000000000000ab.tmp", "00000000000000AB", "000000000000000ab",
                           "0000000000000ab", "0x000000000000ab", "00000000000000ag"}) {
    std::ofstream(dir.path() + "/" + junk) << "x";
  }
  std::filesystem::create_directory(dir.path() + "/subdir");
  EXPECT_EQ(SortedList(store->get()), (std::vector<uint64_t>{0x10}));
}

TEST(PosixDataStoreTest, ReopenedStoreSeesFiles) {
  TempDir dir;
  {
    Result<std::unique_ptr<DataStore>> store = OpenPosixDataStore(dir.path());
    ASSERT_TRUE(store.ok());
    Write(MustOpen(store->get(), 12, true).get(), "kept", 0);
  }
  Result<std::unique_ptr<DataStore>> store = OpenPosixDataStore(dir.path());
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(Read(MustOpen(store->get(), 12, false).get(), 10, 0), "kept");
}

TEST(PosixDataStoreTest, OpeningEmptiesTheUnsealStagingDirectoryOnly) {
  // What a crash in the middle of Unseal leaves: a replacement in unsealing/.
  // Reopening removes it without touching the backing files beside it.
  TempDir dir;
  {
    Result<std::unique_ptr<DataStore>> store = OpenPosixDataStore(dir.path());
    ASSERT_TRUE(store.ok());
    Write(MustOpen(store->get(), 12, true).get(), "kept", 0);
  }
  ASSERT_TRUE(std::filesystem::is_directory(dir.path() + "/unsealing"));
  std::ofstream(dir.path() + "/unsealing/000000000000000c") << "half a copy";
  Result<std::unique_ptr<DataStore>> store = OpenPosixDataStore(dir.path());
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE(std::filesystem::is_empty(dir.path() + "/unsealing"));
  EXPECT_EQ(Read(MustOpen(store->get(), 12, false).get(), 10, 0), "kept");
  EXPECT_EQ(SortedList(store->get()), (std::vector<uint64_t>{12}));
}

TEST(PosixDataStoreTest, OpenOnAFileIsAnError) {
  TempDir dir;
  const std::string path = dir.path() + "/file";
  std::ofstream(path) << "x";
  Result<std::unique_ptr<DataStore>> store = OpenPosixDataStore(path);
  EXPECT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(path), std::string::npos);
}

TEST(PosixDataStoreTest, ErrorsNameThePath) {
  TempDir dir;
  Result<std::unique_ptr<DataStore>> store = OpenPosixDataStore(dir.path() + "/data");
  ASSERT_TRUE(store.ok());
  Result<std::unique_ptr<BackingFile>> f = (*store)->Open(0xff, false);
  EXPECT_EQ(f.err(), ENOENT);
  EXPECT_NE(f.status().message().find(dir.path() + "/data/00000000000000ff"), std::string::npos)
      << f.status().message();
  // With the directory gone, listing and syncing it fail instead of lying.
  std::filesystem::remove_all(dir.path() + "/data");
  EXPECT_EQ((*store)->List().err(), ENOENT);
  EXPECT_EQ((*store)->SyncDir().err(), ENOENT);
}

// ---- MemoryDataStore: crash simulation ----

std::string Contents(DataStore* store, uint64_t ino) {
  auto f = MustOpen(store, ino, false);
  return f ? Read(f.get(), 1 << 20, 0) : "<absent>";
}

TEST(MemoryDataStoreTest, CrashDropsUnsyncedData) {
  MemoryDataStore store;
  auto f = MustOpen(&store, 1, true);
  ASSERT_TRUE(store.SyncDir().ok());
  Write(f.get(), "synced", 0);
  ASSERT_TRUE(f->Sync().ok());
  Write(f.get(), "UNSYNCED-TAIL", 6);
  ASSERT_TRUE(f->Truncate(3).ok());
  store.SimulateCrash();
  EXPECT_EQ(Contents(&store, 1), "synced");
}

TEST(MemoryDataStoreTest, SyncFilesMakesThoseFilesDurable) {
  MemoryDataStore store;
  for (uint64_t ino : {1, 2, 3}) Write(MustOpen(&store, ino, true).get(), "data", 0);
  ASSERT_TRUE(store.SyncDir().ok());
  ASSERT_TRUE(store.SyncFiles({1, 3}, nullptr).ok());
  store.SimulateCrash();
  EXPECT_EQ(Contents(&store, 1), "data");
  EXPECT_EQ(Contents(&store, 2), "");  // not asked for
  EXPECT_EQ(Contents(&store, 3), "data");
}

TEST(MemoryDataStoreTest, CrashDropsUnsyncedCreation) {
  MemoryDataStore store;
  auto f = MustOpen(&store, 1, true);
  Write(f.get(), "data", 0);
  ASSERT_TRUE(f->Sync().ok());  // contents synced, but the name never was
  store.SimulateCrash();
  EXPECT_EQ(store.Open(1, false).err(), ENOENT);
  EXPECT_TRUE(SortedList(&store).empty());
}

TEST(MemoryDataStoreTest, CrashKeepsSyncedCreationWithSyncedContents) {
  MemoryDataStore store;
  auto a = MustOpen(&store, 1, true);
  auto b = MustOpen(&store, 2, true);
  Write(a.get(), "a-data", 0);
  ASSERT_TRUE(a->Sync().ok());
  Write(b.get(), "b-data", 0);  // never synced
  ASSERT_TRUE(store.SyncDir().ok());
  store.SimulateCrash();
  EXPECT_EQ(SortedList(&store), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(Contents(&store, 1), "a-data");
  EXPECT_EQ(Contents(&store, 2), "");  // the name survived, the data did not
}

TEST(MemoryDataStoreTest, CrashUndoesUnsyncedRemoval) {
  MemoryDataStore store;
  {
    auto f = MustOpen(&store, 7, true);
    Write(f.get(), "durable", 0);
    ASSERT_TRUE(f->Sync().ok());
    Write(f.get(), "-not", 7);
  }
  ASSERT_TRUE(store.SyncDir().ok());
  ASSERT_TRUE(store.Remove(7).ok());
  EXPECT_EQ(store.Open(7, false).err(), ENOENT);
  store.SimulateCrash();
  EXPECT_EQ(Contents(&store, 7), "durable");

  // A synced removal stays removed.
  ASSERT_TRUE(store.Remove(7).ok());
  ASSERT_TRUE(store.SyncDir().ok());
  store.SimulateCrash();
  EXPECT_EQ(store.Open(7, false).err(), ENOENT);
}

TEST(MemoryDataStoreTest, UnsyncedRecreationAfterRemovalRevertsToOldFile) {
  MemoryDataStore store;
  Write(MustOpen(&store, 3, true).get(), "old", 0);
  ASSERT_TRUE(MustOpen(&store, 3, false)->Sync().ok());
  ASSERT_TRUE(store.SyncDir().ok());
  ASSERT_TRUE(store.Remove(3).ok());
  auto fresh = MustOpen(&store, 3, true);
  EXPECT_EQ(SizeOf(fresh.get()), 0u);
  Write(fresh.get(), "new", 0);
  ASSERT_TRUE(fresh->Sync().ok());
  store.SimulateCrash();
  EXPECT_EQ(Contents(&store, 3), "old");
}

TEST(MemoryDataStoreTest, HandlesFromBeforeACrashAreDetached) {
  MemoryDataStore store;
  auto f = MustOpen(&store, 1, true);
  Write(f.get(), "base", 0);
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(store.SyncDir().ok());
  store.SimulateCrash();
  // The dead process's handle still works, but nothing it does is seen.
  Write(f.get(), "GHOST", 0);
  EXPECT_TRUE(f->Sync().ok());
  EXPECT_TRUE(f->Truncate(1).ok());
  EXPECT_EQ(Contents(&store, 1), "base");
  store.SimulateCrash();
  EXPECT_EQ(Contents(&store, 1), "base");
}

TEST(MemoryDataStoreTest, HugeOffsetsFailCleanly) {
  MemoryDataStore store;
  auto f = MustOpen(&store, 1, true);
  EXPECT_EQ(f->PWrite("x", 1, std::numeric_limits<uint64_t>::max()).err(), EFBIG);
  EXPECT_EQ(f->PWrite("x", 1, MemoryDataStore::kMaxFileSize).err(), EFBIG);
  EXPECT_EQ(f->Truncate(MemoryDataStore::kMaxFileSize + 1).err(), EFBIG);
  EXPECT_EQ(SizeOf(f.get()), 0u);
  EXPECT_EQ(f->fd(), -1);
}

}  // namespace
}  // namespace ckptfs
