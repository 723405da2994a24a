#include "common/process_session.h"

#include <unistd.h>

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

TEST(ProcessSessionTest, StartTimeSurvivesOddCommandNames) {
  // Field 22 is the start time; the command may contain ") (" and spaces.
  const std::string line =
      "4242 (py thon) (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000 10";
  EXPECT_EQ(StartTimeFromStat(line), 987654u);
  EXPECT_EQ(StartTimeFromStat("garbage"), 0u);
  EXPECT_EQ(StartTimeFromStat("1 (a) S 1 2"), 0u);
}

TEST(ProcessSessionTest, ThisProcessHasAStableSessionOtherThanItsPid) {
  const uint32_t pid = static_cast<uint32_t>(getpid());
  const uint64_t a = ProcessSession(pid);
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, pid);  // the start time was read
  EXPECT_EQ(ProcessSession(pid), a);
  EXPECT_EQ(ProcessSession(0), 0u);
}

}  // namespace
}  // namespace ckptfs
