// Test support: a tiny HTTP/1.1 server on 127.0.0.1 for fault tests of the
// HTTP client and the S3 store. A handler decides, request by request,
// whether to answer (any status, headers, body), reset the connection, close
// it without a word, or stall. Keep-alive works (each connection has its own
// thread), requests are recorded for assertions. Only what libcurl sends is
// understood: a request line, headers and a Content-Length body.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ckptfs {

struct FakeHttpRequest {
  std::string method;
  std::string target;  // "/bucket/key?uploads" as sent
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

struct FakeHttpResponse {
  enum class Action {
    kRespond,  // send status, headers, body; keep the connection open, unless
               // a "Connection: close" header says otherwise (with a larger
               // Content-Length than the body: a body cut short)
    kReset,    // close with a TCP RST, no answer
    kClose,    // close without an answer (an "empty reply")
    kStall,    // answer nothing until stall_for passes (or the server stops), then close
  };
  Action action = Action::kRespond;
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::chrono::milliseconds stall_for{0};

  static FakeHttpResponse Ok(std::string body = {}) {
    FakeHttpResponse r;
    r.body = std::move(body);
    return r;
  }
  static FakeHttpResponse S3Error(int status, const std::string& code,
                                  const std::string& message) {
    FakeHttpResponse r;
    r.status = status;
    r.headers = {{"Content-Type", "application/xml"}};
    r.body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + code +
             "</Code><Message>" + message + "</Message><RequestId>4442587FB7D0A2F9</RequestId></Error>";
    return r;
  }
  static FakeHttpResponse Reset() {
    FakeHttpResponse r;
    r.action = Action::kReset;
    return r;
  }
  static FakeHttpResponse Close() {
    FakeHttpResponse r;
    r.action = Action::kClose;
    return r;
  }
  static FakeHttpResponse Stall(std::chrono::milliseconds d) {
    FakeHttpResponse r;
    r.action = Action::kStall;
    r.stall_for = d;
    return r;
  }
};

class FakeHttpServer {
 public:
  using Handler = std::function<FakeHttpResponse(const FakeHttpRequest&)>;

  // Listens on 127.0.0.1 at a free port; the handler may be called from
  // several connection threads at once (calls are serialized).
  explicit FakeHttpServer(Handler handler);
  ~FakeHttpServer();
  FakeHttpServer(const FakeHttpServer&) = delete;
  FakeHttpServer& operator=(const FakeHttpServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<FakeHttpRequest> requests() const;
  size_t request_count() const;
  int connections_accepted() const { return accepted_.load(); }

 private:
  void AcceptLoop();
  void Serve(int fd);
  // Reads one request from fd (buf holds bytes read ahead) and acts on the
  // handler's answer; false when the connection is to be closed (*reset:
  // with an RST).
  bool ServeOne(int fd, std::string* buf, bool* reset);
  // Waits up to d, returning early when the server stops.
  void Wait(std::chrono::milliseconds d);

  Handler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::thread acceptor_;

  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  std::mutex handler_mu_;              // serializes handler_ calls
  std::vector<FakeHttpRequest> log_;   // GUARDED_BY(mu_)
  std::set<int> open_fds_;             // GUARDED_BY(mu_)
  std::vector<std::thread> workers_;   // GUARDED_BY(mu_)
};

}  // namespace ckptfs
