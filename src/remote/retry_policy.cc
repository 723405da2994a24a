// The retry rules and full-jitter backoff; see retry_policy.h.
#include "remote/retry_policy.h"

#include <algorithm>
#include <cerrno>
#include <thread>

namespace ckptfs {

bool IsRetryableTransportError(int err) {
  switch (err) {
    case ECONNREFUSED:  // a restarting endpoint or load balancer
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ETIMEDOUT:
    case EHOSTUNREACH:  // also DNS failures, which are often transient
    case ENETUNREACH:
    case ENETDOWN:
    case EAGAIN:
      return true;
    default:
      return false;
  }
}

bool IsRetryableHttpResponse(int http_status, std::string_view s3_error_code) {
  // S3 sends some of these with a 200 (CompleteMultipartUpload) or a 400
  // (RequestTimeout: the body did not arrive fast enough), so the code
  // counts on its own.
  for (std::string_view code : {"SlowDown", "InternalError", "ServiceUnavailable",
                                "RequestTimeout", "Throttling", "ThrottlingException",
                                "RequestLimitExceeded", "TooManyRequestsException",
                                // The body did not match its checksum: damaged
                                // on the way, so sending it again can succeed.
                                "BadDigest", "XAmzContentChecksumMismatch", "InvalidDigest",
                                // Another conditional write of the key was in
                                // flight; S3 says to retry.
                                "ConditionalRequestConflict"}) {
    if (s3_error_code == code) return true;
  }
  if (http_status == 429) return true;
  // 501 NotImplemented is an answer, not a hiccup.
  return http_status >= 500 && http_status <= 599 && http_status != 501;
}

RetryPolicy::RetryPolicy(RetryOptions options)
    : options_(std::move(options)),
      max_attempts_(std::max(options_.max_attempts, 1)),
      rng_(std::random_device{}()) {}

std::chrono::milliseconds RetryPolicy::BackoffCap(int attempt) const {
  const int64_t base = std::max<int64_t>(options_.base_delay.count(), 0);
  const int64_t cap = std::max<int64_t>(options_.max_delay.count(), 0);
  int64_t delay = base;
  // Doubling stops at the cap, so a large attempt number cannot overflow.
  for (int i = 1; i < attempt && delay < cap; i++) delay *= 2;
  return std::chrono::milliseconds(std::min(delay, cap));
}

std::chrono::milliseconds RetryPolicy::Delay(int attempt) const {
  const auto bound = static_cast<uint64_t>(BackoffCap(attempt).count());
  uint64_t r;
  if (options_.random) {
    r = std::min(options_.random(bound), bound);
  } else {
    MutexLock lock(&rng_mu_);
    r = std::uniform_int_distribution<uint64_t>(0, bound)(rng_);
  }
  return std::chrono::milliseconds(static_cast<int64_t>(r));
}

Status RetryPolicy::Run(const std::function<Attempt(int attempt)>& attempt) const {
  for (int n = 1;; n++) {
    Attempt result = attempt(n);
    if (result.status.ok() || !result.retryable) return result.status;
    if (n >= max_attempts_) {
      if (n == 1) return result.status;
      return Status::Error(result.status.err(), "gave up after " + std::to_string(n) +
                                                    " attempts, the last one: " +
                                                    result.status.message());
    }
    const std::chrono::milliseconds delay = Delay(n);
    if (options_.sleep) {
      options_.sleep(delay);
    } else if (delay.count() > 0) {
      std::this_thread::sleep_for(delay);
    }
  }
}

}  // namespace ckptfs
