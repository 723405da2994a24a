// Which remote failures become `remote_error` events. During an outage every
// upload, fetch and retry round fails, each with its own object key in the
// message; one event per failure (190 in a 150 s outage) would push
// everything else out of the 4,096-line event ring. An event is emitted for
// each distinct error -- the operation and errno, not the object -- at most
// once per window, and one `remote_ok` when requests succeed again after an
// announced error; every failure is still counted (metrics), and status.json
// keeps the latest message.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace ckptfs {

class RemoteErrorEvents {
 public:
  // window_ns: a distinct error announced within this long is not announced
  // again, even after the remote recovered in between (a flapping remote).
  explicit RemoteErrorEvents(int64_t window_ns = 60LL * 1'000'000'000) : window_ns_(window_ns) {}

  // A request failed: true when this failure is to be announced.
  // signature: what identifies the error without the object (see Signature).
  bool OnFailure(const std::string& signature, int64_t now_ns);
  // A request succeeded: true when a `remote_ok` is due (an error was
  // announced since the last one).
  bool OnSuccess();

  uint64_t failures() const { return failures_; }
  uint64_t suppressed() const { return suppressed_; }

  // "uploading ECONNREFUSED": the operation and the errno's name.
  static std::string Signature(const char* what, int err);

 private:
  const int64_t window_ns_;
  std::map<std::string, int64_t> announced_at_;  // signature -> when last announced
  bool error_announced_ = false;                 // since the last remote_ok
  uint64_t failures_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace ckptfs
