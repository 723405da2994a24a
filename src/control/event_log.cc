#include "control/event_log.h"

#include <ctime>
#include <fstream>

namespace ckptfs {

EventLog::EventLog(std::string path, size_t capacity) : path_(std::move(path)), capacity_(capacity) {
  if (path_.empty()) return;
  {
    std::ifstream in(path_);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      lines_.push_back(line);
      if (lines_.size() > capacity_) lines_.pop_front();
    }
  }
  // Keep the file bounded: rewrite it with the kept tail, then append.
  if (FILE* f = std::fopen(path_.c_str(), "w")) {
    for (const auto& l : lines_) std::fprintf(f, "%s\n", l.c_str());
    std::fclose(f);
  }
  file_ = std::fopen(path_.c_str(), "a");
}

EventLog::~EventLog() {
  if (file_) std::fclose(file_);
}

void EventLog::Append(nlohmann::json event) {
  if (!event.contains("time")) {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    event["time"] = static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
  }
  const std::string kind = event.value("event", "");
  std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::lock_guard<std::mutex> lock(mu_);
  counts_[kind]++;
  if (file_) {
    std::fprintf(file_, "%s\n", line.c_str());
    std::fflush(file_);
  }
  lines_.push_back(std::move(line));
  if (lines_.size() > capacity_) lines_.pop_front();
}

std::string EventLog::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& l : lines_) {
    out += l;
    out += '\n';
  }
  return out;
}

std::map<std::string, uint64_t> EventLog::Counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

size_t EventLog::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lines_.size();
}

}  // namespace ckptfs
