#include "namespace/tier_ledger.h"

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

TEST(TierLedger, QueueAndDequeueMirrorTheManifest) {
  TierLedger ledger;
  ManifestBatch batch;
  ledger.QueueUpload(7, 100, 5, &batch);
  ledger.QueueUpload(7, 200, 6, &batch);  // a newer version replaces the queued one
  ASSERT_TRUE(ledger.IsQueued(7));
  EXPECT_EQ(ledger.FindUpload(7)->size, 200u);
  EXPECT_EQ(batch.size(), 2u);
  ledger.SetRunFileWait(7, RunFileWait{200, 6, 2, {3}});

  ManifestBatch out;
  EXPECT_TRUE(ledger.Dequeue(7, &out));
  EXPECT_FALSE(ledger.IsQueued(7));
  EXPECT_EQ(ledger.FindRunFileWait(7), nullptr);  // its wait goes with it
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out.ops()[0].space, KeySpace::kUploads);
  EXPECT_FALSE(out.ops()[0].value.has_value());
  EXPECT_FALSE(ledger.Dequeue(7, &out));
  EXPECT_EQ(out.size(), 1u);
}

TEST(TierLedger, ALiveObjectIsNeverQueuedForDeletion) {
  TierLedger ledger;
  ledger.SetObjectOwner("run/step1/a", 7);
  ManifestBatch batch;
  ledger.QueueRemoteDelete("run/step1/a", /*commit_object=*/false, &batch);
  EXPECT_TRUE(batch.empty());
  // Commit objects are no file's object: always queued.
  ledger.QueueRemoteDelete("run/step1/.ckptfs-commit.json", /*commit_object=*/true, &batch);
  EXPECT_EQ(batch.size(), 1u);
  // Another inode dropping the key changes nothing; the owner does.
  ledger.ForgetObject("run/step1/a", 8);
  EXPECT_TRUE(ledger.IsLiveObject("run/step1/a"));
  ledger.ForgetObject("run/step1/a", 7);
  ledger.QueueRemoteDelete("run/step1/a", false, &batch);
  EXPECT_EQ(batch.size(), 2u);
}

TEST(TierLedger, ClaimsAreCounted) {
  TierLedger ledger;
  ledger.Claim("k");
  ledger.Claim("k");
  ledger.Release("k");
  EXPECT_TRUE(ledger.IsClaimed("k"));
  ledger.Release("k");
  EXPECT_FALSE(ledger.IsClaimed("k"));
  ledger.Release("k");  // more releases than claims: stays unclaimed
  ledger.Claim("k");
  EXPECT_TRUE(ledger.IsClaimed("k"));
}

}  // namespace
}  // namespace ckptfs
