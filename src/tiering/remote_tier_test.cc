// The remote tier over the in-memory object store: uploads before and at
// commit, commit objects written last, persisted state, remote deletion of
// pruned and abandoned steps, crashes mid-upload, an unavailable remote,
// cold-mount import, eviction and read-through, renames of persisted steps,
// and writers meeting a full cache.
#include "tiering/remote_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/crc32c.h"
#include "formats/commit_object.h"
#include "tiering/remote_tier_test_util.h"

namespace ckptfs {
namespace {

using testing::FsEnv;
using testing::kMiB;
using testing::kRoot;
using testing::Mkdir;
using testing::Pattern;
using testing::ReadFile;
using testing::RemoteOptions;
using testing::RemoteTierTest;
using testing::SharedStore;
using testing::WriteFile;

TEST_F(RemoteTierTest, ClosedFilesGoUpBeforeCommitAndTheCommitObjectLast) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t step = Mkdir(fs, run, "step1");
  const std::string big = Pattern(2 * kMiB + 12345, 'a');  // three parts
  WriteFile(fs, step, "big.bin", big);
  const uint64_t sub = Mkdir(fs, step, "sub");
  WriteFile(fs, sub, "small", "hello");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("run/step1/big.bin"), big);
  EXPECT_EQ(Object("run/step1/sub/small"), "hello");
  EXPECT_GE(store_.complete_calls(), 1u);  // multipart
  // Not committed: no commit object, not persisted.
  EXPECT_FALSE(Has("run/step1/.ckptfs-commit.json"));
  EXPECT_EQ(Xattr(step, "user.ckptfs.persisted"), "false");

  Commit(step);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Xattr(step, "user.ckptfs.persisted"), "true");
  auto obj = DecodeCommitObject(Object("run/step1/.ckptfs-commit.json"), "run/step1");
  ASSERT_TRUE(obj.ok()) << obj.status().ToString();
  ASSERT_EQ(obj->files.size(), 2u);
  EXPECT_EQ(obj->files[0].path, "big.bin");
  EXPECT_EQ(obj->files[0].size, big.size());
  EXPECT_EQ(obj->files[0].crc32c, Crc32c(0, big.data(), big.size()));
  EXPECT_EQ(obj->files[1].path, "sub/small");
  EXPECT_EQ(obj->files[1].crc32c, Crc32c(0, "hello", 5));
  EXPECT_EQ(obj->dirs, std::vector<std::string>{"sub"});
  EXPECT_EQ(obj->step, 1);
  // Nothing was uploaded twice.
  EXPECT_EQ(store_.put_calls(), 2u);  // small + commit object
}

TEST_F(RemoteTierTest, AFileRewrittenAfterItsUploadGoesUpAgain) {
  FileSystem& fs = env_.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  const uint64_t ino = WriteFile(fs, step, "f", "first");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("step1/f"), "first");
  env_.clock.Advance(1000);
  auto o = fs.OpenFile(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE(fs.Write(o->fh, "second", 6, 0).ok());
  ASSERT_TRUE(fs.Release(o->fh).ok());
  Commit(step);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("step1/f"), "second");
  auto obj = DecodeCommitObject(Object("step1/.ckptfs-commit.json"), "step1");
  ASSERT_TRUE(obj.ok());
  EXPECT_EQ(obj->files.at(0).crc32c, Crc32c(0, "second", 6));
}

TEST_F(RemoteTierTest, ADirectoryRenamedIntoAStepNameIsUploadedUnderItsNewName) {
  FileSystem& fs = env_.fs();
  const uint64_t tmp = Mkdir(fs, kRootIno, "step5-tmp");
  WriteFile(fs, tmp, "model.safetensors", "weights");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(store_.object_count(), 0u);  // not a step yet: nothing goes up
  ASSERT_TRUE(fs.Rename(kRootIno, "step5-tmp", kRootIno, "step5", 0).ok());
  env_.DrainCommits();
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("step5/model.safetensors"), "weights");
  EXPECT_TRUE(Has("step5/.ckptfs-commit.json"));
  EXPECT_EQ(store_.object_count(), 2u);
}

TEST_F(RemoteTierTest, AnAbandonedStepLeavesNoCommitObjectAndItsObjectsGoWithIt) {
  FileSystem& fs = env_.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step3");
  WriteFile(fs, step, "a", "aaa");
  WriteFile(fs, step, "b", "bbb");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(store_.object_count(), 2u);
  KillAndRestart();  // step3 becomes incomplete
  EXPECT_EQ(Xattr(step, "user.ckptfs.state"), "incomplete");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_FALSE(Has("step3/.ckptfs-commit.json"));
  ASSERT_TRUE(env_.fs().Unlink(step, "a").ok());
  ASSERT_TRUE(env_.fs().Unlink(step, "b").ok());
  ASSERT_TRUE(env_.fs().Rmdir(kRootIno, "step3").ok());
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(store_.object_count(), 0u);
}

TEST_F(RemoteTierTest, RetentionDeletesPrunedStepsRemotelyCommitObjectFirst) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  ASSERT_TRUE(fs.SetXattr(run, "user.ckptfs.keep_last", "1", 0).ok());
  const uint64_t s1 = Mkdir(fs, run, "step1");
  WriteFile(fs, s1, "w", "one");
  Commit(s1);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_TRUE(Has("run/step1/.ckptfs-commit.json"));
  const uint64_t s2 = Mkdir(fs, run, "step2");
  WriteFile(fs, s2, "w", "two");
  Commit(s2);
  // Step 1 stays while it is the newest persisted step; once step 2 is
  // persisted retention removes it, and its objects go, commit object first.
  EXPECT_EQ(Xattr(s1, "user.ckptfs.state"), "committed");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(fs.Lookup(run, "step1").err(), ENOENT);
  EXPECT_FALSE(Has("run/step1/.ckptfs-commit.json"));
  EXPECT_FALSE(Has("run/step1/w"));
  EXPECT_EQ(Object("run/step2/w"), "two");
  EXPECT_TRUE(Has("run/step2/.ckptfs-commit.json"));
}

TEST_F(RemoteTierTest, AnUnavailableRemoteDelaysPersistenceAndLosesNothing) {
  FileSystem& fs = env_.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  WriteFile(fs, step, "f", Pattern(3 * kMiB, 'x'));
  store_.SetUnavailable(true);
  Commit(step);
  EXPECT_FALSE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Xattr(step, "user.ckptfs.persisted"), "false");
  nlohmann::json status = nlohmann::json::object();
  tier_->AddStatus(&status);
  EXPECT_FALSE(status["remote"]["healthy"].get<bool>());
  EXPECT_FALSE(status["remote"]["last_error"].is_null());
  store_.SetUnavailable(false);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Xattr(step, "user.ckptfs.persisted"), "true");
  EXPECT_EQ(Object("step1/f"), Pattern(3 * kMiB, 'x'));
  status = nlohmann::json::object();
  tier_->AddStatus(&status);
  EXPECT_TRUE(status["remote"]["healthy"].get<bool>());
}

TEST_F(RemoteTierTest, UploadsQueuedBeforeACrashResumeAfterIt) {
  FileSystem& fs = env_.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step7");
  WriteFile(fs, step, "f", Pattern(2 * kMiB, 'q'));
  Commit(step);  // the synced commit batch carries the upload queue
  // A multipart upload was under way when the daemon died.
  store_.FailNext(1, EIO);  // fails the first request: the multipart begins no further
  (void)tier_->RunOnceForTest();
  KillAndRestart();
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Xattr(step, "user.ckptfs.persisted"), "true");
  EXPECT_EQ(Object("step7/f"), Pattern(2 * kMiB, 'q'));
}

TEST_F(RemoteTierTest, AColdMountShowsPersistedStepsAndReadsThemThrough) {
  FileSystem& fs = env_.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "exp");
  const uint64_t step = Mkdir(fs, run, "step100");
  const std::string data = Pattern(3 * kMiB + 5, 'c');
  WriteFile(fs, step, "shard0", data);
  const uint64_t d = Mkdir(fs, step, "optim");
  WriteFile(fs, d, "empty", "");
  ASSERT_TRUE(fs.Symlink(kRoot, step, "link", "shard0").ok());
  Commit(step);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_EQ(Xattr(step, "user.ckptfs.persisted"), "true");

  // Another machine, an hour later: an empty cache on the same remote.
  FsEnv cold(RemoteOptions());
  cold.clock.Advance(3'600'000'000'000);
  RemoteTierOptions o;
  o.fetch_chunk = kMiB;
  RemoteTier tier(&cold.fs(), cold.fs().data(), std::make_unique<SharedStore>(&store_), &cold.events, o);
  cold.fs().SetTierHooks(&tier);
  auto imported = tier.ImportPersistedSteps();
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(*imported, 1u);
  FileSystem& c = cold.fs();
  auto exp = c.Lookup(kRootIno, "exp");
  ASSERT_TRUE(exp.ok());
  auto s = c.Lookup(exp->ino, "step100");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*c.GetXattr(s->ino, "user.ckptfs.state"), "committed");
  EXPECT_EQ(*c.GetXattr(s->ino, "user.ckptfs.persisted"), "true");
  // Directories carry the writing machine's mtime, not the import's
  // (trainers such as Hugging Face order checkpoints by directory mtime).
  EXPECT_EQ(s->attr.st_mtim.tv_sec, fs.GetAttr(step)->attr.st_mtim.tv_sec);
  EXPECT_EQ(s->attr.st_mtim.tv_nsec, fs.GetAttr(step)->attr.st_mtim.tv_nsec);
  EXPECT_EQ(c.GetAttr(c.Lookup(s->ino, "optim")->ino)->attr.st_mtim.tv_sec, s->attr.st_mtim.tv_sec);
  auto latest = c.Readlink(c.Lookup(exp->ino, "latest")->ino);
  EXPECT_EQ(*latest, "step100");
  auto shard = c.Lookup(s->ino, "shard0");
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ(static_cast<uint64_t>(shard->attr.st_size), data.size());
  // Reads at any offset fetch only what they need.
  auto h = c.OpenFile(shard->ino, O_RDONLY);
  ASSERT_TRUE(h.ok());
  std::string buf(100, '\0');
  auto n = c.Read(h->fh, buf.data(), buf.size(), 2 * kMiB + 10);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(buf, data.substr(2 * kMiB + 10, 100));
  EXPECT_EQ(store_.get_calls() - 1, 1u);  // one chunk (plus the commit object)
  std::string all(data.size() + 10, '\0');
  n = c.Read(h->fh, all.data(), all.size(), 0);
  ASSERT_TRUE(n.ok());
  all.resize(*n);
  EXPECT_EQ(all, data);
  ASSERT_TRUE(c.Release(h->fh).ok());
  EXPECT_EQ(*c.Readlink(c.Lookup(s->ino, "link")->ino), "shard0");
  auto opt = c.Lookup(s->ino, "optim");
  ASSERT_TRUE(opt.ok());
  EXPECT_EQ(ReadFile(c, c.Lookup(opt->ino, "empty")->ino), "");
  // Sealed like any committed step, and importing again changes nothing.
  EXPECT_EQ(c.OpenFile(shard->ino, O_WRONLY).err(), EROFS);
  EXPECT_EQ(*tier.ImportPersistedSteps(), 0u);
  // Fully fetched: resident after the control pass, and it survives a
  // restart without the remote.
  ASSERT_TRUE(tier.RunOnceForTest().ok());
  cold.fs().SetTierHooks(nullptr);
  cold.CleanRestart();
  auto again = cold.fs().Lookup(cold.fs().Lookup(kRootIno, "exp")->ino, "step100");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ReadFile(cold.fs(), cold.fs().Lookup(again->ino, "shard0")->ino), data.substr(0, kMiB));
}

std::string StatusJsonOf(FileSystem& fs) {
  auto ctl = fs.Lookup(kRootIno, ".ckptfs");
  if (!ctl.ok()) return "{}";
  auto st = fs.Lookup(ctl->ino, "status.json");
  return st.ok() ? ReadFile(fs, st->ino) : "{}";
}

// status.json's holdings follow the data through the tier: committed, then
// persisted and evictable once uploaded, and no longer held locally once
// evicted (still committed and persisted).
TEST_F(RemoteTierTest, StatusShowsCommittedPersistedAndEvictableBytes) {
  FileSystem& fs = env_.fs();
  const uint64_t step1 = Mkdir(fs, kRootIno, "step1");
  const uint64_t f1 = WriteFile(fs, step1, "f", Pattern(kMiB, 'a'));
  Commit(step1);
  const uint64_t step2 = Mkdir(fs, kRootIno, "step2");
  WriteFile(fs, step2, "f", Pattern(1000, 'b'));  // not committed
  auto cache = nlohmann::json::parse(StatusJsonOf(fs))["cache"];
  EXPECT_EQ(cache["committed_bytes"], kMiB) << cache.dump();
  EXPECT_EQ(cache["writing_bytes"], 1000u) << cache.dump();
  EXPECT_EQ(cache["persisted_bytes"], 0u) << cache.dump();
  EXPECT_EQ(cache["evictable_bytes"], 0u) << cache.dump();
  EXPECT_EQ(cache["local_bytes"], kMiB + 1000) << cache.dump();

  ASSERT_TRUE(tier_->RunOnceForTest().ok());  // uploads, persists step1
  ASSERT_EQ(Xattr(step1, "user.ckptfs.persisted"), "true");
  cache = nlohmann::json::parse(StatusJsonOf(fs))["cache"];
  EXPECT_EQ(cache["persisted_bytes"], kMiB) << cache.dump();
  EXPECT_EQ(cache["evictable_bytes"], kMiB) << cache.dump();

  ASSERT_TRUE(fs.Evict(f1).ok());
  cache = nlohmann::json::parse(StatusJsonOf(fs))["cache"];
  EXPECT_EQ(cache["committed_bytes"], kMiB) << cache.dump();
  EXPECT_EQ(cache["persisted_bytes"], kMiB) << cache.dump();
  EXPECT_EQ(cache["evictable_bytes"], 0u) << cache.dump();
  EXPECT_EQ(cache["local_bytes"], 1000u) << cache.dump();
}

TEST_F(RemoteTierTest, EvictionDropsLeastRecentlyUsedPersistedDataAndReadsFetchItBack) {
  StopTier();
  RemoteTierOptions o;
  o.cache_size = 3 * kMiB + kMiB / 2;
  o.cache_full_wait_ns = 20'000'000'000;
  StartTier(o);
  FileSystem& fs = env_.fs();
  std::vector<uint64_t> files;
  for (int i = 1; i <= 3; i++) {
    const uint64_t step = Mkdir(fs, kRootIno, "step" + std::to_string(i));
    files.push_back(WriteFile(fs, step, "f", Pattern(kMiB + i, static_cast<char>('a' + i))));
    env_.clock.Advance(1000);
    Commit(step);
  }
  ASSERT_TRUE(tier_->RunOnceForTest().ok());  // uploads, persists
  // A fourth megabyte does not fit: the writer waits until eviction (run
  // here by the control pass) makes room.
  const uint64_t step4 = Mkdir(fs, kRootIno, "step4");
  std::atomic<bool> written{false};
  std::thread writer([&] {
    WriteFile(fs, step4, "f", Pattern(kMiB, 'w'));
    written = true;
  });
  for (int i = 0; i < 200 && !written; i++) {
    ASSERT_TRUE(tier_->RunOnceForTest().ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  writer.join();
  EXPECT_LE(fs.ResidentBytes(), o.cache_size);
  nlohmann::json status = nlohmann::json::object();
  tier_->AddStatus(&status);
  EXPECT_GE(status["cache"]["evictions"].get<uint64_t>(), 1u);
  // The data is still all there, fetched from the remote where evicted.
  for (int i = 1; i <= 3; i++) {
    EXPECT_EQ(ReadFile(fs, files[i - 1]), Pattern(kMiB + i, static_cast<char>('a' + i)).substr(0, kMiB));
  }
}

TEST_F(RemoteTierTest, WritersGetEnospcWhenTheCacheIsFullOfUnpersistedData) {
  StopTier();
  RemoteTierOptions o;
  o.cache_size = 2 * kMiB;
  o.cache_full_wait_ns = 50'000'000;
  StartTier(o);
  FileSystem& fs = env_.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  auto c = fs.Create(kRoot, step, "f", 0644, O_WRONLY);
  ASSERT_TRUE(c.ok());
  const std::string mib = Pattern(kMiB, 'z');
  ASSERT_TRUE(fs.Write(c->second.fh, mib.data(), mib.size(), 0).ok());
  ASSERT_TRUE(fs.Write(c->second.fh, mib.data(), mib.size(), kMiB).ok());
  EXPECT_EQ(fs.Write(c->second.fh, mib.data(), mib.size(), 2 * kMiB).err(), ENOSPC);
  ASSERT_TRUE(fs.Release(c->second.fh).ok());
  // What was written before is intact.
  EXPECT_EQ(ReadFile(fs, c->first.ino), mib);
}

TEST_F(RemoteTierTest, ARenamedPersistedStepIsPersistedAgainUnderItsNewPath) {
  FileSystem& fs = env_.fs();
  const uint64_t a = Mkdir(fs, kRootIno, "a");
  const uint64_t step = Mkdir(fs, a, "step1");
  WriteFile(fs, step, "f", "data");
  Commit(step);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_TRUE(Has("a/step1/.ckptfs-commit.json"));
  ASSERT_TRUE(fs.Rename(kRootIno, "a", kRootIno, "b", 0).ok());
  EXPECT_EQ(Xattr(step, "user.ckptfs.persisted"), "false");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_TRUE(tier_->RunOnceForTest().ok());  // old objects go once the new ones exist
  EXPECT_EQ(Xattr(step, "user.ckptfs.persisted"), "true");
  EXPECT_TRUE(Has("b/step1/.ckptfs-commit.json"));
  EXPECT_EQ(Object("b/step1/f"), "data");
  EXPECT_FALSE(Has("a/step1/.ckptfs-commit.json"));
  EXPECT_FALSE(Has("a/step1/f"));
}

TEST_F(RemoteTierTest, ANewFileAtAnOldPathIsNotDeletedWithTheOldOne) {
  FileSystem& fs = env_.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  WriteFile(fs, step, "f", "old");
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_TRUE(fs.Unlink(step, "f").ok());  // queues step1/f for deletion
  WriteFile(fs, step, "f", "new");         // same key, new file
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Object("step1/f"), "new");
}

TEST_F(RemoteTierTest, TheCommitObjectsNameIsReservedInSteps) {
  FileSystem& fs = env_.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  EXPECT_EQ(fs.Create(kRoot, step, ".ckptfs-commit.json", 0644, O_WRONLY).err(), EPERM);
  WriteFile(fs, step, "x", "1");
  EXPECT_EQ(fs.Rename(step, "x", step, ".ckptfs-commit.json", 0).err(), EPERM);
  const uint64_t sub = Mkdir(fs, step, "sub");  // only directly in the step
  WriteFile(fs, sub, ".ckptfs-commit.json", "fine");
}

TEST(PartSize, FitsTenThousandParts) {
  EXPECT_EQ(PartSizeFor(1, 8 * kMiB), 8 * kMiB);
  EXPECT_EQ(PartSizeFor(80 * kMiB * 1000, 8 * kMiB), 8 * kMiB);
  const uint64_t five_tib = 5ULL << 40;
  const uint64_t part = PartSizeFor(five_tib, 8 * kMiB);
  EXPECT_LE((five_tib + part - 1) / part, 10000u);
  EXPECT_EQ(part % kMiB, 0u);
}

}  // namespace
}  // namespace ckptfs
