#include "tiering/remote_error_events.h"

#include <cstring>

namespace ckptfs {

bool RemoteErrorEvents::OnFailure(const std::string& signature, int64_t now_ns) {
  failures_++;
  auto it = announced_at_.find(signature);
  if (it != announced_at_.end() && now_ns - it->second < window_ns_) {
    suppressed_++;
    return false;
  }
  // Old entries go so the map stays as small as the set of recent errors.
  for (auto e = announced_at_.begin(); e != announced_at_.end();) {
    e = now_ns - e->second >= window_ns_ ? announced_at_.erase(e) : std::next(e);
  }
  announced_at_[signature] = now_ns;
  error_announced_ = true;
  return true;
}

bool RemoteErrorEvents::OnSuccess() {
  const bool due = error_announced_;
  error_announced_ = false;
  return due;
}

std::string RemoteErrorEvents::Signature(const char* what, int err) {
  const char* name = strerrorname_np(err);
  return std::string(what) + " " + (name ? name : std::to_string(err));
}

}  // namespace ckptfs
