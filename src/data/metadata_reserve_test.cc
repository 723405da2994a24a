#include "data/metadata_reserve.h"

#include <gtest/gtest.h>

#include "data/memory_data_store.h"

namespace ckptfs {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(MetadataReserveTest, RefusesDataThatWouldEatIntoTheReserve) {
  MemoryDataStore data;
  data.SetDeviceBytes(1024 * kMiB);
  ManualClock clock;
  MetadataReserve reserve({64 * kMiB, 1.0}, &data, &clock);
  data.OccupyBytes(900 * kMiB);  // 124 MiB free
  EXPECT_TRUE(reserve.Admit(50 * kMiB).ok());
  EXPECT_EQ(reserve.reserve_bytes(), 64 * kMiB);  // 1% of 1 GiB is less
  data.OccupyBytes(950 * kMiB);                    // the 50 MiB landed
  // 74 MiB free: 20 more would leave 54 < 64.
  Status st = reserve.Admit(20 * kMiB);
  EXPECT_EQ(st.err(), ENOSPC) << st.ToString();
  // The message says what is true: the disk is not within the reserve yet,
  // this write would take it there.
  EXPECT_NE(st.message().find("writing 20971520 bytes would leave less than the 64 MiB kept"),
            std::string::npos)
      << st.ToString();
  // Metadata-sized requests near the limit are still fine.
  EXPECT_TRUE(reserve.Admit(0).ok());
}

TEST(MetadataReserveTest, SeesFreedSpaceBeforeRefusing) {
  MemoryDataStore data;
  data.SetDeviceBytes(1024 * kMiB);
  ManualClock clock;
  MetadataReserve reserve({64 * kMiB, 0}, &data, &clock);
  data.OccupyBytes(1000 * kMiB);
  EXPECT_EQ(reserve.Admit(1 * kMiB).err(), ENOSPC);
  data.OccupyBytes(0);  // freed by someone else, no time passed
  EXPECT_TRUE(reserve.Admit(1 * kMiB).ok());
}

TEST(MetadataReserveTest, AsksTheFilesystemOnlyEveryFewMegabytesOrTenthOfASecond) {
  MemoryDataStore data;
  data.SetDeviceBytes(1024 * kMiB);
  ManualClock clock;
  MetadataReserve reserve({64 * kMiB, 0}, &data, &clock);
  EXPECT_TRUE(reserve.Admit(4096).ok());
  // Filled behind its back: small writes within the recheck window still
  // pass on the cached answer...
  data.OccupyBytes(1000 * kMiB);
  EXPECT_TRUE(reserve.Admit(4096).ok());
  // ...but after 100 ms it looks again.
  clock.Advance(MetadataReserve::kRecheckNs);
  EXPECT_EQ(reserve.Admit(4096).err(), ENOSPC);
}

TEST(MetadataReserveTest, PercentOfTheDeviceAndOff) {
  MemoryDataStore data;
  data.SetDeviceBytes(100'000 * kMiB);
  ManualClock clock;
  MetadataReserve pct({64 * kMiB, 1.0}, &data, &clock);
  EXPECT_TRUE(pct.Admit(0).ok());
  EXPECT_EQ(pct.reserve_bytes(), 1000 * kMiB);
  data.OccupyBytes(100'000 * kMiB - 10 * kMiB);
  MetadataReserve off({0, 0}, &data, &clock);
  EXPECT_TRUE(off.Admit(5 * kMiB).ok());
  clock.Advance(MetadataReserve::kRecheckNs);
  EXPECT_EQ(pct.Admit(5 * kMiB).err(), ENOSPC);
}

}  // namespace
}  // namespace ckptfs
