#include "common/pacer.h"

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

TEST(PacerTest, DueAtOnceUntilItFirstRuns) {
  Pacer pacer(10);
  EXPECT_TRUE(pacer.Due(0));
  EXPECT_EQ(pacer.next_ns(), 0);
}

TEST(PacerTest, ARunOfDurationDWaitsRatioTimesDFromItsStart) {
  Pacer pacer(10);
  pacer.Ran(1'000, 1'100);  // took 100 ns
  EXPECT_EQ(pacer.next_ns(), 2'000);
  EXPECT_FALSE(pacer.Due(1'100));
  EXPECT_FALSE(pacer.Due(1'999));
  EXPECT_TRUE(pacer.Due(2'000));
  // A slower run pushes the next one further out: the share stays 1/10.
  pacer.Ran(2'000, 3'000);
  EXPECT_EQ(pacer.next_ns(), 12'000);
  EXPECT_FALSE(pacer.Due(11'999));
}

TEST(PacerTest, AnInstantRunIsDueAgainAtOnce) {
  // A small namespace, or a test's manual clock: every pass runs the job.
  Pacer pacer(100);
  pacer.Ran(5'000, 5'000);
  EXPECT_TRUE(pacer.Due(5'000));
}

}  // namespace
}  // namespace ckptfs
