#include "namespace/step_book.h"

#include <gtest/gtest.h>

#include "manifest/schema.h"

namespace ckptfs {
namespace {

// root/run/step_a/sub and root/run/step_b (committed, newer), root/other.
class StepBookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = Dir(kRootIno, 0, "");
    run_ = Dir(2, kRootIno, "run");
    step_a_ = Dir(3, 2, "step_a");
    sub_ = Dir(4, 3, "sub");
    step_b_ = Dir(5, 2, "step_b");
    other_ = Dir(6, kRootIno, "other");
    const timespec now{};
    ManifestBatch links;
    inodes_.AddChild(root_, "run", run_, now, &links);
    inodes_.AddChild(run_, "step_a", step_a_, now, &links);
    inodes_.AddChild(step_a_, "sub", sub_, now, &links);
    inodes_.AddChild(run_, "step_b", step_b_, now, &links);
    inodes_.AddChild(root_, "other", other_, now, &links);
  }
  Inode* Dir(uint64_t ino, uint64_t parent, const std::string& name) {
    Inode inode;
    inode.rec.ino = ino;
    inode.rec.mode = S_IFDIR | 0755;
    inode.rec.nlink = 2;
    inode.rec.parent = parent;
    inode.name = name;
    return inodes_.Insert(std::move(inode));
  }
  InodeTable inodes_;
  StepBook book_;
  Inode *root_, *run_, *step_a_, *sub_, *step_b_, *other_;
};

TEST_F(StepBookTest, AnInodeBelongsToTheStepAboveIt) {
  ManifestBatch batch;
  book_.AddWriting(3, 10, 100, &batch);
  EXPECT_EQ(batch.size(), 1u);
  EXPECT_EQ(book_.Find(3)->state, StepState::kWriting);
  EXPECT_EQ(book_.StepOf(inodes_, 4), 3u);  // sub
  EXPECT_EQ(book_.StepOf(inodes_, 3), 3u);  // the step itself
  EXPECT_EQ(book_.StepOf(inodes_, 2), 0u);  // the run is no step
  EXPECT_EQ(book_.StepOf(inodes_, 6), 0u);
  EXPECT_EQ(book_.StepOf(inodes_, 99), 0u);  // unknown inode
  EXPECT_EQ(book_.Runtime(3).last_activity, 100);
}

TEST_F(StepBookTest, SealedMeansCommittedOrBeingDeleted) {
  ManifestBatch batch;
  book_.AddWriting(3, 10, 0, &batch);
  EXPECT_FALSE(book_.IsSealed(3));
  book_.Commit(3, CommitFacts{}, &batch);
  EXPECT_TRUE(book_.IsSealed(3));
  ASSERT_TRUE(book_.MarkDeleting(3, &batch));
  EXPECT_TRUE(book_.IsSealed(3));
  book_.AddWriting(5, 20, 0, &batch);
  book_.MarkBroken(5, "bad metadata", &batch);
  EXPECT_FALSE(book_.IsSealed(5));
  EXPECT_FALSE(book_.IsSealed(2));
}

TEST_F(StepBookTest, LatestIsTheHighestCommittedNumber) {
  ManifestBatch batch;
  EXPECT_EQ(book_.LatestOf(inodes_, 2), 0u);
  book_.AddWriting(3, 10, 0, &batch);
  book_.Commit(3, CommitFacts{}, &batch);
  book_.AddWriting(5, 20, 0, &batch);
  EXPECT_EQ(book_.LatestOf(inodes_, 2), 3u);  // 20 is not committed yet
  book_.Commit(5, CommitFacts{}, &batch);
  EXPECT_EQ(book_.LatestOf(inodes_, 2), 5u);
  EXPECT_EQ(book_.LatestOf(inodes_, 6), 0u);
}

TEST_F(StepBookTest, RemovingDropsRecordRuntimeAndManifestKey) {
  ManifestBatch batch;
  book_.AddWriting(3, 10, 0, &batch);
  book_.Runtime(3).commit_wanted = true;
  ManifestBatch removal;
  EXPECT_TRUE(book_.Remove(3, &removal));
  EXPECT_EQ(book_.Find(3), nullptr);
  EXPECT_EQ(book_.FindRuntime(3), nullptr);
  ASSERT_EQ(removal.size(), 1u);
  EXPECT_EQ(removal.ops()[0].space, KeySpace::kSteps);
  EXPECT_FALSE(removal.ops()[0].value.has_value());
  EXPECT_FALSE(book_.Remove(3, &removal));  // no step: nothing written
  EXPECT_EQ(removal.size(), 1u);
}

// Each transition writes the record it leaves behind into the batch, and
// the commit records what it learnt and ends the pending request.
TEST_F(StepBookTest, ACommitRecordsItsFactsAndCanBeUndone) {
  ManifestBatch batch;
  book_.AddWriting(3, 10, 0, &batch);
  book_.Find(3)->pending_commit = kPendingCommit;
  book_.Find(3)->error = "waiting for __1_0.distcp";
  CommitFacts facts;
  facts.committed_at = {1700000000, 5};
  facts.bytes = 4096;
  facts.files = 2;
  facts.session = 77;
  facts.best_ref = "step5";
  ManifestBatch commit;
  const StepRecord before = book_.Commit(3, facts, &commit);
  ASSERT_EQ(commit.size(), 1u);
  EXPECT_EQ(commit.ops()[0].space, KeySpace::kSteps);
  const StepRecord& rec = *book_.Find(3);
  EXPECT_EQ(rec.state, StepState::kCommitted);
  EXPECT_EQ(rec.step, 10);
  EXPECT_EQ(rec.bytes, 4096u);
  EXPECT_EQ(rec.files, 2u);
  EXPECT_EQ(rec.session, 77u);
  EXPECT_EQ(rec.best_ref, "step5");
  EXPECT_EQ(rec.pending_commit, 0);
  EXPECT_TRUE(rec.error.empty());
  EXPECT_FALSE(rec.persisted);
  // The batch failed: the record before comes back.
  book_.Restore(3, before);
  EXPECT_EQ(book_.Find(3)->state, StepState::kWriting);
  EXPECT_EQ(book_.Find(3)->error, "waiting for __1_0.distcp");
}

TEST_F(StepBookTest, OnlyAFinishedStepTurnsIntoADeletion) {
  ManifestBatch batch;
  book_.AddWriting(3, 10, 0, &batch);
  ManifestBatch deletion;
  // A trainer deleting its own files while writing deletes no step.
  EXPECT_FALSE(book_.MarkDeleting(3, &deletion));
  EXPECT_EQ(deletion.size(), 0u);
  book_.MarkIncomplete(3, "the daemon stopped", &batch);
  EXPECT_EQ(book_.Find(3)->state, StepState::kIncomplete);
  EXPECT_EQ(book_.Find(3)->error, "the daemon stopped");
  EXPECT_TRUE(book_.MarkDeleting(3, &deletion));
  EXPECT_EQ(book_.Find(3)->state, StepState::kDeleting);
  EXPECT_TRUE(book_.Find(3)->error.empty());
  EXPECT_EQ(deletion.size(), 1u);
  EXPECT_FALSE(book_.MarkDeleting(3, &deletion));   // already deleting
  EXPECT_FALSE(book_.MarkDeleting(99, &deletion));  // no step
  EXPECT_EQ(deletion.size(), 1u);
}

TEST_F(StepBookTest, OnlyACommittedStepBecomesPersisted) {
  ManifestBatch batch;
  book_.AddWriting(3, 10, 0, &batch);
  ManifestBatch persist;
  EXPECT_FALSE(book_.SetPersisted(3, true, &persist));
  book_.Commit(3, CommitFacts{}, &batch);
  EXPECT_TRUE(book_.SetPersisted(3, true, &persist));
  EXPECT_TRUE(book_.Find(3)->persisted);
  EXPECT_FALSE(book_.SetPersisted(3, true, &persist));  // no change, nothing written
  EXPECT_EQ(persist.size(), 1u);
  ASSERT_TRUE(book_.MarkDeleting(3, &batch));
  EXPECT_TRUE(book_.SetPersisted(3, false, &persist));  // any step may stop being so
  EXPECT_EQ(persist.size(), 2u);
}

TEST_F(StepBookTest, AnImportedStepArrivesCommittedAndPersisted) {
  ManifestBatch batch;
  CommitFacts facts;
  facts.files = 8;
  facts.persisted = true;
  const StepRecord& rec = book_.AddCommitted(5, 20, facts, 42, &batch);
  EXPECT_EQ(rec.state, StepState::kCommitted);
  EXPECT_EQ(rec.step, 20);
  EXPECT_TRUE(rec.persisted);
  EXPECT_EQ(book_.Runtime(5).last_activity, 42);
  EXPECT_EQ(book_.LatestOf(inodes_, 2), 5u);
}

TEST(StepRuntime, EndingARequestKeepsActivityAndAttempts) {
  StepRuntime rt;
  rt.commit_wanted = rt.renamed = rt.forced = rt.explicit_commit = rt.direct = rt.settling = true;
  rt.session = 7;
  rt.last_activity = 5;
  rt.outcome_gen = 3;
  rt.EndRequest();
  EXPECT_FALSE(rt.commit_wanted || rt.renamed || rt.forced || rt.explicit_commit || rt.direct ||
               rt.settling);
  EXPECT_EQ(rt.session, 0u);
  EXPECT_EQ(rt.last_activity, 5);
  EXPECT_EQ(rt.outcome_gen, 3u);
}

}  // namespace
}  // namespace ckptfs
