#include "common/status.h"

#include <cstring>

namespace ckptfs {

Status Status::FromErrno(const std::string& what) { return FromErrno(errno, what); }

Status Status::FromErrno(int err, const std::string& what) {
  return Error(err, what + ": " + std::strerror(err));
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  const char* name = strerrorname_np(err_);
  return message_ + " (" + (name ? name : std::to_string(err_)) + ")";
}

}  // namespace ckptfs
