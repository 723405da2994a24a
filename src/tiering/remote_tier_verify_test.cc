// Verified reads (docs/architecture.md, "Verified reads"): what a cold mount
// fetches is checked against the CRC32Cs the commit object recorded before
// it is served or marked resident. Corruption is injected into what the
// in-memory store returns (MemoryObjectStore::CorruptReads); the stored
// objects stay right, so a retry can succeed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "common/crc32c.h"
#include "control/metrics.h"
#include "formats/commit_object.h"
#include "tiering/remote_tier.h"
#include "tiering/remote_tier_test_util.h"

namespace ckptfs {
namespace {

using testing::FsEnv;
using testing::kMiB;
using testing::Mkdir;
using testing::Pattern;
using testing::RemoteOptions;
using testing::RemoteTierTest;
using testing::SharedStore;
using testing::WriteFile;

std::vector<nlohmann::json> EventsNamed(const EventLog& log, const std::string& name) {
  std::vector<nlohmann::json> out;
  std::istringstream in(log.Render());
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_discarded() && e.value("event", "") == name) out.push_back(e);
  }
  return out;
}

class VerifiedReadTest : public RemoteTierTest {
 protected:
  // step100 with two files persisted by a tier recording 1 MiB chunk
  // CRC32Cs (RemoteTierTest's setting).
  VerifiedReadTest() {
    FileSystem& fs = env_.fs();
    const uint64_t step = Mkdir(fs, kRootIno, "step100");
    WriteFile(fs, step, "big", big_);
    WriteFile(fs, step, "small", small_);
    Commit(step);
    EXPECT_TRUE(tier_->RunOnceForTest().ok());
    EXPECT_EQ(Xattr(step, "user.ckptfs.persisted"), "true");
  }

  // Another machine with an empty cache on the same remote.
  void ColdMount(uint64_t fetch_chunk = kMiB) {
    cold_ = std::make_unique<FsEnv>(RemoteOptions());
    RemoteTierOptions o;
    o.fetch_chunk = fetch_chunk;
    cold_tier_ = std::make_unique<RemoteTier>(&cold_->fs(), cold_->fs().data(), std::make_unique<SharedStore>(&store_), &cold_->events, o);
    cold_->fs().SetTierHooks(cold_tier_.get());
    auto imported = cold_tier_->ImportPersistedSteps();
    ASSERT_TRUE(imported.ok()) << imported.status().ToString();
    ASSERT_EQ(*imported, 1u);
  }
  void TearDown() override {
    if (cold_) cold_->fs().SetTierHooks(nullptr);
    cold_tier_.reset();
  }
  uint64_t ColdIno(const std::string& name) {
    FileSystem& c = cold_->fs();
    return c.Lookup(c.Lookup(kRootIno, "step100")->ino, name)->ino;
  }
  // Bytes [offset, offset + n) of a cold file, or the read's error.
  Result<std::string> ColdRead(const std::string& name, uint64_t offset, size_t n) {
    FileSystem& c = cold_->fs();
    auto h = c.OpenFile(ColdIno(name), O_RDONLY);
    if (!h.ok()) return h.status();
    std::string buf(n, '\0');
    auto got = c.Read(h->fh, buf.data(), n, offset);
    (void)c.Release(h->fh);
    if (!got.ok()) return got.status();
    buf.resize(*got);
    return buf;
  }
  bool ColdResident(const std::string& name) {
    auto rec = cold_->fs().ObjectRecordFor(ColdIno(name), "step100/" + name);
    return rec && rec->resident;
  }
  // Rewrites the commit object as a ckptfs without chunk CRC32Cs wrote it.
  void StripChunkCrcs() {
    const std::string key = CommitObjectKey("step100");
    auto obj = DecodeCommitObject(*store_.Peek(key), "step100");
    ASSERT_TRUE(obj.ok());
    obj->chunk_size = 0;
    for (auto& f : obj->files) f.chunk_crcs.clear();
    ASSERT_TRUE(store_.Put(key, EncodeCommitObject(*obj)).ok());
  }

  const std::string big_ = Pattern(4 * kMiB + 100, 'v');
  const std::string small_ = Pattern(5000, 's');
  std::unique_ptr<FsEnv> cold_;
  std::unique_ptr<RemoteTier> cold_tier_;
};

TEST_F(VerifiedReadTest, TheCommitObjectRecordsEachChunksCrc32c) {
  auto obj = DecodeCommitObject(*store_.Peek(CommitObjectKey("step100")), "step100");
  ASSERT_TRUE(obj.ok()) << obj.status().ToString();
  EXPECT_EQ(obj->chunk_size, kMiB);
  ASSERT_EQ(obj->files.size(), 2u);
  const CommitObject::File& big = obj->files[0].path == "big" ? obj->files[0] : obj->files[1];
  ASSERT_EQ(big.chunk_crcs.size(), 5u);
  for (size_t i = 0; i < 5; i++) {
    const std::string chunk = big_.substr(i * kMiB, kMiB);
    EXPECT_EQ(big.chunk_crcs[i], Crc32c(0, chunk.data(), chunk.size())) << i;
  }
  EXPECT_EQ(big.crc32c, Crc32c(0, big_.data(), big_.size()));
}

TEST_F(VerifiedReadTest, BytesCorruptedInTransitOnceAreFetchedAgainAndServedRight) {
  ColdMount();
  store_.CorruptReads("step100/big", 2 * kMiB + 7, 1);
  const size_t gets = store_.get_calls();
  auto got = ColdRead("big", 2 * kMiB, 4096);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, big_.substr(2 * kMiB, 4096));
  EXPECT_EQ(store_.get_calls() - gets, 2u);  // the chunk, then once more
  EXPECT_TRUE(EventsNamed(cold_->events, "checksum_mismatch").empty());
  PrometheusWriter w;
  cold_tier_->AddMetrics(&w);
  EXPECT_NE(w.text().find("\nckptfs_remote_checksum_mismatches_total 1\n"), std::string::npos) << w.text();
}

TEST_F(VerifiedReadTest, ACorruptObjectIsEioWithAnEventAndNeverBecomesResident) {
  ColdMount();
  store_.CorruptReads("step100/big", 3 * kMiB + 11, -1);
  // Chunks before the bad one read fine; the bad one never does.
  auto first = ColdRead("big", 0, 3 * kMiB);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, big_.substr(0, 3 * kMiB));
  for (int i = 0; i < 2; i++) {
    auto bad = ColdRead("big", 3 * kMiB, 4096);
    EXPECT_EQ(bad.err(), EIO) << (bad.ok() ? "read succeeded" : bad.status().ToString());
  }
  auto events = EventsNamed(cold_->events, "checksum_mismatch");
  ASSERT_EQ(events.size(), 1u);  // once per range, not once per read
  EXPECT_EQ(events[0]["key"], "step100/big");
  EXPECT_EQ(events[0]["offset"], 3 * kMiB);
  EXPECT_EQ(events[0]["length"], kMiB);
  const std::string chunk = big_.substr(3 * kMiB, kMiB);
  char expected[9];
  std::snprintf(expected, sizeof expected, "%08x", Crc32c(0, chunk.data(), chunk.size()));
  EXPECT_EQ(events[0]["expected"], expected);
  EXPECT_NE(events[0]["got"], expected);
  // The rest of the file and the other file are fine; nothing of the bad
  // file is resident, even after the control pass.
  auto tail = ColdRead("big", 4 * kMiB, 100);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(*tail, big_.substr(4 * kMiB));
  EXPECT_EQ(*ColdRead("small", 0, 5000), small_);
  ASSERT_TRUE(cold_tier_->RunOnceForTest().ok());
  EXPECT_FALSE(ColdResident("big"));
  EXPECT_TRUE(ColdResident("small"));
}

TEST_F(VerifiedReadTest, AFetchUnitLargerThanTheRecordedChunkIsVerifiedPerRecordedChunk) {
  ColdMount(/*fetch_chunk=*/2 * kMiB + 5);  // rounded down to two recorded chunks
  store_.CorruptReads("step100/big", kMiB + 1, -1);
  const size_t gets = store_.get_calls();
  EXPECT_EQ(ColdRead("big", 0, 100).err(), EIO);
  EXPECT_EQ(store_.get_calls() - gets, 2u);
  auto events = EventsNamed(cold_->events, "checksum_mismatch");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["offset"], kMiB);  // the recorded chunk, not the fetch unit
  EXPECT_EQ(*ColdRead("big", 2 * kMiB, 100), big_.substr(2 * kMiB, 100));
}

TEST_F(VerifiedReadTest, OlderCommitObjectsAreFetchedWholeAndVerifiedBeforeAnyByteIsServed) {
  StripChunkCrcs();
  ColdMount();
  const size_t gets = store_.get_calls();
  auto got = ColdRead("big", 2 * kMiB, 100);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, big_.substr(2 * kMiB, 100));
  EXPECT_EQ(store_.get_calls() - gets, 5u);  // every chunk of the file
  ASSERT_TRUE(cold_tier_->RunOnceForTest().ok());
  EXPECT_TRUE(ColdResident("big"));
}

TEST_F(VerifiedReadTest, AnOlderCommitObjectsCorruptFileIsEioAndNeverResident) {
  StripChunkCrcs();
  ColdMount();
  store_.CorruptReads("step100/big", 4 * kMiB + 50, -1);
  EXPECT_EQ(ColdRead("big", 0, 100).err(), EIO);
  auto events = EventsNamed(cold_->events, "checksum_mismatch");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["offset"], 0u);
  EXPECT_EQ(events[0]["length"], big_.size());
  char expected[9];
  std::snprintf(expected, sizeof expected, "%08x", Crc32c(0, big_.data(), big_.size()));
  EXPECT_EQ(events[0]["expected"], expected);
  ASSERT_TRUE(cold_tier_->RunOnceForTest().ok());
  EXPECT_FALSE(ColdResident("big"));
  // Corrupted once only: the second whole fetch serves it.
  cold_->fs().SetTierHooks(nullptr);
  cold_tier_.reset();
  ColdMount();
  store_.ClearReadCorruptions();
  store_.CorruptReads("step100/big", 50, 1);
  auto again = ColdRead("big", 4 * kMiB, 100);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, big_.substr(4 * kMiB, 100));
}

}  // namespace
}  // namespace ckptfs
