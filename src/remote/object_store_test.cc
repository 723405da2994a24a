// The ObjectStore contract, run against MemoryObjectStore, FileObjectStore
// and the S3 store (on s3rver, each test under its own prefix of one
// bucket), then what is particular to each: the file store's on-disk layout
// (natural paths, no leftovers, pruning) and the memory store's fault
// injection and counters. The S3 store's own tests are in
// s3_object_store_test.cc.
#include <gtest/gtest.h>

#include "remote/object_store_test_util.h"
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/temp_dir_for_test.h"
#include "remote/file_object_store.h"
#include "remote/memory_object_store.h"
#include "remote/object_store.h"
#include "remote/s3_object_store.h"
#include "remote/s3rver_for_test.h"

namespace ckptfs {
namespace {

namespace fs = std::filesystem;

using TempDir = TempDirForTest;

// A factory opens a fresh, empty store for each test; the suite hooks let
// one start a server for all the tests of a suite.
struct MemoryFactory {
  static constexpr bool kNeedsS3rver = false;
  static void SetUpTestSuite() {}
  static void TearDownTestSuite() {}
  std::unique_ptr<ObjectStore> Open() { return std::make_unique<MemoryObjectStore>(); }
};

struct FileFactory {
  static constexpr bool kNeedsS3rver = false;
  static void SetUpTestSuite() {}
  static void TearDownTestSuite() {}
  TempDir dir;
  std::unique_ptr<ObjectStore> Open() {
    Result<std::unique_ptr<ObjectStore>> store = OpenFileObjectStore(dir.path());
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }
};

// One s3rver for the suite; each test gets a prefix of its own, so it sees
// an empty store (and the prefix handling is exercised on every call).
struct S3Factory {
  static constexpr bool kNeedsS3rver = true;
  static inline S3rverForTest* server = nullptr;
  static inline Status started;
  static void SetUpTestSuite() {
    if (!S3rverForTest::Installed()) return;
    server = new S3rverForTest;
    started = server->Start();
  }
  static void TearDownTestSuite() {
    delete server;
    server = nullptr;
  }
  std::unique_ptr<ObjectStore> Open() {
    static std::atomic<int> next{0};
    if (server == nullptr || !started.ok()) {
      ADD_FAILURE() << "s3rver did not start: " << started.ToString();
      return nullptr;
    }
    Result<std::unique_ptr<ObjectStore>> store =
        OpenS3ObjectStore(server->Config("contract/t" + std::to_string(next++)));
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }
};

// Deterministic bytes, NULs included, different for each seed.
std::string Bytes(size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i++) s[i] = static_cast<char>((i * 131 + seed * 7) % 251);
  return s;
}

std::string Get(ObjectStore* store, const std::string& key) {
  Result<std::string> r = store->GetRange(key, 0, UINT64_MAX);
  EXPECT_TRUE(r.ok()) << key << ": " << r.status().ToString();
  return r.ok() ? *r : std::string();
}


template <typename Factory>
class ObjectStoreContractTest : public testing::Test {
 protected:
  static void SetUpTestSuite() { Factory::SetUpTestSuite(); }
  static void TearDownTestSuite() { Factory::TearDownTestSuite(); }
  void SetUp() override {
    if constexpr (Factory::kNeedsS3rver) CKPTFS_REQUIRE_S3RVER();
    store_ = factory_.Open();
    ASSERT_NE(store_, nullptr);
  }

  Factory factory_;
  std::unique_ptr<ObjectStore> store_;
};

using Factories = testing::Types<MemoryFactory, FileFactory, S3Factory>;
TYPED_TEST_SUITE(ObjectStoreContractTest, Factories);

// The multipart rules S3 enforces too (NoSuchUpload, EntityTooSmall,
// InvalidPart for a stale ETag, AbortMultipartUpload), but s3rver 3.7.1
// implements none of them, so only the local stores are held to them here.
template <typename Factory>
class ObjectStoreMultipartRulesTest : public ObjectStoreContractTest<Factory> {};

using StrictFactories = testing::Types<MemoryFactory, FileFactory>;
TYPED_TEST_SUITE(ObjectStoreMultipartRulesTest, StrictFactories);

TYPED_TEST(ObjectStoreContractTest, PutGetHead) {
  ObjectStore* s = this->store_.get();
  const std::string data = Bytes(10000, 1);
  ASSERT_TRUE(s->Put("run1/step1/model.bin", data).ok());
  EXPECT_EQ(Get(s, "run1/step1/model.bin"), data);
  Result<ObjectInfo> info = s->Head("run1/step1/model.bin");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->key, "run1/step1/model.bin");
  EXPECT_EQ(info->size, data.size());

  ASSERT_TRUE(s->Put("empty", "").ok());
  EXPECT_EQ(Get(s, "empty"), "");
  ASSERT_TRUE(s->Head("empty").ok());
  EXPECT_EQ(s->Head("empty")->size, 0u);
}

TYPED_TEST(ObjectStoreContractTest, GetRange) {
  ObjectStore* s = this->store_.get();
  const std::string data = Bytes(1000, 2);
  ASSERT_TRUE(s->Put("k", data).ok());
  EXPECT_EQ(*s->GetRange("k", 100, 50), data.substr(100, 50));
  EXPECT_EQ(*s->GetRange("k", 990, 50), data.substr(990));  // fewer at the end
  EXPECT_EQ(*s->GetRange("k", 0, 0), "");
  EXPECT_EQ(*s->GetRange("k", 1000, 10), "");  // at the end
  EXPECT_EQ(*s->GetRange("k", 5000, 10), "");  // past the end: empty, not an error
}

// ReadRange hands over the bytes GetRange would return, as positional
// pieces in order (several for a range larger than a store's piece).
TYPED_TEST(ObjectStoreContractTest, ReadRangeStreamsTheSameBytes) {
  ObjectStore* s = this->store_.get();
  const std::string data = Bytes(300 * 1024 + 7, 5);
  ASSERT_TRUE(s->Put("k", data).ok());
  std::string got;
  size_t pieces = 0;
  auto read = [&](uint64_t offset, uint64_t length) {
    got.clear();
    pieces = 0;
    return s->ReadRange("k", offset, length, [&](uint64_t at, std::string_view piece) {
      EXPECT_EQ(at, got.size());  // in order; nothing here makes a request retry
      EXPECT_FALSE(piece.empty());
      got.append(piece);
      pieces++;
      return Status::Ok();
    });
  };
  Result<uint64_t> n = read(0, UINT64_MAX);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, data.size());
  EXPECT_TRUE(got == data);
  n = read(1000, 200 * 1024);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 200u * 1024);
  EXPECT_TRUE(got == data.substr(1000, 200 * 1024));
  EXPECT_EQ(*read(data.size() - 10, 100), 10u);  // fewer at the end
  EXPECT_EQ(got, data.substr(data.size() - 10));
  EXPECT_EQ(*read(data.size(), 10), 0u);  // at the end: no bytes, no pieces
  EXPECT_EQ(pieces, 0u);
  EXPECT_EQ(*read(0, 0), 0u);
  EXPECT_EQ(pieces, 0u);
  EXPECT_EQ(s->ReadRange("nope", 0, 10, [](uint64_t, std::string_view) { return Status::Ok(); }).err(),
            ENOENT);
}

// A sink that fails ends the read with its own status, and is not called again.
TYPED_TEST(ObjectStoreContractTest, ReadRangeStopsAtAFailingSink) {
  ObjectStore* s = this->store_.get();
  ASSERT_TRUE(s->Put("k", Bytes(300 * 1024, 6)).ok());
  int calls = 0;
  Result<uint64_t> n = s->ReadRange("k", 0, UINT64_MAX, [&](uint64_t, std::string_view) {
    calls++;
    return Status::Error(ENOSPC, "cache full");
  });
  EXPECT_EQ(n.err(), ENOSPC);
  EXPECT_NE(n.status().message().find("cache full"), std::string::npos) << n.status().ToString();
  EXPECT_EQ(calls, 1);
}

TYPED_TEST(ObjectStoreContractTest, MissingObjectsAreEnoent) {
  ObjectStore* s = this->store_.get();
  EXPECT_EQ(s->GetRange("nope", 0, 10).err(), ENOENT);
  EXPECT_EQ(s->Head("nope").err(), ENOENT);
  ASSERT_TRUE(s->Put("dir/file", "x").ok());
  EXPECT_EQ(s->Head("dir").err(), ENOENT);  // a key prefix is not an object
  EXPECT_EQ(s->GetRange("dir", 0, 1).err(), ENOENT);
  EXPECT_EQ(s->Head("dir/file/more").err(), ENOENT);
}

TYPED_TEST(ObjectStoreContractTest, PutReplaces) {
  ObjectStore* s = this->store_.get();
  ASSERT_TRUE(s->Put("k", Bytes(5000, 3)).ok());
  ASSERT_TRUE(s->Put("k", "short").ok());
  EXPECT_EQ(Get(s, "k"), "short");
  EXPECT_EQ(s->Head("k")->size, 5u);
  EXPECT_EQ(Keys(s, ""), std::vector<std::string>{"k"});
}

TYPED_TEST(ObjectStoreContractTest, ListTagsMoveWhenTheBytesChangeAndOnlyThen) {
  // The cluster's persist polls GET a part record again only when its
  // listed tag moved: a tag that stayed while the bytes changed would stall
  // a commit object for good. Stores that give no tag give "" for all.
  ObjectStore* s = this->store_.get();
  ASSERT_TRUE(s->Put("p/a", "one").ok());
  ASSERT_TRUE(s->Put("p/b", "two").ok());
  auto before = s->List("p/");
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_EQ(before->size(), 2u);
  ASSERT_TRUE(s->Put("p/a", "six").ok());  // the same size, other bytes
  auto after = s->List("p/");
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  ASSERT_EQ(after->size(), 2u);
  const bool tagged = !(*before)[0].etag.empty();
  for (const auto* l : {&*before, &*after}) {
    for (const ObjectInfo& o : *l) EXPECT_EQ(o.etag.empty(), !tagged) << o.key;
  }
  if (!tagged) return;
  EXPECT_NE((*before)[0].etag, (*after)[0].etag) << "p/a changed";
  EXPECT_EQ((*before)[1].etag, (*after)[1].etag) << "p/b did not";
}

TYPED_TEST(ObjectStoreContractTest, ListByPrefixInKeyOrder) {
  ObjectStore* s = this->store_.get();
  for (const char* key : {"run1/step2/b", "run1/step10/a", "top", "run1x", "run10/z",
                          "run1/step1/x", "run1/step1/.ckptfs-commit.json", "run1/step1/a/deep"}) {
    ASSERT_TRUE(s->Put(key, key).ok()) << key;
  }
  EXPECT_EQ(Keys(s, ""), (std::vector<std::string>{
                             "run1/step1/.ckptfs-commit.json", "run1/step1/a/deep", "run1/step1/x",
                             "run1/step10/a", "run1/step2/b", "run10/z", "run1x", "top"}));
  EXPECT_EQ(Keys(s, "run1/"),
            (std::vector<std::string>{"run1/step1/.ckptfs-commit.json", "run1/step1/a/deep",
                                      "run1/step1/x", "run1/step10/a", "run1/step2/b"}));
  // A plain string prefix, not only a directory boundary.
  EXPECT_EQ(Keys(s, "run1/step1"),
            (std::vector<std::string>{"run1/step1/.ckptfs-commit.json", "run1/step1/a/deep",
                                      "run1/step1/x", "run1/step10/a"}));
  EXPECT_EQ(Keys(s, "run1"), (std::vector<std::string>{
                                 "run1/step1/.ckptfs-commit.json", "run1/step1/a/deep",
                                 "run1/step1/x", "run1/step10/a", "run1/step2/b", "run10/z",
                                 "run1x"}));
  EXPECT_EQ(Keys(s, "run1/step1/x"), std::vector<std::string>{"run1/step1/x"});
  EXPECT_EQ(Keys(s, "run1/step1/."), std::vector<std::string>{"run1/step1/.ckptfs-commit.json"});
  EXPECT_TRUE(Keys(s, "nope").empty());
  EXPECT_TRUE(Keys(s, "run1/step3/").empty());
  EXPECT_TRUE(Keys(s, "../").empty());
  EXPECT_TRUE(Keys(s, "/run1").empty());

  Result<std::vector<ObjectInfo>> sized = s->List("top");
  ASSERT_TRUE(sized.ok());
  ASSERT_EQ(sized->size(), 1u);
  EXPECT_EQ((*sized)[0].size, 3u);
}

TYPED_TEST(ObjectStoreContractTest, DeleteIgnoresAbsentKeys) {
  ObjectStore* s = this->store_.get();
  ASSERT_TRUE(s->Put("a/1", "x").ok());
  ASSERT_TRUE(s->Put("a/2", "y").ok());
  ASSERT_TRUE(s->Put("b", "z").ok());
  ASSERT_TRUE(s->Delete({"a/1", "missing", "a/2/deeper", "a"}).ok());
  EXPECT_EQ(s->Head("a/1").err(), ENOENT);
  EXPECT_EQ(Keys(s, ""), (std::vector<std::string>{"a/2", "b"}));
  ASSERT_TRUE(s->Delete({}).ok());
  ASSERT_TRUE(s->Delete({"a/2", "b", "b"}).ok());
  EXPECT_TRUE(Keys(s, "").empty());
  // A deleted key can be written again.
  ASSERT_TRUE(s->Put("a/2", "again").ok());
  EXPECT_EQ(Get(s, "a/2"), "again");
}

TYPED_TEST(ObjectStoreContractTest, InvalidKeysAreEinval) {
  ObjectStore* s = this->store_.get();
  const std::vector<std::string> bad = {
      "", "/abs", "trailing/", "a//b", "./a", "a/.", "a/../b", "..", std::string("a\0b", 3),
      std::string(1025, 'k')};
  for (const std::string& key : bad) {
    EXPECT_EQ(ValidateObjectKey(key).err(), EINVAL) << key;
    EXPECT_EQ(s->Put(key, "x").err(), EINVAL) << key;
    EXPECT_EQ(s->GetRange(key, 0, 1).err(), EINVAL) << key;
    EXPECT_EQ(s->Head(key).err(), EINVAL) << key;
    EXPECT_EQ(s->Delete({"fine", key}).err(), EINVAL) << key;
    EXPECT_EQ(s->BeginMultipart(key).err(), EINVAL) << key;
  }
  for (const std::string& key : {std::string("a"), std::string("a/b.c/..d/.e"),
                                 std::string(1024, 'k'), std::string("sp ace/ü")}) {
    EXPECT_TRUE(ValidateObjectKey(key).ok()) << key;
  }
  EXPECT_TRUE(Keys(s, "").empty());
}

struct Uploaded {
  std::string data;                // the object the parts make up
  std::vector<std::string> etags;  // by part number - 1; "" for parts not uploaded
};

// Uploads parts in the given order for a part_count-part object of parts
// min, min, ..., last_size.
Uploaded UploadParts(ObjectStore* s, const std::string& key, const std::string& id,
                     const std::vector<int>& order, int part_count, size_t last_size) {
  std::vector<std::string> parts;
  for (int i = 1; i <= part_count; i++) {
    parts.push_back(Bytes(i == part_count ? last_size : s->min_part_size(), i));
  }
  Uploaded up;
  up.etags.resize(part_count);
  for (int n : order) {
    Result<std::string> etag = s->UploadPart(key, id, n, parts[n - 1]);
    EXPECT_TRUE(etag.ok()) << etag.status().ToString();
    if (etag.ok()) up.etags[n - 1] = *etag;
  }
  for (const std::string& p : parts) up.data += p;
  return up;
}

TYPED_TEST(ObjectStoreMultipartRulesTest, MultipartHappyPath) {
  ObjectStore* s = this->store_.get();
  Result<std::string> id = s->BeginMultipart("run1/step1/big.bin");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  Result<std::string> other = s->BeginMultipart("run1/step1/big.bin");
  ASSERT_TRUE(other.ok());
  EXPECT_NE(*id, *other);
  ASSERT_TRUE(s->AbortMultipart("run1/step1/big.bin", *other).ok());

  const Uploaded up = UploadParts(s, "run1/step1/big.bin", *id, {3, 1, 2}, 3, 1000);
  const std::string& want = up.data;
  // Not visible before Complete.
  EXPECT_EQ(s->Head("run1/step1/big.bin").err(), ENOENT);
  EXPECT_TRUE(Keys(s, "").empty());
  ASSERT_TRUE(s->CompleteMultipart("run1/step1/big.bin", *id, up.etags).ok());
  EXPECT_EQ(s->Head("run1/step1/big.bin")->size, want.size());
  EXPECT_TRUE(Get(s, "run1/step1/big.bin") == want);
  const uint64_t min = s->min_part_size();
  EXPECT_EQ(*s->GetRange("run1/step1/big.bin", min - 3, 6), want.substr(min - 3, 6));
  EXPECT_EQ(Keys(s, ""), std::vector<std::string>{"run1/step1/big.bin"});
  // The upload is gone once completed.
  EXPECT_EQ(s->CompleteMultipart("run1/step1/big.bin", *id, up.etags).err(), ENOENT);
  EXPECT_EQ(s->AbortMultipart("run1/step1/big.bin", *id).err(), ENOENT);
}

TYPED_TEST(ObjectStoreContractTest, MultipartSmallSinglePartAndReupload) {
  ObjectStore* s = this->store_.get();
  Result<std::string> id = s->BeginMultipart("k");
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(s->UploadPart("k", *id, 1, "first try").ok());
  Result<std::string> retried = s->UploadPart("k", *id, 1, "retried");  // the later upload wins
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_FALSE(retried->empty());
  ASSERT_TRUE(s->UploadPart("k", *id, 2, "beyond the ETags given: discarded").ok());
  Status st = s->CompleteMultipart("k", *id, {*retried});  // the last part may be small
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Get(s, "k"), "retried");
}

TYPED_TEST(ObjectStoreMultipartRulesTest, MultipartStaleETagIsEinval) {
  ObjectStore* s = this->store_.get();
  Result<std::string> id = s->BeginMultipart("k");
  ASSERT_TRUE(id.ok());
  Result<std::string> first = s->UploadPart("k", *id, 1, "first try");
  Result<std::string> second = s->UploadPart("k", *id, 1, "retried");
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(*first, *second);
  EXPECT_EQ(s->CompleteMultipart("k", *id, {*first}).err(), EINVAL);
  EXPECT_EQ(s->CompleteMultipart("k", *id, {"not-an-etag"}).err(), EINVAL);
  EXPECT_EQ(s->Head("k").err(), ENOENT);
  ASSERT_TRUE(s->CompleteMultipart("k", *id, {*second}).ok());
  EXPECT_EQ(Get(s, "k"), "retried");
}

TYPED_TEST(ObjectStoreMultipartRulesTest, MultipartPartTooSmall) {
  ObjectStore* s = this->store_.get();
  Result<std::string> id = s->BeginMultipart("k");
  ASSERT_TRUE(id.ok());
  Result<std::string> tiny = s->UploadPart("k", *id, 1, "tiny");
  Result<std::string> end = s->UploadPart("k", *id, 2, "end");
  ASSERT_TRUE(tiny.ok() && end.ok());
  EXPECT_EQ(s->CompleteMultipart("k", *id, {*tiny, *end}).err(), EINVAL);
  EXPECT_EQ(s->Head("k").err(), ENOENT);
  // The upload survives a refused Complete and can be aborted.
  EXPECT_TRUE(s->AbortMultipart("k", *id).ok());
}

TYPED_TEST(ObjectStoreMultipartRulesTest, MultipartMissingPart) {
  ObjectStore* s = this->store_.get();
  Result<std::string> id = s->BeginMultipart("k");
  ASSERT_TRUE(id.ok());
  const Uploaded up = UploadParts(s, "k", *id, {1, 3}, 3, 10);
  EXPECT_EQ(s->CompleteMultipart("k", *id, up.etags).err(), EINVAL);
  EXPECT_EQ(s->CompleteMultipart("k", *id, {}).err(), EINVAL);
  EXPECT_EQ(s->CompleteMultipart("k", *id, std::vector<std::string>(10001, up.etags[0])).err(),
            EINVAL);
  EXPECT_EQ(s->UploadPart("k", *id, 0, "x").err(), EINVAL);
  EXPECT_EQ(s->UploadPart("k", *id, 10001, "x").err(), EINVAL);
  EXPECT_EQ(s->Head("k").err(), ENOENT);
  EXPECT_TRUE(s->AbortMultipart("k", *id).ok());
}

TYPED_TEST(ObjectStoreMultipartRulesTest, MultipartAbortAndUnknownUploads) {
  ObjectStore* s = this->store_.get();
  ASSERT_TRUE(s->Put("k", "old").ok());
  Result<std::string> id = s->BeginMultipart("k");
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(s->UploadPart("k", *id, 1, "new").ok());
  ASSERT_TRUE(s->AbortMultipart("k", *id).ok());
  EXPECT_EQ(Get(s, "k"), "old");  // an aborted upload leaves the old object alone
  EXPECT_EQ(s->UploadPart("k", *id, 1, "x").err(), ENOENT);
  EXPECT_EQ(s->CompleteMultipart("k", *id, {"x"}).err(), ENOENT);
  EXPECT_EQ(s->AbortMultipart("k", *id).err(), ENOENT);

  Result<std::string> live = s->BeginMultipart("k");
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(s->UploadPart("other", *live, 1, "x").err(), ENOENT);  // upload of another key
  EXPECT_EQ(s->CompleteMultipart("other", *live, {"x"}).err(), ENOENT);
  for (const std::string& bogus : {std::string("bogus"), std::string("../../etc"),
                                   std::string(32, '0'), std::string()}) {
    EXPECT_EQ(s->UploadPart("k", bogus, 1, "x").err(), ENOENT) << bogus;
    EXPECT_EQ(s->CompleteMultipart("k", bogus, {"x"}).err(), ENOENT) << bogus;
    EXPECT_EQ(s->AbortMultipart("k", bogus).err(), ENOENT) << bogus;
  }
  EXPECT_TRUE(s->AbortMultipart("k", *live).ok());
  EXPECT_EQ(Keys(s, ""), std::vector<std::string>{"k"});
}

TYPED_TEST(ObjectStoreContractTest, ConcurrentPutsAndDeletes) {
  ObjectStore* s = this->store_.get();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([s, t] {
      for (int i = 0; i < 50; i++) {
        const std::string mine = "shared/t" + std::to_string(t) + "/k" + std::to_string(i);
        const std::string kept = "shared/keep/t" + std::to_string(t) + "k" + std::to_string(i);
        EXPECT_TRUE(s->Put(mine, "x").ok());
        EXPECT_TRUE(s->Put(kept, mine).ok());
        EXPECT_TRUE(s->Delete({mine}).ok());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const std::vector<std::string> keys = Keys(s, "");
  EXPECT_EQ(keys.size(), 200u);
  for (const std::string& k : keys) EXPECT_EQ(k.rfind("shared/keep/", 0), 0u) << k;
}

// ---- FileObjectStore ----

class FileObjectStoreTest : public testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<FileObjectStore>> s = FileObjectStore::Open(dir_.path(), 1024);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  std::string Path(const std::string& rel) const { return dir_.path() + "/" + rel; }
  std::string ReadFile(const std::string& rel) const {
    std::ifstream in(Path(rel), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Everything under dir, directories included, as relative paths.
  std::vector<std::string> Tree() const {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_.path())) {
      out.push_back(fs::relative(e.path(), dir_.path()).string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  size_t Entries(const std::string& rel) const {
    if (!fs::exists(Path(rel))) return 0;
    return static_cast<size_t>(std::distance(fs::directory_iterator(Path(rel)), {}));
  }

  TempDir dir_;
  std::unique_ptr<FileObjectStore> store_;
};

TEST_F(FileObjectStoreTest, OpenRequiresAnExistingDirectory) {
  const std::string missing = dir_.path() + "/missing";
  Result<std::unique_ptr<ObjectStore>> r = OpenFileObjectStore(missing);
  EXPECT_EQ(r.err(), ENOENT);
  EXPECT_NE(r.status().message().find(missing), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(missing));
  std::ofstream(Path("plain")) << "x";
  EXPECT_EQ(OpenFileObjectStore(Path("plain")).err(), ENOTDIR);
  EXPECT_EQ(OpenFileObjectStore("").err(), ENOENT);

  Result<std::unique_ptr<ObjectStore>> slash = OpenFileObjectStore(dir_.path() + "/");
  ASSERT_TRUE(slash.ok());
  EXPECT_EQ((*slash)->Describe(), "file://" + dir_.path());
  EXPECT_EQ(store_->Describe(), "file://" + dir_.path());
  EXPECT_EQ(store_->min_part_size(), 1024u);
  EXPECT_EQ(Tree(), std::vector<std::string>{"plain"});  // opening creates nothing
}

TEST_F(FileObjectStoreTest, ObjectsArePlainFilesAtNaturalPaths) {
  const std::string data = Bytes(3000, 9);
  ASSERT_TRUE(store_->Put("run1/step1/model.safetensors", data).ok());
  EXPECT_EQ(ReadFile("run1/step1/model.safetensors"), data);

  Result<std::string> id = store_->BeginMultipart("run1/step1/big");
  ASSERT_TRUE(id.ok());
  const Uploaded up = UploadParts(store_.get(), "run1/step1/big", *id, {2, 1, 3}, 3, 7);
  EXPECT_FALSE(fs::exists(Path("run1/step1/big")));
  ASSERT_TRUE(store_->CompleteMultipart("run1/step1/big", *id, up.etags).ok());
  EXPECT_EQ(ReadFile("run1/step1/big"), up.data);

  // And files put there by other tools are objects.
  fs::create_directories(Path("other/tool"));
  std::ofstream(Path("other/tool/file"), std::ios::binary) << "hello";
  EXPECT_EQ(Get(store_.get(), "other/tool/file"), "hello");
  EXPECT_EQ(Keys(store_.get(), "other/"), std::vector<std::string>{"other/tool/file"});
}

TEST_F(FileObjectStoreTest, NoTemporaryFilesLeftBehind) {
  ASSERT_TRUE(store_->Put("a/b", "x").ok());
  ASSERT_TRUE(store_->Put("a/b", "replaced").ok());
  Result<std::string> done = store_->BeginMultipart("a/c");
  ASSERT_TRUE(done.ok());
  const Uploaded up = UploadParts(store_.get(), "a/c", *done, {1, 2}, 2, 5);
  ASSERT_TRUE(store_->CompleteMultipart("a/c", *done, up.etags).ok());
  Result<std::string> aborted = store_->BeginMultipart("a/d");
  ASSERT_TRUE(aborted.ok());
  ASSERT_TRUE(store_->UploadPart("a/d", *aborted, 1, "x").ok());
  ASSERT_TRUE(store_->AbortMultipart("a/d", *aborted).ok());
  EXPECT_EQ(store_->CompleteMultipart("a/c", "0123456789abcdef0123456789abcdef", {"x"}).err(),
            ENOENT);
  EXPECT_EQ(Entries(".ckptfs-tmp"), 0u);
  EXPECT_EQ(Entries(".ckptfs-multipart"), 0u);
  EXPECT_EQ(Keys(store_.get(), ""), (std::vector<std::string>{"a/b", "a/c"}));
}

TEST_F(FileObjectStoreTest, DeletePrunesEmptyDirectories) {
  ASSERT_TRUE(store_->Put("a/b/c/obj", "1").ok());
  ASSERT_TRUE(store_->Put("a/other", "2").ok());
  ASSERT_TRUE(store_->Delete({"a/b/c/obj"}).ok());
  EXPECT_FALSE(fs::exists(Path("a/b")));
  EXPECT_TRUE(fs::exists(Path("a/other")));
  ASSERT_TRUE(store_->Delete({"a/other"}).ok());
  EXPECT_FALSE(fs::exists(Path("a")));
  EXPECT_TRUE(fs::is_directory(dir_.path()));
  EXPECT_TRUE(Tree().empty() || Tree() == std::vector<std::string>{".ckptfs-tmp"});
}

TEST_F(FileObjectStoreTest, CrashLeftoversAreIgnored) {
  ASSERT_TRUE(store_->Put("run/obj", "real").ok());
  // What a crash mid-Put and mid-upload leaves behind.
  fs::create_directories(Path(".ckptfs-tmp"));
  std::ofstream(Path(".ckptfs-tmp/0123abcd")) << "partial";
  fs::create_directories(Path(".ckptfs-multipart/00112233445566778899aabbccddeeff"));
  std::ofstream(Path(".ckptfs-multipart/00112233445566778899aabbccddeeff/part-00001")) << "p";
  EXPECT_EQ(Keys(store_.get(), ""), std::vector<std::string>{"run/obj"});
  EXPECT_TRUE(Keys(store_.get(), ".ckptfs").empty());
  // The upload without its key file is unknown.
  EXPECT_EQ(store_->CompleteMultipart("run/obj", "00112233445566778899aabbccddeeff", {"x"}).err(),
            ENOENT);
  // The reserved names are not keys.
  EXPECT_EQ(store_->Head(".ckptfs-tmp/0123abcd").err(), EINVAL);
  EXPECT_EQ(store_->Put(".ckptfs-multipart/x", "x").err(), EINVAL);
  EXPECT_TRUE(store_->Put("x/.ckptfs-tmp", "fine below the top").ok());
  // Symlinks and other non-files are not objects.
  fs::create_symlink(Path("run/obj"), Path("run/link"));
  EXPECT_EQ(Keys(store_.get(), "run/"), std::vector<std::string>{"run/obj"});
  EXPECT_EQ(store_->Head("run/link").err(), ENOENT);
  EXPECT_EQ(store_->GetRange("run/link", 0, 4).err(), ENOENT);
}

TEST_F(FileObjectStoreTest, ObjectCannotAlsoBeADirectory) {
  ASSERT_TRUE(store_->Put("a", "x").ok());
  EXPECT_FALSE(store_->Put("a/b", "y").ok());
  ASSERT_TRUE(store_->Put("d/e", "x").ok());
  EXPECT_FALSE(store_->Put("d", "y").ok());
  EXPECT_EQ(Entries(".ckptfs-tmp"), 0u);
  EXPECT_EQ(Keys(store_.get(), ""), (std::vector<std::string>{"a", "d/e"}));
}

// ---- MemoryObjectStore ----

TEST(MemoryObjectStoreTest, FailNextFailsThenRecovers) {
  MemoryObjectStore s;
  ASSERT_TRUE(s.Put("k", "old").ok());
  s.FailNext(2, EIO);
  EXPECT_EQ(s.Put("k", "new").err(), EIO);
  EXPECT_EQ(s.GetRange("k", 0, 3).err(), EIO);
  EXPECT_EQ(*s.Peek("k"), "old");  // the failed Put changed nothing
  EXPECT_EQ(Get(&s, "k"), "old");
  ASSERT_TRUE(s.Put("k", "new").ok());
  EXPECT_EQ(*s.Peek("k"), "new");

  // Faults come before validation, and apply to every method.
  s.FailNext(8, ENOSPC);
  EXPECT_EQ(s.Put("", "x").err(), ENOSPC);
  EXPECT_EQ(s.BeginMultipart("m").err(), ENOSPC);
  EXPECT_EQ(s.UploadPart("m", "id", 1, "x").err(), ENOSPC);
  EXPECT_EQ(s.CompleteMultipart("m", "id", {"x"}).err(), ENOSPC);
  EXPECT_EQ(s.AbortMultipart("m", "id").err(), ENOSPC);
  EXPECT_EQ(s.Head("k").err(), ENOSPC);
  EXPECT_EQ(s.List("").err(), ENOSPC);
  EXPECT_EQ(s.Delete({"k"}).err(), ENOSPC);
  EXPECT_EQ(s.object_count(), 1u);
  EXPECT_EQ(s.upload_count(), 0u);
  EXPECT_TRUE(s.Head("k").ok());

  s.FailNext(5, EIO);
  s.FailNext(0, EIO);  // cancels
  EXPECT_TRUE(s.Head("k").ok());
}

TEST(MemoryObjectStoreTest, FailedCompleteKeepsTheUpload) {
  MemoryObjectStore s(/*min_part_size=*/4);
  Result<std::string> id = s.BeginMultipart("k");
  ASSERT_TRUE(id.ok());
  Result<std::string> p1 = s.UploadPart("k", *id, 1, "abcd");
  Result<std::string> p2 = s.UploadPart("k", *id, 2, "e");
  ASSERT_TRUE(p1.ok() && p2.ok());
  s.FailNext(1, ETIMEDOUT);
  EXPECT_EQ(s.CompleteMultipart("k", *id, {*p1, *p2}).err(), ETIMEDOUT);
  EXPECT_EQ(s.upload_count(), 1u);
  EXPECT_FALSE(s.Peek("k").has_value());
  ASSERT_TRUE(s.CompleteMultipart("k", *id, {*p1, *p2}).ok());  // the retry succeeds
  EXPECT_EQ(*s.Peek("k"), "abcde");
  EXPECT_EQ(s.upload_count(), 0u);
}

TEST(MemoryObjectStoreTest, UnavailableFailsEverythingWithEhostunreach) {
  MemoryObjectStore s;
  ASSERT_TRUE(s.Put("k", "v").ok());
  s.FailNext(1, EIO);
  s.SetUnavailable(true);
  EXPECT_EQ(s.Put("k2", "v").err(), EHOSTUNREACH);
  EXPECT_EQ(s.GetRange("k", 0, 1).err(), EHOSTUNREACH);
  EXPECT_EQ(s.Head("k").err(), EHOSTUNREACH);
  EXPECT_EQ(s.List("").err(), EHOSTUNREACH);
  EXPECT_EQ(s.Delete({"k"}).err(), EHOSTUNREACH);
  EXPECT_EQ(s.BeginMultipart("k").err(), EHOSTUNREACH);
  EXPECT_EQ(s.object_count(), 1u);
  s.SetUnavailable(false);
  EXPECT_EQ(s.Head("k").err(), EIO);  // the pending FailNext was not used up
  EXPECT_TRUE(s.Head("k").ok());
  EXPECT_EQ(s.Describe(), "memory://");
}

TEST(MemoryObjectStoreTest, CountersCountCallsIncludingFailures) {
  MemoryObjectStore s(/*min_part_size=*/2);
  ASSERT_TRUE(s.Put("a", "1").ok());
  s.FailNext(1, EIO);
  EXPECT_FALSE(s.Put("a", "2").ok());
  Result<std::string> id = s.BeginMultipart("m");
  ASSERT_TRUE(id.ok());
  Result<std::string> p1 = s.UploadPart("m", *id, 1, "xy");
  Result<std::string> p2 = s.UploadPart("m", *id, 2, "z");
  ASSERT_TRUE(p1.ok() && p2.ok());
  ASSERT_TRUE(s.CompleteMultipart("m", *id, {*p1, *p2}).ok());
  EXPECT_TRUE(s.GetRange("m", 0, 10).ok());
  EXPECT_TRUE(s.GetRange("m", 1, 1).ok());
  EXPECT_TRUE(s.Head("m").ok());
  EXPECT_TRUE(s.List("").ok());
  EXPECT_TRUE(s.Delete({"a", "nope"}).ok());
  EXPECT_EQ(s.put_calls(), 2u);
  EXPECT_EQ(s.begin_calls(), 1u);
  EXPECT_EQ(s.part_calls(), 2u);
  EXPECT_EQ(s.complete_calls(), 1u);
  EXPECT_EQ(s.abort_calls(), 0u);
  EXPECT_EQ(s.get_calls(), 2u);
  EXPECT_EQ(s.head_calls(), 1u);
  EXPECT_EQ(s.list_calls(), 1u);
  EXPECT_EQ(s.delete_calls(), 1u);
  EXPECT_EQ(s.object_count(), 1u);
  EXPECT_EQ(*s.Peek("m"), "xyz");
  EXPECT_FALSE(s.Peek("a").has_value());
  EXPECT_EQ(s.min_part_size(), 2u);
}

}  // namespace
}  // namespace ckptfs
