// s3rver as a child process for tests; see s3rver_for_test.h.
#include "remote/s3rver_for_test.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace ckptfs {

namespace {

// The node binary on PATH, found before fork: the child must not allocate.
std::string FindNode() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/node";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string S3rverForTest::ScriptPath() {
  return std::string(CKPTFS_SOURCE_DIR) + "/tests/s3rver/node_modules/.bin/s3rver";
}

bool S3rverForTest::Installed() { return ::access(ScriptPath().c_str(), R_OK) == 0; }

std::string S3rverForTest::NotInstalledMessage() {
  return "s3rver is not installed at " + ScriptPath() +
         "; run packaging/install-deps.sh (or: npm install --prefix " + CKPTFS_SOURCE_DIR +
         "/tests/s3rver s3rver@3.7.1)";
}

std::string S3rverForTest::endpoint() const {
  return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
}

S3Config S3rverForTest::Config(const std::string& prefix) const {
  S3Config c;
  c.bucket = bucket_;
  c.prefix = prefix;
  c.endpoint = endpoint();
  c.credentials = AwsCredentials{"S3RVER", "S3RVER", ""};
  c.retry.max_attempts = 3;
  c.retry.base_delay = std::chrono::milliseconds(1);
  c.retry.max_delay = std::chrono::milliseconds(5);
  c.connect_timeout = std::chrono::milliseconds(2000);
  c.stall_timeout = std::chrono::seconds(10);
  return c;
}

Status S3rverForTest::Start(const Options& options) {
  Stop();
  bucket_ = options.bucket;
  tls_ = !options.cert_file.empty();
  const std::string log = dir_.path() + "/s3rver.log";
  const std::string data = dir_.path() + "/data";
  if (::mkdir(data.c_str(), 0755) != 0 && errno != EEXIST) return Status::FromErrno("mkdir " + data);

  const std::string node = FindNode();
  if (node.empty()) return Status::Error(ENOENT, "node is not on PATH; s3rver needs Node.js");
  // --openssl-legacy-provider: s3rver 3.7.1 makes ListObjectsV2
  // continuation tokens with DES, which OpenSSL 3 (Node >= 17) only has in
  // its legacy provider; without it every truncated listing is a 500.
  std::vector<std::string> args = {node, "--openssl-legacy-provider", ScriptPath(), "-d", data,
                                   "-a", "127.0.0.1", "-p", "0", "--silent",
                                   "--configure-bucket", options.bucket};
  if (tls_) {
    args.insert(args.end(), {"--key", options.key_file, "--cert", options.cert_file});
  }
  if (!options.service_endpoint.empty()) {
    args.insert(args.end(), {"--service-endpoint", options.service_endpoint});
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno("fork");
  if (pid == 0) {
    // Its own group, so Stop can kill node and anything it spawned.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so the group exists before we may kill it
  pid_ = pid;

  // "S3rver listening on 127.0.0.1:PORT" comes once the bucket exists and
  // the socket listens.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string out = ReadAll(log);
    const size_t at = out.find("listening on 127.0.0.1:");
    if (at != std::string::npos) {
      const size_t digits = at + std::string("listening on 127.0.0.1:").size();
      const size_t end = out.find_first_not_of("0123456789", digits);
      if (end != std::string::npos) {  // the whole number has arrived
        port_ = std::atoi(out.substr(digits, end - digits).c_str());
        if (port_ > 0) return Status::Ok();
      }
    }
    int wstatus = 0;
    if (::waitpid(pid_, &wstatus, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::Error(EIO, "s3rver exited at startup: " + out);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string out = ReadAll(log);
  Stop();
  return Status::Error(ETIMEDOUT, "s3rver did not start within 20 s: " + out);
}

void S3rverForTest::Stop() {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGTERM);
  // Wait for node to exit but leave it a zombie: while it is one, its
  // process group id cannot be reused, so the SIGKILL below reaches only
  // what is left of our group.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    siginfo_t info{};
    const int r = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
    if (r != 0 || info.si_pid == pid_) break;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(-pid_, SIGKILL);
  int wstatus = 0;
  ::waitpid(pid_, &wstatus, 0);
  pid_ = -1;
  port_ = 0;
}

}  // namespace ckptfs
