#include "control/status_report.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

namespace ckptfs {

std::string RenderStatusJson(const StatusInfo& info, const std::vector<StatusStep>& steps) {
  nlohmann::json j;
  j["version"] = CKPTFS_VERSION;
  j["pid"] = static_cast<int64_t>(getpid());
  j["mountpoint"] = info.mountpoint;
  // bytes_total and bytes_free are the cache filesystem's; the *_bytes keys
  // after them are what ckptfs holds (Holdings).
  const Holdings& h = info.holdings;
  j["cache"] = {{"dir", info.cache_dir},
                {"bytes_total", info.cache_bytes_total},
                {"bytes_free", info.cache_bytes_free},
                {"local_bytes", h.local_bytes},
                {"committed_bytes", h.committed_bytes},
                {"writing_bytes", h.writing_bytes},
                {"persisted_bytes", h.persisted_bytes},
                {"evictable_bytes", h.evictable_bytes}};
  for (const auto& [key, value] : info.extra.items()) {
    if (key == "cache" && value.is_object()) {
      for (const auto& [k, v] : value.items()) j["cache"][k] = v;
    } else {
      j[key] = value;
    }
  }
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& s : steps) {
    nlohmann::json e = {{"path", s.path},
                        {"step", s.rec.step},
                        {"state", StepStateName(s.rec.state)},
                        {"bytes", s.rec.bytes},
                        {"files", s.rec.files},
                        {"error", s.rec.error}};
    if (s.rec.state == StepState::kCommitted) {
      e["committed_at"] = TimespecToSeconds(s.rec.committed_at);
    } else {
      e["committed_at"] = nullptr;
    }
    e["persisted"] = s.rec.persisted;
    if (s.upload) {
      e["upload"] = {{"bytes_done", s.upload->bytes_done},
                     {"bytes_total", s.upload->bytes_total},
                     {"files_done", s.upload->files_done},
                     {"files_total", s.upload->files_total}};
    }
    arr.push_back(std::move(e));
  }
  j["steps"] = std::move(arr);
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace ckptfs
