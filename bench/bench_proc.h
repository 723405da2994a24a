// What the benches measure a process with: the monotonic clock, and the
// CPU time (utime + stime of every thread) a process has used so far, read
// from /proc/PID/stat. Header-only: each bench is one translation unit.
#pragma once

#include <time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace bench {

inline double NowSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// False, with *why, when the process is gone or its stat cannot be parsed.
inline bool ProcessCpuSeconds(long pid, double* seconds, std::string* why) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  std::ifstream in(path);
  std::string text;
  if (!in || !std::getline(in, text)) {
    *why = "cannot read " + path;
    return false;
  }
  // The command name (field 2) may hold spaces and ')': split after the last ')'.
  const auto paren = text.rfind(')');
  std::istringstream fields(paren == text.npos ? std::string() : text.substr(paren + 1));
  std::string field;
  unsigned long long utime = 0;
  for (int n = 3; fields >> field; ++n) {
    if (n == 14) utime = std::stoull(field);
    if (n == 15) {
      *seconds = static_cast<double>(utime + std::stoull(field)) / static_cast<double>(sysconf(_SC_CLK_TCK));
      return true;
    }
  }
  *why = "cannot parse " + path;
  return false;
}

}  // namespace bench
