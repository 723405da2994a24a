// RetryPolicy: what is retried, the backoff bounds, and Run's bookkeeping,
// with an injected random source and sleep so nothing waits.
#include "remote/retry_policy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace ckptfs {
namespace {

using std::chrono::milliseconds;

TEST(RetryPolicyTest, RetryableTransportErrors) {
  for (int err : {ECONNREFUSED, ECONNRESET, ETIMEDOUT, EHOSTUNREACH, ENETUNREACH, EPIPE}) {
    EXPECT_TRUE(IsRetryableTransportError(err)) << err;
  }
  for (int err : {EACCES, ENOENT, EINVAL, EPROTO, ECANCELED, ENOMEM, EIO}) {
    EXPECT_FALSE(IsRetryableTransportError(err)) << err;
  }
}

TEST(RetryPolicyTest, RetryableHttpResponses) {
  EXPECT_TRUE(IsRetryableHttpResponse(503, "SlowDown"));
  EXPECT_TRUE(IsRetryableHttpResponse(503, ""));
  EXPECT_TRUE(IsRetryableHttpResponse(500, "InternalError"));
  EXPECT_TRUE(IsRetryableHttpResponse(502, ""));
  EXPECT_TRUE(IsRetryableHttpResponse(504, ""));
  EXPECT_TRUE(IsRetryableHttpResponse(429, ""));
  EXPECT_TRUE(IsRetryableHttpResponse(400, "RequestTimeout"));
  // CompleteMultipartUpload's late failure: a 200 carrying an error.
  EXPECT_TRUE(IsRetryableHttpResponse(200, "InternalError"));

  EXPECT_FALSE(IsRetryableHttpResponse(501, "NotImplemented"));
  EXPECT_FALSE(IsRetryableHttpResponse(400, "InvalidArgument"));
  EXPECT_FALSE(IsRetryableHttpResponse(400, ""));
  EXPECT_FALSE(IsRetryableHttpResponse(403, "AccessDenied"));
  EXPECT_FALSE(IsRetryableHttpResponse(403, "SignatureDoesNotMatch"));
  EXPECT_FALSE(IsRetryableHttpResponse(404, "NoSuchKey"));
  EXPECT_FALSE(IsRetryableHttpResponse(416, "InvalidRange"));
  EXPECT_FALSE(IsRetryableHttpResponse(200, ""));
}

TEST(RetryPolicyTest, BackoffCapDoublesUpToTheCap) {
  RetryPolicy p;  // defaults: 100 ms base, 5 s cap, 8 attempts
  EXPECT_EQ(p.max_attempts(), 8);
  EXPECT_EQ(p.BackoffCap(1), milliseconds(100));
  EXPECT_EQ(p.BackoffCap(2), milliseconds(200));
  EXPECT_EQ(p.BackoffCap(3), milliseconds(400));
  EXPECT_EQ(p.BackoffCap(6), milliseconds(3200));
  EXPECT_EQ(p.BackoffCap(7), milliseconds(5000));
  EXPECT_EQ(p.BackoffCap(1000), milliseconds(5000));  // no overflow
}

TEST(RetryPolicyTest, DelayIsFullJitterWithinTheCap) {
  uint64_t last_bound = 0;
  RetryOptions o;
  o.random = [&](uint64_t bound) {
    last_bound = bound;
    return bound / 2;
  };
  RetryPolicy half(o);
  EXPECT_EQ(half.Delay(3), milliseconds(200));
  EXPECT_EQ(last_bound, 400u);

  o.random = [](uint64_t) { return uint64_t{1} << 40; };  // out of range: clamped
  RetryPolicy big(o);
  EXPECT_EQ(big.Delay(1), milliseconds(100));

  RetryPolicy real;  // the default random source stays within bounds
  for (int attempt = 1; attempt <= 10; attempt++) {
    for (int i = 0; i < 50; i++) {
      const milliseconds d = real.Delay(attempt);
      EXPECT_GE(d.count(), 0);
      EXPECT_LE(d, real.BackoffCap(attempt));
    }
  }
}

TEST(RetryPolicyTest, RunRetriesUntilSuccessAndSleepsBetween) {
  std::vector<milliseconds> slept;
  RetryOptions o;
  o.random = [](uint64_t bound) { return bound; };  // always the cap
  o.sleep = [&](milliseconds d) { slept.push_back(d); };
  RetryPolicy p(o);
  int calls = 0;
  Status st = p.Run([&](int attempt) -> RetryPolicy::Attempt {
    EXPECT_EQ(attempt, ++calls);
    if (attempt < 4) return {Status::Error(EAGAIN, "SlowDown"), true};
    return {Status::Ok(), false};
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(slept, (std::vector<milliseconds>{milliseconds(100), milliseconds(200),
                                              milliseconds(400)}));
}

TEST(RetryPolicyTest, RunGivesUpAfterMaxAttemptsSayingSo) {
  int sleeps = 0;
  RetryOptions o;
  o.sleep = [&](milliseconds) { sleeps++; };
  RetryPolicy p(o);
  int calls = 0;
  Status st = p.Run([&](int attempt) -> RetryPolicy::Attempt {
    calls++;
    return {Status::Error(ECONNRESET, "connection lost, try " + std::to_string(attempt)), true};
  });
  EXPECT_EQ(st.err(), ECONNRESET);
  EXPECT_EQ(calls, 8);
  EXPECT_EQ(sleeps, 7);  // none after the last attempt
  EXPECT_NE(st.message().find("gave up after 8 attempts"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("connection lost, try 8"), std::string::npos) << st.message();
}

TEST(RetryPolicyTest, NonRetryableErrorsReturnAtOnceUnchanged) {
  int sleeps = 0;
  RetryOptions o;
  o.sleep = [&](milliseconds) { sleeps++; };
  RetryPolicy p(o);
  int calls = 0;
  Status st = p.Run([&](int attempt) -> RetryPolicy::Attempt {
    calls++;
    if (attempt == 1) return {Status::Error(ECONNRESET, "reset"), true};
    return {Status::Error(EACCES, "AccessDenied: Access Denied (HTTP 403)"), false};
  });
  EXPECT_EQ(st.err(), EACCES);
  EXPECT_EQ(st.message(), "AccessDenied: Access Denied (HTTP 403)");
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(sleeps, 1);
}

TEST(RetryPolicyTest, OneAttemptMeansNoRetry) {
  RetryOptions o;
  o.max_attempts = 0;  // counts as 1
  o.sleep = [](milliseconds) { ADD_FAILURE() << "slept"; };
  RetryPolicy p(o);
  EXPECT_EQ(p.max_attempts(), 1);
  int calls = 0;
  Status st = p.Run([&](int) -> RetryPolicy::Attempt {
    calls++;
    return {Status::Error(ETIMEDOUT, "timed out"), true};
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(st.message(), "timed out");  // nothing to say about attempts
}

TEST(RetryPolicyTest, RunIsThreadSafe) {
  RetryOptions o;
  o.base_delay = milliseconds(0);
  RetryPolicy p(o);  // default random source and real (zero) sleeps
  std::atomic<int> calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; t++) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; i++) {
        Status st = p.Run([&](int attempt) -> RetryPolicy::Attempt {
          calls++;
          return {attempt < 3 ? Status::Error(EAGAIN, "busy") : Status::Ok(), true};
        });
        EXPECT_TRUE(st.ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(calls.load(), 8 * 20 * 3);
}

}  // namespace
}  // namespace ckptfs
