// A remote mount reads only what its tier must know at mount: persisted
// steps stay in the manifest until something looks inside them, with their
// object records, and the background pass counts what they hold locally
// (src/namespace/filesystem_lazy_tier.cc).
#include <gtest/gtest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "manifest/schema.h"
#include "tiering/remote_tier.h"
#include "tiering/remote_tier_test_util.h"

namespace ckptfs {
namespace {

using testing::kMiB;
using testing::Mkdir;
using testing::Pattern;
using testing::ReadFile;
using testing::WriteFile;

constexpr int kFiles = 10;
constexpr size_t kFileBytes = 1000;

class RemoteLazyMountTest : public testing::RemoteTierTest {
 protected:
  static std::string Data(int step, int file) {
    return Pattern(kFileBytes, static_cast<char>('a' + step * kFiles + file));
  }
  static std::string Name(int file) { return "f" + std::to_string(file); }
  // run/step<i> with kFiles files, committed.
  uint64_t MakeStep(int i) {
    FileSystem& fs = env_.fs();
    const uint64_t step = Mkdir(fs, run_, "step" + std::to_string(i));
    for (int f = 0; f < kFiles; f++) WriteFile(fs, step, Name(f), Data(i, f));
    Commit(step);
    return step;
  }
  uint64_t Ino(uint64_t dir, const std::string& name) {
    auto e = env_.fs().Lookup(dir, name);
    EXPECT_TRUE(e.ok()) << name << ": " << e.status().ToString();
    return e.ok() ? e->ino : 0;
  }
  // exp/step1 persisted and resident, exp/step2 persisted and evicted,
  // exp/step3 committed but not in the bucket (its first upload fails).
  void MakeRun() {
    FileSystem& fs = env_.fs();
    run_ = Mkdir(fs, kRootIno, "exp");
    shared_->FailPutsOf("exp/step3/f0", true);
    for (int i = 1; i <= 3; i++) steps_[i] = MakeStep(i);
    (void)tier_->RunOnceForTest();
    ASSERT_EQ(Xattr(steps_[1], "user.ckptfs.persisted"), "true");
    ASSERT_EQ(Xattr(steps_[2], "user.ckptfs.persisted"), "true");
    ASSERT_EQ(Xattr(steps_[3], "user.ckptfs.persisted"), "false");
    for (int f = 0; f < kFiles; f++) ASSERT_TRUE(fs.Evict(Ino(steps_[2], Name(f))).ok());
    ASSERT_EQ(fs.ResidentBytes(), 2 * kFiles * kFileBytes);
  }
  void CleanRemount() {
    StopTier();
    env_.CleanRestart();
    StartTier(options_);
  }
  // A power loss cut the local copy of ino, which its upload left unsynced,
  // to `size` bytes while the daemon was down.
  void RemountWithCopyCutTo(uint64_t ino, uint64_t size) {
    StopTier();
    env_.Stop();
    {
      auto file = env_.data.Open(ino, false);
      ASSERT_TRUE(file.ok());
      ASSERT_TRUE((*file)->Truncate(size).ok());
    }
    env_.Start();
    StartTier(options_);
  }
  bool HasEvent(const std::string& key, const std::string& value) {
    std::istringstream lines(env_.events.Render());
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json e = nlohmann::json::parse(line);
      if (e.contains(key) && e[key] == value) return true;
    }
    return false;
  }

  uint64_t run_ = 0;
  uint64_t steps_[4] = {};
};

TEST_F(RemoteLazyMountTest, PersistedStepsStayUnloadedAndCountWhatTheyHoldOnceChecked) {
  MakeRun();
  const uint64_t f3_of_step2 = Ino(steps_[2], Name(3));
  CleanRemount();
  FileSystem& fs = env_.fs();

  // In memory: the root, the run, its three steps and step3's files (it
  // still has uploads to do); the persisted steps' files are not.
  EXPECT_EQ(fs.InodeCountForTest(), 5u + kFiles);
  EXPECT_EQ(fs.metrics().lazy_step_loads.load(), 0u);
  // The import of what the bucket has and this cache not reads no commit
  // object of a step it has, and loads none.
  const size_t gets_before_import = store_.get_calls();
  auto imported = tier_->ImportPersistedSteps();
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(*imported, 0u);
  EXPECT_EQ(store_.get_calls(), gets_before_import);
  EXPECT_EQ(fs.metrics().lazy_step_loads.load(), 0u);
  // Until the background pass read their object records, the unloaded
  // steps count at their full size: never less than they hold.
  EXPECT_EQ(fs.ResidentBytes(), 3 * kFiles * kFileBytes);
  env_.FinishBackgroundChecks();
  EXPECT_EQ(fs.ResidentBytes(), 2 * kFiles * kFileBytes) << "step2 was evicted";
  EXPECT_EQ(fs.metrics().lazy_step_loads.load(), 0u) << "checked from the manifest";
  // Its evicted files are not "lost data": they are in the bucket.
  EXPECT_FALSE(HasEvent("event", "error"));
  EXPECT_EQ(Xattr(steps_[2], "user.ckptfs.state"), "committed");

  // One candidate for step1 with what it holds; none for step2.
  bool step1_found = false;
  for (const auto& c : fs.EvictionCandidates()) {
    EXPECT_NE(c.ino, steps_[2]);
    if (c.ino != steps_[1]) continue;
    step1_found = true;
    EXPECT_EQ(c.bytes, kFiles * kFileBytes);
  }
  EXPECT_TRUE(step1_found);

  // step1 reads from the local disk; step2 from the bucket, with the same
  // inode numbers as before the remount.
  size_t gets = store_.get_calls();
  EXPECT_EQ(ReadFile(fs, Ino(steps_[1], Name(4))), Data(1, 4));
  EXPECT_EQ(store_.get_calls(), gets);
  EXPECT_EQ(Ino(steps_[2], Name(3)), f3_of_step2);
  EXPECT_EQ(ReadFile(fs, f3_of_step2), Data(2, 3));
  EXPECT_GT(store_.get_calls(), gets);
  EXPECT_EQ(fs.metrics().lazy_step_loads.load(), 2u);
  EXPECT_EQ(Xattr(steps_[1], "user.ckptfs.persisted"), "true");

  // step3's uploads were loaded with it: they go once the bucket takes them.
  shared_->FailPutsOf("exp/step3/f0", false);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Xattr(steps_[3], "user.ckptfs.persisted"), "true");
  EXPECT_EQ(Object("exp/step3/f0"), Data(3, 0));
}

TEST_F(RemoteLazyMountTest, AQueuedFileOfAPersistedStepLoadsItsStepAtMount) {
  MakeRun();
  FileSystem& fs = env_.fs();
  const uint64_t sub = Mkdir(fs, kRootIno, "other");
  const uint64_t step9 = Mkdir(fs, sub, "step9");
  const uint64_t deep = Mkdir(fs, step9, "model");
  WriteFile(fs, deep, "w", Data(9, 0));
  Commit(step9);
  (void)tier_->RunOnceForTest();  // step3's upload still fails
  ASSERT_EQ(Xattr(step9, "user.ckptfs.persisted"), "true");
  // A queue record that outlived its upload (what a persisted step never
  // holds, so a mount must not trust that it does not).
  const uint64_t w = Ino(deep, "w");
  ManifestBatch batch;
  batch.Put(KeySpace::kUploads, InoKey(w), EncodeUpload(UploadRecord{kFileBytes, 1, "", ""}));
  ASSERT_TRUE(env_.manifest.Write(batch, true).ok());

  CleanRemount();
  FileSystem& now = env_.fs();
  // step9 (and the directory inside it) loaded at mount, step1 and step2 not.
  EXPECT_EQ(now.InodeCountForTest(), 5u + kFiles + 4u);
  EXPECT_EQ(Ino(Ino(Ino(Ino(kRootIno, "other"), "step9"), "model"), "w"), w);
  EXPECT_EQ(now.metrics().lazy_step_loads.load(), 0u);
  EXPECT_EQ(ReadFile(now, w), Data(9, 0));
}

TEST_F(RemoteLazyMountTest, ALocalCopyCutShortInAnUnloadedStepIsReadFromTheBucket) {
  MakeRun();
  const uint64_t f5 = Ino(steps_[1], Name(5));
  ASSERT_NO_FATAL_FAILURE(RemountWithCopyCutTo(f5, 100));
  FileSystem& fs = env_.fs();
  env_.FinishBackgroundChecks();
  EXPECT_EQ(fs.metrics().lazy_step_loads.load(), 0u) << "checked from the manifest";
  EXPECT_TRUE(HasEvent("kind", "local_copy_lost"));
  EXPECT_FALSE(HasEvent("event", "error"));
  EXPECT_EQ(fs.ResidentBytes(), (2 * kFiles - 1) * kFileBytes);
  EXPECT_EQ(Xattr(steps_[1], "user.ckptfs.state"), "committed") << "not broken: the bucket has it";
  const size_t gets = store_.get_calls();
  EXPECT_EQ(Ino(steps_[1], Name(5)), f5);
  EXPECT_EQ(ReadFile(fs, f5), Data(1, 5));
  EXPECT_GT(store_.get_calls(), gets);
}

TEST_F(RemoteLazyMountTest, AStepReadBeforeTheBackgroundPassIsCheckedAsItLoads) {
  MakeRun();
  const uint64_t f5 = Ino(steps_[1], Name(5));
  ASSERT_NO_FATAL_FAILURE(RemountWithCopyCutTo(f5, 0));
  FileSystem& fs = env_.fs();
  // Looked into first: the check runs as the step loads, and the count
  // moves from the step's estimate to its files.
  EXPECT_EQ(ReadFile(fs, Ino(steps_[1], Name(5))), Data(1, 5));
  EXPECT_TRUE(HasEvent("kind", "local_copy_lost"));
  EXPECT_EQ(Xattr(steps_[1], "user.ckptfs.state"), "committed");
  env_.FinishBackgroundChecks();
  EXPECT_FALSE(HasEvent("event", "error"));
  // step1's nine files and the one just fetched (marked resident by the
  // tier's next pass); step2 evicted.
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(fs.ResidentBytes(), 2 * kFiles * kFileBytes);
}

}  // namespace
}  // namespace ckptfs
