#include "formats/commit_object.h"

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

CommitObject Sample() {
  CommitObject obj;
  obj.step_path = "run1/step100";
  obj.step = 100;
  obj.committed_at = {1700000000, 123456789};
  obj.ephemeral = true;
  obj.dir_mtime_ns = 1'699'999'999'000'000'001;
  obj.files = {{"__0_0.distcp", 1000, 0xdeadbeef, 0640, 5, {}}, {"sub/x.bin", 0, 0, 0600, 6, {}}};
  obj.bytes = 1000;
  obj.dirs = {"sub"};
  obj.symlinks = {{"link", "__0_0.distcp"}};
  return obj;
}

TEST(CommitObject, RoundTrips) {
  const CommitObject obj = Sample();
  auto back = DecodeCommitObject(EncodeCommitObject(obj), "run1/step100");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->step, 100);
  EXPECT_EQ(back->committed_at.tv_sec, obj.committed_at.tv_sec);
  EXPECT_EQ(back->committed_at.tv_nsec, obj.committed_at.tv_nsec);
  EXPECT_TRUE(back->ephemeral);
  EXPECT_EQ(back->dir_mtime_ns, obj.dir_mtime_ns);
  EXPECT_EQ(back->files, obj.files);
  EXPECT_EQ(back->dirs, obj.dirs);
  EXPECT_EQ(back->symlinks, obj.symlinks);
  EXPECT_EQ(back->bytes, 1000u);
}

TEST(CommitObject, ChunkCrcsRoundTripAndMustCoverTheFile) {
  CommitObject obj = Sample();
  obj.chunk_size = 4096;
  obj.files[0].size = 10000;
  obj.files[0].chunk_crcs = {1, 2, 0xffffffff};
  obj.bytes = 10000;
  const std::string json = EncodeCommitObject(obj);
  EXPECT_NE(json.find("\"chunk_size\": 4096"), std::string::npos) << json;
  auto back = DecodeCommitObject(json, "run1/step100");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->chunk_size, 4096u);
  EXPECT_EQ(back->files, obj.files);  // the empty file has no chunks

  CommitObject short_list = obj;
  short_list.files[0].chunk_crcs.pop_back();
  EXPECT_EQ(DecodeCommitObject(EncodeCommitObject(short_list), "run1/step100").err(), EIO);
  CommitObject tiny = obj;
  tiny.chunk_size = 16;
  tiny.files[0].chunk_crcs.assign(625, 0);
  EXPECT_EQ(DecodeCommitObject(EncodeCommitObject(tiny), "run1/step100").err(), EIO);
  // Written before chunk CRC32Cs existed: no chunk_size, no chunks.
  auto old = DecodeCommitObject(EncodeCommitObject(Sample()), "run1/step100");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->chunk_size, 0u);
  EXPECT_TRUE(old->files[0].chunk_crcs.empty());
}

TEST(CommitObject, Keys) {
  EXPECT_EQ(CommitObjectKey("a/step1"), "a/step1/.ckptfs-commit.json");
  std::string step;
  EXPECT_TRUE(IsCommitObjectKey("a/step1/.ckptfs-commit.json", &step));
  EXPECT_EQ(step, "a/step1");
  EXPECT_FALSE(IsCommitObjectKey(".ckptfs-commit.json", &step));
  EXPECT_FALSE(IsCommitObjectKey("a/step1/x.ckptfs-commit.json", &step));
}

TEST(CommitObject, RejectsWhatAColdMountMustNotTrust) {
  const std::string good = EncodeCommitObject(Sample());
  EXPECT_EQ(DecodeCommitObject(good, "run1/step200").err(), EIO);  // names another step
  EXPECT_EQ(DecodeCommitObject("not json", "s").err(), EIO);
  EXPECT_EQ(DecodeCommitObject("[]", "s").err(), EIO);
  for (const char* path : {"../x", "/abs", "a//b", "a/./b", "", "x/"}) {
    CommitObject obj = Sample();
    obj.files[0].path = path;
    EXPECT_EQ(DecodeCommitObject(EncodeCommitObject(obj), "run1/step100").err(), EIO) << path;
  }
  CommitObject dup = Sample();
  dup.dirs.push_back("__0_0.distcp");
  EXPECT_EQ(DecodeCommitObject(EncodeCommitObject(dup), "run1/step100").err(), EIO);
  std::string wrong_bytes = good;
  wrong_bytes.replace(wrong_bytes.find("\"bytes\": 1000"), 13, "\"bytes\": 1001");
  auto st = DecodeCommitObject(wrong_bytes, "run1/step100");
  EXPECT_EQ(st.err(), EIO);
  std::string bad_crc = good;
  bad_crc.replace(bad_crc.find("deadbeef"), 8, "xyz");
  EXPECT_EQ(DecodeCommitObject(bad_crc, "run1/step100").err(), EIO);
  std::string wrong_version = good;
  wrong_version.replace(wrong_version.find("\"version\": 1"), 12, "\"version\": 9");
  EXPECT_NE(DecodeCommitObject(wrong_version, "run1/step100").status().message().find("version"),
            std::string::npos);
}

}  // namespace
}  // namespace ckptfs
