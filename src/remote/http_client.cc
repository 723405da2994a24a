// The libcurl transport; see http_client.h.
#include "remote/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>

namespace ckptfs {

namespace {

// An error body larger than this is not an S3 error document; what is kept
// is enough for the message.
constexpr size_t kMaxErrorBody = size_t{64} << 10;
// Larger than curl's 16 KiB / 64 KiB defaults: checkpoint objects are big and
// each callback round trip costs.
constexpr long kBufferSize = 256L << 10;

// curl_global_init is not thread-safe and must run once before any handle
// exists; a function-local static gives exactly that (C++11 magic statics).
CURLcode GlobalInit() {
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  return init;
}

// The state one transfer's callbacks share.
struct Transfer {
  const HttpRequest* req = nullptr;
  HttpResponse* resp = nullptr;
  CURL* curl = nullptr;
  size_t sent = 0;           // body bytes handed to curl so far
  bool sink_refused = false;  // body_sink returned false
};

size_t ReadBody(char* buf, size_t size, size_t nitems, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  const size_t n = std::min(size * nitems, t->req->body_size - t->sent);
  if (n > 0) std::memcpy(buf, t->req->body + t->sent, n);
  t->sent += n;
  return n;
}

// curl rewinds the body when it must send the request again on a fresh
// connection (a reused one the server had closed).
int SeekBody(void* userdata, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(userdata);
  if (origin != SEEK_SET || offset < 0 || static_cast<uint64_t>(offset) > t->req->body_size) {
    return CURL_SEEKFUNC_CANTSEEK;
  }
  t->sent = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

size_t WriteBody(char* ptr, size_t size, size_t nmemb, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  const size_t n = size * nmemb;
  long code = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &code);
  const bool success = code >= 200 && code < 300;
  if (success && t->req->body_sink) {
    if (!t->req->body_sink(static_cast<int>(code), std::string_view(ptr, n))) {
      t->sink_refused = true;
      return 0;  // curl stops with CURLE_WRITE_ERROR
    }
    return n;
  }
  std::string& body = t->resp->body;
  if (success) {
    body.append(ptr, n);
  } else if (body.size() < kMaxErrorBody) {
    body.append(ptr, std::min(n, kMaxErrorBody - body.size()));
  }
  return n;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

size_t HeaderLine(char* buf, size_t size, size_t nitems, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  const size_t n = size * nitems;
  std::string_view line(buf, n);
  if (line.substr(0, 5) == "HTTP/") {
    // A new status line: headers of an interim response (100 Continue) or
    // of an earlier attempt curl retried are not this response's.
    t->resp->headers.clear();
    return n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return n;  // the blank line, or junk
  std::string name(Trim(line.substr(0, colon)));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string_view value = Trim(line.substr(colon + 1));
  auto [it, inserted] = t->resp->headers.emplace(name, value);
  if (!inserted) (it->second += ",") += value;
  return n;
}

// The errno and words for a failed transfer. The message names the method
// and host; curl's error buffer is safe to quote (it never holds headers).
Status TransportError(CURLcode code, long os_errno, const char* errbuf, const HttpRequest& req,
                      const HttpClientOptions& options) {
  const std::string host = HostOfUrl(req.url);
  const std::string detail = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(code);
  const std::string what = req.method + " " + host + ": ";
  const int os = static_cast<int>(os_errno);
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      return Status::Error(EHOSTUNREACH, what + "cannot resolve the host (" + detail + ")");
    case CURLE_COULDNT_CONNECT: {
      const int err = (os == ECONNREFUSED || os == EHOSTUNREACH || os == ENETUNREACH ||
                       os == ETIMEDOUT || os == ENETDOWN)
                          ? os
                          : ECONNREFUSED;
      return Status::Error(err, what + "cannot connect (" + detail + ")");
    }
    case CURLE_OPERATION_TIMEDOUT:
      return Status::Error(ETIMEDOUT, what + "timed out (" + detail + ")");
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return Status::Error(ECONNRESET, what + "connection lost (" + detail + ")");
    case CURLE_PEER_FAILED_VERIFICATION:
      return Status::Error(EPROTO, what + "TLS certificate verification failed (" + detail +
                                       "); set AWS_CA_BUNDLE to the CA that signed it" +
                                       (options.ca_bundle.empty()
                                            ? std::string()
                                            : " (now " + options.ca_bundle + ")"));
    case CURLE_SSL_CACERT_BADFILE:
      return Status::Error(EINVAL, what + "cannot use CA bundle \"" + options.ca_bundle + "\" (" +
                                       detail + ")");
    case CURLE_SSL_CONNECT_ERROR:
      // A reset during the handshake is a lost connection, not bad TLS.
      if (os == ECONNRESET || os == EPIPE) {
        return Status::Error(ECONNRESET, what + "connection lost (" + detail + ")");
      }
      return Status::Error(EPROTO, what + "TLS handshake failed (" + detail + ")");
    case CURLE_WRITE_ERROR:
    case CURLE_ABORTED_BY_CALLBACK:
      return Status::Error(ECANCELED, what + "the response body was refused by its reader");
    case CURLE_URL_MALFORMAT:
    case CURLE_UNSUPPORTED_PROTOCOL:
      return Status::Error(EINVAL, what + "bad URL (" + detail + ")");
    case CURLE_OUT_OF_MEMORY:
      return Status::Error(ENOMEM, what + "out of memory in libcurl");
    default:
      return Status::Error(EIO, what + detail);
  }
}

// Frees the header list on every path out of Send.
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

}  // namespace

std::string HostOfUrl(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string();
  std::string_view rest = url.substr(scheme + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  const size_t at = rest.rfind('@');  // never show userinfo
  if (at != std::string_view::npos) rest.remove_prefix(at + 1);
  return std::string(rest);
}

HttpClient::HttpClient(HttpClientOptions options) : options_(std::move(options)) {
  GlobalInit();
}

HttpClient::~HttpClient() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* HttpClient::Acquire() {
  MutexLock lock(&mu_);
  const int max = std::max(options_.max_connections, 1);
  while (idle_.empty() && handles_ >= max) lock.Wait(handle_freed_);
  if (!idle_.empty()) {
    void* h = idle_.back();  // the most recently used: its connection is warmest
    idle_.pop_back();
    return h;
  }
  handles_++;
  lock.Unlock();
  CURL* h = curl_easy_init();
  if (h == nullptr) Release(nullptr, false);
  return h;
}

void HttpClient::Release(void* handle, bool keep) {
  {
    MutexLock lock(&mu_);
    if (keep && handle != nullptr) {
      idle_.push_back(handle);
    } else {
      if (handle != nullptr) curl_easy_cleanup(static_cast<CURL*>(handle));
      handles_--;
    }
  }
  handle_freed_.notify_one();
}

Result<HttpResponse> HttpClient::Send(const HttpRequest& req) {
  const CURLcode init = GlobalInit();
  if (init != CURLE_OK) {
    return Status::Error(EIO, std::string("libcurl initialization failed: ") +
                                  curl_easy_strerror(init));
  }
  CURL* curl = static_cast<CURL*>(Acquire());
  if (curl == nullptr) return Status::Error(ENOMEM, "cannot create a libcurl handle");
  // Options go back to their defaults; the handle's connections stay.
  curl_easy_reset(curl);

  HttpResponse resp;
  Transfer t;
  t.req = &req;
  t.resp = &resp;
  t.curl = curl;
  char errbuf[CURL_ERROR_SIZE];
  errbuf[0] = '\0';

  std::unique_ptr<curl_slist, SlistDeleter> headers;
  auto add_header = [&](const std::string& line) {
    curl_slist* l = curl_slist_append(headers.get(), line.c_str());
    if (l != nullptr) {
      headers.release();
      headers.reset(l);
    }
    return l != nullptr;
  };
  bool headers_ok = true;
  bool has_content_type = false;
  for (const auto& [name, value] : req.headers) {
    // "Name;" is curl's way to send a header with an empty value.
    headers_ok &= add_header(value.empty() ? name + ";" : name + ": " + value);
    std::string lname = name;
    for (char& c : lname) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    has_content_type |= lname == "content-type";
  }
  // No "Expect: 100-continue": it costs a round trip (or a one-second wait
  // when a server ignores it) on every large upload.
  headers_ok &= add_header("Expect:");
  // curl would add a form Content-Type to a POST.
  if (!has_content_type) headers_ok &= add_header("Content-Type:");
  if (!headers_ok) {
    Release(curl, true);
    return Status::Error(ENOMEM, "cannot build the request headers");
  }

  curl_easy_setopt(curl, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  // No signals: timeouts must not interrupt other threads.
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "ckptfs/" CKPTFS_VERSION);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::max<int64_t>(options_.connect_timeout.count(), 1)));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, std::max(options_.low_speed_limit, 1L));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME,
                   static_cast<long>(std::max<int64_t>(options_.low_speed_time.count(), 1)));
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, kBufferSize);
  curl_easy_setopt(curl, CURLOPT_UPLOAD_BUFFERSIZE, kBufferSize);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!options_.ca_bundle.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_bundle.c_str());
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, HeaderLine);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WriteBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);

  const bool has_body = req.body_size > 0;
  auto stream_body = [&] {
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, ReadBody);
    curl_easy_setopt(curl, CURLOPT_READDATA, &t);
    curl_easy_setopt(curl, CURLOPT_SEEKFUNCTION, SeekBody);
    curl_easy_setopt(curl, CURLOPT_SEEKDATA, &t);
  };
  const auto body_size = static_cast<curl_off_t>(req.body_size);
  if (req.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (req.method == "GET" && !has_body) {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else if (req.method == "PUT") {
    // Always with a Content-Length, even 0: S3 refuses chunked uploads.
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, body_size);
    stream_body();
  } else if (req.method == "POST" || has_body) {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, body_size);
    stream_body();
    if (req.method != "POST") curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  }

  const CURLcode code = curl_easy_perform(curl);
  if (code != CURLE_OK) {
    long os_errno = 0;
    curl_easy_getinfo(curl, CURLINFO_OS_ERRNO, &os_errno);
    Status st = TransportError(code, os_errno, errbuf, req, options_);
    if (t.sink_refused) {
      st = Status::Error(ECANCELED, req.method + " " + HostOfUrl(req.url) +
                                        ": the response body was refused by its reader");
    }
    // A failed transfer may leave the connection in any state; a new handle
    // starts clean.
    Release(curl, false);
    return st;
  }
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  resp.status = static_cast<int>(status);
  Release(curl, true);
  return resp;
}

}  // namespace ckptfs
