// Transaction on its own: one change, one batch, written once; an ending
// without a write still records what the change gathered; a commit's
// discardable write leaves nothing behind on failure.
#include "namespace/transaction.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "common/clock.h"
#include "control/event_log.h"
#include "manifest/memory_manifest_store.h"

namespace ckptfs {
namespace {

class TransactionTest : public ::testing::Test {
 protected:
  std::optional<std::string> Meta(const std::string& key) {
    auto v = store_.Get(KeySpace::kMeta, key);
    EXPECT_TRUE(v.ok());
    return v.ok() ? *v : std::nullopt;
  }

  MemoryManifestStore store_;
  ManualClock clock_;
  EventLog events_;
  ManifestJournal journal_{&store_, &clock_, &events_};
};

TEST_F(TransactionTest, WritesItsRecordsAsOneBatch) {
  {
    Transaction txn(&journal_);
    txn.batch()->Put(KeySpace::kMeta, "a", "1");
    txn.batch()->Put(KeySpace::kMeta, "b", "2");
    ASSERT_TRUE(txn.Write().ok());
    // Buffered: in the store, not yet durable.
    EXPECT_EQ(store_.unsynced_batches(), 1u);
  }
  EXPECT_EQ(Meta("a"), "1");
  EXPECT_EQ(Meta("b"), "2");
  // The end of scope after a write writes nothing more.
  EXPECT_EQ(store_.unsynced_batches(), 1u);
}

TEST_F(TransactionTest, SyncedWriteIsDurable) {
  Transaction txn(&journal_);
  txn.batch()->Put(KeySpace::kMeta, "a", "1");
  ASSERT_TRUE(txn.WriteSynced().ok());
  EXPECT_EQ(store_.unsynced_batches(), 0u);
  store_.SimulateCrash(0);
  EXPECT_EQ(Meta("a"), "1");
}

TEST_F(TransactionTest, AnEmptyTransactionWritesNothing) {
  {
    Transaction txn(&journal_);
    EXPECT_TRUE(txn.empty());
    ASSERT_TRUE(txn.Write().ok());
  }
  { Transaction unused(&journal_); }
  EXPECT_EQ(store_.unsynced_batches(), 0u);
}

TEST_F(TransactionTest, EndingWithoutAWriteStillRecordsTheChange) {
  // An error return after part of a change was made: the image holds that
  // part, so the manifest gets it too.
  {
    Transaction txn(&journal_);
    txn.batch()->Put(KeySpace::kMeta, "dir", "made");
  }
  EXPECT_EQ(Meta("dir"), "made");
  EXPECT_EQ(store_.unsynced_batches(), 1u);
}

TEST_F(TransactionTest, AFailedWriteIsKeptAndWrittenOnRecovery) {
  store_.FailWritesAfter(0, ENOSPC);
  {
    Transaction txn(&journal_);
    txn.batch()->Put(KeySpace::kMeta, "a", "1");
    EXPECT_EQ(txn.Write().err(), ENOSPC);
  }
  EXPECT_EQ(Meta("a"), std::nullopt);
  store_.ClearFailure();
  ASSERT_TRUE(journal_.TryRecover());
  EXPECT_EQ(Meta("a"), "1");
}

TEST_F(TransactionTest, ADiscardableWriteLeavesNothingOnFailure) {
  store_.FailWritesAfter(0, EIO);
  {
    Transaction txn(&journal_);
    txn.batch()->Put(KeySpace::kMeta, "committed", "step5");
    EXPECT_FALSE(txn.WriteSyncedOrDiscard().ok());
  }
  store_.ClearFailure();
  ASSERT_TRUE(journal_.TryRecover());
  // The caller undid its change; the manifest never learns of it.
  EXPECT_EQ(Meta("committed"), std::nullopt);
}

#ifndef NDEBUG
TEST_F(TransactionTest, WritingTwiceIsABug) {
  EXPECT_DEATH(
      {
        Transaction txn(&journal_);
        txn.batch()->Put(KeySpace::kMeta, "a", "1");
        (void)txn.Write();
        (void)txn.Write();
      },
      "written once");
}
#endif

}  // namespace
}  // namespace ckptfs
