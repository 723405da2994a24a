// Renders /.ckptfs/status.json: the daemon and every step with its state.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/time_convert.h"  // TimespecToSeconds, for the callers of this header
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

// What ckptfs itself holds, apart from whatever else shares the cache's
// filesystem (the disk's totals say nothing about ckptfs on a shared or
// non-empty disk). Sizes are the files' sizes, each file counted once.
struct Holdings {
  uint64_t local_bytes = 0;      // file data on the cache disk (every resident file)
  uint64_t committed_bytes = 0;  // files of committed steps, here or only in the remote
  uint64_t writing_bytes = 0;    // files of steps still being written (state writing)
  uint64_t persisted_bytes = 0;  // files of committed steps the remote holds whole
  uint64_t evictable_bytes = 0;  // resident, closed files of persisted steps: what eviction may free
};

struct StatusInfo {
  std::string mountpoint;
  std::string cache_dir;
  uint64_t cache_bytes_total = 0;
  uint64_t cache_bytes_free = 0;
  Holdings holdings;
  // Objects merged into the top level ("remote", "uploads", and more keys
  // under "cache"), from the remote tier.
  nlohmann::json extra = nlohmann::json::object();
};

std::string RenderStatusJson(const StatusInfo& info, const std::vector<StatusStep>& steps);

}  // namespace ckptfs
