#include "cli/mount_options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ckptfs {
namespace {

Result<MountOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "mount");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseMountArgs(static_cast<int>(argv.size()), argv.data());
}

TEST(MountOptionsTest, MetadataReserveTakesASizeAShareOrZero) {
  auto def = Parse({"/m"});
  ASSERT_TRUE(def.ok()) << def.status().ToString();
  EXPECT_EQ(def->fs.metadata_reserve.min_bytes, uint64_t{64} << 20);
  EXPECT_EQ(def->fs.metadata_reserve.percent, 1.0);

  auto size = Parse({"/m", "--metadata-reserve", "256M"});
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(size->fs.metadata_reserve.min_bytes, uint64_t{256} << 20);
  EXPECT_EQ(size->fs.metadata_reserve.percent, 0.0);

  auto pct = Parse({"/m", "--metadata-reserve", "2.5%"});
  ASSERT_TRUE(pct.ok()) << pct.status().ToString();
  EXPECT_EQ(pct->fs.metadata_reserve.min_bytes, 0u);
  EXPECT_EQ(pct->fs.metadata_reserve.percent, 2.5);

  auto off = Parse({"/m", "--metadata-reserve", "0"});
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->fs.metadata_reserve.min_bytes, 0u);
  EXPECT_EQ(off->fs.metadata_reserve.percent, 0.0);

  for (const char* bad : {"", "%", "60%", "-1%", "lots", "12Q"}) {
    auto r = Parse({"/m", "--metadata-reserve", bad});
    EXPECT_EQ(r.err(), EINVAL) << bad;
  }
}

}  // namespace
}  // namespace ckptfs
