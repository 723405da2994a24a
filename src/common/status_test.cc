#include "common/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace ckptfs {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.err(), 0);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(StatusTest, ErrorKeepsErrnoAndMessage) {
  Status s = Status::Error(ENOENT, "no step 7");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.err(), ENOENT);
  EXPECT_EQ(s.message(), "no step 7");
  EXPECT_EQ(s.ToString(), "no step 7 (ENOENT)");
}

TEST(StatusTest, ErrorWithZeroErrnoIsStillAnError) {
  Status s = Status::Error(0, "oops");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.err(), EIO);
}

TEST(StatusTest, FromErrnoNamesWhatFailed) {
  Status s = Status::FromErrno(EACCES, "open /x");
  EXPECT_EQ(s.err(), EACCES);
  EXPECT_EQ(s.message(), "open /x: Permission denied");

  errno = ENOSPC;
  Status t = Status::FromErrno("write /y");
  EXPECT_EQ(t.err(), ENOSPC);
  EXPECT_NE(t.message().find("write /y: "), std::string::npos);
}

TEST(StatusTest, AnnotatePrefixesAndKeepsErrno) {
  Status s = Status::Error(EROFS, "sealed").Annotate("write step-1/a");
  EXPECT_EQ(s.err(), EROFS);
  EXPECT_EQ(s.message(), "write step-1/a: sealed");
  EXPECT_TRUE(Status::Ok().Annotate("context").ok());
  EXPECT_EQ(Status::Ok().Annotate("context").message(), "");
}

TEST(ResultTest, HoldsValue) {
  Result<int> r(42);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.err(), 0);
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(*r, 42);
  EXPECT_EQ(r.value(), 42);
}

TEST(ResultTest, HoldsError) {
  Result<std::string> r(Status::Error(EEXIST, "exists"));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.err(), EEXIST);
  EXPECT_EQ(r.status().message(), "exists");
}

TEST(ResultTest, OkStatusBecomesAnError) {
  // A Result must hold a value or a real error; an ok Status is a bug.
  Result<int> r(Status::Ok());
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.err(), EIO);
}

TEST(ResultTest, MovesOutMoveOnlyValues) {
  Result<std::unique_ptr<int>> r(std::make_unique<int>(7));
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
}

Status FailsAt(int fail_step, int* reached) {
  for (int i = 0; i < 3; i++) {
    *reached = i;
    CKPTFS_RETURN_IF_ERROR(i == fail_step ? Status::Error(EAGAIN, "step") : Status::Ok());
  }
  return Status::Ok();
}

TEST(StatusTest, ReturnIfErrorStopsAtFirstError) {
  int reached = -1;
  Status s = FailsAt(1, &reached);
  EXPECT_EQ(s.err(), EAGAIN);
  EXPECT_EQ(reached, 1);
  EXPECT_TRUE(FailsAt(5, &reached).ok());
  EXPECT_EQ(reached, 2);
}

}  // namespace
}  // namespace ckptfs
