// The fake HTTP server for fault tests; see fake_http_server_for_test.h.
#include "remote/fake_http_server_for_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

namespace ckptfs {

namespace {

bool SendAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) b++;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) e--;
  return s.substr(b, e - b);
}

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 416: return "Range Not Satisfiable";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Slow Down";
    default: return "Whatever";
  }
}

}  // namespace

FakeHttpServer::FakeHttpServer(Handler handler) : handler_(std::move(handler)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("FakeHttpServer: cannot listen");
    std::abort();
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

FakeHttpServer::~FakeHttpServer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // Wakes the blocked accept() and recv()s.
    ::shutdown(listen_fd_, SHUT_RDWR);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  stop_cv_.notify_all();
  acceptor_.join();
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
  ::close(listen_fd_);
}

std::vector<FakeHttpRequest> FakeHttpServer::requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

size_t FakeHttpServer::request_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_.size();
}

void FakeHttpServer::Wait(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  stop_cv_.wait_for(lock, d, [this] { return stopping_.load(); });
}

void FakeHttpServer::AcceptLoop() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;  // shut down
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) {
      ::close(fd);
      return;
    }
    accepted_++;
    open_fds_.insert(fd);
    workers_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FakeHttpServer::Serve(int fd) {
  std::string buf;
  bool reset = false;
  while (ServeOne(fd, &buf, &reset)) {
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (reset) {
    // Linger 0: close() sends RST instead of FIN.
    linger lg{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  }
  open_fds_.erase(fd);
  ::close(fd);
}

bool FakeHttpServer::ServeOne(int fd, std::string* buf, bool* reset) {
  auto fill = [&](size_t want_size, size_t* found, const char* delim) {
    for (;;) {
      if (delim != nullptr) {
        *found = buf->find(delim);
        if (*found != std::string::npos) return true;
      } else if (buf->size() >= want_size) {
        return true;
      }
      char chunk[65536];
      const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buf->append(chunk, static_cast<size_t>(n));
    }
  };
  size_t head_end = 0;
  if (!fill(0, &head_end, "\r\n\r\n")) return false;
  FakeHttpRequest req;
  const std::string head = buf->substr(0, head_end);
  buf->erase(0, head_end + 4);
  size_t line_end = head.find("\r\n");
  const std::string request_line = head.substr(0, line_end);
  const size_t sp1 = request_line.find(' ');
  const size_t sp2 = request_line.rfind(' ');
  req.method = request_line.substr(0, sp1);
  req.target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
  while (line_end != std::string::npos) {
    const size_t start = line_end + 2;
    line_end = head.find("\r\n", start);
    const std::string line =
        head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    req.headers[Lower(Trim(line.substr(0, colon)))] = Trim(line.substr(colon + 1));
  }
  const size_t length = std::strtoull(req.Header("content-length").c_str(), nullptr, 10);
  size_t unused = 0;
  if (!fill(length, &unused, nullptr)) return false;
  req.body = buf->substr(0, length);
  buf->erase(0, length);

  FakeHttpResponse resp;
  {
    std::lock_guard<std::mutex> handler_lock(handler_mu_);
    resp = handler_(req);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back(req);
  }
  switch (resp.action) {
    case FakeHttpResponse::Action::kRespond: {
      std::string out =
          "HTTP/1.1 " + std::to_string(resp.status) + " " + Reason(resp.status) + "\r\n";
      bool has_length = false;
      bool close = false;
      for (const auto& [name, value] : resp.headers) {
        out += name + ": " + value + "\r\n";
        has_length |= Lower(name) == "content-length";
        close |= Lower(name) == "connection" && Lower(value) == "close";
      }
      if (!has_length) out += "Content-Length: " + std::to_string(resp.body.size()) + "\r\n";
      out += "\r\n";
      if (req.method != "HEAD") out += resp.body;
      return SendAll(fd, out) && !close;
    }
    case FakeHttpResponse::Action::kReset:
      *reset = true;
      return false;
    case FakeHttpResponse::Action::kClose:
      return false;
    case FakeHttpResponse::Action::kStall:
      Wait(resp.stall_for);
      return false;
  }
  return false;
}

}  // namespace ckptfs
