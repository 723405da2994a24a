#include "control/rate_meter.h"

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

constexpr int64_t kSec = 1'000'000'000;

TEST(RateMeterTest, NoHistoryIsZero) {
  RateMeter m;
  EXPECT_EQ(m.PerSecond(0), 0);
  m.Record(0, 100);
  EXPECT_EQ(m.PerSecond(kSec), 0);
}

TEST(RateMeterTest, SteadyGrowth) {
  RateMeter m(10 * kSec);
  for (int i = 0; i <= 20; i++) m.Record(i * kSec, static_cast<uint64_t>(i) * 1000);
  EXPECT_NEAR(m.PerSecond(20 * kSec), 1000, 1e-6);
}

TEST(RateMeterTest, BurstsAverageAndStallsDecay) {
  RateMeter m(10 * kSec);
  m.Record(0, 0);
  m.Record(5 * kSec, 500);   // one file of 500 after 5 s
  m.Record(10 * kSec, 1000);
  EXPECT_NEAR(m.PerSecond(10 * kSec), 100, 1e-6);
  // Nothing more for 10 s: the window still starts at the 10 s sample's
  // predecessor, and the rate falls.
  EXPECT_LT(m.PerSecond(20 * kSec), 100);
}

}  // namespace
}  // namespace ckptfs
