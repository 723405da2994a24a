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
    auto inode = std::make_unique<Inode>();
    inode->rec.ino = ino;
    inode->rec.mode = S_IFDIR | 0755;
    inode->rec.nlink = 2;
    inode->rec.parent = parent;
    inode->name = name;
    return inodes_.Insert(std::move(inode));
  }
  static StepRecord Step(int64_t number, StepState state) {
    StepRecord rec;
    rec.step = number;
    rec.state = state;
    return rec;
  }

  InodeTable inodes_;
  StepBook book_;
  Inode *root_, *run_, *step_a_, *sub_, *step_b_, *other_;
};

TEST_F(StepBookTest, AnInodeBelongsToTheStepAboveIt) {
  ManifestBatch batch;
  book_.Add(3, Step(10, StepState::kWriting), 100, &batch);
  EXPECT_EQ(batch.size(), 1u);
  EXPECT_EQ(book_.StepOf(inodes_, 4), 3u);  // sub
  EXPECT_EQ(book_.StepOf(inodes_, 3), 3u);  // the step itself
  EXPECT_EQ(book_.StepOf(inodes_, 2), 0u);  // the run is no step
  EXPECT_EQ(book_.StepOf(inodes_, 6), 0u);
  EXPECT_EQ(book_.StepOf(inodes_, 99), 0u);  // unknown inode
  EXPECT_EQ(book_.Runtime(3).last_activity, 100);
}

TEST_F(StepBookTest, SealedMeansCommittedOrBeingDeleted) {
  ManifestBatch batch;
  book_.Add(3, Step(10, StepState::kWriting), 0, &batch);
  EXPECT_FALSE(book_.IsSealed(3));
  book_.Find(3)->state = StepState::kCommitted;
  EXPECT_TRUE(book_.IsSealed(3));
  book_.Find(3)->state = StepState::kDeleting;
  EXPECT_TRUE(book_.IsSealed(3));
  book_.Find(3)->state = StepState::kBroken;
  EXPECT_FALSE(book_.IsSealed(3));
  EXPECT_FALSE(book_.IsSealed(2));
}

TEST_F(StepBookTest, LatestIsTheHighestCommittedNumber) {
  ManifestBatch batch;
  EXPECT_EQ(book_.LatestOf(inodes_, 2), 0u);
  book_.Add(3, Step(10, StepState::kCommitted), 0, &batch);
  book_.Add(5, Step(20, StepState::kWriting), 0, &batch);
  EXPECT_EQ(book_.LatestOf(inodes_, 2), 3u);  // 20 is not committed yet
  book_.Find(5)->state = StepState::kCommitted;
  EXPECT_EQ(book_.LatestOf(inodes_, 2), 5u);
  EXPECT_EQ(book_.LatestOf(inodes_, 6), 0u);
}

TEST_F(StepBookTest, RemovingDropsRecordRuntimeAndManifestKey) {
  ManifestBatch batch;
  book_.Add(3, Step(10, StepState::kWriting), 0, &batch);
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

TEST(StepRuntime, EndingARequestKeepsActivityAndAttempts) {
  StepRuntime rt;
  rt.commit_wanted = rt.renamed = rt.forced = rt.direct = rt.settling = true;
  rt.session = 7;
  rt.last_activity = 5;
  rt.outcome_gen = 3;
  rt.EndRequest();
  EXPECT_FALSE(rt.commit_wanted || rt.renamed || rt.forced || rt.direct || rt.settling);
  EXPECT_EQ(rt.session, 0u);
  EXPECT_EQ(rt.last_activity, 5);
  EXPECT_EQ(rt.outcome_gen, 3u);
}

}  // namespace
}  // namespace ckptfs
