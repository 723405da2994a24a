// Renders /.ckptfs/status.json: the daemon and every step with its state.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "manifest/records.h"

namespace ckptfs {

struct StatusStep {
  std::string path;  // relative to the mount root
  StepRecord rec;
  // With a remote: how much of the committed step is uploaded.
  struct Upload {
    uint64_t bytes_done = 0;
    uint64_t bytes_total = 0;
    uint64_t files_done = 0;
    uint64_t files_total = 0;
  };
  std::optional<Upload> upload;
};

struct StatusInfo {
  std::string mountpoint;
  std::string cache_dir;
  uint64_t cache_bytes_total = 0;
  uint64_t cache_bytes_free = 0;
  // Objects merged into the top level ("remote", "uploads", and more keys
  // under "cache"), from the remote tier.
  nlohmann::json extra = nlohmann::json::object();
};

std::string RenderStatusJson(const StatusInfo& info, const std::vector<StatusStep>& steps);

// "2026-11-22T19:09:00.123Z"-free form used everywhere: unix seconds as a
// double, or null when ts is zero.
double TimespecToSeconds(const timespec& ts);

}  // namespace ckptfs
