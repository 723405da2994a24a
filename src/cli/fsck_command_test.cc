// Who holds a cache that fsck found locked, read from the cache's events log.
#include "cli/fsck_command.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "common/temp_dir_for_test.h"

namespace ckptfs {
namespace {

void WriteEvents(const std::string& dir, const std::string& lines) {
  std::ofstream out(dir + "/events.jsonl");
  out << lines;
}

TEST(FsckCommandTest, NamesTheMountOfALiveDaemon) {
  TempDirForTest dir;
  const std::string pid = std::to_string(getpid());
  WriteEvents(dir.path(),
              "{\"event\":\"mount\",\"mountpoint\":\"/old\",\"pid\":1}\n"
              "{\"event\":\"unmount\",\"mountpoint\":\"/old\"}\n"
              "{\"event\":\"mount\",\"mountpoint\":\"/ckpt\",\"cache\":\"x\",\"pid\":" +
                  pid +
                  "}\n"
                  "{\"event\":\"commit\",\"path\":\"run/step1\"}\n"
                  "not json, a line cut short\n");
  EXPECT_EQ(DescribeCacheInUse(dir.path()), dir.path() +
                                                " is in use by a running ckptfs (mounted at /ckpt, pid " +
                                                pid + "); unmount first: fusermount3 -u /ckpt");
}

TEST(FsckCommandTest, UnmountedOrDeadDaemonGivesTheGenericReason) {
  TempDirForTest dir;
  const std::string generic = " is in use by another process";
  EXPECT_NE(DescribeCacheInUse(dir.path()).find(generic), std::string::npos);  // no log at all
  const std::string pid = std::to_string(getpid());
  WriteEvents(dir.path(), "{\"event\":\"mount\",\"mountpoint\":\"/ckpt\",\"pid\":" + pid +
                              "}\n{\"event\":\"unmount\",\"mountpoint\":\"/ckpt\"}\n");
  EXPECT_NE(DescribeCacheInUse(dir.path()).find(generic), std::string::npos);
  // A pid no process has (above the kernel's pid_max limit).
  WriteEvents(dir.path(), "{\"event\":\"mount\",\"mountpoint\":\"/ckpt\",\"pid\":99999999}\n");
  EXPECT_NE(DescribeCacheInUse(dir.path()).find(generic), std::string::npos);
}

}  // namespace
}  // namespace ckptfs
