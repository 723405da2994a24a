// A remote mount's idle steps leave memory as a local mount's do
// (src/namespace/filesystem_unload.cc), once all of them is in the bucket:
// the tier forgets their files, the cache limit still counts what they
// hold, eviction takes an unloaded step whole, status.json and retention
// work from the step records, and a step read again has its objects.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tiering/remote_tier.h"
#include "tiering/remote_tier_test_util.h"

namespace ckptfs {
namespace {

using testing::FsEnv;
using testing::kMiB;
using testing::Mkdir;
using testing::Pattern;
using testing::ReadFile;
using testing::RemoteOptions;
using testing::SharedStore;
using testing::WriteFile;

constexpr int kFiles = 10;

bool Exists(FileSystem& fs, uint64_t ino) { return fs.data()->SizesOf({ino})[0].ok(); }
constexpr size_t kFileBytes = 1000;

class RemoteUnloadTest : public ::testing::Test {
 protected:
  // Less than one of the steps below: every step that may go goes.
  static FileSystemOptions Options(size_t budget = 12) {
    FileSystemOptions o = RemoteOptions();
    o.max_cached_inodes = budget;
    return o;
  }
  explicit RemoteUnloadTest(size_t budget = 12) : store_(kMiB), env_(Options(budget)) {
    RemoteTierOptions o;
    o.min_part_size = kMiB;
    o.fetch_chunk = kMiB;
    o.checksum_chunk = kMiB;  // chunks verified on their own: partial fetches
    o.retry_min_ns = 0;
    auto shared = std::make_unique<SharedStore>(&store_);
    shared_ = shared.get();
    tier_ = std::make_unique<RemoteTier>(&env_.fs(), env_.fs().data(), std::move(shared),
                                         &env_.events, o);
    env_.fs().SetTierHooks(tier_.get());
  }
  ~RemoteUnloadTest() override { env_.fs().SetTierHooks(nullptr); }

  static std::string Data(int step, int file) {
    return Pattern(kFileBytes, static_cast<char>('a' + step * kFiles + file));
  }
  // run/step<i> with kFiles files, committed; persisted by the next pass.
  uint64_t MakeStep(int i) {
    FileSystem& fs = env_.fs();
    const uint64_t step = Mkdir(fs, run_, "step" + std::to_string(i));
    for (int f = 0; f < kFiles; f++) WriteFile(fs, step, "f" + std::to_string(f), Data(i, f));
    fs.RequestCommit(step);
    env_.DrainCommits();
    EXPECT_EQ(*fs.GetXattr(step, "user.ckptfs.state"), "committed");
    return step;
  }
  std::string Persisted(uint64_t step) {
    auto v = env_.fs().GetXattr(step, "user.ckptfs.persisted");
    return v.ok() ? *v : "<" + v.status().ToString() + ">";
  }
  size_t Unload() {
    auto n = env_.fs().UnloadIdleSteps();
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return n.ok() ? *n : 0;
  }
  // step0 (its first file's upload failing, so never persisted), then
  // step1..step3 persisted; the kernel holds nothing.
  void MakeRun() {
    run_ = Mkdir(env_.fs(), kRootIno, "exp");
    shared_->FailPutsOf("exp/step0/f0", true);
    for (int i = 0; i < 4; i++) steps_.push_back(MakeStep(i));
    (void)tier_->RunOnceForTest();  // reports step0's failed upload
    ASSERT_EQ(Persisted(steps_[0]), "false");
    for (int i = 1; i < 4; i++) ASSERT_EQ(Persisted(steps_[i]), "true");
    env_.fs().ForgetEverythingForTest();
  }
  nlohmann::json StepInStatus(const std::string& path) {
    FileSystem& fs = env_.fs();
    auto st = fs.Lookup(fs.Lookup(kRootIno, ".ckptfs")->ino, "status.json");
    auto status = nlohmann::json::parse(ReadFile(fs, st->ino));
    for (const auto& s : status["steps"])
      if (s["path"] == path) return s;
    return nullptr;
  }

  MemoryObjectStore store_;
  FsEnv env_;
  std::unique_ptr<RemoteTier> tier_;
  SharedStore* shared_ = nullptr;  // owned by tier_
  uint64_t run_ = 0;
  std::vector<uint64_t> steps_;
};

TEST_F(RemoteUnloadTest, OnlyPersistedStepsUnloadAndTheCacheStillCountsThem) {
  MakeRun();
  FileSystem& fs = env_.fs();
  const size_t loaded = fs.InodeCountForTest();
  const uint64_t resident = fs.ResidentBytes();
  ASSERT_EQ(resident, 4 * kFiles * kFileBytes);

  // step0 is not in the bucket yet and stays; the others go.
  EXPECT_EQ(Unload(), 3u);
  EXPECT_EQ(fs.InodeCountForTest(), loaded - 3 * kFiles);
  EXPECT_EQ(fs.ResidentBytes(), resident) << "unloaded, still on the local disk";
  EXPECT_EQ(fs.metrics().lazy_step_unloads.load(), 3u);

  // status.json answers from the step records, without loading them.
  const nlohmann::json s1 = StepInStatus("exp/step1");
  ASSERT_FALSE(s1.is_null());
  EXPECT_EQ(s1["upload"]["files_done"], kFiles) << s1.dump();
  EXPECT_EQ(s1["upload"]["bytes_done"], s1["upload"]["bytes_total"]) << s1.dump();
  EXPECT_EQ(fs.metrics().lazy_step_loads.load(), 0u);

  // Read again: from the local disk, no GET; it is persisted as before.
  const size_t gets = store_.get_calls();
  auto f3 = fs.Lookup(steps_[2], "f3");
  ASSERT_TRUE(f3.ok());
  EXPECT_EQ(ReadFile(fs, f3->ino), Data(2, 3));
  EXPECT_EQ(store_.get_calls(), gets);
  EXPECT_EQ(Persisted(steps_[2]), "true");
  EXPECT_EQ(fs.metrics().lazy_step_loads.load(), 1u);
}

TEST_F(RemoteUnloadTest, EvictionTakesAnUnloadedStepWholeAndReadsFetchItBack) {
  MakeRun();
  FileSystem& fs = env_.fs();
  ASSERT_EQ(Unload(), 3u);
  const uint64_t resident = fs.ResidentBytes();

  // One candidate for the whole unloaded step, with what it holds.
  bool found = false;
  for (const auto& c : fs.EvictionCandidates()) {
    if (c.ino != steps_[1]) continue;
    found = true;
    EXPECT_EQ(c.bytes, kFiles * kFileBytes);
  }
  ASSERT_TRUE(found);
  ASSERT_TRUE(fs.Evict(steps_[1]).ok());
  EXPECT_EQ(fs.ResidentBytes(), resident - kFiles * kFileBytes);
  for (const auto& c : fs.EvictionCandidates()) EXPECT_TRUE(c.ino != steps_[1] || c.bytes == 0);

  // Evicted for real: a read fetches the object back.
  const size_t gets = store_.get_calls();
  auto f7 = fs.Lookup(steps_[1], "f7");
  ASSERT_TRUE(f7.ok());
  EXPECT_EQ(ReadFile(fs, f7->ino), Data(1, 7));
  EXPECT_GT(store_.get_calls(), gets);

  // Unloaded again, it counts what it holds now: f7, fetched whole.
  fs.ForgetEverythingForTest();
  (void)tier_->RunOnceForTest();  // marks f7 resident (step0 still fails)
  const uint64_t before = fs.ResidentBytes();
  EXPECT_EQ(before, resident - (kFiles - 1) * kFileBytes);
  EXPECT_EQ(Unload(), 1u);
  EXPECT_EQ(fs.ResidentBytes(), before);
  for (const auto& c : fs.EvictionCandidates())
    if (c.ino == steps_[1]) EXPECT_EQ(c.bytes, kFileBytes);
}

// Room for all but one of two loaded steps: the order decides which goes.
class RemoteUnloadOrderTest : public RemoteUnloadTest {
 protected:
  RemoteUnloadOrderTest() : RemoteUnloadTest(32) {}
};

TEST_F(RemoteUnloadOrderTest, AStepReadOnlyToEvictItIsTheFirstToUnloadAgain) {
  MakeRun();
  FileSystem& fs = env_.fs();
  ASSERT_EQ(fs.InodeCountForTest(), 6u + 4 * kFiles);
  ASSERT_EQ(Unload(), 2u);
  // An unloaded step is one candidate for eviction, under its own number.
  std::vector<uint64_t> unloaded;
  for (const auto& c : fs.EvictionCandidates())
    if (c.ino == steps_[1] || c.ino == steps_[2] || c.ino == steps_[3]) unloaded.push_back(c.ino);
  ASSERT_EQ(unloaded.size(), 2u);
  const uint64_t read = unloaded[0], evicted = unloaded[1];
  // One read by someone; the other read back only to be evicted. Two of
  // the three loaded steps must go: the evicted one first, then the one
  // that stayed (used before the read).
  ASSERT_TRUE(fs.Lookup(read, "f1").ok());
  ASSERT_TRUE(fs.Evict(evicted).ok());
  fs.ForgetEverythingForTest();
  ASSERT_EQ(fs.InodeCountForTest(), 6u + 4 * kFiles);
  EXPECT_EQ(Unload(), 2u);
  const uint64_t loads = fs.metrics().lazy_step_loads.load();
  ASSERT_TRUE(fs.Lookup(read, "f2").ok());
  EXPECT_EQ(fs.metrics().lazy_step_loads.load(), loads) << "the step read last stayed";
  ASSERT_TRUE(fs.Lookup(evicted, "f2").ok());
  EXPECT_EQ(fs.metrics().lazy_step_loads.load(), loads + 1) << "the evicted step went";
}

TEST_F(RemoteUnloadTest, RetentionDeletesTheObjectsOfAnUnloadedStep) {
  MakeRun();
  FileSystem& fs = env_.fs();
  ASSERT_EQ(Unload(), 3u);
  ASSERT_TRUE(store_.Peek("exp/step1/f4").has_value());
  ASSERT_TRUE(fs.SetXattr(run_, "user.ckptfs.keep_last", "1", 0).ok());
  shared_->FailPutsOf("exp/step0/f0", false);
  steps_.push_back(MakeStep(4));
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_TRUE(tier_->RunOnceForTest().ok());  // the remote deletions
  ASSERT_EQ(Persisted(steps_[4]), "true");
  EXPECT_EQ(fs.Lookup(run_, "step1").err(), ENOENT);
  for (int f = 0; f < kFiles; f++) {
    EXPECT_FALSE(store_.Peek("exp/step1/f" + std::to_string(f)).has_value()) << f;
    EXPECT_FALSE(store_.Peek("exp/step2/f" + std::to_string(f)).has_value()) << f;
  }
  EXPECT_FALSE(store_.Peek("exp/step1/.ckptfs-commit.json").has_value());
  EXPECT_EQ(fs.ResidentBytes(), kFiles * kFileBytes) << "only step4 is left";
}

TEST_F(RemoteUnloadTest, APartlyFetchedFileIsDroppedWithItsStepAndFetchedAgain) {
  // Another machine reads part of a large file of a step it imported.
  FileSystem& fs = env_.fs();
  run_ = Mkdir(fs, kRootIno, "exp");
  const uint64_t big_step = Mkdir(fs, run_, "step9");
  const std::string big = Pattern(3 * kMiB, 'z');
  WriteFile(fs, big_step, "big", big);
  fs.RequestCommit(big_step);
  env_.DrainCommits();
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_EQ(Persisted(big_step), "true");

  FileSystemOptions o = Options();
  o.max_cached_inodes = 1;  // unloads whatever may go
  FsEnv cold(o);
  RemoteTierOptions to;
  to.fetch_chunk = kMiB;
  RemoteTier tier(&cold.fs(), cold.fs().data(), std::make_unique<SharedStore>(&store_),
                  &cold.events, to);
  cold.fs().SetTierHooks(&tier);
  ASSERT_EQ(*tier.ImportPersistedSteps(), 1u);
  FileSystem& c = cold.fs();
  const uint64_t exp = c.Lookup(kRootIno, "exp")->ino;
  const uint64_t step = c.Lookup(exp, "step9")->ino;
  const uint64_t file = c.Lookup(step, "big")->ino;
  auto h = c.OpenFile(file, O_RDONLY);
  ASSERT_TRUE(h.ok());
  std::string buf(100, '\0');
  ASSERT_TRUE(c.Read(h->fh, buf.data(), buf.size(), 2 * kMiB + 10).ok());
  EXPECT_EQ(buf, big.substr(2 * kMiB + 10, 100));
  ASSERT_TRUE(c.Release(h->fh).ok());
  ASSERT_TRUE(tier.RunOnceForTest().ok());
  EXPECT_TRUE(Exists(c, file)) << "one chunk fetched";
  EXPECT_EQ(c.ResidentBytes(), 0u) << "not resident: fetched in part";

  // Over the budget: the step goes, and the chunk with it.
  c.ForgetEverythingForTest();
  auto n = c.UnloadIdleSteps();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1u);
  EXPECT_FALSE(Exists(c, file)) << "the partly fetched data went with the step";
  EXPECT_EQ(c.ResidentBytes(), 0u);

  // Read again: every byte from the bucket.
  auto again = c.Lookup(step, "big");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ino, file);
  EXPECT_EQ(ReadFile(c, file), big.substr(0, kMiB));
  cold.fs().SetTierHooks(nullptr);
}

}  // namespace
}  // namespace ckptfs
