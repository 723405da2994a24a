// Recent events (commits, recoveries, errors) as JSON lines, served by
// /.ckptfs/events. Keeps the newest `capacity` lines in memory and appends
// every line to a log file in the cache directory (when given) so operators
// keep the history across restarts; the tail of that file is reloaded at
// start. Thread-safe.
#pragma once

#include <cstdio>
#include <deque>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace ckptfs {

// How much of the event stream also goes to the daemon's log (stderr, which
// journald collects under systemd): --log-level.
enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
// "debug", "info", "warning" (or "warn"), "error"; false otherwise.
bool ParseLogLevel(const std::string& text, LogLevel* level);
const char* LogLevelName(LogLevel level);

class EventLog {
 public:
  // path may be empty (memory only). Reloads the last lines of the file.
  explicit EventLog(std::string path = "", size_t capacity = 4096);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Adds "time" (unix seconds, float) when absent, and appends the line.
  void Append(nlohmann::json event);
  // Every line kept, oldest first, each ending in '\n'.
  std::string Render() const;
  size_t size() const;
  // How many events of each kind ("commit", "error", ...) since start.
  std::map<std::string, uint64_t> Counts() const;

  // Also writes every event at or above level to sink, one line each:
  // "ckptfs: error: {...}". nullptr turns it off (the default).
  void SetLogSink(FILE* sink, LogLevel level);
  // Errors (the event "error", kinds ending in "_error") are kError; a step
  // found broken is kWarning; everything else (commits, prunes, mounts) kInfo.
  static LogLevel LevelOf(const nlohmann::json& event);

 private:
  const std::string path_;
  const size_t capacity_;
  mutable Mutex mu_;
  std::deque<std::string> lines_ GUARDED_BY(mu_);
  FILE* file_ GUARDED_BY(mu_) = nullptr;
  std::map<std::string, uint64_t> counts_ GUARDED_BY(mu_);
  FILE* log_sink_ GUARDED_BY(mu_) = nullptr;
  LogLevel log_level_ GUARDED_BY(mu_) = LogLevel::kInfo;
};

}  // namespace ckptfs
