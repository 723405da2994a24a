#include "control/event_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <fstream>

#include "common/time_convert.h"

namespace ckptfs {

namespace {

// Events name paths of the mount, also those inside directories other users
// may not enter: the file is the daemon user's alone (0600 whatever the
// umask, and a file left looser by an older version is tightened).
FILE* OpenOwnerOnly(const std::string& path, int mode_flag) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | mode_flag, 0600);
  if (fd < 0) return nullptr;
  (void)fchmod(fd, 0600);
  FILE* f = fdopen(fd, mode_flag == O_APPEND ? "a" : "w");
  if (!f) close(fd);
  return f;
}

}  // namespace

bool ParseLogLevel(const std::string& text, LogLevel* level) {
  if (text == "debug") {
    *level = LogLevel::kDebug;
  } else if (text == "info") {
    *level = LogLevel::kInfo;
  } else if (text == "warning" || text == "warn") {
    *level = LogLevel::kWarning;
  } else if (text == "error") {
    *level = LogLevel::kError;
  } else {
    return false;
  }
  return true;
}

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "?";
}

LogLevel EventLog::LevelOf(const nlohmann::json& event) {
  const std::string kind = event.value("event", "");
  const std::string suffix = "_error";
  if (kind == "error" || kind == "checksum_mismatch" ||
      (kind.size() > suffix.size() && kind.compare(kind.size() - suffix.size(), suffix.size(), suffix) == 0)) {
    return LogLevel::kError;
  }
  if (kind == "broken") return LogLevel::kWarning;
  return LogLevel::kInfo;
}

void EventLog::SetLogSink(FILE* sink, LogLevel level) {
  MutexLock lock(&mu_);
  log_sink_ = sink;
  log_level_ = level;
}

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
  if (FILE* f = OpenOwnerOnly(path_, O_TRUNC)) {
    for (const auto& l : lines_) std::fprintf(f, "%s\n", l.c_str());
    std::fclose(f);
  }
  file_ = OpenOwnerOnly(path_, O_APPEND);
}

EventLog::~EventLog() {
  if (file_) std::fclose(file_);
}

void EventLog::Append(nlohmann::json event) {
  if (!event.contains("time")) {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    event["time"] = TimespecToSeconds(ts);
  }
  const std::string kind = event.value("event", "");
  const LogLevel level = LevelOf(event);
  std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  MutexLock lock(&mu_);
  counts_[kind]++;
  if (log_sink_ && level >= log_level_) {
    std::fprintf(log_sink_, "ckptfs: %s: %s\n", LogLevelName(level), line.c_str());
    std::fflush(log_sink_);
  }
  if (file_) {
    std::fprintf(file_, "%s\n", line.c_str());
    std::fflush(file_);
  }
  lines_.push_back(std::move(line));
  if (lines_.size() > capacity_) lines_.pop_front();
}

std::string EventLog::Render() const {
  MutexLock lock(&mu_);
  std::string out;
  for (const auto& l : lines_) {
    out += l;
    out += '\n';
  }
  return out;
}

std::map<std::string, uint64_t> EventLog::Counts() const {
  MutexLock lock(&mu_);
  return counts_;
}

size_t EventLog::size() const {
  MutexLock lock(&mu_);
  return lines_.size();
}

}  // namespace ckptfs
