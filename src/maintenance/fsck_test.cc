// ckptfs fsck over in-memory stores: caches written by a real FileSystem,
// then damaged record by record or file by file. Each repair is checked
// three ways: what it changed, that a second check finds nothing left to
// repair, and that the cache mounts (loads and recovers) afterwards.
#include "maintenance/fsck.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <random>
#include <set>
#include <string>

#include "common/crc32c.h"
#include "remote/memory_object_store.h"
#include "maintenance/fsck_report.h"
#include "maintenance/fsck_state.h"
#include "namespace/fs_test_env.h"
#include "retention/retention_planner.h"

namespace ckptfs::testing {
namespace {

FsckReport Check(FsEnv& env, bool crc = false) {
  FsckOptions options;
  options.verify_crc = crc;
  auto report = CheckCache(&env.manifest, &env.data, options);
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  return report.ok() ? std::move(report).value() : FsckReport{};
}

std::string Describe(const FsckReport& report) {
  std::string out = RenderFsckText(report);
  for (const auto& g : report.plan) out += "plan group " + g.name + "\n";
  return out;
}

// Check, repair, and require that a second check plans nothing and finds
// only what the first one could not repair.
FsckReport CheckAndRepair(FsEnv& env) {
  FsckReport report = Check(env);
  Status st = RepairCache(&env.manifest, &env.data, &report);
  EXPECT_TRUE(st.ok()) << st.ToString();
  const FsckReport again = Check(env);
  EXPECT_TRUE(again.plan.empty()) << "second run still plans repairs:\n" << Describe(again);
  EXPECT_EQ(again.findings.size(), report.remaining()) << "first:\n"
                                                       << Describe(report) << "second:\n"
                                                       << Describe(again);
  return report;
}

const FsckFinding* FindingAt(const FsckReport& report, const std::string& path) {
  for (const FsckFinding& f : report.findings) {
    if (f.path == path) return &f;
  }
  return nullptr;
}

void PutRaw(MemoryManifestStore& m, KeySpace space, const std::string& key, const std::string& value) {
  ManifestBatch b;
  b.Put(space, key, value);
  ASSERT_TRUE(m.Write(b, true).ok());
}

void DeleteRaw(MemoryManifestStore& m, KeySpace space, const std::string& key) {
  ManifestBatch b;
  b.Delete(space, key);
  ASSERT_TRUE(m.Write(b, true).ok());
}

InodeRecord GetInode(MemoryManifestStore& m, uint64_t ino) {
  auto v = m.Get(KeySpace::kInodes, InoKey(ino));
  EXPECT_TRUE(v.ok() && v->has_value()) << "no inode " << ino;
  if (!v.ok() || !v->has_value()) return {};
  return *DecodeInode(**v);
}

void PutInodeRecord(MemoryManifestStore& m, const InodeRecord& rec) {
  PutRaw(m, KeySpace::kInodes, InoKey(rec.ino), EncodeInode(rec));
}

StepRecord GetStep(MemoryManifestStore& m, uint64_t ino) {
  auto v = m.Get(KeySpace::kSteps, InoKey(ino));
  EXPECT_TRUE(v.ok() && v->has_value()) << "no step " << ino;
  if (!v.ok() || !v->has_value()) return {};
  return *DecodeStep(**v);
}

uint64_t BackingSize(MemoryDataStore& data, uint64_t ino) {
  auto f = data.Open(ino, false);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? *(*f)->Size() : 0;
}

// The object record the remote tier would have written after uploading
// the file as it is now.
void RecordUpload(FsEnv& env, uint64_t ino, const std::string& key, const std::string& contents) {
  const InodeRecord rec = GetInode(env.manifest, ino);
  ObjectRecord obj;
  obj.key = key;
  obj.size = rec.size;
  obj.mtime_ns = TimespecToNanos(rec.mtime);
  obj.crc32c = Crc32c(0, contents.data(), contents.size());
  obj.resident = true;
  PutRaw(env.manifest, KeySpace::kObjects, InoKey(ino), EncodeObject(obj));
}

// run/step1 (committed: shard, sub/more), run/step2 (writing: part), plus a
// symlink, a hard link and an xattr outside the steps.
struct Cache {
  uint64_t run = 0, step1 = 0, shard = 0, more = 0, step2 = 0, part = 0, notes = 0;
};

Cache WriteCache(FsEnv& env) {
  auto& fs = env.fs();
  Cache c;
  c.run = Mkdir(fs, kRootIno, "run");
  c.step1 = Mkdir(fs, c.run, "step1");
  c.shard = WriteFile(fs, c.step1, "shard", "committed shard bytes");
  const uint64_t sub = Mkdir(fs, c.step1, "sub");
  c.more = WriteFile(fs, sub, "more", "more bytes");
  fs.RequestCommit(c.step1);
  env.DrainCommits();
  c.step2 = Mkdir(fs, c.run, "step2");
  c.part = WriteFile(fs, c.step2, "part", "partial");
  c.notes = WriteFile(fs, kRootIno, "notes", "hello");
  EXPECT_TRUE(fs.Link(c.notes, c.run, "notes-link").ok());
  EXPECT_TRUE(fs.Symlink(kRoot, kRootIno, "to-run", "run").ok());
  EXPECT_TRUE(fs.SetXattr(c.notes, "user.k", "v", 0).ok());
  EXPECT_EQ(GetStep(env.manifest, c.step1).state, StepState::kCommitted);
  return c;
}

TEST(FsckTest, CleanCacheHasNoFindings) {
  FsEnv env;
  WriteCache(env);
  env.Stop();
  FsckReport report = Check(env, /*crc=*/true);
  EXPECT_TRUE(report.findings.empty()) << Describe(report);
  EXPECT_TRUE(report.plan.empty());
  EXPECT_EQ(report.counts.files, 4u);  // shard, more, part, notes
  EXPECT_EQ(report.counts.symlinks, 1u);
  EXPECT_EQ(report.counts.steps, 2u);
  EXPECT_EQ(report.counts.committed_steps, 1u);
  EXPECT_EQ(report.counts.backing_files, 4u);
  EXPECT_EQ(report.counts.crc_files, 0u);  // no object records without a remote
  EXPECT_EQ(FsckExitCode(report), kFsckClean);
  EXPECT_EQ(RenderFsckText(report), "fsck: 4 files, 2 steps checked; 0 errors, 0 warnings, 0 repaired\n");
}

// Whatever the daemon does, and wherever it crashes, the cache it leaves is
// clean: fsck must not report a healthy cache (random histories of namespace
// operations, commits, retention, GC and crashes, in the manner of
// commit_test.cc).
TEST(FsckTest, RandomHistoriesLeaveCleanCaches) {
  const std::vector<std::string> kNames = {"step1", "step2", "step3", "run", "a", "f", "g", ".metadata"};
  uint64_t files = 0;
  uint64_t committed = 0;
  for (unsigned seed = 1; seed <= 60; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    FileSystemOptions options;
    ASSERT_TRUE(SetPolicyRule("keep_last", "2", &options.retention).ok());
    FsEnv env(options);
    std::mt19937 rng(seed);
    std::vector<uint64_t> dirs{kRootIno};
    // The kernel never sends requests for a directory already removed
    // (IS_DEADDIR): neither do we, though we remember its number.
    auto alive = [&](uint64_t ino) {
      auto a = env.fs().GetAttr(ino);
      return a.ok() && a->attr.st_nlink > 0;
    };
    auto pick_entry = [&](uint64_t* parent, std::string* name) {
      *parent = dirs[rng() % dirs.size()];
      if (!alive(*parent)) return false;
      auto listed = env.fs().Readdir(*parent, 0, 1000);
      if (!listed.ok()) return false;
      std::vector<std::string> names;
      for (const auto& d : *listed) {
        if (d.name != "." && d.name != ".." && d.name != "latest" && d.name != ".ckptfs")
          names.push_back(d.name);
      }
      if (names.empty()) return false;
      *name = names[rng() % names.size()];
      return true;
    };
    for (int op = 0; op < 200; ++op) {
      FileSystem& fs = env.fs();
      const uint64_t dir = dirs[rng() % dirs.size()];
      const std::string name = kNames[rng() % kNames.size()];
      uint64_t parent = 0;
      std::string old;
      if (!alive(dir)) continue;
      switch (rng() % 10) {
        case 0:
        case 1:
          if (auto e = fs.Mkdir(kRoot, dir, name, 0755); e.ok()) dirs.push_back(e->ino);
          break;
        case 2:
        case 3:
          if (auto c = fs.Create(kRoot, dir, name, 0644, O_WRONLY); c.ok()) {
            const std::string data(rng() % 5000, static_cast<char>('a' + seed % 26));
            (void)fs.Write(c->second.fh, data.data(), data.size(), 0);
            (void)fs.Release(c->second.fh);
          }
          break;
        case 4:
          if (pick_entry(&parent, &old)) {
            if (auto e = fs.Lookup(parent, old); e.ok()) (void)fs.Link(e->ino, dir, name);
          }
          break;
        case 5:
          if (pick_entry(&parent, &old)) (void)(fs.Unlink(parent, old).ok() || fs.Rmdir(parent, old).ok());
          break;
        case 6:
          if (pick_entry(&parent, &old)) (void)fs.Rename(parent, old, dir, name, 0);
          break;
        case 7:
          fs.RequestCommit(dir);
          env.DrainCommits();
          break;
        case 8:
          (void)fs.CollectGarbage(rng() % 3);
          break;
        case 9:
          if (rng() % 4 == 0) env.CrashAndRestart(rng() % 4);
          break;
      }
    }
    // Backing files a crash left without an inode go in the mount's
    // background pass (a lazy mount does not list the data directory).
    env.FinishBackgroundChecks();
    env.Stop();
    const FsckReport report = Check(env, /*crc=*/true);
    EXPECT_TRUE(report.findings.empty()) << Describe(report);
    files += report.counts.files;
    committed += report.counts.committed_steps;
  }
  // The histories did build something worth checking.
  EXPECT_GT(files, 100u);
  EXPECT_GT(committed, 10u);
}

TEST(FsckTest, EmptyManifestIsClean) {
  MemoryManifestStore manifest;
  MemoryDataStore data;
  auto report = CheckCache(&manifest, &data, {});
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->findings.empty());
}

TEST(FsckTest, UnsupportedFormatVersionIsAnOperationalError) {
  MemoryManifestStore manifest;
  MemoryDataStore data;
  PutRaw(manifest, KeySpace::kMeta, "format_version", "7");
  auto report = CheckCache(&manifest, &data, {});
  EXPECT_EQ(report.err(), EINVAL);
}

TEST(FsckTest, ShortCommittedFileIsDataLossAndNeverRepaired) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  ASSERT_TRUE((*env.data.Open(c.shard, false))->Truncate(4).ok());
  const std::string inode_before = EncodeInode(GetInode(env.manifest, c.shard));

  FsckReport report = CheckAndRepair(env);
  ASSERT_EQ(report.findings.size(), 1u) << Describe(report);
  const FsckFinding& f = report.findings[0];
  EXPECT_EQ(f.severity, FsckSeverity::kError);
  EXPECT_FALSE(f.repaired);
  EXPECT_EQ(RenderFsckFinding(f), "error: run/step1/shard: backing file " + fsck::HexIno(c.shard) +
                                      " is 4 bytes, manifest says 21 (committed data lost: restore from "
                                      "the remote or delete the step)");
  EXPECT_EQ(FsckExitCode(report), kFsckProblemsLeft);
  // The record and the step are as the commit left them.
  EXPECT_EQ(EncodeInode(GetInode(env.manifest, c.shard)), inode_before);
  EXPECT_EQ(GetStep(env.manifest, c.step1).state, StepState::kCommitted);
  EXPECT_EQ(BackingSize(env.data, c.shard), 4u);
}

TEST(FsckTest, LostCommittedFileTheRemoteHoldsBecomesRemoteOnly) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  RecordUpload(env, c.shard, "run/step1/shard", "committed shard bytes");
  ASSERT_TRUE(env.data.Remove(c.shard).ok());

  FsckReport report = CheckAndRepair(env);
  ASSERT_EQ(report.findings.size(), 1u) << Describe(report);
  EXPECT_EQ(report.findings[0].severity, FsckSeverity::kError);
  EXPECT_TRUE(report.findings[0].repaired);
  EXPECT_EQ(FsckExitCode(report), kFsckAllRepaired);
  auto obj = DecodeObject(**env.manifest.Get(KeySpace::kObjects, InoKey(c.shard)));
  ASSERT_TRUE(obj.ok());
  EXPECT_FALSE(obj->resident);
  // The mount's recovery no longer sees lost data: the step stays committed.
  env.Start();
  bool seen = false;
  for (const auto& s : env.fs().Steps()) {
    if (s.ino != c.step1) continue;
    seen = true;
    EXPECT_EQ(s.rec.state, StepState::kCommitted);
  }
  EXPECT_TRUE(seen);
}

FsckReport CheckWithRemote(FsEnv& env, ObjectStore* remote) {
  FsckOptions options;
  options.verify_crc = true;
  options.remote = remote;
  auto report = CheckCache(&env.manifest, &env.data, options);
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  return report.ok() ? std::move(report).value() : FsckReport{};
}

TEST(FsckTest, CrcIsOptInAndALocalMismatchIsOnlyReportedWithoutTheRemote) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  RecordUpload(env, c.shard, "run/step1/shard", "committed shard bytes");
  RecordUpload(env, c.more, "run/step1/sub/more", "more bytes");
  // Same size, other bytes: only a CRC pass can tell.
  ASSERT_TRUE((*env.data.Open(c.more, false))->PWrite("MORE", 4, 0).ok());

  EXPECT_TRUE(Check(env).findings.empty());
  FsckReport report = Check(env, /*crc=*/true);
  EXPECT_EQ(report.counts.crc_files, 2u);
  EXPECT_EQ(report.counts.crc_bytes, 31u);
  ASSERT_EQ(report.findings.size(), 1u) << Describe(report);
  EXPECT_EQ(report.findings[0].path, "run/step1/sub/more");
  EXPECT_EQ(report.findings[0].check, "crc");
  // Re-fetching is offered only once the remote copy is known to be good.
  EXPECT_NE(report.findings[0].problem.find("the remote object was not checked"), std::string::npos)
      << Describe(report);
  EXPECT_TRUE(report.findings[0].repair.empty());
  EXPECT_TRUE(report.plan.empty()) << Describe(report);
}

TEST(FsckTest, CrcWithTheRemoteReFetchesACorruptLocalCopy) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  RecordUpload(env, c.shard, "run/step1/shard", "committed shard bytes");
  RecordUpload(env, c.more, "run/step1/sub/more", "more bytes");
  MemoryObjectStore remote;
  ASSERT_TRUE(remote.Put("run/step1/shard", "committed shard bytes").ok());
  ASSERT_TRUE(remote.Put("run/step1/sub/more", "more bytes").ok());
  ASSERT_TRUE((*env.data.Open(c.more, false))->PWrite("MORE", 4, 0).ok());

  FsckReport report = CheckWithRemote(env, &remote);
  EXPECT_EQ(report.counts.remote_crc_files, 2u);
  ASSERT_EQ(report.findings.size(), 1u) << Describe(report);
  EXPECT_NE(report.findings[0].problem.find("local copy corrupt (remote good: re-fetch fixes it)"), std::string::npos)
      << Describe(report);
  ASSERT_TRUE(RepairCache(&env.manifest, &env.data, &report).ok());
  EXPECT_FALSE(DecodeObject(**env.manifest.Get(KeySpace::kObjects, InoKey(c.more)))->resident);
  EXPECT_TRUE(DecodeObject(**env.manifest.Get(KeySpace::kObjects, InoKey(c.shard)))->resident);
  EXPECT_TRUE(CheckWithRemote(env, &remote).findings.empty());
}

TEST(FsckTest, CrcWithTheRemoteTellsACorruptRemoteObjectFromLostData) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  RecordUpload(env, c.shard, "run/step1/shard", "committed shard bytes");
  RecordUpload(env, c.more, "run/step1/sub/more", "more bytes");
  MemoryObjectStore remote;
  // The shard was stored corrupt (the local copy is good); "more" is bad in both.
  ASSERT_TRUE(remote.Put("run/step1/shard", "committed shard bytez").ok());
  ASSERT_TRUE(remote.Put("run/step1/sub/more", "more byteZ").ok());
  ASSERT_TRUE((*env.data.Open(c.more, false))->PWrite("MORE", 4, 0).ok());

  FsckReport report = CheckWithRemote(env, &remote);
  ASSERT_EQ(report.findings.size(), 2u) << Describe(report);
  const FsckFinding* shard = FindingAt(report, "run/step1/shard");
  ASSERT_NE(shard, nullptr) << Describe(report);
  EXPECT_NE(shard->problem.find("remote object corrupt (local good: re-upload fixes it)"), std::string::npos);
  EXPECT_NE(shard->problem.find("run/step1/shard"), std::string::npos);
  const FsckFinding* more = FindingAt(report, "run/step1/sub/more");
  ASSERT_NE(more, nullptr) << Describe(report);
  EXPECT_NE(more->problem.find("committed data lost"), std::string::npos);
  EXPECT_TRUE(more->repair.empty());
  ASSERT_TRUE(RepairCache(&env.manifest, &env.data, &report).ok());
  // The shard's upload is queued again for the next mount; "more" is left alone.
  auto queued = env.manifest.Get(KeySpace::kUploads, InoKey(c.shard));
  ASSERT_TRUE(queued.ok() && queued->has_value());
  EXPECT_EQ(DecodeUpload(**queued)->size, 21u);
  EXPECT_FALSE(env.manifest.Get(KeySpace::kUploads, InoKey(c.more))->has_value());
  EXPECT_TRUE(DecodeObject(**env.manifest.Get(KeySpace::kObjects, InoKey(c.more)))->resident);
}

TEST(FsckTest, CrcWithTheRemoteChecksFilesWithNoLocalCopyPerRecordedChunk) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  // A cold cache: the shard is only in the remote, with chunk CRC32Cs.
  const std::string bytes = "committed shard bytes";
  const InodeRecord rec = GetInode(env.manifest, c.shard);
  ObjectRecord obj;
  obj.key = "run/step1/shard";
  obj.size = rec.size;
  obj.mtime_ns = TimespecToNanos(rec.mtime);
  obj.crc32c = Crc32c(0, bytes.data(), bytes.size());
  obj.chunk_size = 8;
  for (size_t at = 0; at < bytes.size(); at += 8) {
    const std::string chunk = bytes.substr(at, 8);
    obj.chunk_crcs.push_back(Crc32c(0, chunk.data(), chunk.size()));
  }
  obj.resident = false;
  PutRaw(env.manifest, KeySpace::kObjects, InoKey(c.shard), EncodeObject(obj));
  MemoryObjectStore remote;
  ASSERT_TRUE(remote.Put("run/step1/shard", bytes).ok());
  FsckReport clean = CheckWithRemote(env, &remote);
  EXPECT_TRUE(clean.findings.empty()) << Describe(clean);
  EXPECT_EQ(clean.counts.remote_crc_files, 1u);
  EXPECT_EQ(clean.counts.crc_files, 0u);

  ASSERT_TRUE(remote.Put("run/step1/shard", "committed shard_bytes").ok());
  FsckReport bad = CheckWithRemote(env, &remote);
  ASSERT_EQ(bad.findings.size(), 1u) << Describe(bad);
  EXPECT_NE(bad.findings[0].problem.find("committed data lost: remote object corrupt and no local copy"),
            std::string::npos)
      << Describe(bad);
  EXPECT_NE(bad.findings[0].problem.find("bytes 8-16"), std::string::npos) << Describe(bad);
  EXPECT_TRUE(bad.plan.empty());
  // A missing object is as lost.
  ASSERT_TRUE(remote.Delete({"run/step1/shard"}).ok());
  FsckReport gone = CheckWithRemote(env, &remote);
  ASSERT_EQ(gone.findings.size(), 1u) << Describe(gone);
  EXPECT_NE(gone.findings[0].problem.find("is missing"), std::string::npos) << Describe(gone);
}

TEST(FsckTest, WriterReportedChecksumsAreVerifiedAndStrayOnesDropped) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  // What a writer-library client reported for the shard's current version.
  const InodeRecord shard = *DecodeInode(**env.manifest.Get(KeySpace::kInodes, InoKey(c.shard)));
  const std::string bytes = "committed shard bytes";
  PutRaw(env.manifest, KeySpace::kChecksums, InoKey(c.shard),
         EncodeChecksum({shard.size, TimespecToNanos(shard.mtime), Crc32c(0, bytes.data(), bytes.size())}));
  PutRaw(env.manifest, KeySpace::kChecksums, InoKey(9999), EncodeChecksum({1, 2, 3}));  // no such inode
  FsckReport report = CheckAndRepair(env);
  ASSERT_EQ(report.findings.size(), 1u) << Describe(report);
  EXPECT_TRUE(report.findings[0].repaired);
  EXPECT_FALSE(env.manifest.Get(KeySpace::kChecksums, InoKey(9999))->has_value());

  FsckReport clean = Check(env, /*crc=*/true);
  EXPECT_TRUE(clean.findings.empty()) << Describe(clean);
  EXPECT_EQ(clean.counts.crc_files, 1u);
  // Same size, other bytes, no remote copy: reported, never "repaired".
  ASSERT_TRUE((*env.data.Open(c.shard, false))->PWrite("C", 1, 0).ok());
  FsckReport bad = Check(env, /*crc=*/true);
  ASSERT_EQ(bad.findings.size(), 1u) << Describe(bad);
  EXPECT_EQ(bad.findings[0].check, "crc");
  EXPECT_NE(bad.findings[0].problem.find("its writer reported"), std::string::npos) << Describe(bad);
  EXPECT_TRUE(bad.plan.empty());
}

TEST(FsckTest, UnownedBackingFilesAreRemovedButQueuedOnesLeftToTheGc) {
  FsEnv env;
  const Cache c = WriteCache(env);
  const uint64_t gone = WriteFile(env.fs(), kRootIno, "gone", "queued for the GC");
  ASSERT_TRUE(env.fs().Unlink(kRootIno, "gone").ok());  // in the GC queue, data still there
  env.Stop();
  const uint64_t stray = 5000;
  ASSERT_TRUE((*env.data.Open(stray, true))->PWrite("x", 1, 0).ok());
  ASSERT_TRUE(env.data.Open(c.run, true).ok());  // a directory has no backing file

  FsckReport report = CheckAndRepair(env);
  EXPECT_EQ(report.findings.size(), 2u) << Describe(report);
  const FsckFinding* f = FindingAt(report, "data/" + fsck::HexIno(stray));
  ASSERT_NE(f, nullptr) << Describe(report);
  EXPECT_EQ(f->severity, FsckSeverity::kWarning);
  EXPECT_TRUE(f->repaired);
  EXPECT_EQ(env.data.Open(stray, false).err(), ENOENT);
  EXPECT_EQ(env.data.Open(c.run, false).err(), ENOENT);
  EXPECT_TRUE(env.data.Open(gone, false).ok());
  EXPECT_EQ(FsckExitCode(report), kFsckAllRepaired);
}

TEST(FsckTest, UncommittedFileTakesItsBackingFileSize) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  // Bytes written after the last recorded size, as after a kill -9.
  ASSERT_TRUE((*env.data.Open(c.part, false))->PWrite(" and more", 9, 7).ok());

  FsckReport report = CheckAndRepair(env);
  ASSERT_EQ(report.findings.size(), 1u) << Describe(report);
  EXPECT_EQ(report.findings[0].path, "run/step2/part");
  EXPECT_EQ(report.findings[0].severity, FsckSeverity::kWarning);
  EXPECT_EQ(GetInode(env.manifest, c.part).size, 16u);
  env.Start();
  EXPECT_EQ(ReadFile(env.fs(), c.part), "partial and more");
}

TEST(FsckTest, CommittedEmptyFileWithoutBackingFileGetsOne) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t step = Mkdir(fs, kRootIno, "step5");
  const uint64_t empty = WriteFile(fs, step, "empty", "");
  fs.RequestCommit(step);
  env.DrainCommits();
  env.Stop();
  ASSERT_TRUE(env.data.Remove(empty).ok());
  FsckReport report = CheckAndRepair(env);
  ASSERT_EQ(report.findings.size(), 1u) << Describe(report);
  EXPECT_TRUE(report.findings[0].repaired);
  env.Start();
  ASSERT_TRUE(env.fs().Lookup(step, "empty").ok());  // a new mount: the kernel looks it up first
  EXPECT_EQ(ReadFile(env.fs(), empty), "");
}

TEST(FsckTest, OrphanInodeIsRemovedWithItsDataAsRecoveryWould) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  InodeRecord orphan = GetInode(env.manifest, c.notes);
  orphan.ino = 6000;
  orphan.nlink = 0;
  PutInodeRecord(env.manifest, orphan);
  PutRaw(env.manifest, KeySpace::kXattrs, XattrKey(6000, "user.k"), "v");
  ASSERT_TRUE((*env.data.Open(6000, true))->PWrite("abc", 3, 0).ok());

  FsckReport report = CheckAndRepair(env);
  ASSERT_EQ(report.findings.size(), 1u) << Describe(report);
  EXPECT_EQ(report.findings[0].path, "#6000");
  EXPECT_FALSE(env.manifest.Get(KeySpace::kInodes, InoKey(6000))->has_value());
  EXPECT_FALSE(env.manifest.Get(KeySpace::kXattrs, XattrKey(6000, "user.k"))->has_value());
  EXPECT_EQ(env.data.Open(6000, false).err(), ENOENT);
}

TEST(FsckTest, DanglingEntryIsRemovedSoTheCacheMountsAgain) {
  FsEnv env;
  WriteCache(env);
  env.Stop();
  PutRaw(env.manifest, KeySpace::kDentries, DentryKey(kRootIno, "ghost"), EncodeDentry({7000, 1}));
  EXPECT_THROW(env.Start(), std::runtime_error);  // the daemon cannot load it

  FsckReport report = CheckAndRepair(env);
  ASSERT_EQ(report.findings.size(), 1u) << Describe(report);
  EXPECT_EQ(report.findings[0].path, "ghost");
  EXPECT_EQ(report.findings[0].severity, FsckSeverity::kError);
  env.Start();
  EXPECT_EQ(env.fs().Lookup(kRootIno, "ghost").err(), ENOENT);
}

TEST(FsckTest, UnreachableFileGoesToLostFound) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  // part's only entry vanishes; its inode (nlink 1) and data stay.
  DeleteRaw(env.manifest, KeySpace::kDentries, DentryKey(c.step2, "part"));

  FsckReport report = CheckAndRepair(env);
  ASSERT_EQ(report.findings.size(), 1u) << Describe(report);
  EXPECT_EQ(report.findings[0].path, "#" + std::to_string(c.part));
  EXPECT_TRUE(report.findings[0].repaired);
  env.Start();
  auto lf = env.fs().Lookup(kRootIno, "lost+found");
  ASSERT_TRUE(lf.ok());
  auto found = env.fs().Lookup(lf->ino, "#" + std::to_string(c.part));
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->ino, c.part);
  EXPECT_EQ(found->attr.st_nlink, 1u);
  EXPECT_EQ(ReadFile(env.fs(), c.part), "partial");
  EXPECT_EQ(env.fs().GetAttr(kRootIno)->attr.st_nlink, 4u);  // run, lost+found
}

TEST(FsckTest, LostFoundNeverTakesANameInUse) {
  FsEnv env;
  const Cache c = WriteCache(env);
  WriteFile(env.fs(), kRootIno, "lost+found", "a user's file");
  env.Stop();
  DeleteRaw(env.manifest, KeySpace::kDentries, DentryKey(c.step2, "part"));

  FsckReport report = CheckAndRepair(env);
  EXPECT_EQ(report.remaining(), 0u) << Describe(report);
  env.Start();
  EXPECT_EQ(ReadFile(env.fs(), env.fs().Lookup(kRootIno, "lost+found")->ino), "a user's file");
  auto lf = env.fs().Lookup(kRootIno, "lost+found.1");
  ASSERT_TRUE(lf.ok());
  EXPECT_EQ(env.fs().Lookup(lf->ino, "#" + std::to_string(c.part))->ino, c.part);
}

TEST(FsckTest, DetachedDirectoryCycleIsCutAndLinkedIntoLostFound) {
  FsEnv env;
  auto& fs = env.fs();
  const uint64_t a = Mkdir(fs, kRootIno, "a");
  const uint64_t b = Mkdir(fs, a, "b");
  const uint64_t f = WriteFile(fs, b, "f", "in the cycle");
  env.Stop();
  // root -/-> a -> b -> a: a cycle nothing reaches.
  DeleteRaw(env.manifest, KeySpace::kDentries, DentryKey(kRootIno, "a"));
  PutRaw(env.manifest, KeySpace::kDentries, DentryKey(b, "a"), EncodeDentry({a, 99}));
  InodeRecord ra = GetInode(env.manifest, a);
  ra.parent = b;
  PutInodeRecord(env.manifest, ra);
  InodeRecord rb = GetInode(env.manifest, b);
  rb.next_cookie = 100;
  rb.nlink = 4;  // 2 + its subdirectory a would be 3
  PutInodeRecord(env.manifest, rb);

  FsckReport report = CheckAndRepair(env);
  EXPECT_EQ(report.remaining(), 0u) << Describe(report);
  env.Start();
  auto lf = env.fs().Lookup(kRootIno, "lost+found");
  ASSERT_TRUE(lf.ok());
  auto top = env.fs().Lookup(lf->ino, "#" + std::to_string(b));
  ASSERT_TRUE(top.ok()) << Describe(report);
  EXPECT_EQ(env.fs().Lookup(b, "a").ok() || env.fs().Lookup(a, "b").ok(), true);
  EXPECT_EQ(ReadFile(env.fs(), f), "in the cycle");
  const std::string path = env.fs().PathOf(f);
  EXPECT_EQ(path.rfind("lost+found/#", 0), 0u) << path;
}

TEST(FsckTest, LinkCountTooLowIsFixedBeforeTheMountWouldDeleteTheFile) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  InodeRecord rec = GetInode(env.manifest, c.notes);  // two names: notes, run/notes-link
  rec.nlink = 0;
  PutInodeRecord(env.manifest, rec);

  FsckReport report = CheckAndRepair(env);
  ASSERT_EQ(report.findings.size(), 1u) << Describe(report);
  EXPECT_EQ(report.findings[0].severity, FsckSeverity::kError);
  EXPECT_EQ(GetInode(env.manifest, c.notes).nlink, 2u);
  env.Start();
  EXPECT_EQ(ReadFile(env.fs(), c.notes), "hello");
}

TEST(FsckTest, DirectoryWithTwoEntriesKeepsTheOneTheRootReaches) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  PutRaw(env.manifest, KeySpace::kDentries, DentryKey(c.step2, "alias"), EncodeDentry({c.step1, 1}));

  FsckReport report = CheckAndRepair(env);
  EXPECT_EQ(report.remaining(), 0u) << Describe(report);
  EXPECT_FALSE(env.manifest.Get(KeySpace::kDentries, DentryKey(c.step2, "alias"))->has_value());
  EXPECT_TRUE(env.manifest.Get(KeySpace::kDentries, DentryKey(c.run, "step1"))->has_value());
  EXPECT_EQ(GetStep(env.manifest, c.step1).state, StepState::kCommitted);
}

TEST(FsckTest, WrongParentPointerAndRepeatedCookiesAreFixed) {
  FsEnv env;
  const Cache c = WriteCache(env);
  // A file's parent is where it was last linked (inode.h): after this unlink
  // it may name run while the only entry is at the root. That is no finding.
  ASSERT_TRUE(env.fs().Unlink(c.run, "notes-link").ok());
  env.Stop();
  InodeRecord rec = GetInode(env.manifest, c.step1);
  rec.parent = c.step2;
  PutInodeRecord(env.manifest, rec);
  auto dent = DecodeDentry(**env.manifest.Get(KeySpace::kDentries, DentryKey(c.run, "step2")));
  auto other = DecodeDentry(**env.manifest.Get(KeySpace::kDentries, DentryKey(c.run, "step1")));
  dent->cookie = other->cookie;
  PutRaw(env.manifest, KeySpace::kDentries, DentryKey(c.run, "step2"), EncodeDentry(*dent));

  FsckReport report = CheckAndRepair(env);
  EXPECT_EQ(report.findings.size(), 2u) << Describe(report);
  EXPECT_EQ(report.remaining(), 0u) << Describe(report);
  EXPECT_EQ(GetInode(env.manifest, c.step1).parent, c.run);
  env.Start();
  auto listed = env.fs().Readdir(c.run, 0, 100);
  ASSERT_TRUE(listed.ok());
  std::set<std::string> names;
  for (const auto& d : *listed) names.insert(d.name);
  EXPECT_TRUE(names.count("step1") && names.count("step2"));
}

TEST(FsckTest, RecordsThatNameNothingAreDeleted) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  PutRaw(env.manifest, KeySpace::kXattrs, XattrKey(8000, "user.x"), "1");
  PutRaw(env.manifest, KeySpace::kSteps, InoKey(8001), EncodeStep(StepRecord{}));
  PutRaw(env.manifest, KeySpace::kSteps, InoKey(c.notes), EncodeStep(StepRecord{}));  // not a directory
  PutRaw(env.manifest, KeySpace::kUploads, InoKey(8002), EncodeUpload(UploadRecord{}));
  PutRaw(env.manifest, KeySpace::kObjects, InoKey(8003), EncodeObject(ObjectRecord{}));
  PutRaw(env.manifest, KeySpace::kGc, InoKey(c.notes), "");  // a live file
  PutRaw(env.manifest, KeySpace::kGc, "bad", "");
  PutRaw(env.manifest, KeySpace::kRemoteGc, "\x07oops", "");

  FsckReport report = CheckAndRepair(env);
  EXPECT_EQ(report.findings.size(), 8u) << Describe(report);
  EXPECT_EQ(report.remaining(), 0u) << Describe(report);
  for (const auto& f : report.findings) EXPECT_EQ(f.check, "records") << RenderFsckFinding(f);
  EXPECT_TRUE(env.data.Open(c.notes, false).ok());
  env.Start();
  EXPECT_EQ(ReadFile(env.fs(), c.notes), "hello");
}

TEST(FsckTest, UndecodableInodeBlocksEveryRepair) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  // The record of a file with data goes bad: its backing file now looks
  // unowned and its entry dangling, but neither may be removed.
  PutRaw(env.manifest, KeySpace::kInodes, InoKey(c.notes), "garbage");

  FsckReport report = Check(env);
  EXPECT_FALSE(report.repair_blocked.empty());
  EXPECT_TRUE(report.plan.empty());
  EXPECT_GE(report.errors(), 1u);
  const FsckFinding* data = FindingAt(report, "data/" + fsck::HexIno(c.notes));
  ASSERT_NE(data, nullptr) << Describe(report);
  EXPECT_TRUE(data->repair.empty());
  EXPECT_NE(data->advice.find("withheld"), std::string::npos);
  ASSERT_TRUE(RepairCache(&env.manifest, &env.data, &report).ok());
  EXPECT_EQ(report.repaired(), 0u);
  EXPECT_TRUE(env.data.Open(c.notes, false).ok());
  EXPECT_TRUE(env.manifest.Get(KeySpace::kDentries, DentryKey(kRootIno, "notes"))->has_value());
  EXPECT_EQ(FsckExitCode(report), kFsckProblemsLeft);
}

TEST(FsckTest, CommittedStepThatChangedIsReportedNotRepaired) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  InodeRecord rec = GetInode(env.manifest, c.more);
  rec.sealed = false;
  PutInodeRecord(env.manifest, rec);
  // Still committed data: the longer backing file does not change its size.
  ASSERT_TRUE((*env.data.Open(c.more, false))->PWrite("!", 1, 10).ok());
  StepRecord step = GetStep(env.manifest, c.step1);
  step.files = 3;
  PutRaw(env.manifest, KeySpace::kSteps, InoKey(c.step1), EncodeStep(step));

  FsckReport report = CheckAndRepair(env);
  EXPECT_EQ(report.findings.size(), 3u) << Describe(report);
  EXPECT_EQ(report.repaired(), 0u);
  EXPECT_EQ(GetInode(env.manifest, c.more).size, 10u);
  int about_more = 0;
  for (const auto& f : report.findings) about_more += f.path == "run/step1/sub/more";
  EXPECT_EQ(about_more, 2) << Describe(report);  // longer backing file; not sealed
  const FsckFinding* totals = FindingAt(report, "run/step1");
  ASSERT_NE(totals, nullptr) << Describe(report);
  EXPECT_NE(totals->problem.find("committed with 3 files"), std::string::npos) << totals->problem;
  EXPECT_EQ(GetStep(env.manifest, c.step1).files, 3u);
}

TEST(FsckTest, RepairBatchesAreSyncedAndSurviveAPowerLoss) {
  FsEnv env;
  const Cache c = WriteCache(env);
  env.Stop();
  ASSERT_TRUE((*env.data.Open(c.part, false))->PWrite("++", 2, 7).ok());
  PutRaw(env.manifest, KeySpace::kXattrs, XattrKey(8000, "user.x"), "1");
  FsckReport report = Check(env);
  EXPECT_EQ(report.plan.size(), 2u) << Describe(report);  // records, files
  ASSERT_TRUE(RepairCache(&env.manifest, &env.data, &report).ok());
  EXPECT_EQ(env.manifest.unsynced_batches(), 0u);
  env.manifest.SimulateCrash(0);
  EXPECT_TRUE(Check(env).findings.empty());
}

TEST(FsckTest, ReportJsonAndExitCodes) {
  FsckReport report;
  report.counts.files = 3;
  EXPECT_EQ(FsckExitCode(report), kFsckClean);
  FsckFinding f;
  f.severity = FsckSeverity::kWarning;
  f.check = "data";
  f.path = "data/00000000000000ff";
  f.problem = "backing file with no inode";
  f.repair = "remove it";
  report.findings.push_back(f);
  EXPECT_EQ(FsckExitCode(report), kFsckProblemsLeft);
  EXPECT_EQ(RenderFsckFinding(report.findings[0]),
            "warning: data/00000000000000ff: backing file with no inode (--repair: remove it)");
  report.findings[0].repaired = true;
  EXPECT_EQ(FsckExitCode(report), kFsckAllRepaired);
  EXPECT_EQ(RenderFsckFinding(report.findings[0]),
            "warning: data/00000000000000ff: backing file with no inode (repaired: remove it)");
  const nlohmann::json j = FsckReportJson(report);
  EXPECT_EQ(j["counts"]["files"], 3);
  EXPECT_EQ(j["warnings"], 1);
  EXPECT_EQ(j["repaired"], 1);
  EXPECT_EQ(j["remaining"], 0);
  EXPECT_EQ(j["exit_code"], kFsckAllRepaired);
  EXPECT_EQ(j["findings"][0]["path"], "data/00000000000000ff");
  EXPECT_TRUE(j["repair_blocked"].is_null());
}

}  // namespace
}  // namespace ckptfs::testing
