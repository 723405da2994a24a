// HttpClient: one HTTP(S) request per call over libcurl, for the S3 client.
// It knows nothing of S3: the caller builds (and signs) every header; the
// client sends exactly those plus what the transport itself adds
// (Content-Length, User-Agent).
//
// Connections are reused: the client keeps a pool of curl easy handles, each
// holding its own keep-alive connections, and hands one to each call. At most
// max_connections requests are in flight at once; further callers wait for a
// handle. So any number of threads may call Send concurrently and get
// parallel requests, while the endpoint sees a bounded number of connections.
//
// Failures to get an HTTP response at all come back as a Status whose errno
// says what happened (ECONNREFUSED, ETIMEDOUT, ECONNRESET, EHOSTUNREACH,
// EPROTO for TLS trouble, EIO otherwise) and whose message names the method
// and host but never a header, since headers carry the signature and the
// session token. Any HTTP status, 4xx and 5xx included, is a response, not an
// error: interpreting it is the caller's job.
//
// TLS certificates are verified against the system store, or against
// ca_bundle when given (AWS_CA_BUNDLE); there is no switch to turn
// verification off.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace ckptfs {

struct HttpClientOptions {
  std::chrono::milliseconds connect_timeout{10'000};
  // A transfer that moves fewer than low_speed_limit bytes per second for
  // low_speed_time is stalled and fails with ETIMEDOUT. curl counts whole
  // seconds, so low_speed_time is rounded up to at least 1 s.
  long low_speed_limit = 1;
  std::chrono::seconds low_speed_time{30};
  std::string ca_bundle;  // PEM file of trusted CAs; empty = the system store
  int max_connections = 16;  // requests in flight at once (and pooled handles)
};

struct HttpRequest {
  std::string method;  // "GET", "HEAD", "PUT", "POST", "DELETE"
  std::string url;     // already encoded: "https://host:port/path?query"
  // Sent as they are, in order. A "Host" header replaces curl's own, so the
  // signed value is the one that goes out.
  std::vector<std::pair<std::string, std::string>> headers;
  // The request body, not copied: it must stay valid until Send returns.
  // Sent again from the start if curl has to rewind.
  const char* body = nullptr;
  size_t body_size = 0;
  // When set, the body of a 2xx response goes here chunk by chunk instead of
  // into HttpResponse::body (which then stays empty); returning false aborts
  // the transfer with ECANCELED. Bodies of other responses (S3's error
  // documents) always go to HttpResponse::body.
  std::function<bool(int status, std::string_view chunk)> body_sink;
};

struct HttpResponse {
  int status = 0;
  // Names lower-cased; repeated headers joined with ",". Only those of the
  // final response (not of a "100 Continue").
  std::map<std::string, std::string> headers;
  std::string body;

  // The header's value, or "" when absent.
  std::string Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class HttpClient {
 public:
  explicit HttpClient(HttpClientOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Sends req and waits for the whole response. Thread-safe.
  Result<HttpResponse> Send(const HttpRequest& req);

  const HttpClientOptions& options() const { return options_; }

 private:
  // A handle for one request: an idle one from the pool, or a new one while
  // fewer than max_connections exist; blocks otherwise. Null only when curl
  // cannot allocate one.
  void* Acquire() EXCLUDES(mu_);
  // Returns the handle to the pool; keep=false destroys it (and with it its
  // connections), which Send does after a transport failure.
  void Release(void* handle, bool keep) EXCLUDES(mu_);

  const HttpClientOptions options_;

  Mutex mu_;
  std::condition_variable handle_freed_;
  std::vector<void*> idle_ GUARDED_BY(mu_);  // CURL*, kept opaque here
  int handles_ GUARDED_BY(mu_) = 0;          // idle plus in use
};

// The host[:port] part of an absolute URL, for messages ("" if none).
std::string HostOfUrl(std::string_view url);

}  // namespace ckptfs
