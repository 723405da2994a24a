#include "common/time_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

namespace ckptfs {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

void ExpectTimespec(const timespec& ts, int64_t sec, long nsec) {
  EXPECT_EQ(static_cast<int64_t>(ts.tv_sec), sec);
  EXPECT_EQ(ts.tv_nsec, nsec);
}

TEST(TimeConvertTest, TimespecToNanos) {
  EXPECT_EQ(TimespecToNanos(timespec{0, 0}), 0);
  EXPECT_EQ(TimespecToNanos(timespec{1700000000, 123456789}), 1'700'000'000'123'456'789);
  EXPECT_EQ(TimespecToNanos(timespec{-1, 999'999'999}), -1);
  EXPECT_EQ(TimespecToNanos(timespec{-2, 500'000'000}), -1'500'000'000);
}

TEST(TimeConvertTest, TimespecToNanosSaturatesBeyondInt64) {
  EXPECT_EQ(TimespecToNanos(timespec{9'223'372'036, 854'775'807}), kMax);
  EXPECT_EQ(TimespecToNanos(timespec{9'223'372'036, 854'775'808}), kMax);
  EXPECT_EQ(TimespecToNanos(timespec{std::numeric_limits<time_t>::max(), 0}), kMax);
  EXPECT_EQ(TimespecToNanos(timespec{-9'223'372'037, 145'224'192}), kMin);
  EXPECT_EQ(TimespecToNanos(timespec{std::numeric_limits<time_t>::min(), 0}), kMin);
}

TEST(TimeConvertTest, NanosToTimespec) {
  ExpectTimespec(NanosToTimespec(0), 0, 0);
  ExpectTimespec(NanosToTimespec(1), 0, 1);
  ExpectTimespec(NanosToTimespec(1'000'000'000), 1, 0);
  ExpectTimespec(NanosToTimespec(1'700'000'000'123'456'789), 1700000000, 123456789);
}

TEST(TimeConvertTest, NanosToTimespecBeforeTheEpochKeepsNanosInRange) {
  ExpectTimespec(NanosToTimespec(-1), -1, 999'999'999);
  ExpectTimespec(NanosToTimespec(-999'999'999), -1, 1);
  ExpectTimespec(NanosToTimespec(-1'000'000'000), -1, 0);
  ExpectTimespec(NanosToTimespec(-1'000'000'001), -2, 999'999'999);
  ExpectTimespec(NanosToTimespec(-1'500'000'000), -2, 500'000'000);
  ExpectTimespec(NanosToTimespec(kMin), -9'223'372'037, 145'224'192);
  ExpectTimespec(NanosToTimespec(kMax), 9'223'372'036, 854'775'807);
}

TEST(TimeConvertTest, NanosRoundTrip) {
  for (int64_t ns :
       {int64_t{0}, int64_t{1}, int64_t{-1}, int64_t{999'999'999}, int64_t{-999'999'999},
        int64_t{1'000'000'000}, int64_t{-1'000'000'000}, int64_t{1'700'000'000'123'456'789},
        int64_t{-1'700'000'000'123'456'789}, kMax, kMin}) {
    const timespec ts = NanosToTimespec(ns);
    EXPECT_GE(ts.tv_nsec, 0) << ns;
    EXPECT_LT(ts.tv_nsec, kNanosPerSecond) << ns;
    EXPECT_EQ(TimespecToNanos(ts), ns);
  }
}

TEST(TimeConvertTest, SecondsToTimespec) {
  ExpectTimespec(SecondsToTimespec(0.0), 0, 0);
  ExpectTimespec(SecondsToTimespec(0.25), 0, 250'000'000);
  ExpectTimespec(SecondsToTimespec(1712345679.5), 1712345679, 500'000'000);
  ExpectTimespec(SecondsToTimespec(-0.25), -1, 750'000'000);
  ExpectTimespec(SecondsToTimespec(-1712345679.5), -1712345680, 500'000'000);
}

TEST(TimeConvertTest, SecondsToTimespecRoundsToTheNearestNanosecond) {
  // 1.000000007 * 1e9 is 1000000006.9999999 in doubles: truncating would
  // lose a nanosecond.
  ASSERT_LT(1.000000007 * 1e9, 1'000'000'007.0);
  ExpectTimespec(SecondsToTimespec(1.000000007), 1, 7);
  ExpectTimespec(SecondsToTimespec(-1.000000007), -2, 999'999'993);
  ExpectTimespec(SecondsToTimespec(1.0000000064), 1, 6);
  ExpectTimespec(SecondsToTimespec(1.0000000066), 1, 7);
  // Halves round away from zero.
  ExpectTimespec(SecondsToTimespec(2.5e-9), 0, 3);
  ExpectTimespec(SecondsToTimespec(-2.5e-9), -1, 999'999'997);
}

TEST(TimeConvertTest, SecondsToTimespecSaturatesAndTakesNanAsTheEpoch) {
  EXPECT_EQ(TimespecToNanos(SecondsToTimespec(1e300)), kMax);
  EXPECT_EQ(TimespecToNanos(SecondsToTimespec(INFINITY)), kMax);
  EXPECT_EQ(TimespecToNanos(SecondsToTimespec(-1e300)), kMin);
  EXPECT_EQ(TimespecToNanos(SecondsToTimespec(-INFINITY)), kMin);
  ExpectTimespec(SecondsToTimespec(NAN), 0, 0);
}

TEST(TimeConvertTest, SecondsRoundTripThroughNanos) {
  // A commit time written as seconds (ns / 1e9, as cluster records hold it)
  // comes back within the double's precision at today's dates (~240 ns).
  const int64_t ns = 1'700'000'000'123'456'789;
  const timespec back = SecondsToTimespec(static_cast<double>(ns) / 1e9);
  EXPECT_LE(std::llabs(TimespecToNanos(back) - ns), 256);
  // Exactly representable times come back exactly.
  for (int64_t exact : {int64_t{0}, int64_t{1'500'000'000}, int64_t{-1'500'000'000},
                        int64_t{1'712'345'679'500'000'000}, int64_t{7}, int64_t{-7}}) {
    EXPECT_EQ(TimespecToNanos(SecondsToTimespec(static_cast<double>(exact) / 1e9)), exact);
  }
}

TEST(TimeConvertTest, TimespecToSeconds) {
  EXPECT_DOUBLE_EQ(TimespecToSeconds(timespec{0, 0}), 0.0);
  EXPECT_DOUBLE_EQ(TimespecToSeconds(timespec{1712345679, 500'000'000}), 1712345679.5);
  EXPECT_DOUBLE_EQ(TimespecToSeconds(timespec{-1, 750'000'000}), -0.25);
  const timespec ts{1700000000, 123456789};
  const timespec back = SecondsToTimespec(TimespecToSeconds(ts));
  EXPECT_LE(std::llabs(TimespecToNanos(back) - TimespecToNanos(ts)), 256);
}

}  // namespace
}  // namespace ckptfs
