#include "common/random_hex.h"

#include <sys/random.h>

#include <cerrno>

namespace ckptfs {

Result<std::string> RandomHex(size_t bytes) {
  unsigned char buf[64];
  if (bytes > sizeof buf) return Status::Error(EINVAL, "RandomHex: at most 64 bytes");
  size_t got = 0;
  while (got < bytes) {
    const ssize_t r = ::getrandom(buf + got, bytes - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("getrandom");
    }
    got += static_cast<size_t>(r);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes);
  for (size_t i = 0; i < bytes; ++i) {
    out += kHex[buf[i] >> 4];
    out += kHex[buf[i] & 0xf];
  }
  return out;
}

}  // namespace ckptfs
