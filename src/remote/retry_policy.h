// RetryPolicy: which failed S3 requests are worth sending again, and how long
// to wait before each new attempt. Pure apart from the two seams it is given
// (a random source and a sleep), so tests run it instantly and exactly.
//
// Retried: throttling and server-side trouble (HTTP 5xx except 501, 429,
// S3's SlowDown / InternalError / RequestTimeout codes whatever the status,
// and BadDigest / XAmzContentChecksumMismatch / InvalidDigest: a body damaged
// on the way)
// and transport failures that say nothing about the request itself
// (connection refused or reset, timeouts, unreachable host). Everything else
// (403, 404, a malformed request...) fails at once: sending it again would
// give the same answer.
//
// Backoff is exponential with "full jitter" (AWS architecture blog, 2015):
// before attempt n+1 the caller sleeps a uniformly random time in
// [0, min(max_delay, base_delay * 2^(n-1))], which spreads the retries of
// many clients hitting the same throttled prefix.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <string_view>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace ckptfs {

struct RetryOptions {
  int max_attempts = 8;  // in all, the first one included; < 1 counts as 1
  std::chrono::milliseconds base_delay{100};
  std::chrono::milliseconds max_delay{5000};
  // Seams for tests; empty = the real thing. random(bound) returns a value
  // uniformly distributed in [0, bound] and must be thread-safe.
  std::function<uint64_t(uint64_t bound)> random;
  std::function<void(std::chrono::milliseconds)> sleep;
};

// Whether a request that failed in transport with this errno (as HttpClient
// reports it) may succeed when sent again.
bool IsRetryableTransportError(int err);
// Whether an HTTP response with this status and S3 error code (empty when
// the body had none) may be answered differently when the request is sent
// again.
bool IsRetryableHttpResponse(int http_status, std::string_view s3_error_code);

class RetryPolicy {
 public:
  // What one attempt came to: ok, or an error that may or may not be retried.
  struct Attempt {
    Status status;
    bool retryable = false;
  };

  explicit RetryPolicy(RetryOptions options = {});
  RetryPolicy(const RetryPolicy&) = delete;
  RetryPolicy& operator=(const RetryPolicy&) = delete;

  // The upper bound of the delay before attempt `attempt + 1`, attempt >= 1:
  // min(max_delay, base_delay * 2^(attempt - 1)).
  std::chrono::milliseconds BackoffCap(int attempt) const;
  // A random delay in [0, BackoffCap(attempt)].
  std::chrono::milliseconds Delay(int attempt) const;

  // Calls attempt(1), attempt(2), ... until one is ok or not retryable, or
  // max_attempts have been made, sleeping Delay(n) after a retryable failure
  // of attempt n. Returns ok, the non-retryable error as it is, or the last
  // error prefixed with "gave up after N attempts" when every attempt failed.
  // Thread-safe: any number of threads may Run at once.
  Status Run(const std::function<Attempt(int attempt)>& attempt) const;

  int max_attempts() const { return max_attempts_; }

 private:
  const RetryOptions options_;
  const int max_attempts_;

  // The default random source, used when options_.random is empty.
  mutable Mutex rng_mu_;
  mutable std::mt19937_64 rng_ GUARDED_BY(rng_mu_);
};

}  // namespace ckptfs
