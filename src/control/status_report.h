// Renders /.ckptfs/status.json: the daemon and every step with its state.
#pragma once

#include <string>
#include <vector>

#include "manifest/records.h"

namespace ckptfs {

struct StatusStep {
  std::string path;  // relative to the mount root
  StepRecord rec;
};

struct StatusInfo {
  std::string mountpoint;
  std::string cache_dir;
  uint64_t cache_bytes_total = 0;
  uint64_t cache_bytes_free = 0;
};

std::string RenderStatusJson(const StatusInfo& info, const std::vector<StatusStep>& steps);

// "2026-11-22T19:09:00.123Z"-free form used everywhere: unix seconds as a
// double, or null when ts is zero.
double TimespecToSeconds(const timespec& ts);

}  // namespace ckptfs
