// Integrity of what the remote tier uploads (issue 15): bodies damaged on
// their way to the store are refused, retried and never recorded; a local
// copy whose bytes are not those whose CRC32C was recorded is not uploaded.
#include <gtest/gtest.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "tiering/commit_object.h"
#include "tiering/remote_tier_test_util.h"

namespace ckptfs {
namespace {

using testing::kMiB;
using testing::Mkdir;
using testing::Pattern;
using testing::RemoteTierTest;
using testing::WriteFile;

TEST_F(RemoteTierTest, UploadsDamagedOnTheWayAreRetriedAndNeverRecorded) {
  FileSystem& fs = env_.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  const std::string big = Pattern(2 * kMiB + 999, 'b');  // multipart: three parts
  const std::string small = Pattern(1000, 's');
  WriteFile(fs, step, "big.bin", big);
  WriteFile(fs, step, "small.bin", small);
  Commit(step);
  // Every upload body of the first round arrives with a bit flipped.
  store_.CorruptNextUploads(4);
  EXPECT_FALSE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Xattr(step, "user.ckptfs.persisted"), "false");
  EXPECT_FALSE(Has("step1/.ckptfs-commit.json"));
  // Whatever got through is intact.
  if (Has("step1/small.bin")) EXPECT_EQ(Object("step1/small.bin"), small);
  if (Has("step1/big.bin")) EXPECT_EQ(Object("step1/big.bin"), big);
  for (int i = 0; i < 5 && Xattr(step, "user.ckptfs.persisted") != "true"; i++) (void)tier_->RunOnceForTest();
  ASSERT_EQ(Xattr(step, "user.ckptfs.persisted"), "true");
  EXPECT_EQ(Object("step1/big.bin"), big);
  EXPECT_EQ(Object("step1/small.bin"), small);
  EXPECT_EQ(store_.UploadChecksumMismatches(), 4u);
  auto obj = DecodeCommitObject(Object("step1/.ckptfs-commit.json"), "step1");
  ASSERT_TRUE(obj.ok()) << obj.status().ToString();
  ASSERT_EQ(obj->files.size(), 2u);
  EXPECT_EQ(obj->files[0].crc32c, Crc32c(0, big.data(), big.size()));
  EXPECT_EQ(obj->files[1].crc32c, Crc32c(0, small.data(), small.size()));
  nlohmann::json status = nlohmann::json::object();
  tier_->AddStatus(&status);
  EXPECT_EQ(status["remote"]["upload_checksum_mismatches"].get<uint64_t>(), 4u);
}

TEST_F(RemoteTierTest, WithoutTheStoresCheckTheDamageWouldBePersisted) {
  // The control for the test above: the fault is real.
  FileSystem& fs = env_.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  const std::string small = Pattern(1000, 's');
  WriteFile(fs, step, "small.bin", small);
  Commit(step);
  store_.SetVerifyUploads(false);
  store_.CorruptNextUploads(1);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  EXPECT_EQ(Xattr(step, "user.ckptfs.persisted"), "true");
  ASSERT_TRUE(Has("step1/small.bin"));
  EXPECT_NE(Object("step1/small.bin"), small);
}

TEST_F(RemoteTierTest, ALocalCopyThatNoLongerHasItsRecordedChecksumIsNotUploaded) {
  FileSystem& fs = env_.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step1");
  for (const uint64_t size : {uint64_t{4096}, 2 * kMiB + 5}) {  // one PUT, then multipart
    const std::string name = "f" + std::to_string(size);
    const std::string data = Pattern(size, 'f');
    auto f = fs.OpenForFastPath({0, 0, {}}, "step1/" + name, 0644);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_EQ(pwrite(f->fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
    close(f->fd);
    ASSERT_TRUE(fs.FinishFastPath(f->fh, data.size(), Crc32c(0, data.data(), data.size())).ok());
    ASSERT_TRUE(fs.Release(f->fh).ok());
    // The backing file changes behind ckptfs's back (a disk error, a
    // descriptor kept): same size, one byte different.
    auto backing = fs.data()->Open(f->ino, false);
    ASSERT_TRUE(backing.ok());
    ASSERT_TRUE((*backing)->PWrite("X", 1, size / 2).ok());
    const uint64_t events_before = env_.events.Counts()["error"];
    (void)tier_->RunOnceForTest();
    EXPECT_FALSE(Has("step1/" + name)) << name;
    EXPECT_GT(env_.events.Counts()["error"], events_before);
    const std::string log = env_.events.Render();
    EXPECT_NE(log.find("\"kind\":\"checksum_mismatch\""), std::string::npos);
    EXPECT_NE(log.find("step1/" + name), std::string::npos);
    EXPECT_NE(log.find("the local copy has CRC32C"), std::string::npos) << log;
  }
  EXPECT_EQ(store_.abort_calls() > 0, true);  // the multipart upload was not completed
}

}  // namespace
}  // namespace ckptfs
