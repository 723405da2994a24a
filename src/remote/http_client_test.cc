// HttpClient against the fake server: methods and bodies, response headers,
// the body sink, parallel requests over a bounded pool with connection reuse,
// and transport failures as errno values whose messages never show headers.
#include "remote/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "remote/fake_http_server_for_test.h"

namespace ckptfs {
namespace {

using std::chrono::milliseconds;

// A port nothing listens on: bound, then closed again.
int UnusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(HttpClientTest, MethodsBodiesAndHeaders) {
  FakeHttpServer server([](const FakeHttpRequest& req) {
    FakeHttpResponse r = FakeHttpResponse::Ok("echo " + req.method + " " + req.target + " " +
                                              std::to_string(req.body.size()));
    r.headers = {{"ETag", "\"abc\""}, {"X-Amz-Request-Id", "one"}, {"x-amz-request-id", "two"}};
    if (req.method == "HEAD") r.headers.emplace_back("Content-Length", "12345");
    return r;
  });
  HttpClient client;
  const std::string big(3 << 20, 'z');
  for (const char* method : {"GET", "PUT", "POST", "DELETE", "HEAD"}) {
    HttpRequest req;
    req.method = method;
    req.url = server.url() + "/bkt/some%20key?uploads";
    req.headers = {{"X-Custom", "v"}, {"Host", "example.test"}};
    if (std::string(method) == "PUT" || std::string(method) == "POST") {
      req.body = big.data();
      req.body_size = big.size();
    }
    Result<HttpResponse> resp = client.Send(req);
    ASSERT_TRUE(resp.ok()) << method << ": " << resp.status().ToString();
    EXPECT_EQ(resp->status, 200);
    EXPECT_EQ(resp->Header("etag"), "\"abc\"");
    EXPECT_EQ(resp->Header("x-amz-request-id"), "one,two");  // lower-cased and joined
    EXPECT_EQ(resp->Header("missing"), "");
    if (std::string(method) == "HEAD") {
      EXPECT_EQ(resp->body, "");
      EXPECT_EQ(resp->Header("content-length"), "12345");
    } else {
      EXPECT_EQ(resp->body, std::string("echo ") + method + " /bkt/some%20key?uploads " +
                                std::to_string(req.body_size));
    }
  }
  const std::vector<FakeHttpRequest> seen = server.requests();
  ASSERT_EQ(seen.size(), 5u);
  for (const FakeHttpRequest& r : seen) {
    EXPECT_EQ(r.Header("x-custom"), "v");
    EXPECT_EQ(r.Header("host"), "example.test");  // ours, not curl's
    EXPECT_EQ(r.Header("expect"), "");            // no 100-continue round trip
    if (r.method == "PUT" || r.method == "POST") {
      EXPECT_EQ(r.body, big);
      EXPECT_EQ(r.Header("content-length"), std::to_string(big.size()));
      EXPECT_EQ(r.Header("content-type"), "");  // no form type slipped in
    }
  }
  EXPECT_EQ(server.connections_accepted(), 1);  // one keep-alive connection throughout
}

TEST(HttpClientTest, EmptyPutStillSendsContentLength) {
  FakeHttpServer server([](const FakeHttpRequest&) { return FakeHttpResponse::Ok(); });
  HttpClient client;
  HttpRequest req;
  req.method = "PUT";
  req.url = server.url() + "/k";
  Result<HttpResponse> resp = client.Send(req);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  ASSERT_EQ(server.request_count(), 1u);
  EXPECT_EQ(server.requests()[0].Header("content-length"), "0");
  EXPECT_EQ(server.requests()[0].Header("transfer-encoding"), "");
}

TEST(HttpClientTest, BodySinkGetsSuccessBodiesOnly) {
  int next_status = 200;
  FakeHttpServer server([&](const FakeHttpRequest&) {
    FakeHttpResponse r = FakeHttpResponse::Ok(std::string(100000, 'b'));
    r.status = next_status;
    return r;
  });
  HttpClient client;
  std::string sunk;
  int sink_status = 0;
  HttpRequest req;
  req.method = "GET";
  req.url = server.url() + "/k";
  req.body_sink = [&](int status, std::string_view chunk) {
    sink_status = status;
    sunk.append(chunk);
    return true;
  };
  Result<HttpResponse> resp = client.Send(req);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(sunk.size(), 100000u);
  EXPECT_EQ(sink_status, 200);
  EXPECT_TRUE(resp->body.empty());

  next_status = 404;  // an error body is for the caller to read, not the sink
  sunk.clear();
  resp = client.Send(req);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->status, 404);
  EXPECT_TRUE(sunk.empty());
  EXPECT_EQ(resp->body.size(), 65536u);  // capped: error documents are small

  next_status = 200;
  req.body_sink = [](int, std::string_view) { return false; };
  resp = client.Send(req);
  EXPECT_EQ(resp.err(), ECANCELED);
}

TEST(HttpClientTest, ParallelRequestsShareABoundedPool) {
  // 12 threads, 4 handles: every request gets its own answer, and the
  // server sees at most 4 connections, each reused (keep-alive).
  FakeHttpServer server([](const FakeHttpRequest& req) { return FakeHttpResponse::Ok(req.target); });
  HttpClientOptions options;
  options.max_connections = 4;
  HttpClient client(options);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 12; t++) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; i++) {
        HttpRequest req;
        req.method = "GET";
        req.url = server.url() + "/t" + std::to_string(t) + "/" + std::to_string(i);
        Result<HttpResponse> resp = client.Send(req);
        if (resp.ok() && resp->body == "/t" + std::to_string(t) + "/" + std::to_string(i)) ok++;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(ok.load(), 12 * 20);
  EXPECT_EQ(server.request_count(), 240u);
  EXPECT_LE(server.connections_accepted(), 4);
  EXPECT_GE(server.connections_accepted(), 1);
}

TEST(HttpClientTest, ConnectionRefused) {
  HttpClientOptions options;
  HttpClient client(options);
  HttpRequest req;
  req.method = "GET";
  req.url = "http://127.0.0.1:" + std::to_string(UnusedPort()) + "/bkt/key";
  req.headers = {{"Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/secretstuff"},
                 {"X-Amz-Security-Token", "tokentokentoken"}};
  Result<HttpResponse> resp = client.Send(req);
  EXPECT_EQ(resp.err(), ECONNREFUSED);
  EXPECT_NE(resp.status().message().find("127.0.0.1"), std::string::npos)
      << resp.status().message();
  EXPECT_EQ(resp.status().message().find("secretstuff"), std::string::npos);
  EXPECT_EQ(resp.status().message().find("tokentoken"), std::string::npos);
}

TEST(HttpClientTest, UnresolvableHostIsEhostunreach) {
  HttpClient client;
  HttpRequest req;
  req.method = "GET";
  req.url = "http://no-such-host.invalid/x";
  Result<HttpResponse> resp = client.Send(req);
  EXPECT_EQ(resp.err(), EHOSTUNREACH) << resp.status().ToString();
  EXPECT_NE(resp.status().message().find("no-such-host.invalid"), std::string::npos);
}

TEST(HttpClientTest, ResetAndEmptyReplyAreEconnreset) {
  int calls = 0;
  FakeHttpServer server([&](const FakeHttpRequest&) {
    return ++calls == 1 ? FakeHttpResponse::Reset() : FakeHttpResponse::Close();
  });
  HttpClient client;
  HttpRequest req;
  req.method = "GET";
  req.url = server.url() + "/k";
  EXPECT_EQ(client.Send(req).err(), ECONNRESET);
  Result<HttpResponse> resp = client.Send(req);
  EXPECT_EQ(resp.err(), ECONNRESET) << resp.status().ToString();
}

TEST(HttpClientTest, StalledTransferTimesOut) {
  FakeHttpServer server([](const FakeHttpRequest&) {
    return FakeHttpResponse::Stall(milliseconds(5000));
  });
  HttpClientOptions options;
  options.low_speed_time = std::chrono::seconds(1);
  HttpClient client(options);
  HttpRequest req;
  req.method = "GET";
  req.url = server.url() + "/k";
  const auto start = std::chrono::steady_clock::now();
  Result<HttpResponse> resp = client.Send(req);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(resp.err(), ETIMEDOUT) << resp.status().ToString();
  EXPECT_LT(took, std::chrono::milliseconds(4000));
}

TEST(HttpClientTest, UnreadableCaBundleIsEinvalNamingIt) {
  FakeHttpServer server([](const FakeHttpRequest&) { return FakeHttpResponse::Ok(); });
  HttpClientOptions options;
  options.ca_bundle = "/nonexistent/ca.pem";
  options.connect_timeout = milliseconds(2000);  // bounds the test should the TLS handshake start
  HttpClient client(options);
  HttpRequest req;
  req.method = "GET";
  req.url = "https://127.0.0.1:" + std::to_string(server.port()) + "/k";
  Result<HttpResponse> resp = client.Send(req);
  EXPECT_EQ(resp.err(), EINVAL) << resp.status().ToString();
  EXPECT_NE(resp.status().message().find("/nonexistent/ca.pem"), std::string::npos);
}

TEST(HttpClientTest, HostOfUrl) {
  EXPECT_EQ(HostOfUrl("https://b.s3.amazonaws.com/k?x=1"), "b.s3.amazonaws.com");
  EXPECT_EQ(HostOfUrl("http://127.0.0.1:4568"), "127.0.0.1:4568");
  EXPECT_EQ(HostOfUrl("http://user:pw@host:1/x"), "host:1");
  EXPECT_EQ(HostOfUrl("nonsense"), "");
}

}  // namespace
}  // namespace ckptfs
