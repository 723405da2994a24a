#include "control/event_log.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace ckptfs {
namespace {

std::string Drain(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

TEST(EventLogTest, EventsAtOrAboveTheLevelGoToTheLog) {
  EventLog events;
  FILE* sink = std::tmpfile();
  ASSERT_NE(sink, nullptr);
  events.SetLogSink(sink, LogLevel::kWarning);
  events.Append({{"event", "commit"}, {"path", "run/step1"}});
  events.Append({{"event", "remote_error"}, {"error", "connection refused"}});
  events.Append({{"event", "broken"}, {"path", "run/step2"}});
  const std::string log = Drain(sink);
  EXPECT_EQ(log.find("commit"), std::string::npos) << log;
  EXPECT_NE(log.find("ckptfs: error: {\"error\":\"connection refused\",\"event\":\"remote_error\""), std::string::npos)
      << log;
  EXPECT_NE(log.find("ckptfs: warning: {\"event\":\"broken\""), std::string::npos) << log;
  // Every event is kept for /.ckptfs/events whatever the log level.
  EXPECT_EQ(events.size(), 3u);
  std::fclose(sink);
}

TEST(EventLogTest, LevelsParseAndName) {
  LogLevel level = LogLevel::kInfo;
  EXPECT_TRUE(ParseLogLevel("debug", &level));
  EXPECT_EQ(level, LogLevel::kDebug);
  EXPECT_TRUE(ParseLogLevel("warn", &level));
  EXPECT_EQ(level, LogLevel::kWarning);
  EXPECT_STREQ(LogLevelName(level), "warning");
  EXPECT_FALSE(ParseLogLevel("verbose", &level));
  EXPECT_EQ(EventLog::LevelOf({{"event", "error"}}), LogLevel::kError);
  EXPECT_EQ(EventLog::LevelOf({{"event", "prune"}}), LogLevel::kInfo);
}

}  // namespace
}  // namespace ckptfs
