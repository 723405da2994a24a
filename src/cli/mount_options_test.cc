// `ckptfs mount`'s refusals that need no mount (issue 15): an empty --cache,
// a non-empty mountpoint, a writer socket path holding something else, and
// the cache directory's protection.
#include "cli/mount_options.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "cli/cache_dir.h"
#include "common/temp_dir_for_test.h"

namespace ckptfs {
namespace {

Result<MountOptions> Parse(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ParseMountArgs(static_cast<int>(argv.size()), argv.data());
}

// A mountpoint and a cache directory under a temporary directory.
struct Targets {
  TempDirForTest tmp;
  std::string mnt = tmp.path() + "/mnt";
  std::string cache = tmp.path() + "/cache";
  Targets() {
    EXPECT_EQ(mkdir(mnt.c_str(), 0755), 0);
    EXPECT_EQ(mkdir(cache.c_str(), 0755), 0);
  }
};

TEST(MountOptionsTest, EmptyCacheValueIsRefused) {
  auto o = Parse({"mount", "/mnt", "--cache", ""});
  EXPECT_EQ(o.err(), EINVAL);
  EXPECT_NE(o.status().message().find("--cache takes a directory"), std::string::npos);
}

TEST(MountOptionsTest, NonEmptyMountpointNeedsNonempty) {
  Targets t;
  std::ofstream(t.mnt + "/left-over") << "x";
  auto o = Parse({"mount", t.mnt, "--cache", t.cache});
  ASSERT_TRUE(o.ok());
  Status st = CheckMountTargets(&*o);
  EXPECT_EQ(st.err(), ENOTEMPTY);
  EXPECT_NE(st.message().find("left-over"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--nonempty"), std::string::npos) << st.message();
  auto forced = Parse({"mount", t.mnt, "--cache", t.cache, "--nonempty"});
  ASSERT_TRUE(forced.ok());
  EXPECT_TRUE(CheckMountTargets(&*forced).ok());
}

TEST(MountOptionsTest, WriterSocketPathHoldingAFileIsRefused) {
  Targets t;
  const std::string file = t.tmp.path() + "/notes.txt";
  std::ofstream(file) << "keep me";
  auto o = Parse({"mount", t.mnt, "--cache", t.cache, "--writer-socket", file});
  ASSERT_TRUE(o.ok());
  Status st = CheckMountTargets(&*o);
  EXPECT_EQ(st.err(), EEXIST);
  EXPECT_NE(st.message().find("is not a socket"), std::string::npos) << st.message();
  EXPECT_EQ(access(file.c_str(), F_OK), 0);
}

TEST(MountOptionsTest, CacheDirectoryIsMadePrivateAndSaysSo) {
  Targets t;
  ASSERT_EQ(mkdir((t.cache + "/manifest").c_str(), 0755), 0);  // as an older version left it
  auto o = Parse({"mount", t.mnt, "--cache", t.cache});
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE(CheckMountTargets(&*o).ok());
  struct stat st {};
  ASSERT_EQ(stat(t.cache.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, kCacheDirMode);
  ASSERT_EQ(stat((t.cache + "/manifest").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(o->notices.size(), 2u);
  EXPECT_NE(o->notices[0].find("was mode 0755; now 0711"), std::string::npos) << o->notices[0];
  // Nothing to change the second time.
  std::vector<std::string> notes;
  EXPECT_TRUE(SecureCacheDir(o->cache_dir, &notes).ok());
  EXPECT_TRUE(notes.empty());
}

TEST(MountOptionsTest, CacheDirectoryOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give the directory away";
  Targets t;
  ASSERT_EQ(chown(t.cache.c_str(), 65534, 65534), 0);
  std::vector<std::string> notes;
  Status st = SecureCacheDir(t.cache, &notes);
  EXPECT_EQ(st.err(), EPERM);
  EXPECT_NE(st.message().find("belongs to uid 65534"), std::string::npos) << st.message();
  struct stat s {};
  ASSERT_EQ(stat(t.cache.c_str(), &s), 0);
  EXPECT_EQ(s.st_mode & 07777, 0755u);  // left as it was
}


Result<MountOptions> ParseMount(std::vector<std::string> args) {
  args.insert(args.begin(), "mount");
  return Parse(std::move(args));
}

TEST(MountOptionsTest, MetadataReserveTakesASizeAShareOrZero) {
  auto def = ParseMount({"/m"});
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->fs.metadata_reserve.min_bytes, uint64_t{64} << 20);
  EXPECT_EQ(def->fs.metadata_reserve.percent, 1.0);

  auto size = ParseMount({"/m", "--metadata-reserve", "256M"});
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(size->fs.metadata_reserve.min_bytes, uint64_t{256} << 20);
  EXPECT_EQ(size->fs.metadata_reserve.percent, 0.0);

  auto pct = ParseMount({"/m", "--metadata-reserve", "2.5%"});
  ASSERT_TRUE(pct.ok()) << pct.status().ToString();
  EXPECT_EQ(pct->fs.metadata_reserve.min_bytes, 0u);
  EXPECT_EQ(pct->fs.metadata_reserve.percent, 2.5);

  auto off = ParseMount({"/m", "--metadata-reserve", "0"});
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->fs.metadata_reserve.min_bytes, 0u);
  EXPECT_EQ(off->fs.metadata_reserve.percent, 0.0);

  for (const char* bad : {"", "%", "60%", "-1%", "lots", "12Q"}) {
    auto r = ParseMount({"/m", "--metadata-reserve", bad});
    EXPECT_EQ(r.err(), EINVAL) << bad;
  }
}

TEST(MountOptionsTest, InodeCacheTakesACountOfInodes) {
  auto def = ParseMount({"/m"});
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->fs.max_cached_inodes, 250000u);
  auto set = ParseMount({"/m", "--inode-cache", "1000000"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->fs.max_cached_inodes, 1000000u);
  for (const char* bad : {"", "999", "-5000", "1e6", "250k", "99999999999"}) {
    auto r = ParseMount({"/m", "--inode-cache", bad});
    EXPECT_EQ(r.err(), EINVAL) << bad;
    if (!r.ok()) EXPECT_NE(r.status().message().find("--inode-cache"), std::string::npos);
  }
}

TEST(MountOptionsTest, PassthroughAndIoUringTakeAutoOnOrOff) {
  auto def = ParseMount({"/m"});
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->passthrough, MountOptions::Switch::kAuto);
  EXPECT_EQ(def->io_uring, MountOptions::Switch::kAuto);
  auto set = ParseMount({"/m", "--passthrough", "off", "--io-uring", "on"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->passthrough, MountOptions::Switch::kOff);
  EXPECT_EQ(set->io_uring, MountOptions::Switch::kOn);
  EXPECT_STREQ(SwitchName(set->io_uring), "on");
  auto off = ParseMount({"/m", "--io-uring", "off"});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->io_uring, MountOptions::Switch::kOff);
  EXPECT_EQ(off->passthrough, MountOptions::Switch::kAuto);
  for (const char* flag : {"--io-uring", "--passthrough"}) {
    auto bad = ParseMount({"/m", flag, "yes"});
    EXPECT_EQ(bad.err(), EINVAL) << flag;
    if (!bad.ok()) {
      EXPECT_NE(
          bad.status().message().find(std::string(flag) + " takes auto, on or off, not 'yes'"),
          std::string::npos)
          << bad.status().message();
    }
  }
}

TEST(MountOptionsTest, NodeAndRefreshForClusterMode) {
  auto def = ParseMount({"/m"});
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(def->fs.node, "");
  EXPECT_EQ(def->fs.refresh_ns, 1'000'000'000);

  auto o = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--node", "gpu-017.rack_2"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->fs.node, "gpu-017.rack_2");
  EXPECT_EQ(o->fs.refresh_ns, 1'000'000'000);

  auto r = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--node", "a", "--refresh", "0.25"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->fs.refresh_ns, 250'000'000);
  auto hour = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--refresh", "3600", "--node", "a"});
  ASSERT_TRUE(hour.ok()) << hour.status().ToString();
  EXPECT_EQ(hour->fs.refresh_ns, int64_t{3600} * 1'000'000'000);

  EXPECT_EQ(def->publish_timeout_ns, int64_t{60} * 1'000'000'000);
  auto wait = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--node", "a", "--publish-timeout", "600"});
  ASSERT_TRUE(wait.ok()) << wait.status().ToString();
  EXPECT_EQ(wait->publish_timeout_ns, int64_t{600} * 1'000'000'000);
  auto short_wait = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--node", "a", "--publish-timeout", "0.5"});
  ASSERT_TRUE(short_wait.ok()) << short_wait.status().ToString();
  EXPECT_EQ(short_wait->publish_timeout_ns, 500'000'000);

  EXPECT_EQ(def->read_wait_ns, int64_t{600} * 1'000'000'000);
  auto read = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--node", "a", "--read-wait", "2.5"});
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->read_wait_ns, 2'500'000'000);

  EXPECT_EQ(def->fs.job_nodes, 0u);
  auto nodes =
      ParseMount({"/m", "--remote", "file:///tmp/bucket", "--node", "a", "--nodes", "1000"});
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  EXPECT_EQ(nodes->fs.job_nodes, 1000u);
}

TEST(MountOptionsTest, BadClusterOptionsAreRefused) {
  for (const char* bad : {"", "-a", ".a", "a.", "a/b", "a~b", "a b", "ü",
                          "x123456789012345678901234567890123456789012345678901234567890123"}) {
    auto r = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--node", bad});
    EXPECT_EQ(r.err(), EINVAL) << bad;
    EXPECT_EQ(r.status().message().rfind("--node: ", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find("1-63 characters"), std::string::npos) << r.status().message();
  }
  auto no_remote = ParseMount({"/m", "--node", "a"});
  EXPECT_EQ(no_remote.err(), EINVAL);
  EXPECT_EQ(no_remote.status().message(), "--node needs --remote: the bucket is what the nodes share");

  auto alone = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--refresh", "2"});
  EXPECT_EQ(alone.err(), EINVAL);
  EXPECT_NE(alone.status().message().find("--refresh needs --node"), std::string::npos) << alone.status().message();

  for (const char* bad : {"0", "-1", "3600.5", "1e9", "soon", "", "nan", "1s"}) {
    auto r = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--node", "a", "--refresh", bad});
    EXPECT_EQ(r.err(), EINVAL) << bad;
    EXPECT_NE(r.status().message().find("--refresh takes"), std::string::npos) << r.status().message();
  }

  EXPECT_FALSE(ParseMount({"/m", "--remote", "file:///tmp/bucket", "--node", "a"})->replace_node);
  auto replace =
      ParseMount({"/m", "--remote", "file:///tmp/bucket", "--node", "a", "--replace-node"});
  ASSERT_TRUE(replace.ok()) << replace.status().ToString();
  EXPECT_TRUE(replace->replace_node);
  auto lone_replace = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--replace-node"});
  EXPECT_EQ(lone_replace.err(), EINVAL);
  EXPECT_NE(lone_replace.status().message().find("--replace-node needs --node"), std::string::npos)
      << lone_replace.status().message();
  auto lone_nodes = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--nodes", "4"});
  EXPECT_EQ(lone_nodes.err(), EINVAL);
  EXPECT_NE(lone_nodes.status().message().find("--nodes needs --node"), std::string::npos)
      << lone_nodes.status().message();
  for (const char* bad :
       {"0", "-2", "100001", "4.5", "04", "+4", "four", "", "4 ", "99999999999999999999"}) {
    auto r = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--node", "a", "--nodes", bad});
    EXPECT_EQ(r.err(), EINVAL) << bad;
    EXPECT_NE(r.status().message().find("--nodes takes the job's node count"), std::string::npos)
        << r.status().message();
  }

  auto lone_wait = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--publish-timeout", "5"});
  EXPECT_EQ(lone_wait.err(), EINVAL);
  EXPECT_NE(lone_wait.status().message().find("--publish-timeout needs --node"), std::string::npos)
      << lone_wait.status().message();
  for (const char* bad : {"0", "-3", "86401", "inf", "later", ""}) {
    auto r = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--node", "a", "--publish-timeout", bad});
    EXPECT_EQ(r.err(), EINVAL) << bad;
    EXPECT_NE(r.status().message().find("--publish-timeout takes"), std::string::npos) << r.status().message();
  }

  auto lone_read = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--read-wait", "5"});
  EXPECT_EQ(lone_read.err(), EINVAL);
  EXPECT_NE(lone_read.status().message().find("--read-wait needs --node"), std::string::npos)
      << lone_read.status().message();
  for (const char* bad : {"0", "-3", "86401", "nan", "soon", ""}) {
    auto r = ParseMount({"/m", "--remote", "file:///tmp/bucket", "--node", "a", "--read-wait", bad});
    EXPECT_EQ(r.err(), EINVAL) << bad;
    EXPECT_NE(r.status().message().find("--read-wait takes"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace ckptfs
