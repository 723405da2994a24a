#include "tiering/remote_error_events.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

TEST(RemoteErrorEventsTest, OneEventPerDistinctErrorNotPerFailure) {
  RemoteErrorEvents events;
  const std::string refused = RemoteErrorEvents::Signature("uploading", ECONNREFUSED);
  EXPECT_TRUE(events.OnFailure(refused, 0));
  // 190 retries of many files in a 150 s outage: nothing more to say.
  for (int i = 1; i < 190; i++) EXPECT_FALSE(events.OnFailure(refused, i * kSecond / 4));
  // Another operation failing is news.
  EXPECT_TRUE(events.OnFailure(RemoteErrorEvents::Signature("fetching", ECONNREFUSED), 50 * kSecond));
  EXPECT_EQ(events.failures(), 191u);
  EXPECT_EQ(events.suppressed(), 189u);
}

TEST(RemoteErrorEventsTest, RecoveryIsAnnouncedOnceAfterAnAnnouncedError) {
  RemoteErrorEvents events;
  EXPECT_FALSE(events.OnSuccess());  // healthy from the start: nothing to say
  EXPECT_TRUE(events.OnFailure(RemoteErrorEvents::Signature("uploading", EAGAIN), 0));
  EXPECT_TRUE(events.OnSuccess());
  EXPECT_FALSE(events.OnSuccess());
}

TEST(RemoteErrorEventsTest, AFlappingRemoteRepeatsItselfOncePerWindow) {
  RemoteErrorEvents events(60 * kSecond);
  const std::string slow = RemoteErrorEvents::Signature("uploading", EAGAIN);
  EXPECT_TRUE(events.OnFailure(slow, 0));
  EXPECT_TRUE(events.OnSuccess());
  // The same error right after a recovery: neither it nor a new remote_ok.
  EXPECT_FALSE(events.OnFailure(slow, 5 * kSecond));
  EXPECT_FALSE(events.OnSuccess());
  // Once the window has passed it is announced again.
  EXPECT_TRUE(events.OnFailure(slow, 61 * kSecond));
  EXPECT_TRUE(events.OnSuccess());
}

TEST(RemoteErrorEventsTest, SignatureNamesOperationAndErrno) {
  EXPECT_EQ(RemoteErrorEvents::Signature("uploading", ECONNREFUSED), "uploading ECONNREFUSED");
  EXPECT_NE(RemoteErrorEvents::Signature("uploading", EIO), RemoteErrorEvents::Signature("fetching", EIO));
}

}  // namespace
}  // namespace ckptfs
