#include "manifest/records.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace ckptfs {
namespace {

constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kMax32 = std::numeric_limits<uint32_t>::max();

InodeRecord SampleInode() {
  InodeRecord rec;
  rec.ino = 42;
  rec.mode = S_IFREG | 0644;
  rec.uid = 1000;
  rec.gid = 100;
  rec.nlink = 1;
  rec.size = 123456789;
  rec.atime = {1700000000, 1};
  rec.mtime = {1700000001, 999999999};
  rec.ctime = {1700000002, 500};
  rec.parent = 7;
  rec.sealed = true;
  rec.next_cookie = 3;
  return rec;
}

StepRecord SampleStep() {
  StepRecord rec;
  rec.state = StepState::kCommitted;
  rec.step = 1000;
  rec.committed_at = {1700000100, 250};
  rec.bytes = 1 << 30;
  rec.files = 12;
  rec.error = "";
  return rec;
}

TEST(RecordsTest, InodeRoundTrip) {
  const InodeRecord rec = SampleInode();
  Result<InodeRecord> back = DecodeInode(EncodeInode(rec));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, rec);
}

TEST(RecordsTest, InodeRoundTripEdgeValues) {
  InodeRecord rec;
  rec.ino = kMax64;
  rec.mode = kMax32;
  rec.uid = kMax32;
  rec.gid = 0;
  rec.nlink = kMax32;
  rec.size = kMax64;
  rec.atime = {std::numeric_limits<time_t>::max(), 999999999};
  rec.mtime = {std::numeric_limits<time_t>::min(), 0};
  rec.ctime = {-1, 123};
  rec.parent = kMax64 - 1;
  rec.sealed = false;
  rec.next_cookie = kMax64;
  rec.symlink_target = std::string(70000, 'x') + std::string("\0\xff", 2);
  Result<InodeRecord> back = DecodeInode(EncodeInode(rec));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, rec);

  const InodeRecord zero;
  Result<InodeRecord> back_zero = DecodeInode(EncodeInode(zero));
  ASSERT_TRUE(back_zero.ok());
  EXPECT_EQ(*back_zero, zero);
}

TEST(RecordsTest, InodeEqualityComparesEveryField) {
  const InodeRecord base = SampleInode();
  std::vector<InodeRecord> variants(13, base);
  variants[0].ino++;
  variants[1].mode++;
  variants[2].uid++;
  variants[3].gid++;
  variants[4].nlink++;
  variants[5].size++;
  variants[6].atime.tv_nsec++;
  variants[7].mtime.tv_sec++;
  variants[8].ctime.tv_nsec++;
  variants[9].parent++;
  variants[10].sealed = !base.sealed;
  variants[11].next_cookie++;
  variants[12].symlink_target = "t";
  for (size_t i = 0; i < variants.size(); i++) {
    EXPECT_FALSE(variants[i] == base) << "field " << i;
    // The difference must survive encoding too, or a field is not stored.
    Result<InodeRecord> back = DecodeInode(EncodeInode(variants[i]));
    ASSERT_TRUE(back.ok());
    EXPECT_FALSE(*back == base) << "field " << i;
  }
}

TEST(RecordsTest, DentryRoundTrip) {
  for (const DentryRecord rec :
       {DentryRecord{5, 1}, DentryRecord{kMax64, kMax64}, DentryRecord{}}) {
    Result<DentryRecord> back = DecodeDentry(EncodeDentry(rec));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, rec);
  }
}

TEST(RecordsTest, DentryEncodingIsPinned) {
  // The on-disk format: version 1, then little-endian ino and cookie.
  const std::string expected("\x01\x08\x07\x06\x05\x04\x03\x02\x01\x09\0\0\0\0\0\0\0", 17);
  EXPECT_EQ(EncodeDentry(DentryRecord{0x0102030405060708, 9}), expected);
}

TEST(RecordsTest, StepRoundTripEveryState) {
  for (StepState state : {StepState::kWriting, StepState::kCommitted, StepState::kIncomplete,
                          StepState::kBroken, StepState::kDeleting}) {
    StepRecord rec = SampleStep();
    rec.state = state;
    rec.error = state == StepState::kBroken ? "bad .metadata" : "";
    Result<StepRecord> back = DecodeStep(EncodeStep(rec));
    ASSERT_TRUE(back.ok()) << StepStateName(state);
    EXPECT_EQ(*back, rec);
  }
}

TEST(RecordsTest, StepPersistedFlagRoundTripsAndOldRecordsDecode) {
  StepRecord rec = SampleStep();
  rec.persisted = true;
  std::string encoded = EncodeStep(rec);
  EXPECT_EQ(*DecodeStep(encoded), rec);
  encoded.pop_back();  // as written before the remote tier existed
  auto old = DecodeStep(encoded);
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(old->persisted);
}

TEST(RecordsTest, StepPendingCommitRoundTripsAndOlderRecordsHaveNone) {
  StepRecord rec = SampleStep();
  rec.session = 0;
  rec.best_ref.clear();
  const std::string without = EncodeStep(rec);
  rec.pending_commit = kPendingCommit | kPendingCommitRenamed | kPendingCommitDirect;
  const std::string with = EncodeStep(rec);
  EXPECT_EQ(with.size(), without.size() + 8 + 4 + 1);  // session, empty best_ref, the bits
  EXPECT_EQ(*DecodeStep(with), rec);
  EXPECT_EQ(DecodeStep(without)->pending_commit, 0);
  rec.session = 42;
  rec.best_ref = "checkpoint-7";
  EXPECT_EQ(*DecodeStep(EncodeStep(rec)), rec);
}

TEST(RecordsTest, StepCommitterRoundTripsAndOlderRecordsHaveNone) {
  StepRecord rec = SampleStep();
  rec.session = 0;
  rec.best_ref.clear();
  rec.pending_commit = 0;
  const std::string without = EncodeStep(rec);
  EXPECT_EQ(DecodeStep(without)->committer, "");
  rec.committer = "gpu-017";
  const std::string with = EncodeStep(rec);
  // The earlier trailing fields are written too, so the committer is last.
  EXPECT_EQ(with.size(), without.size() + 8 + 4 + 1 + 4 + 7);
  EXPECT_EQ(*DecodeStep(with), rec);
  EXPECT_FALSE(*DecodeStep(with) == *DecodeStep(without));
}

TEST(RecordsTest, StepFollowsRemovalRoundTripsAndOlderRecordsHaveNone) {
  StepRecord rec = SampleStep();
  rec.committer = "gpu-017";
  const std::string without = EncodeStep(rec);
  EXPECT_EQ(DecodeStep(without)->follows_removal, "");
  rec.follows_removal = "\"9b2f\"";
  const std::string with = EncodeStep(rec);
  EXPECT_EQ(with.size(), without.size() + 4 + 6);
  EXPECT_EQ(*DecodeStep(with), rec);
  // A writing step (no committer yet) keeps it too.
  rec.committer.clear();
  rec.follows_removal = kFollowsNextRemoval;
  EXPECT_EQ(*DecodeStep(EncodeStep(rec)), rec);
  // A record from before the field follows whichever removal comes next: a
  // save in progress across the upgrade is never taken for a leftover.
  EXPECT_TRUE(FollowsAnyRemoval(DecodeStep(without)->follows_removal));
  EXPECT_TRUE(FollowsAnyRemoval(kFollowsNextRemoval));
  EXPECT_FALSE(FollowsAnyRemoval(kFollowsNoRemoval));
  EXPECT_FALSE(FollowsAnyRemoval("\"9b2f\""));
}

TEST(RecordsTest, StepDecisionRoundTripsAndOlderRecordsHaveNone) {
  StepRecord rec = SampleStep();
  rec.committer = "gpu-017";
  const std::string without = EncodeStep(rec);
  EXPECT_EQ(DecodeStep(without)->decision, "");
  rec.decision = "gpu-017~8c1d";
  const std::string with = EncodeStep(rec);
  // follows_removal ("" written, 4 bytes) comes before it.
  EXPECT_EQ(with.size(), without.size() + 4 + 4 + 12);
  EXPECT_EQ(*DecodeStep(with), rec);
  rec.follows_removal = "\"9b2f\"";
  EXPECT_EQ(*DecodeStep(EncodeStep(rec)), rec);
}

TEST(RecordsTest, ObjectOwnerNodeRoundTripsAndOlderRecordsHaveNone) {
  ObjectRecord object{"a/step1/x", 10, 5, 0, false, false, 0, {}, ""};
  const std::string mine = EncodeObject(object);
  EXPECT_EQ(DecodeObject(mine)->owner_node, "");
  object.owner_node = "b";
  const std::string theirs = EncodeObject(object);
  EXPECT_EQ(theirs.size(), mine.size() + 4 + 1);
  EXPECT_EQ(*DecodeObject(theirs), object);
}

TEST(RecordsTest, ObjectAndUploadRecordsRoundTrip) {
  ObjectRecord object{"a/step1/x y", ~0ULL, -5, 0xffffffff, true, true, 0, {}, ""};
  EXPECT_EQ(*DecodeObject(EncodeObject(object)), object);
  object.resident = false;
  EXPECT_EQ(*DecodeObject(EncodeObject(object)), object);
  UploadRecord upload{1ULL << 40, 99, "upload-id", "a/step1/x y"};
  EXPECT_EQ(*DecodeUpload(EncodeUpload(upload)), upload);
  EXPECT_EQ(RemoteGcObjectKey(RemoteGcKey("a/b", true)), "a/b");
  EXPECT_LT(RemoteGcKey("z", true), RemoteGcKey("a", false));  // commit objects first
}

TEST(RecordsTest, ChecksumRecordRoundTrips) {
  ChecksumRecord rec{(1ULL << 42) + 1, -7, 0xe3069283};
  EXPECT_EQ(*DecodeChecksum(EncodeChecksum(rec)), rec);
}

TEST(RecordsTest, StepEphemeralFlagRoundTrips) {
  StepRecord rec = SampleStep();
  rec.ephemeral = true;
  std::string encoded = EncodeStep(rec);
  EXPECT_EQ(*DecodeStep(encoded), rec);
  encoded[encoded.size() - 2] = 2;  // the flag before persisted; only 0 and 1 are valid
  EXPECT_EQ(DecodeStep(encoded).err(), EIO);
}

TEST(RecordsTest, StepSessionAndBestRoundTripAndOldRecordsDecode) {
  StepRecord rec = SampleStep();
  const std::string without = EncodeStep(rec);
  rec.session = 0x1234'5678'9abcULL;
  rec.best_ref = "checkpoint-200";
  const std::string with = EncodeStep(rec);
  EXPECT_GT(with.size(), without.size());
  EXPECT_EQ(*DecodeStep(with), rec);
  // A record without the trailing fields (an older version's) decodes as
  // unknown session and no best checkpoint.
  StepRecord old = *DecodeStep(without);
  EXPECT_EQ(old.session, 0u);
  EXPECT_EQ(old.best_ref, "");
  // Cut inside the trailing fields: corrupt, not silently shortened.
  EXPECT_EQ(DecodeStep(with.substr(0, with.size() - 3)).err(), EIO);
}

TEST(RecordsTest, StepRoundTripEdgeValues) {
  StepRecord rec;
  rec.state = StepState::kIncomplete;
  rec.step = std::numeric_limits<int64_t>::min();
  rec.committed_at = {-5, 999999999};
  rec.bytes = kMax64;
  rec.files = kMax64;
  rec.error = std::string(1 << 20, 'e');
  Result<StepRecord> back = DecodeStep(EncodeStep(rec));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, rec);

  rec.step = std::numeric_limits<int64_t>::max();
  back = DecodeStep(EncodeStep(rec));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->step, rec.step);
}

TEST(RecordsTest, StepEqualityComparesEveryField) {
  const StepRecord base = SampleStep();
  std::vector<StepRecord> variants(7, base);
  variants[0].state = StepState::kBroken;
  variants[1].step++;
  variants[2].committed_at.tv_sec++;
  variants[3].committed_at.tv_nsec++;
  variants[4].bytes++;
  variants[5].files++;
  variants[6].error = "x";
  for (size_t i = 0; i < variants.size(); i++) {
    EXPECT_FALSE(variants[i] == base) << "field " << i;
    Result<StepRecord> back = DecodeStep(EncodeStep(variants[i]));
    ASSERT_TRUE(back.ok());
    EXPECT_FALSE(*back == base) << "field " << i;
  }
}

TEST(RecordsTest, StepStateNames) {
  EXPECT_STREQ(StepStateName(StepState::kWriting), "writing");
  EXPECT_STREQ(StepStateName(StepState::kCommitted), "committed");
  EXPECT_STREQ(StepStateName(StepState::kIncomplete), "incomplete");
  EXPECT_STREQ(StepStateName(StepState::kBroken), "broken");
}

// Every proper prefix of a valid value, and the value with a byte appended,
// must decode to EIO.
template <typename Decode>
void ExpectTruncationsAndExtensionsFail(const std::string& valid, Decode decode) {
  ASSERT_TRUE(decode(valid).ok());
  for (size_t len = 0; len < valid.size(); len++) {
    auto r = decode(std::string_view(valid).substr(0, len));
    EXPECT_EQ(r.err(), EIO) << "prefix of length " << len;
  }
  EXPECT_EQ(decode(valid + '\0').err(), EIO);
  std::string wrong_version = valid;
  wrong_version[0] = 2;
  EXPECT_EQ(decode(wrong_version).err(), EIO);
}

TEST(RecordsTest, TruncatedOrExtendedValuesAreCorrupt) {
  InodeRecord inode = SampleInode();
  inode.symlink_target = "target";
  ExpectTruncationsAndExtensionsFail(EncodeInode(inode), DecodeInode);
  ExpectTruncationsAndExtensionsFail(EncodeDentry(DentryRecord{1, 2}), DecodeDentry);
  StepRecord step = SampleStep();
  step.error = "why";
  // The persisted flag is an optional trailing byte (records from before the
  // remote tier): without it the record is whole; any shorter is corrupt.
  const std::string full = EncodeStep(step);
  for (size_t len = 0; len + 1 < full.size(); len++) {
    EXPECT_EQ(DecodeStep(std::string_view(full).substr(0, len)).err(), EIO) << len;
  }
  EXPECT_TRUE(DecodeStep(full.substr(0, full.size() - 1)).ok());
  EXPECT_EQ(DecodeStep(full + '\0').err(), EIO);
  ObjectRecord object{"run/step1/f", 123, 456, 0xabcdef01, false, true, 100, {1, 2}, ""};
  // crc_known, the chunk size and the chunk CRC32Cs are an optional tail
  // (records from before them end after `resident`); a cut inside it is corrupt.
  const std::string full_object = EncodeObject(object);
  const size_t old_size = full_object.size() - (1 + 8 + 4 + 2 * 4);
  for (size_t len = 0; len < full_object.size(); len++) {
    if (len == old_size) continue;
    EXPECT_EQ(DecodeObject(std::string_view(full_object).substr(0, len)).err(), EIO) << len;
  }
  auto old = DecodeObject(full_object.substr(0, old_size));
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->crc_known);
  EXPECT_TRUE(old->chunk_crcs.empty());
  EXPECT_EQ(DecodeObject(full_object + '\0').err(), EIO);
  // An old run-level file's record (CRC32C 0 for a non-empty file) knows nothing.
  ObjectRecord run_file{"run/latest", 9, 1, 0, false, true, 0, {}, ""};
  const std::string run_file_value = EncodeObject(run_file);
  EXPECT_FALSE(DecodeObject(run_file_value.substr(0, run_file_value.size() - (1 + 8 + 4)))->crc_known);
  // A chunk list that does not cover the size is corrupt.
  ObjectRecord uncovered = object;
  uncovered.chunk_crcs = {1};
  EXPECT_EQ(DecodeObject(EncodeObject(uncovered)).err(), EIO);
  ExpectTruncationsAndExtensionsFail(EncodeUpload(UploadRecord{7, 8, "id", "k"}), DecodeUpload);
  ExpectTruncationsAndExtensionsFail(EncodeChecksum(ChecksumRecord{1, 2, 3}), DecodeChecksum);
  EXPECT_NE(DecodeStep("").status().message().find("corrupt step record"), std::string::npos);
  EXPECT_NE(DecodeInode("\x01").status().message().find("corrupt inode record"),
            std::string::npos);
}

TEST(RecordsTest, HugeStringLengthIsCorruptNotAnOverread) {
  std::string value = EncodeStep(SampleStep());
  // The error string's length is the four bytes before the final ephemeral
  // and persisted flags (the string is empty).
  value.replace(value.size() - 6, 4, "\xff\xff\xff\xff");
  EXPECT_EQ(DecodeStep(value).err(), EIO);
  value.replace(value.size() - 6, 4, std::string("\x02\0\0\0", 4));
  EXPECT_EQ(DecodeStep(value).err(), EIO);  // one byte promised, none there
}

TEST(RecordsTest, OutOfRangeFieldsAreCorrupt) {
  std::string step = EncodeStep(SampleStep());
  step[1] = 5;  // no such state
  EXPECT_EQ(DecodeStep(step).err(), EIO);

  // nsec of committed_at follows version, state, step and the 8-byte tv_sec.
  step = EncodeStep(SampleStep());
  step.replace(1 + 1 + 8 + 8, 4, std::string("\x00\xca\x9a\x3b", 4));  // 1e9
  EXPECT_EQ(DecodeStep(step).err(), EIO);

  // sealed sits after version, ino, four u32s, size, three times and parent.
  const size_t sealed_at = 1 + 8 + 4 * 4 + 8 + 3 * 12 + 8;
  std::string inode = EncodeInode(SampleInode());
  ASSERT_EQ(inode[sealed_at], 1);
  inode[sealed_at] = 2;
  EXPECT_EQ(DecodeInode(inode).err(), EIO);
}

TEST(KeysTest, InoKeyIsBigEndian) {
  EXPECT_EQ(InoKey(0x0102030405060708), std::string("\x01\x02\x03\x04\x05\x06\x07\x08"));
  EXPECT_EQ(InoKey(1), std::string("\0\0\0\0\0\0\0\x01", 8));
  for (uint64_t ino : {uint64_t{0}, uint64_t{1}, uint64_t{255}, uint64_t{256}, kMax64}) {
    Result<uint64_t> back = DecodeInoKey(InoKey(ino));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, ino);
  }
}

TEST(KeysTest, InoKeysSortNumerically) {
  const std::vector<uint64_t> inos = {0, 1, 2, 255, 256, 257, 65535, 65536, uint64_t{1} << 32,
                                      (uint64_t{1} << 56) - 1, uint64_t{1} << 56, kMax64};
  for (size_t i = 1; i < inos.size(); i++) {
    EXPECT_LT(InoKey(inos[i - 1]), InoKey(inos[i])) << inos[i - 1] << " vs " << inos[i];
  }
}

TEST(KeysTest, DentriesOfAParentSortTogether) {
  // Bytewise order of every key of parents 255, 256 and 257 (names chosen so
  // that a little-endian or decimal key would interleave them).
  std::vector<std::string> keys;
  for (uint64_t parent : {uint64_t{257}, uint64_t{255}, uint64_t{256}}) {
    for (const char* name : {"\xff", "a", "zz", "\x01"}) keys.push_back(DentryKey(parent, name));
  }
  std::sort(keys.begin(), keys.end());
  std::vector<uint64_t> parents;
  for (const std::string& key : keys) {
    Result<std::pair<uint64_t, std::string>> decoded = DecodeNamedKey(key);
    ASSERT_TRUE(decoded.ok());
    parents.push_back(decoded->first);
    EXPECT_TRUE(key.starts_with(DentryPrefix(decoded->first)));
  }
  EXPECT_EQ(parents, (std::vector<uint64_t>{255, 255, 255, 255, 256, 256, 256, 256, 257, 257,
                                            257, 257}));
  EXPECT_FALSE(DentryKey(256, "a").starts_with(DentryPrefix(1)));
}

TEST(KeysTest, NamedKeysRoundTrip) {
  const std::string long_name(255, 'n');
  for (const std::string& name : {std::string("a"), long_name, std::string("\0x", 2)}) {
    Result<std::pair<uint64_t, std::string>> d = DecodeNamedKey(DentryKey(kMax64, name));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->first, kMax64);
    EXPECT_EQ(d->second, name);
    Result<std::pair<uint64_t, std::string>> x = DecodeNamedKey(XattrKey(3, name));
    ASSERT_TRUE(x.ok());
    EXPECT_EQ(x->first, 3u);
    EXPECT_EQ(x->second, name);
  }
  EXPECT_EQ(XattrKey(9, "user.a"), InoKey(9) + "user.a");
  EXPECT_EQ(XattrPrefix(9), InoKey(9));
}

TEST(KeysTest, MalformedKeysAreCorrupt) {
  EXPECT_EQ(DecodeInoKey("").err(), EIO);
  EXPECT_EQ(DecodeInoKey("1234567").err(), EIO);
  EXPECT_EQ(DecodeInoKey("123456789").err(), EIO);
  EXPECT_EQ(DecodeNamedKey("1234567").err(), EIO);
  EXPECT_EQ(DecodeNamedKey(InoKey(5)).err(), EIO);  // names are never empty
}

}  // namespace
}  // namespace ckptfs
