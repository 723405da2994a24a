#include "common/process_session.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace ckptfs {

uint64_t StartTimeFromStat(const std::string& stat_line) {
  // Fields after the command: "S ppid pgrp ..."; starttime is field 22
  // overall, the 20th after the closing parenthesis.
  const size_t close = stat_line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat_line.substr(close + 1));
  std::string field;
  for (int i = 0; i < 20; ++i) {
    if (!(rest >> field)) return 0;
  }
  char* end = nullptr;
  const unsigned long long v = std::strtoull(field.c_str(), &end, 10);
  return end && *end == '\0' ? v : 0;
}

uint64_t ProcessSession(uint32_t pid) {
  if (pid == 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const uint64_t start = StartTimeFromStat(line);
  if (start == 0) return pid;
  // Mixed so that (pid, start) pairs rarely collide; never 0.
  const uint64_t mixed = (start * 0x9E3779B97F4A7C15ULL) ^ (uint64_t{pid} << 1) ^ 1;
  return mixed == 0 ? 1 : mixed;
}

}  // namespace ckptfs
