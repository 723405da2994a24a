// Integrity of what the remote tier uploads (issue 15): bodies damaged on
// their way to the store are refused, retried and never recorded; a local
// copy whose bytes are not those whose CRC32C was recorded is not uploaded.
#include <gtest/gtest.h>
#include <utility>

#include "common/crc32c.h"
#include "formats/commit_object.h"
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
  if (Has("step1/small.bin")) {
    EXPECT_EQ(Object("step1/small.bin"), small);
  }
  if (Has("step1/big.bin")) {
    EXPECT_EQ(Object("step1/big.bin"), big);
  }
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
  // A persisted step moved to another run goes up again under its new keys,
  // read from the cache: the bytes read must still have the CRC32C the first
  // upload recorded.
  FileSystem& fs = env_.fs();
  const uint64_t a = Mkdir(fs, kRootIno, "a");
  const uint64_t step = Mkdir(fs, a, "step1");
  const std::string small = Pattern(4096, 's');
  const std::string big = Pattern(2 * kMiB + 5, 'b');  // multipart
  const uint64_t small_ino = WriteFile(fs, step, "small", small);
  const uint64_t big_ino = WriteFile(fs, step, "big", big);
  Commit(step);
  ASSERT_TRUE(tier_->RunOnceForTest().ok());
  ASSERT_EQ(Xattr(step, "user.ckptfs.persisted"), "true");
  // The cache copies change behind ckptfs's back (a disk error): same size,
  // one byte different.
  for (const auto& [ino, at] : {std::pair{small_ino, uint64_t{100}}, std::pair{big_ino, kMiB + 7}}) {
    auto backing = fs.data()->Open(ino, false);
    ASSERT_TRUE(backing.ok()) << backing.status().ToString();
    ASSERT_TRUE((*backing)->PWrite("X", 1, at).ok());
  }
  const size_t aborts_before = store_.abort_calls();
  ASSERT_TRUE(fs.Rename(kRootIno, "a", kRootIno, "b", 0).ok());
  for (int i = 0; i < 3; i++) (void)tier_->RunOnceForTest();
  EXPECT_FALSE(Has("b/step1/small"));
  EXPECT_FALSE(Has("b/step1/big"));
  EXPECT_FALSE(Has("b/step1/.ckptfs-commit.json"));
  EXPECT_EQ(Xattr(step, "user.ckptfs.persisted"), "false");
  EXPECT_GT(store_.abort_calls(), aborts_before);  // the multipart upload was not completed
  const std::string log = env_.events.Render();
  EXPECT_NE(log.find("\"kind\":\"checksum_mismatch\""), std::string::npos) << log;
  EXPECT_NE(log.find("b/step1/small"), std::string::npos) << log;
  EXPECT_NE(log.find("b/step1/big"), std::string::npos) << log;
  EXPECT_NE(log.find("the local copy has CRC32C"), std::string::npos) << log;
}

}  // namespace
}  // namespace ckptfs
