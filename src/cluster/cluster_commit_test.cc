// Cluster commits without a mount: two or three FileSystems ("nodes"), each
// with its own ClusterBook, over one MemoryObjectStore (the shared bucket).
// The ClusterBooks run no thread here; commits run on the test's thread
// through each node's coordinator (DrainCommits).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <linux/fs.h>  // RENAME_EXCHANGE

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>

#include "cluster/cluster_book.h"
#include "cluster/cluster_join.h"
#include "common/crc32c.h"
#include "common/time_convert.h"
#include "data/memory_data_store.h"
#include "formats/formats_test_util.h"
#include "namespace/fs_test_env.h"
#include "remote/memory_object_store.h"
#include "tiering/remote_tier_test_util.h"

namespace ckptfs::testing {
namespace {

class Node {
 public:
  Node(const std::string& name, ObjectStore* bucket, int64_t publish_timeout_ns = 0,
       bool uploads = true, DataStore* data = nullptr, int64_t commit_watch_first_ns = 100'000'000,
       const Clock* book_clock = nullptr, uint32_t job_nodes = 0, int64_t refresh_ns = 0,
       const std::string& cache_id = "", uint64_t epoch = 1)
      : env_(Options(name, uploads, job_nodes), data) {
    ClusterBookOptions o;
    o.node = name;
    o.cache_id = cache_id.empty() ? "cache-" + name : cache_id;
    o.epoch = epoch;
    o.refresh_ns = refresh_ns;  // 0: every lookup reads the index
    o.publish_timeout_ns = publish_timeout_ns;
    o.commit_watch_first_ns = commit_watch_first_ns;
    // The book's own waits (retries, back-offs) run on the real clock unless
    // the test times the book itself (book_clock, a ManualClock it advances).
    o.clock = book_clock;
    book_options_ = o;
    bucket_ = bucket;
    // As a mount joins before it writes: gathers leave out parts of names
    // nobody registered (a name registered already, at any epoch, is kept).
    (void)bucket->PutIfAbsent(NodeRegistrationKey(name, epoch),
                              EncodeNodeRegistration(name, o.cache_id, "test"));
    book_ = std::make_unique<ClusterBook>(&env_.fs(), bucket, &env_.events, o);
    env_.fs().SetClusterHooks(book_.get());
  }
  // The daemon is killed and mounted again (same_boot) or the machine
  // loses power and boots again; the book starts as the daemon's does.
  void Restart(bool same_boot) {
    env_.fs().SetClusterHooks(nullptr);
    book_.reset();
    if (same_boot) {
      env_.KillAndRestart();
    } else {
      env_.CrashAndRestart();
    }
    book_ = std::make_unique<ClusterBook>(&env_.fs(), bucket_, &env_.events, book_options_);
    env_.fs().SetClusterHooks(book_.get());
    book_->QueueRestartWork();  // as Start does; the test runs it (Background)
  }
  ~Node() { env_.fs().SetClusterHooks(nullptr); }

  FileSystem& fs() { return env_.fs(); }
  FsEnv& env() { return env_; }
  ClusterBook& book() { return *book_; }

  // run/<step>, made here (every DCP rank makes the step directory).
  uint64_t Step(const std::string& step) {
    auto run = fs().Lookup(kRootIno, "run");
    const uint64_t run_ino = run.ok() ? run->ino : Mkdir(fs(), kRootIno, "run");
    auto existing = fs().Lookup(run_ino, step);
    return existing.ok() ? existing->ino : Mkdir(fs(), run_ino, step);
  }
  std::string State(uint64_t step) {
    auto v = fs().GetXattr(step, "user.ckptfs.state");
    return v.ok() ? *v : "<" + v.status().ToString() + ">";
  }
  std::string Xattr(uint64_t ino, const std::string& name) {
    auto v = fs().GetXattr(ino, name);
    return v.ok() ? *v : "<" + v.status().ToString() + ">";
  }
  std::string CommitterOf(const std::string& path) {
    for (const auto& s : fs().Steps()) {
      if (s.path == path) return s.rec.committer;
    }
    return "<no step " + path + ">";
  }
  void Commit(uint64_t step) {
    fs().RequestCommit(step);
    env_.DrainCommits();
  }
  // One pass of the book's background work. After this node's files are
  // closed, that makes its part durable and puts it again, which another
  // node's commit waits for (SPEC section 9, "committed means durable").
  void Background() { book_->RunOnceForTest(); }

 private:
  static FileSystemOptions Options(const std::string& name, bool uploads, uint32_t job_nodes) {
    FileSystemOptions o;
    o.remote = uploads;
    o.node = name;
    o.job_nodes = job_nodes;
    return o;
  }
  FsEnv env_;
  ClusterBookOptions book_options_;
  ObjectStore* bucket_ = nullptr;
  std::unique_ptr<ClusterBook> book_;
};

// status.json's cluster block has one writer, the node's ClusterBook: its
// identity, how the bucket decides, the mount's probe, and its requests.
TEST(ClusterCommitTest, TheBookWritesTheWholeClusterBlockOfStatus) {
  MemoryObjectStore bucket;
  FsEnv env;
  ClusterBookOptions o;
  o.node = "a";
  o.refresh_ns = 2'500'000'000;
  o.conditional_put = "supported";
  ClusterBook book(&env.fs(), &bucket, &env.events, o);
  nlohmann::json status = nlohmann::json::object();
  book.AddStatus(&status);
  nlohmann::json block = status["cluster"];
  ASSERT_TRUE(block.contains("requests")) << block.dump();
  block.erase("requests");
  EXPECT_EQ(
      block.dump(),
      R"({"closes_published_later":0,"conditional_put":"supported","epoch":1,"fenced":null,"job_nodes":null,"node":"a","refresh_s":2.5,"view_known":false})");
  // Known once a refresh read the step index; not while the bucket fails them.
  book.MaybeRefresh();
  status = nlohmann::json::object();
  book.AddStatus(&status);
  EXPECT_EQ(status["cluster"]["view_known"], true);
  bucket.SetUnavailable(true);
  book.RefreshForRetention();  // whatever the view's age
  status = nlohmann::json::object();
  book.AddStatus(&status);
  EXPECT_EQ(status["cluster"]["view_known"], false);
}

// The part record of run/<step> that node has in the bucket.
Result<PartRecord> PartInBucket(ObjectStore& bucket, const std::string& step,
                                const std::string& node) {
  auto body = bucket.GetRange(PartRecordKey("run/" + step, node), 0, UINT64_MAX);
  if (!body.ok()) return body.status();
  return DecodePartRecord(*body);
}

// Opens a new file for writing on the node and writes data into it.
FileHandle* CreateAndWrite(Node& n, uint64_t dir, const std::string& name,
                           const std::string& data) {
  auto open = n.fs().Create(kRoot, dir, name, 0644, O_WRONLY);
  EXPECT_TRUE(open.ok()) << open.status().ToString();
  if (!open.ok()) return nullptr;
  EXPECT_TRUE(n.fs().Write(open->second.fh, data.data(), data.size(), 0).ok());
  return open->second.fh;
}

void Close(Node& n, FileHandle* fh) {
  ASSERT_TRUE(n.fs().Flush(fh).ok());
  ASSERT_TRUE(n.fs().Release(fh).ok());
}

// The first open for writing of a step on a node puts its part (the file
// counted open) before it returns; fsync and close put nothing and never
// wait for the bucket: the book's thread makes the part durable and puts it
// again, quiet, once for every close made meanwhile.
TEST(ClusterCommitTest, OnlyTheFirstOpenWaitsForTheBucketAndTheClosesPutFollows) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  const uint64_t step = a.Step("step1");
  FileHandle* const x = CreateAndWrite(a, step, "x", "AAA");
  FileHandle* const y = CreateAndWrite(a, step, "y", "BB");
  EXPECT_EQ(a.book().counters().part_puts.load(), 1u) << "the first open's";
  auto part = PartInBucket(bucket, "step1", "a");
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(part->open_writers, 1u);
  ASSERT_TRUE(a.fs().Fsync(x, false).ok());
  Close(a, x);
  Close(a, y);
  EXPECT_EQ(a.book().counters().part_puts.load(), 1u);
  EXPECT_EQ(a.book().counters().closes_published_later.load(), 2u);
  part = PartInBucket(bucket, "step1", "a");
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(part->open_writers, 1u) << "until the book's PUT, the bucket still counts a file open";
  a.Background();
  EXPECT_EQ(a.book().counters().part_puts.load(), 2u) << "one PUT for both closes";
  part = PartInBucket(bucket, "step1", "a");
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  ASSERT_EQ(part->files.size(), 2u);
  EXPECT_EQ(part->files[0].path, "x");
  EXPECT_EQ(part->files[0].size, 3u);
  EXPECT_EQ(part->files[1].size, 2u);
  EXPECT_EQ(part->node, "a");
  EXPECT_EQ(part->cache_id, "cache-a");
  EXPECT_EQ(part->open_writers, 0u);
  EXPECT_TRUE(part->synced);
}

// A bucket that does not answer: the first open of a step fails with EIO
// (the committing node could not know the file is being written), but
// fsync() and close() of files already open succeed. The part keeps
// counting them open until the bucket is back, so nothing commits without
// them meanwhile; the book's thread retries its PUT.
TEST(ClusterCommitTest, AnOutageFailsTheFirstOpenButNeverAnFsyncOrAClose) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);  // publish timeout 0: the first failure is final
  const uint64_t step = a.Step("step6");
  FileHandle* const x = CreateAndWrite(a, step, "x", "AAA");
  ASSERT_NE(x, nullptr);
  bucket.SetUnavailable(true);
  EXPECT_TRUE(a.fs().Fsync(x, false).ok());
  Close(a, x);
  a.Background();  // its PUT fails: retried on the next pass
  auto open = a.fs().Create(kRoot, a.Step("step7"), "z", 0644, O_WRONLY);
  EXPECT_EQ(open.err(), EIO) << open.status().ToString();
  EXPECT_NE(open.status().message().find("cannot publish"), std::string::npos)
      << open.status().ToString();
  bucket.SetUnavailable(false);
  auto part = PartInBucket(bucket, "step6", "a");
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(part->open_writers, 1u);
  a.Background();
  part = PartInBucket(bucket, "step6", "a");
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(part->open_writers, 0u);
  EXPECT_TRUE(part->synced);
}

// Issue 28, 1 (SPEC section 9: a file open for writing on any node keeps its
// step from committing). DeepSpeed: a rank on node b has its optimizer shard
// open, nothing closed on b yet, when rank 0 on node a writes `latest`; a
// committed the step with a's files alone, and b's write and close returned
// 0 into a step that no longer had them. The open publishes b's part now.
TEST(ClusterCommitTest, AFileOpenOnAnotherNodeBeforeAnythingClosedHoldsTheCommit) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  const uint64_t step_a = a.Step("global_step10");
  WriteFile(a.fs(), step_a, "mp_rank_00_model_states.pt", "model");
  FileHandle* const fh =
      CreateAndWrite(b, b.Step("global_step10"), "zero_pp_rank_1_optim_states.pt", "opt");
  ASSERT_NE(fh, nullptr);
  auto part = PartInBucket(bucket, "global_step10", "b");
  ASSERT_TRUE(part.ok()) << "the open published nothing: " << part.status().ToString();
  EXPECT_EQ(part->open_writers, 1u);
  // A second file opened while the first is open needs no PUT: the part says
  // a file is open already.
  const uint64_t puts = b.book().counters().part_puts.load();
  FileHandle* const fh2 =
      CreateAndWrite(b, b.Step("global_step10"), "zero_pp_rank_3_optim_states.pt", "o3");
  EXPECT_EQ(b.book().counters().part_puts.load(), puts);
  a.Commit(step_a);
  EXPECT_EQ(a.State(step_a), "writing");
  EXPECT_NE(a.Xattr(step_a, "user.ckptfs.error").find("open for writing on node b"),
            std::string::npos)
      << a.Xattr(step_a, "user.ckptfs.error");
  Close(b, fh);
  Close(b, fh2);
  // The last close found its file named as it is (the first close's PUT
  // named it): its PUT is the book thread's (ACloseAfterAnFsync... below).
  b.book().RunOnceForTest();
  a.Commit(step_a);
  ASSERT_EQ(a.State(step_a), "committed") << a.Xattr(step_a, "user.ckptfs.error");
  EXPECT_EQ(a.Xattr(step_a, "user.ckptfs.files"), "3");
  EXPECT_TRUE(a.fs().Lookup(step_a, "zero_pp_rank_1_optim_states.pt").ok());
}

// SPEC section 9: a step whose format lists no files (DeepSpeed here: rank
// 0's `latest` names it) commits only once every node of the job (--nodes)
// has published its part with nothing open. Node b's rank has not opened
// its shard yet when `latest` lands on a: a committed with its own file
// alone before --nodes existed. Now a waits, asks again by itself, and
// reads only the parts that moved.
TEST(ClusterCommitTest, AStepThatListsNoFilesWaitsForEveryNodeOfTheJob) {
  MemoryObjectStore bucket;
  Node a("a", &bucket, 0, true, nullptr, 100'000'000, nullptr, /*job_nodes=*/2);
  Node b("b", &bucket, 0, true, nullptr, 100'000'000, nullptr, /*job_nodes=*/2);
  const uint64_t step_a = a.Step("global_step10");
  const uint64_t step_b = b.Step("global_step10");
  WriteFile(a.fs(), step_a, "mp_rank_00_model_states.pt", "model");
  auto run = a.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run.ok());
  WriteFile(a.fs(), run->ino, "latest", "global_step10");  // rank 0, the trigger
  a.env().DrainCommits();
  EXPECT_EQ(a.State(step_a), "writing");
  EXPECT_NE(a.Xattr(step_a, "user.ckptfs.error").find("1 of --nodes 2 published (this node)"),
            std::string::npos)
      << a.Xattr(step_a, "user.ckptfs.error");
  // b's rank opens its shard: the part says a file is open.
  FileHandle* const fh =
      CreateAndWrite(b, step_b, "zero_pp_rank_1_mp_rank_00_optim_states.pt", "opt");
  ASSERT_NE(fh, nullptr);
  auto again = [&a] {
    a.env().clock.Advance(100'000'000);
    a.env().DrainCommits();
  };
  again();
  EXPECT_EQ(a.State(step_a), "writing");
  EXPECT_NE(a.Xattr(step_a, "user.ckptfs.error").find("open for writing on node b"),
            std::string::npos)
      << a.Xattr(step_a, "user.ckptfs.error");
  // Asked again while nothing moved: a LIST, no GET.
  const uint64_t gets = a.book().counters().part_gets.load();
  const uint64_t lists = a.book().counters().lists.load();
  again();
  EXPECT_EQ(a.book().counters().part_gets.load(), gets);
  EXPECT_GT(a.book().counters().lists.load(), lists);
  EXPECT_EQ(a.State(step_a), "writing");
  Close(b, fh);
  b.Background();  // b's part, durable
  again();
  ASSERT_EQ(a.State(step_a), "committed") << a.Xattr(step_a, "user.ckptfs.error");
  EXPECT_EQ(a.book().counters().part_gets.load(), gets + 1);  // only b's moved part
  EXPECT_EQ(a.Xattr(step_a, "user.ckptfs.files"), "2");
}

// Without --nodes such a step waits, and its error says what to set; the
// user's explicit commit is their word that the save is complete.
TEST(ClusterCommitTest, AStepThatListsNoFilesWaitsForNodesToBeSetOrAnExplicitCommit) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  const uint64_t step = a.Step("checkpoint-100");
  WriteFile(a.fs(), step, "model.safetensors", "weights");
  WriteFile(a.fs(), step, "trainer_state.json", R"({"global_step": 100})");
  a.env().DrainCommits();
  EXPECT_EQ(a.State(step), "writing");
  EXPECT_NE(a.Xattr(step, "user.ckptfs.error").find("--nodes N"), std::string::npos)
      << a.Xattr(step, "user.ckptfs.error");
  a.Commit(step);
  EXPECT_EQ(a.State(step), "committed") << a.Xattr(step, "user.ckptfs.error");
}

// SPEC section 9, "committed means durable": another node's files of a
// committed step survive that node's power loss. Node b's trainer closes
// without fsync (torch.save); before, a committed the step at once and a
// power loss on b then lost y, committed everywhere. Now b's part counts
// the file open until b's book has made it durable (files, directory,
// manifest) and put the part again, and only then can a commit.
TEST(ClusterCommitTest, AnotherNodesFilesAreDurableBeforeTheStepCommits) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  const uint64_t step_a = a.Step("step1");
  const uint64_t step_b = b.Step("step1");
  WriteFile(a.fs(), step_a, "x", "AAA");
  WriteFile(b.fs(), step_b, "y", "BBBB");
  auto part = PartInBucket(bucket, "step1", "b");
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(part->open_writers, 1u);
  EXPECT_FALSE(part->synced);
  a.Commit(step_a);
  EXPECT_EQ(a.State(step_a), "writing");
  b.Background();  // the sync, then one PUT
  part = PartInBucket(bucket, "step1", "b");
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_TRUE(part->synced);
  // Another file opened and written on b: the part is no longer durable as
  // it is named.
  WriteFile(b.fs(), step_b, "y2", "CC");
  a.Commit(step_a);
  EXPECT_EQ(a.State(step_a), "writing");
  b.Background();
  a.Commit(step_a);
  ASSERT_EQ(a.State(step_a), "committed") << a.Xattr(step_a, "user.ckptfs.error");
  EXPECT_EQ(a.Xattr(step_a, "user.ckptfs.files"), "3");
  // Node b loses power: its files of the committed step are still there.
  b.env().CrashAndRestart();
  auto run = b.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto step = b.fs().Lookup(run->ino, "step1");
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  for (const auto& [name, bytes] :
       {std::pair<std::string, std::string>{"y", "BBBB"}, {"y2", "CC"}}) {
    auto f = b.fs().Lookup(step->ino, name);
    ASSERT_TRUE(f.ok()) << name << ": " << f.status().ToString();
    EXPECT_EQ(ReadFile(b.fs(), f->ino), bytes) << name;
  }
}

// SPEC section 9, "node names": a node name taken over with --replace-node
// (the next epoch) fences its old daemon. What the old daemon still has in
// a step never enters a commit, and its next first open of a step fails
// with EROFS naming what happened; the new holder's part counts.
TEST(ClusterCommitTest, AReplacedNodesPartNeverEntersACommitAndItsDaemonTurnsReadOnly) {
  MemoryObjectStore bucket;
  ASSERT_TRUE(JoinCluster(&bucket, "a", "cache-a", "ha").ok());
  auto b_joined = JoinCluster(&bucket, "b", "cache-b", "hb");
  ASSERT_TRUE(b_joined.ok()) << b_joined.status().ToString();
  ASSERT_EQ(b_joined->epoch, 1u);
  Node a("a", &bucket);
  Node old_b("b", &bucket);
  // Before the replacement, b's part is in a commit.
  const uint64_t s5 = a.Step("step5");
  WriteFile(a.fs(), s5, "x", "AAA");
  WriteFile(old_b.fs(), old_b.Step("step5"), "y", "BBBB");
  old_b.Background();
  a.Commit(s5);
  ASSERT_EQ(a.State(s5), "committed") << a.Xattr(s5, "user.ckptfs.error");
  EXPECT_EQ(a.Xattr(s5, "user.ckptfs.files"), "2");
  // Node b's old daemon writes into step6; then its name is taken over.
  const uint64_t s6 = a.Step("step6");
  WriteFile(a.fs(), s6, "x", "AAA");
  WriteFile(old_b.fs(), old_b.Step("step6"), "stale", "OLD");
  old_b.Background();
  auto replaced = JoinCluster(&bucket, "b", "cache-b2", "hb2", /*replace=*/true);
  ASSERT_TRUE(replaced.ok()) << replaced.status().ToString();
  EXPECT_EQ(replaced->epoch, 2u);
  EXPECT_EQ(replaced->replaced_cache_id, "cache-b");
  EXPECT_EQ(replaced->replaced_host, "hb");
  // The commit leaves the old daemon's part out (the explicit commit is the
  // user's word that what the cluster has is the step).
  a.Commit(s6);
  ASSERT_EQ(a.State(s6), "committed") << a.Xattr(s6, "user.ckptfs.error");
  EXPECT_EQ(a.Xattr(s6, "user.ckptfs.files"), "1");
  EXPECT_NE(a.env().events.Render().find("cluster_fenced_part"), std::string::npos)
      << a.env().events.Render();
  // The old daemon's first open of another step: EROFS, and why.
  const uint64_t old_s7 = old_b.Step("step7");
  auto refused = old_b.fs().Create(kRoot, old_s7, "z", 0644, O_WRONLY);
  ASSERT_EQ(refused.status().err(), EROFS) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("taken over by another cache with --replace-node"),
            std::string::npos)
      << refused.status().message();
  nlohmann::json status = nlohmann::json::object();
  old_b.book().AddStatus(&status);
  EXPECT_TRUE(status["cluster"]["fenced"].is_string()) << status.dump();
  EXPECT_NE(old_b.env().events.Render().find("cluster_fenced"), std::string::npos);
  // The new holder's part of step7 counts.
  Node new_b("b", &bucket, 0, true, nullptr, 100'000'000, nullptr, 0, 0, "cache-b2", 2);
  const uint64_t s7 = a.Step("step7");
  WriteFile(a.fs(), s7, "x", "AAA");
  WriteFile(new_b.fs(), new_b.Step("step7"), "z", "NEW");
  new_b.Background();
  a.Commit(s7);
  ASSERT_EQ(a.State(s7), "committed") << a.Xattr(s7, "user.ckptfs.error");
  EXPECT_EQ(a.Xattr(s7, "user.ckptfs.files"), "2");
}

// A part record under a name no mount registered (a node joins before it
// writes anything) is not the cluster's: it never enters a commit.
TEST(ClusterCommitTest, APartOfANameNoMountRegisteredStaysOut) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  const uint64_t step = a.Step("step3");
  WriteFile(a.fs(), step, "x", "AAA");
  PartRecord ghost;
  ghost.node = "ghost";
  ghost.cache_id = "cache-ghost";
  ghost.step_path = "run/step3";
  ghost.seq = 1;
  ghost.published_at = 1;
  ghost.last_activity = 1;
  ghost.files = {{"y", 4, 0644, 1, 0x12345678, true, {}}};
  ghost.all_uploaded = true;
  ghost.synced = true;
  ASSERT_TRUE(bucket.Put(PartRecordKey("run/step3", "ghost"), EncodePartRecord(ghost)).ok());
  a.Commit(step);
  ASSERT_EQ(a.State(step), "committed") << a.Xattr(step, "user.ckptfs.error");
  EXPECT_EQ(a.Xattr(step, "user.ckptfs.files"), "1");
  EXPECT_NE(a.env().events.Render().find("no mount registered that name"), std::string::npos)
      << a.env().events.Render();
}

// SPEC section 9, "one save, one step": an abandoned attempt with more ranks
// left __2_0.distcp on node b; the re-save (2 ranks, on node a) writes its
// shards and .metadata, which names only its own. The stale shard never
// enters the commit, and node b drops its copy when it applies the record.
TEST(ClusterCommitTest, AShardTheMetadataDoesNotNameIsAnotherSavesAndStaysOut) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  const std::string fixture = testing::DcpTestdata("torch-2.14/dcp_default");
  auto bytes = [&](const std::string& name) {
    std::string data;
    EXPECT_TRUE(testing::ReadTestFile(fixture + "/" + name, &data)) << name;
    return data;
  };
  const uint64_t step_b = b.Step("step5");
  WriteFile(b.fs(), step_b, "__2_0.distcp", "attempt 1's rank 2");  // abandoned
  WriteFile(b.fs(), step_b, "__1_0.distcp", bytes("__1_0.distcp"));
  b.Background();
  const uint64_t step_a = a.Step("step5");
  WriteFile(a.fs(), step_a, "__0_0.distcp", bytes("__0_0.distcp"));
  WriteFile(a.fs(), step_a, ".metadata", bytes(".metadata"));  // the marker: commits
  a.env().DrainCommits();
  ASSERT_EQ(a.State(step_a), "committed") << a.Xattr(step_a, "user.ckptfs.error");
  EXPECT_EQ(a.Xattr(step_a, "user.ckptfs.files"), "3");
  EXPECT_NE(a.env().events.Render().find("cluster_stale_shard"), std::string::npos)
      << a.env().events.Render();
  EXPECT_EQ(a.fs().Lookup(step_a, "__2_0.distcp").status().err(), ENOENT);
  // Node b learns the commit, and its stale copy goes with it.
  ASSERT_EQ(b.State(step_b), "committed") << b.Xattr(step_b, "user.ckptfs.error");
  EXPECT_EQ(b.fs().Lookup(step_b, "__2_0.distcp").status().err(), ENOENT);
  auto kept = b.fs().Lookup(step_b, "__1_0.distcp");
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(ReadFile(b.fs(), kept->ino), bytes("__1_0.distcp"));
}

// A data store whose SyncFiles fails while `fail` is set (a disk error).
class FailingSyncData final : public DataStore {
 public:
  Result<std::unique_ptr<BackingFile>> Open(uint64_t ino, bool create) override {
    return data_.Open(ino, create);
  }
  Status Remove(uint64_t ino) override { return data_.Remove(ino); }
  Status SyncDir() override { return data_.SyncDir(); }
  Status SyncFiles(const std::vector<uint64_t>& inos, uint64_t* failed_ino) override {
    if (fail) return Status::Error(EIO, "injected: the disk did not sync");
    return data_.SyncFiles(inos, failed_ino);
  }
  Result<std::vector<uint64_t>> List() override { return data_.List(); }
  Result<Space> Capacity() override { return data_.Capacity(); }
  bool fail = false;

 private:
  MemoryDataStore data_;
};

// A part whose sync fails is put all the same (quiet, synced false): the
// committing node waits for it to be durable, and commits once a later
// sync (retried each second) succeeds.
TEST(ClusterCommitTest, APartWhoseSyncFailsHoldsTheCommitUntilItSyncs) {
  MemoryObjectStore bucket;
  FailingSyncData data;
  Node a("a", &bucket);
  Node b("b", &bucket, 0, true, &data);
  const uint64_t step_a = a.Step("step1");
  WriteFile(a.fs(), step_a, "x", "AAA");
  WriteFile(b.fs(), b.Step("step1"), "y", "BBBB");
  data.fail = true;
  b.Background();
  auto part = PartInBucket(bucket, "step1", "b");
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(part->open_writers, 0u);
  EXPECT_FALSE(part->synced);
  EXPECT_NE(b.env().events.Render().find("cluster_sync"), std::string::npos)
      << b.env().events.Render();
  a.Commit(step_a);
  EXPECT_EQ(a.State(step_a), "writing");
  EXPECT_NE(
      a.Xattr(step_a, "user.ckptfs.error").find("waiting for node b to make its files durable"),
      std::string::npos)
      << a.Xattr(step_a, "user.ckptfs.error");
  data.fail = false;
  b.Background();
  a.Commit(step_a);
  EXPECT_EQ(a.State(step_a), "committed") << a.Xattr(step_a, "user.ckptfs.error");
}

// A node killed (kill -9) after its close put the part and before it made
// the part durable: the commit waits for it, and the restarted daemon (the
// same boot: the bytes are intact) syncs the part and puts it again. After
// a power loss (a new boot) the files may be torn: the part stays not
// durable and the step cannot commit with it.
TEST(ClusterCommitTest, ANodeRestartedInTheSameBootMakesItsPartDurable) {
  for (const bool same_boot : {true, false}) {
    SCOPED_TRACE(same_boot ? "kill -9" : "power loss");
    MemoryObjectStore bucket;
    Node a("a", &bucket);
    Node b("b", &bucket);
    const uint64_t step_a = a.Step("step1");
    WriteFile(a.fs(), step_a, "x", "AAA");
    WriteFile(b.fs(), b.Step("step1"), "y", "BBBB");
    b.Restart(same_boot);
    a.Commit(step_a);
    EXPECT_EQ(a.State(step_a), "writing");
    b.Background();
    a.Commit(step_a);
    auto part = PartInBucket(bucket, "step1", "b");
    ASSERT_TRUE(part.ok()) << part.status().ToString();
    EXPECT_EQ(part->synced, same_boot);
    EXPECT_EQ(a.State(step_a), same_boot ? "committed" : "writing")
        << a.Xattr(step_a, "user.ckptfs.error");
  }
}

TEST(ClusterCommitTest, ACloseAfterAnFsyncLeavesItsPutToTheBackground) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  const uint64_t step_a = a.Step("step1");
  WriteFile(a.fs(), step_a, "x", "AAA");
  FileHandle* const fh = CreateAndWrite(b, b.Step("step1"), "y", "BBBB");
  ASSERT_TRUE(b.fs().Fsync(fh, false).ok());
  const uint64_t puts = b.book().counters().part_puts.load();
  // The close returns without a PUT: the bucket already names y at 4 bytes.
  Close(b, fh);
  EXPECT_EQ(b.book().counters().part_puts.load(), puts);
  EXPECT_EQ(b.book().counters().closes_published_later.load(), 1u);
  // Until that PUT is made, the committing node waits for b's open writer.
  a.Commit(step_a);
  EXPECT_EQ(a.State(step_a), "writing");
  EXPECT_NE(a.Xattr(step_a, "user.ckptfs.error").find("open for writing on node b"),
            std::string::npos)
      << a.Xattr(step_a, "user.ckptfs.error");
  b.book().RunOnceForTest();  // the book's thread makes it
  EXPECT_EQ(b.book().counters().part_puts.load(), puts + 1);
  a.Commit(step_a);
  EXPECT_EQ(a.State(step_a), "committed");
}

TEST(ClusterCommitTest, OneNodesCommitCoversTheUnionAndTheOtherAdoptsIt) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  const uint64_t step_a = a.Step("step1");
  const uint64_t step_b = b.Step("step1");
  WriteFile(a.fs(), step_a, "x", "AAA");
  WriteFile(b.fs(), step_b, "y", "BBBB");
  b.Background();
  a.Commit(step_a);
  EXPECT_EQ(a.State(step_a), "committed");
  EXPECT_EQ(a.Xattr(step_a, "user.ckptfs.files"), "2");
  EXPECT_EQ(a.Xattr(step_a, "user.ckptfs.bytes"), "7");
  auto y = a.fs().Lookup(step_a, "y");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->attr.st_size, 4);
  EXPECT_EQ(a.CommitterOf("run/step1"), "a");
  // Node b learns it at its next lookup, and its own file is sealed.
  auto x = b.fs().Lookup(step_b, "x");
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(x->attr.st_size, 3);
  EXPECT_EQ(b.State(step_b), "committed");
  EXPECT_EQ(b.CommitterOf("run/step1"), "a");
  auto yb = b.fs().Lookup(step_b, "y");
  ASSERT_TRUE(yb.ok());
  auto w = b.fs().OpenFile(yb->ino, O_WRONLY);
  EXPECT_FALSE(w.ok()) << "a committed file opened for writing";
}

// Issue 28, 3 (SPEC section 9, "one save, one step"): attempt 1 of step5 left
// shard2 on node a and was abandoned; attempt 2 wrote that rank's shard on node
// b. The commit, made on a, kept a's stale copy ("the step keeps node a's"): a
// DCP load then got one tensor wrong. The copy written last wins, on every node.
TEST(ClusterCommitTest, TheCopyWrittenLastWinsOverAnAbandonedAttemptsFile) {
  MemoryObjectStore bucket;
  Node a("a", &bucket, 0, /*uploads=*/false);
  Node b("b", &bucket, 0, /*uploads=*/false);
  const uint64_t step_a = a.Step("step5");
  const uint64_t step_b = b.Step("step5");
  WriteFile(a.fs(), step_a, "shard2", "attempt 1");  // abandoned
  a.env().clock.Advance(1'000'000'000);
  b.env().clock.Advance(5'000'000'000);  // attempt 2, seconds later
  WriteFile(b.fs(), step_b, "shard2", "attempt two");
  WriteFile(b.fs(), step_b, "shard3", "3");
  b.Background();
  a.Commit(step_a);
  ASSERT_EQ(a.State(step_a), "committed");
  EXPECT_EQ(a.Xattr(step_a, "user.ckptfs.files"), "2");
  EXPECT_EQ(a.Xattr(step_a, "user.ckptfs.bytes"), std::to_string(strlen("attempt two") + 1));
  // Node a shows b's copy (to be read from b's upload), not its own.
  auto on_a = a.fs().Lookup(step_a, "shard2");
  ASSERT_TRUE(on_a.ok()) << on_a.status().ToString();
  EXPECT_EQ(on_a->attr.st_size, static_cast<off_t>(strlen("attempt two")));
  // Node b keeps and seals its own copy.
  auto on_b = b.fs().Lookup(step_b, "shard2");
  ASSERT_TRUE(on_b.ok()) << on_b.status().ToString();
  EXPECT_EQ(b.State(step_b), "committed");
  EXPECT_EQ(ReadFile(b.fs(), on_b->ino), "attempt two");
  EXPECT_NE(a.env().events.Render().find("the step keeps node b's, the copy written last"),
            std::string::npos)
      << a.env().events.Render();
}

TEST(ClusterCommitTest, UploadsOfAPublishedPartWaitForTheCommit) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  const uint64_t step_a = a.Step("step1");
  const uint64_t step_b = b.Step("step1");
  EXPECT_EQ(b.fs().CommitPendingSinceNs(), 0);
  WriteFile(a.fs(), step_a, "x", "AAA");
  WriteFile(b.fs(), step_b, "y", "BBBB");
  // Each node published its part: its uploads hold back (RemoteTier's
  // commit_hold) so that the commit's requests do not queue behind them.
  EXPECT_NE(a.fs().CommitPendingSinceNs(), 0);
  EXPECT_NE(b.fs().CommitPendingSinceNs(), 0);
  EXPECT_NE(b.fs().LastSaveActivityNs(), 0);
  b.Background();
  a.Commit(step_a);
  EXPECT_EQ(a.fs().CommitPendingSinceNs(), 0);
  EXPECT_EQ(a.fs().LastSaveActivityNs(), 0);
  EXPECT_EQ(b.State(step_b), "committed");  // b's view refreshes here
  EXPECT_EQ(b.fs().CommitPendingSinceNs(), 0);
  // b's save ended with the commit it adopted: no quiet period to wait out.
  EXPECT_EQ(b.fs().LastSaveActivityNs(), 0);
}

TEST(ClusterCommitTest, ANodeThatPublishedLearnsTheCommitWithoutALookup) {
  MemoryObjectStore bucket;
  ManualClock book_clock;  // b's watch: polls when this clock says so
  Node a("a", &bucket);
  Node b("b", &bucket, 0, true, nullptr, 100'000'000, &book_clock);
  const uint64_t step_a = a.Step("step1");
  const uint64_t step_b = b.Step("step1");
  // Node b fsyncs a file it keeps open: published, but b still writes the
  // step, so its watch asks the bucket nothing.
  auto open = b.fs().Create(kRoot, step_b, "y", 0644, O_WRONLY);
  ASSERT_TRUE(open.ok()) << open.status().ToString();
  ASSERT_TRUE(b.fs().Write(open->second.fh, "BBBB", 4, 0).ok());
  ASSERT_TRUE(b.fs().Fsync(open->second.fh, false).ok());
  book_clock.Advance(150'000'000);
  b.book().RunOnceForTest();
  EXPECT_EQ(b.book().counters().commit_watch_gets.load(), 0u);
  // Its close publishes again (from the book's thread: nothing changed
  // since the fsync but the open writer); then node a commits the step.
  ASSERT_TRUE(b.fs().Flush(open->second.fh).ok());
  ASSERT_TRUE(b.fs().Release(open->second.fh).ok());
  b.book().RunOnceForTest();
  WriteFile(a.fs(), step_a, "x", "AAA");
  a.Commit(step_a);
  ASSERT_EQ(a.State(step_a), "committed");
  EXPECT_EQ(b.CommitterOf("run/step1"), "") << "node b knew of the commit before its watch looked";
  // No lookup on node b: its watch finds the commit in the bucket.
  const uint64_t refreshes = b.book().counters().refreshes.load();
  book_clock.Advance(150'000'000);
  b.book().RunOnceForTest();
  EXPECT_EQ(b.CommitterOf("run/step1"), "a");
  EXPECT_EQ(b.book().counters().commit_watch_gets.load(), 1u);
  EXPECT_EQ(b.book().counters().refreshes.load(), refreshes)
      << "learnt by a refresh, not by the watch";
  // Learnt, the watch ends: later passes ask nothing.
  book_clock.Advance(250'000'000);
  b.book().RunOnceForTest();
  EXPECT_EQ(b.book().counters().commit_watch_gets.load(), 1u);
}

TEST(ClusterCommitTest, TheCommitWatchGivesUpAfterItsPolls) {
  MemoryObjectStore bucket;
  ManualClock book_clock;
  Node b("b", &bucket, 0, true, nullptr, /*commit_watch_first_ns=*/5'000'000, &book_clock);
  WriteFile(b.fs(), b.Step("step2"), "y", "BBBB");  // nobody ever commits it
  // Polls 5, 10, 20, 40, 80 and 160 ms apart, then none.
  for (int i = 0; i < 10; i++) {
    book_clock.Advance(6'000'000LL * (1 << i));
    b.book().RunOnceForTest();
  }
  EXPECT_EQ(b.book().counters().commit_watch_gets.load(), 6u);
  // A new publication (another close) watches again.
  WriteFile(b.fs(), b.Step("step2"), "z", "Z");
  book_clock.Advance(10'000'000);
  b.book().RunOnceForTest();
  EXPECT_EQ(b.book().counters().commit_watch_gets.load(), 7u);
}

TEST(ClusterCommitTest, ANodeWithoutTheStepSeesItAfterTheCommit) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node c("c", &bucket);
  const uint64_t step = a.Step("step5");
  WriteFile(a.fs(), step, "x", "AAA");
  a.Commit(step);
  ASSERT_EQ(a.State(step), "committed");
  auto run = c.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto s = c.fs().Lookup(run->ino, "step5");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(c.State(s->ino), "committed");
  auto x = c.fs().Lookup(s->ino, "x");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->attr.st_size, 3);
}

TEST(ClusterCommitTest, TriggersOnTwoNodesGiveOneRecord) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  const uint64_t step_a = a.Step("step2");
  const uint64_t step_b = b.Step("step2");
  WriteFile(a.fs(), step_a, "x", "AAA");
  WriteFile(b.fs(), step_b, "y", "BBBB");
  a.Background();
  b.Background();
  b.Commit(step_b);
  a.Commit(step_a);
  EXPECT_EQ(a.State(step_a), "committed");
  EXPECT_EQ(b.State(step_b), "committed");
  // a's own trigger found b's decision and adopted it.
  EXPECT_EQ(a.CommitterOf("run/step2"), "b");
  EXPECT_EQ(b.CommitterOf("run/step2"), "b");
  auto record = bucket.GetRange("run/step2/.ckptfs-step.json", 0, UINT64_MAX);
  ASSERT_TRUE(record.ok());
  auto decoded = DecodeClusterStepRecord(*record);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->committer, "b");
  EXPECT_EQ(decoded->files.size(), 2u);
}

TEST(ClusterCommitTest, AMalformedPartBreaksTheStepNamingIt) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  const uint64_t step = a.Step("step3");
  WriteFile(a.fs(), step, "x", "AAA");
  ASSERT_TRUE(bucket.Put(PartRecordKey("run/step3", "zz"), "{not json").ok());
  a.Commit(step);
  EXPECT_EQ(a.State(step), "broken");
  EXPECT_NE(a.Xattr(step, "user.ckptfs.error").find(".ckptfs-parts/zz.json"), std::string::npos)
      << a.Xattr(step, "user.ckptfs.error");
}

TEST(ClusterCommitTest, AnUnreachableBucketKeepsTheCommitWaiting) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  const uint64_t step = a.Step("step4");
  WriteFile(a.fs(), step, "x", "AAA");
  bucket.SetUnavailable(true);
  a.Commit(step);
  EXPECT_EQ(a.State(step), "writing");
  bucket.SetUnavailable(false);
  // The coordinator asks again after its poll interval.
  a.env().clock.Advance(1'000'000'000);
  a.env().DrainCommits();
  EXPECT_EQ(a.State(step), "committed");
}

TEST(ClusterCommitTest, StagedFilesArePublishedAsThePartOfTheirStep) {
  MemoryObjectStore bucket;
  Node b("b", &bucket);
  auto run = Mkdir(b.fs(), kRootIno, "run");
  const uint64_t tmp = Mkdir(b.fs(), run, "step20-tmp");
  WriteFile(b.fs(), tmp, "y", "BBBB");
  auto body = bucket.GetRange(PartRecordKey("run/step20", "b"), 0, UINT64_MAX);
  ASSERT_TRUE(body.ok()) << body.status().ToString();
  auto part = DecodePartRecord(*body);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(part->staged_as, "step20-tmp");
  ASSERT_EQ(part->files.size(), 1u);
  EXPECT_EQ(part->files[0].path, "y");
}

TEST(ClusterCommitTest, RemovingACommittedStepRemovesItForTheCluster) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  const uint64_t step_a = a.Step("step7");
  const uint64_t step_b = b.Step("step7");
  WriteFile(a.fs(), step_a, "x", "AAA");
  WriteFile(b.fs(), step_b, "y", "BBBB");
  b.Background();
  a.Commit(step_a);
  ASSERT_TRUE(b.fs().Lookup(step_b, "x").ok());  // b adopted it
  ASSERT_EQ(b.State(step_b), "committed");
  // rm -rf on node b (not the committer): the first unlink makes it a removal.
  auto run_b = b.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run_b.ok());
  ASSERT_TRUE(b.fs().Unlink(step_b, "x").ok());
  ASSERT_TRUE(b.fs().Unlink(step_b, "y").ok());
  ASSERT_TRUE(b.fs().Rmdir(run_b->ino, "step7").ok());
  b.book().RunOnceForTest();
  auto left = bucket.List("run/step7/");
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty()) << left->size() << " objects left, e.g. " << (*left)[0].key;
  EXPECT_TRUE(bucket.Head(StepIndexKey("run/step7", 'r')).ok());
  EXPECT_FALSE(bucket.Head(StepIndexKey("run/step7", 'c')).ok());
  // Node a drops its copy at its next lookup.
  auto run_a = a.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run_a.ok());
  EXPECT_EQ(a.fs().Lookup(run_a->ino, "step7").status().err(), ENOENT);
  // A step saved again under the name is not hidden by the old tombstone.
  const uint64_t again = a.Step("step7");
  WriteFile(a.fs(), again, "z", "Z");
  a.Commit(again);
  EXPECT_EQ(a.State(again), "committed");
  auto seen = b.fs().Lookup(run_b->ino, "step7");
  ASSERT_TRUE(seen.ok()) << seen.status().ToString();
  EXPECT_EQ(b.State(seen->ino), "committed");
}

// Issue 28, 4: rm -rf of a step on b while its deletions in the bucket are
// slow, and a saves the name again. The new save adopted the removed step's
// decision (its new files dropped as late), said committed, and the removal
// then erased it everywhere. Now a decision the tombstone names is never
// adopted: the save waits as writing until the removal has deleted it (the
// decision goes last), then commits as a new step.
TEST(ClusterCommitTest, ASaveOfARemovedNameWaitsForTheRemovalAndIsANewStep) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  const uint64_t step_a = a.Step("step9");
  const uint64_t step_b = b.Step("step9");
  WriteFile(a.fs(), step_a, "x", "AAA");
  WriteFile(b.fs(), step_b, "y", "BBBB");
  b.Background();
  a.Commit(step_a);
  ASSERT_EQ(a.State(step_a), "committed");
  auto old =
      DecodeClusterStepRecord(*bucket.GetRange("run/step9/.ckptfs-step.json", 0, UINT64_MAX));
  ASSERT_TRUE(old.ok());
  // b's removal, halfway: its tombstone and index entries are written and
  // deleted, the step's objects (the decision among them) not yet.
  ASSERT_TRUE(b.fs().Lookup(step_b, "x").ok());
  auto run_b = b.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(b.fs().Unlink(step_b, "x").ok());
  ASSERT_TRUE(b.fs().Unlink(step_b, "y").ok());
  ASSERT_TRUE(b.fs().Rmdir(run_b->ino, "step9").ok());
  ASSERT_TRUE(bucket
                  .Put(StepIndexKey("run/step9", 'r'), R"({"format":"ckptfs-index","proposal":")" +
                                                           old->proposal +
                                                           R"(","state":"removed"})"
                                                           "\n")
                  .ok());
  ASSERT_TRUE(bucket.Delete({StepIndexKey("run/step9", 'c'), StepIndexKey("run/step9", 'p')}).ok());
  // a sees the removal, and saves step9 again.
  auto run_a = a.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run_a.ok());
  ASSERT_EQ(a.fs().Lookup(run_a->ino, "step9").status().err(), ENOENT);
  const uint64_t again = a.Step("step9");
  WriteFile(a.fs(), again, "z", "ZZZZZ");
  a.Commit(again);
  EXPECT_EQ(a.State(again), "writing");
  EXPECT_NE(a.Xattr(again, "user.ckptfs.error").find("still being deleted from the bucket"),
            std::string::npos)
      << a.Xattr(again, "user.ckptfs.error");
  // Nor does it upload before its commit: the removal may still delete
  // objects of the same names.
  auto uploads_of_step9 = [&] {
    size_t n = 0;
    for (const auto& job : a.fs().NextUploads(100, {})) n += job.key.rfind("run/step9/", 0) == 0;
    return n;
  };
  EXPECT_EQ(uploads_of_step9(), 0u);
  // b's removal ends: every old object, the decision last.
  b.book().RunOnceForTest();
  EXPECT_FALSE(bucket.Head("run/step9/.ckptfs-step.json").ok());
  a.Commit(again);
  ASSERT_EQ(a.State(again), "committed") << a.Xattr(again, "user.ckptfs.error");
  EXPECT_EQ(uploads_of_step9(), 1u);
  auto record =
      DecodeClusterStepRecord(*bucket.GetRange("run/step9/.ckptfs-step.json", 0, UINT64_MAX));
  ASSERT_TRUE(record.ok());
  EXPECT_NE(record->proposal, old->proposal);
  ASSERT_EQ(record->files.size(), 1u);
  EXPECT_EQ(record->files[0].path, "z");
  EXPECT_EQ(ReadFile(a.fs(), a.fs().Lookup(again, "z")->ino), "ZZZZZ");
  // b sees the new step, not the removed one.
  auto seen = b.fs().Lookup(run_b->ino, "step9");
  ASSERT_TRUE(seen.ok()) << seen.status().ToString();
  EXPECT_EQ(b.State(seen->ino), "committed");
  EXPECT_TRUE(b.fs().Lookup(seen->ino, "z").ok());
  EXPECT_EQ(b.fs().Lookup(seen->ino, "x").status().err(), ENOENT);
}

// A node that never learnt of a commit before another node removed the step
// (found by the simulation: Seed179, Seed106). Its request, asked again after
// the removal, decided the removed step again, and a node that only wrote
// kept it as `writing` for ever, its part back in the bucket. The step
// record now says which removal of the name, if any, each save follows
// (the tombstone's tag in the node's view when it made the directory): one
// left over from the removed save is dropped, a save made after the removal
// commits as a new step.
TEST(ClusterCommitTest, AStepLeftOverFromARemovedSaveGoesAndASaveAfterTheRemovalStays) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  Node c("c", &bucket);
  const uint64_t step_a = a.Step("step5");
  const uint64_t step_b = b.Step("step5");
  const uint64_t step_c = c.Step("step5");
  WriteFile(a.fs(), step_a, "x", "AAA");
  WriteFile(b.fs(), step_b, "y", "BB");
  WriteFile(c.fs(), step_c, "w", "C");
  b.Background();
  c.Background();
  a.Commit(step_a);
  ASSERT_EQ(a.State(step_a), "committed");
  // Neither b nor c looks again before a removes the step for the cluster.
  auto run_a = a.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run_a.ok());
  for (const char* f : {"x", "y", "w"}) ASSERT_TRUE(a.fs().Unlink(step_a, f).ok()) << f;
  ASSERT_TRUE(a.fs().Rmdir(run_a->ino, "step5").ok());
  a.Background();
  ASSERT_TRUE(bucket.Head(StepIndexKey("run/step5", 'r')).ok());
  // b's request (as if asked before it learnt of the commit) decides nothing.
  b.Commit(step_b);
  EXPECT_FALSE(bucket.Head(StepIndexKey("run/step5", 'c')).ok());
  EXPECT_FALSE(bucket.Head("run/step5/.ckptfs-step.json").ok());
  EXPECT_NE(b.env().events.Render().find("cluster_leftover"), std::string::npos);
  auto run_b = b.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run_b.ok());
  EXPECT_EQ(b.fs().Lookup(run_b->ino, "step5").status().err(), ENOENT);
  // c's next lookup drops what it holds of the removed save.
  auto run_c = c.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run_c.ok());
  EXPECT_EQ(c.fs().Lookup(run_c->ino, "step5").status().err(), ENOENT);
  auto left = bucket.List("run/step5/");
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty()) << left->size() << " objects left, e.g. " << (*left)[0].key;
  // A save of the name after the removal, on b and c, is a new step: the
  // refreshes keep it, and it commits.
  const uint64_t again_b = b.Step("step5");
  const uint64_t again_c = c.Step("step5");
  WriteFile(b.fs(), again_b, "y", "NEW");
  WriteFile(c.fs(), again_c, "w", "NEWER");
  c.Background();
  ASSERT_TRUE(b.fs().Lookup(run_b->ino, "step5").ok());
  ASSERT_TRUE(c.fs().Lookup(run_c->ino, "step5").ok());
  b.Commit(again_b);
  ASSERT_EQ(b.State(again_b), "committed") << b.Xattr(again_b, "user.ckptfs.error");
  auto record =
      DecodeClusterStepRecord(*bucket.GetRange("run/step5/.ckptfs-step.json", 0, UINT64_MAX));
  ASSERT_TRUE(record.ok());
  ASSERT_EQ(record->files.size(), 2u);
  EXPECT_EQ(record->files[0].path, "w");
  EXPECT_EQ(record->files[1].path, "y");
}

// The other side of the rule above: a save of a removed name on a node whose view
// predates the removal (--refresh 1 h here) follows that removal, because making a
// step directory reads the step index first (RefreshForNewStep), whatever
// --refresh says. Had it used its old view, the save would count as left over from
// the removed step, and its commit would drop it.
TEST(ClusterCommitTest, ASaveOfARemovedNameOnANodeWithAnOldViewIsANewStep) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  ManualClock book_clock;  // b's view ages only as the test says
  Node b("b", &bucket, 0, true, nullptr, 100'000'000, &book_clock, 0,
         /*refresh_ns=*/3600'000'000'000LL);
  ASSERT_TRUE(b.fs().Lookup(kRootIno, "run").status().err() == ENOENT);  // b's view: nothing
  book_clock.Advance(1'000'000'000);
  const uint64_t step_a = a.Step("step6");
  WriteFile(a.fs(), step_a, "x", "OLD");
  a.Commit(step_a);
  ASSERT_EQ(a.State(step_a), "committed");
  auto run_a = a.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run_a.ok());
  ASSERT_TRUE(a.fs().Unlink(step_a, "x").ok());
  ASSERT_TRUE(a.fs().Rmdir(run_a->ino, "step6").ok());
  a.Background();
  ASSERT_TRUE(bucket.Head(StepIndexKey("run/step6", 'r')).ok());
  // b saves step6 again, its view an hour from stale.
  const uint64_t again = b.Step("step6");
  WriteFile(b.fs(), again, "x", "NEW");
  b.Commit(again);
  ASSERT_EQ(b.State(again), "committed") << b.env().events.Render();
  EXPECT_EQ(b.env().events.Render().find("cluster_leftover"), std::string::npos);
  EXPECT_EQ(ReadFile(b.fs(), b.fs().Lookup(again, "x")->ino), "NEW");
  // And a sees it as the new step.
  auto seen = a.fs().Lookup(run_a->ino, "step6");
  ASSERT_TRUE(seen.ok()) << seen.status().ToString();
  EXPECT_EQ(a.State(seen->ino), "committed");
}

// a commits run/step6 (one file, x) and c, which refreshes only when its
// clock says, learns of it. Returns c's inode of run, or 0 (a failure is
// reported).
uint64_t CommitStep6AndLetCLearnIt(Node& a, Node& c) {
  const uint64_t old_step = a.Step("step6");
  WriteFile(a.fs(), old_step, "x", "OLD");
  a.Commit(old_step);
  EXPECT_EQ(a.State(old_step), "committed");
  auto run_c = c.fs().Lookup(kRootIno, "run");
  EXPECT_TRUE(run_c.ok()) << run_c.status().ToString();
  if (!run_c.ok()) return 0;
  auto held = c.fs().Lookup(run_c->ino, "step6");
  EXPECT_TRUE(held.ok()) << held.status().ToString();
  if (!held.ok()) return 0;
  EXPECT_EQ(c.State(held->ino), "committed");
  EXPECT_TRUE(c.fs().Lookup(held->ino, "x").ok());
  return run_c->ino;
}

// A node that holds a step committed and learns of neither its removal nor the save
// of its name again before both are done (--refresh 1 h here) finds, when it next
// looks, a tombstone and a committed entry of another save. The tombstone names the
// decision its step was committed with (StepRecord::decision): that step goes and the
// new save takes its place, as in a shared namespace. Before, the node kept the
// removed save's contents for good.
TEST(ClusterCommitTest, ANodeThatMissedARemovalAndTheSaveAgainShowsTheNewSave) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  ManualClock book_clock;  // c's view ages only as the test says
  Node c("c", &bucket, 0, true, nullptr, 100'000'000, &book_clock, 0,
         /*refresh_ns=*/3600'000'000'000LL);
  const uint64_t run_c = CommitStep6AndLetCLearnIt(a, c);
  ASSERT_NE(run_c, 0u);
  // a removes it; b saves the name again with other contents. c looks at neither.
  auto run_a = a.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run_a.ok());
  auto old_step = a.fs().Lookup(run_a->ino, "step6");
  ASSERT_TRUE(old_step.ok());
  ASSERT_TRUE(a.fs().Unlink(old_step->ino, "x").ok());
  ASSERT_TRUE(a.fs().Rmdir(run_a->ino, "step6").ok());
  a.Background();
  ASSERT_TRUE(bucket.Head(StepIndexKey("run/step6", 'r')).ok());
  const uint64_t again = b.Step("step6");
  WriteFile(b.fs(), again, "y", "NEW!");
  b.Commit(again);
  ASSERT_EQ(b.State(again), "committed") << b.env().events.Render();
  ASSERT_TRUE(bucket.Head(StepIndexKey("run/step6", 'c')).ok());
  // An hour later c looks again.
  book_clock.Advance(3601'000'000'000LL);
  ASSERT_TRUE(c.fs().Lookup(kRootIno, "run").ok());
  c.Background();
  auto now = c.fs().Lookup(run_c, "step6");
  ASSERT_TRUE(now.ok()) << now.status().ToString() << c.env().events.Render();
  EXPECT_EQ(c.State(now->ino), "committed");
  EXPECT_EQ(c.fs().Lookup(now->ino, "x").status().err(), ENOENT) << "the removed save's file";
  auto y = c.fs().Lookup(now->ino, "y");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->attr.st_size, 4);
}

// A refresh reads ahead the step records it may apply, then judges
// tombstones. A save of the name committed between that read and the
// judgement must not be applied with the removed save's record: CI once saw
// a node commit its new save with the old save's files, its own dropped as
// late.
TEST(ClusterCommitTest, ARefreshJudgesATombstoneOnTheCopyOfTheRecordItApplies) {
  MemoryObjectStore memory;
  SharedStore bucket(&memory, /*conditional_writes=*/true);
  Node a("a", &bucket);
  Node b("b", &bucket);
  ManualClock book_clock;  // c refreshes only when the test says
  Node c("c", &bucket, 0, true, nullptr, 100'000'000, &book_clock, 0,
         /*refresh_ns=*/3600'000'000'000LL);
  const uint64_t run_c = CommitStep6AndLetCLearnIt(a, c);
  ASSERT_NE(run_c, 0u);
  // A removal under way: the tombstone names the old save, whose index
  // entry is not deleted yet.
  const std::string index_key = StepIndexKey("run/step6", 'c');
  auto old_body = memory.GetRange(index_key, 0, UINT64_MAX);
  ASSERT_TRUE(old_body.ok()) << old_body.status().ToString();
  auto old_record = DecodeClusterStepRecord(*old_body);
  ASSERT_TRUE(old_record.ok()) << old_record.status().ToString();
  ASSERT_TRUE(memory
                  .Put(StepIndexKey("run/step6", 'r'), R"({"format":"ckptfs-index","proposal":")" +
                                                           old_record->proposal +
                                                           R"(","state":"removed"})"
                                                           "\n")
                  .ok());
  // The name is saved again (another proposal) right after c's refresh has
  // read the old record.
  ClusterStepRecord again = *old_record;
  again.proposal = "b~00000000000000ff";
  bucket.AfterNextGetOf(
      index_key, [&] { ASSERT_TRUE(memory.Put(index_key, EncodeClusterStepRecord(again)).ok()); });
  book_clock.Advance(3601'000'000'000LL);
  ASSERT_TRUE(c.fs().Lookup(kRootIno, "run").ok());
  c.Background();
  // The copy c read names the removed save: c removes its step. The new
  // save is for a later refresh; the old one never comes back as it.
  auto now = c.fs().Lookup(run_c, "step6");
  if (now.ok()) {
    EXPECT_EQ(c.fs().Lookup(now->ino, "x").status().err(), ENOENT)
        << "the removed save's record was applied as the new save\n"
        << c.env().events.Render();
  }
}

// A node deletes its own uploads of a removed step from its own queue, on its own
// schedule: after a restart, perhaps days later, when the name has been saved
// again and the keys hold the new step's objects. Those deletions are dropped
// once a decision of the name other than the removed one is in the bucket.
TEST(ClusterCommitTest, LateDeletionsOfARemovedStepSpareASaveOfItsNameAgain) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  const std::vector<std::string> keys = {"run/step7/x", "run/step7/sub/y",
                                         "run/step7/.ckptfs-commit.json", "run/step8/z",
                                         "run/latest"};
  auto skipped = [&] {
    auto got = a.fs().KeysOfStepsSavedAgain(keys);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    return got.ok() ? *got : std::set<std::string>{};
  };
  // No decision of the name: every deletion goes ahead.
  EXPECT_TRUE(skipped().empty());
  auto decision = [&](const std::string& proposal) {
    ClusterStepRecord r;
    r.step_path = "run/step7";
    r.step = 7;
    r.proposal = proposal;
    r.committer = "b";
    r.parts["b"] = ClusterStepRecord::Part{1, 0};
    ASSERT_TRUE(bucket.Put("run/step7/.ckptfs-step.json", EncodeClusterStepRecord(r)).ok());
  };
  ASSERT_TRUE(bucket
                  .Put(StepIndexKey("run/step7", 'r'),
                       R"({"format":"ckptfs-index","proposal":"b~0001","state":"removed"})"
                       "\n")
                  .ok());
  // The removed step's decision, not deleted yet by its removal: go ahead.
  decision("b~0001");
  EXPECT_TRUE(skipped().empty());
  // The name saved again (another decision): its keys are spared.
  decision("c~0002");
  EXPECT_EQ(skipped(), (std::set<std::string>{"run/step7/x", "run/step7/sub/y",
                                              "run/step7/.ckptfs-commit.json"}));
}

TEST(ClusterCommitTest, ACommittedStepCannotBeRenamedButAWritingOneCan) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  const uint64_t step_a = a.Step("step8");
  const uint64_t step_b = b.Step("step8");
  WriteFile(a.fs(), step_a, "x", "AAA");
  WriteFile(b.fs(), step_b, "y", "BBBB");
  b.Background();
  a.Commit(step_a);
  auto run_b = b.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run_b.ok());
  ASSERT_TRUE(b.fs().Lookup(step_b, "x").ok());  // b adopted it
  // Neither the step nor the directory holding it moves, on either node.
  EXPECT_EQ(b.fs().Rename(run_b->ino, "step8", run_b->ino, "step9", 0).err(), EXDEV);
  EXPECT_EQ(b.fs().Rename(kRootIno, "run", kRootIno, "run2", 0).err(), EXDEV);
  EXPECT_EQ(a.fs().Rename(run_b->ino, "step8", run_b->ino, "best", 0).err(), EXDEV);
  b.Step("other");
  EXPECT_EQ(b.fs().Rename(run_b->ino, "other", run_b->ino, "step8", RENAME_EXCHANGE).err(), EXDEV);
  EXPECT_EQ(b.State(step_b), "committed");
  EXPECT_TRUE(b.fs().Lookup(run_b->ino, "step8").ok());
  EXPECT_TRUE(bucket.Head(StepIndexKey("run/step8", 'c')).ok());
  // A step being written still moves (OLMo-core renames step<N>-tmp).
  const uint64_t tmp = b.Step("step10-tmp");
  WriteFile(b.fs(), tmp, "z", "Z");
  EXPECT_TRUE(b.fs().Rename(run_b->ino, "step10-tmp", run_b->ino, "step10", 0).ok());
}

TEST(ClusterCommitTest, RetentionIsDecidedByTheCommitterForEveryNode) {
  MemoryObjectStore bucket;
  // Without upload bookkeeping: retention's rule that keeps the newest
  // persisted step would otherwise keep everything here, where no tier runs.
  Node a("a", &bucket, 0, /*uploads=*/false);
  Node b("b", &bucket, 0, /*uploads=*/false);
  auto run_a = Mkdir(a.fs(), kRootIno, "run");
  ASSERT_TRUE(a.fs().SetXattr(run_a, "user.ckptfs.keep_last", "1", 0).ok());
  for (const char* name : {"step1", "step2"}) {
    const uint64_t sa = a.Step(name);
    const uint64_t sb = b.Step(name);
    WriteFile(a.fs(), sa, "x", "AAA");
    WriteFile(b.fs(), sb, "y", "BBBB");
    b.Background();
    a.Commit(sa);
    ASSERT_EQ(a.State(sa), "committed") << name;
  }
  // Node a kept only step2 and removed step1 for the cluster.
  EXPECT_EQ(a.fs().Lookup(run_a, "step1").status().err(), ENOENT) << a.env().events.Render();
  a.book().RunOnceForTest();
  EXPECT_TRUE(bucket.Head(StepIndexKey("run/step1", 'r')).ok());
  auto run_b = b.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run_b.ok());
  EXPECT_EQ(b.fs().Lookup(run_b->ino, "step1").status().err(), ENOENT);
  auto step2 = b.fs().Lookup(run_b->ino, "step2");
  ASSERT_TRUE(step2.ok());
  EXPECT_EQ(b.State(step2->ino), "committed");
}

// Retention is planned on a view of the cluster just read (SPEC section 9): node a,
// whose view is an hour old (--refresh 1 h), commits step2 with keep_last 1 after b
// persisted step1. On a's old view step1 was not persisted yet, so no rule kept it
// and a removed the cluster's newest persisted step before step2 was persisted.
TEST(ClusterCommitTest, RetentionPlansOnAViewReadAfterTheDecision) {
  MemoryObjectStore bucket;
  ManualClock book_clock;  // a's view ages only as the test says
  Node a("a", &bucket, 0, true, nullptr, 100'000'000, &book_clock, 0,
         /*refresh_ns=*/3600'000'000'000LL);
  Node b("b", &bucket);
  const uint64_t step1 = b.Step("step1");
  WriteFile(b.fs(), step1, "x", "ONE");
  b.Commit(step1);
  ASSERT_EQ(b.State(step1), "committed");
  // a learns of step1's commit, and starts step2 while step1 is not persisted.
  auto run_a = a.fs().Lookup(kRootIno, "run");
  ASSERT_TRUE(run_a.ok()) << run_a.status().ToString();
  ASSERT_TRUE(a.fs().SetXattr(run_a->ino, "user.ckptfs.keep_last", "1", 0).ok());
  const uint64_t step2 = a.Step("step2");
  WriteFile(a.fs(), step2, "y", "TWO");
  auto seen = a.fs().Lookup(run_a->ino, "step1");
  ASSERT_TRUE(seen.ok());
  ASSERT_EQ(a.State(seen->ino), "committed");
  // b persists step1 (its committer's duty; here its index entry alone).
  b.book().StepPersisted("run/step1");
  b.Background();
  ASSERT_TRUE(bucket.Head(StepIndexKey("run/step1", 'p')).ok());
  book_clock.Advance(1'000'000'000);  // a's view: a second old, not stale by --refresh
  a.Commit(step2);
  ASSERT_EQ(a.State(step2), "committed") << a.env().events.Render();
  // step1 is the newest persisted step until step2 is persisted: kept, everywhere.
  auto kept = a.fs().Lookup(run_a->ino, "step1");
  ASSERT_TRUE(kept.ok()) << a.env().events.Render();
  EXPECT_EQ(a.Xattr(kept->ino, "user.ckptfs.persisted"), "true");
  a.Background();
  EXPECT_TRUE(bucket.Head(StepIndexKey("run/step1", 'c')).ok());
  EXPECT_EQ(bucket.Head(StepIndexKey("run/step1", 'r')).status().err(), ENOENT);
}

// run/step1 with one file on each of three nodes (x on a, y on b, z on c),
// committed on a; returns a's step ino.
uint64_t CommitAcrossThreeNodes(Node& a, Node& b, Node& c) {
  const uint64_t step_a = a.Step("step1");
  WriteFile(a.fs(), step_a, "x", "AAA");
  WriteFile(b.fs(), b.Step("step1"), "y", "BBBB");
  WriteFile(c.fs(), c.Step("step1"), "z", "CCCCC");
  b.Background();
  c.Background();
  a.Commit(step_a);
  return step_a;
}

// Node `node` says in its part record of run/step1 that its files are
// uploaded, as it does when its uploads end. Returns the record as it was.
PartRecord MarkPartUploaded(MemoryObjectStore* bucket, const std::string& node) {
  auto body = bucket->GetRange(PartRecordKey("run/step1", node), 0, UINT64_MAX);
  EXPECT_TRUE(body.ok()) << body.status().ToString();
  if (!body.ok()) return {};
  auto part = DecodePartRecord(*body);
  EXPECT_TRUE(part.ok()) << part.status().ToString();
  if (!part.ok()) return {};
  const PartRecord before = *part;
  for (auto& f : part->files) {
    f.uploaded = true;
    f.crc32c = 1234;
  }
  part->all_uploaded = true;
  part->seq++;
  EXPECT_TRUE(bucket->Put(PartRecordKey("run/step1", node), EncodePartRecord(*part)).ok());
  return before;
}

TEST(ClusterCommitTest, TheCommittersPersistPollReadsEveryAwaitedPartInOnePass) {
  // The committing node learns of the other nodes' finished uploads from
  // their part records; one pass reads every awaited part (in parallel:
  // at 1,000 nodes, one after another would take 999 round trips per poll).
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  Node c("c", &bucket);
  const uint64_t step_a = CommitAcrossThreeNodes(a, b, c);
  ASSERT_EQ(a.State(step_a), "committed");
  EXPECT_EQ(a.fs().PartsAwaited().size(), 2u);
  // b and c finish their uploads and say so in their parts.
  for (const auto& [node, name, size] : {std::tuple{"b", "y", 4}, std::tuple{"c", "z", 5}}) {
    const PartRecord before = MarkPartUploaded(&bucket, node);
    ASSERT_EQ(before.files.size(), 1u);
    EXPECT_EQ(before.files[0].path, name);
    EXPECT_EQ(before.files[0].size, static_cast<uint64_t>(size));
  }
  const uint64_t gets = a.book().counters().part_gets.load();
  a.book().AwaitingParts();
  a.book().RunOnceForTest();
  EXPECT_EQ(a.book().counters().part_gets.load() - gets, 2u);
  EXPECT_TRUE(a.fs().PartsAwaited().empty());
}

TEST(ClusterCommitTest, APersistPollGetsOnlyThePartsThatMovedSinceItLastReadThem) {
  // Each poll LISTs the step's part records (one request per 1,000 nodes)
  // and GETs only the awaited ones whose tag moved: at 1,000 nodes a poll
  // every 200 ms costs 5 LISTs a second, not 5,000 GETs.
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  Node c("c", &bucket);
  const uint64_t step_a = CommitAcrossThreeNodes(a, b, c);
  ASSERT_EQ(a.State(step_a), "committed");
  auto poll = [&] {
    const uint64_t gets = a.book().counters().part_gets.load();
    const uint64_t lists = a.book().counters().lists.load();
    a.book().AwaitingParts();
    a.book().RunOnceForTest();
    return std::pair<uint64_t, uint64_t>(a.book().counters().part_gets.load() - gets,
                                         a.book().counters().lists.load() - lists);
  };
  auto uploaded = [&](const char* node) {
    ASSERT_EQ(MarkPartUploaded(&bucket, node).files.size(), 1u);
  };
  poll();  // the first look reads what it has not read yet
  EXPECT_EQ(a.fs().PartsAwaited().size(), 2u);
  EXPECT_EQ(poll(), (std::pair<uint64_t, uint64_t>(0, 1))) << "nothing moved: one LIST, no GET";
  uploaded("b");
  EXPECT_EQ(poll(), (std::pair<uint64_t, uint64_t>(1, 1))) << "b moved: its part alone";
  ASSERT_EQ(a.fs().PartsAwaited().size(), 1u);
  EXPECT_EQ(a.fs().PartsAwaited()[0].owner, "c");
  uploaded("c");
  EXPECT_EQ(poll(), (std::pair<uint64_t, uint64_t>(1, 1)));
  EXPECT_TRUE(a.fs().PartsAwaited().empty());
  // A LIST that fails costs a GET of every awaited part, as before tags.
  MemoryObjectStore bucket2;
  Node d("d", &bucket2);
  Node e("e", &bucket2);
  const uint64_t step_d = d.Step("step1");
  WriteFile(d.fs(), step_d, "x", "AAA");
  WriteFile(e.fs(), e.Step("step1"), "y", "BBBB");
  e.Background();
  d.Commit(step_d);
  ASSERT_EQ(d.State(step_d), "committed");
  d.book().AwaitingParts();
  d.book().RunOnceForTest();
  const uint64_t gets = d.book().counters().part_gets.load();
  bucket2.FailNext(1, EIO);  // the LIST
  d.book().AwaitingParts();
  d.book().RunOnceForTest();
  EXPECT_EQ(d.book().counters().part_gets.load() - gets, 1u);
}

// The request costs docs/cluster.md gives ("Request costs, counted"),
// counted here instead of worked out: 100 nodes x 8 ranks save one step
// into one in-memory bucket, each rank creating, writing, fsyncing and then
// closing its shard (DCP's order; the ranks of a node one after another),
// each node's book then making its part durable and putting it, node 0
// commits it,
// every other node learns the commit through its watch, and then an hour
// passes with nobody looking. Uploads are not run here (the harness has no
// tier): their requests are the single-node ones. CLUSTER_SCALE_NODES=1000
// gives docs/cluster.md's figures (about 3 minutes: every node materialises
// all 8,000 files of the step; 100 nodes take under a second).
TEST(ClusterScaleTest, RequestsOfOneStepAndOfAnIdleHour) {
  size_t n_nodes = 100;
  if (const char* n = std::getenv("CLUSTER_SCALE_NODES"))
    n_nodes = std::max<size_t>(2, std::strtoull(n, nullptr, 10));
  constexpr int kRanks = 8;
  MemoryObjectStore bucket;
  ManualClock book_clock;  // the books' timers (commit watch, persist polls)
  std::vector<std::unique_ptr<Node>> nodes;
  for (size_t i = 0; i < n_nodes; i++) {
    char name[16];
    std::snprintf(name, sizeof name, "n%04zu", i);
    nodes.push_back(std::make_unique<Node>(name, &bucket, 0, true, nullptr, 100'000'000,
                                           &book_clock,
                                           /*job_nodes=*/0, /*refresh_ns=*/1'000'000'000));
  }
  using Counters = ClusterBook::Counters;
  // A node's requests (its book's counters) since `before`, by kind.
  struct Requests {
    uint64_t puts = 0, gets = 0, lists = 0;
  };
  auto snapshot = [](const Counters& c) {
    Requests r;
    // A decision is a GET and a conditional PUT (DecideOnce).
    r.puts = c.part_puts + c.index_puts + c.run_file_puts + c.decisions;
    r.gets = c.part_gets + c.index_gets + c.commit_watch_gets + c.run_file_gets + c.decisions;
    r.lists = c.lists;
    return r;
  };
  auto since = [&](const std::vector<Requests>& before, size_t i) {
    Requests now = snapshot(nodes[i]->book().counters());
    return Requests{now.puts - before[i].puts, now.gets - before[i].gets,
                    now.lists - before[i].lists};
  };
  auto all = [&] {
    std::vector<Requests> r;
    for (auto& n : nodes) r.push_back(snapshot(n->book().counters()));
    return r;
  };
  const size_t bucket_puts_before = bucket.put_calls();

  // The save: every rank's file, then each node's book makes its part
  // durable (here already: the ranks fsynced) and puts it again.
  std::vector<uint64_t> step(n_nodes);
  for (size_t i = 0; i < n_nodes; i++) {
    Node& n = *nodes[i];
    step[i] = n.Step("step100");
    std::vector<FileHandle*> open;
    for (int r = 0; r < kRanks; r++) {
      const std::string shard = "__" + std::to_string(i * kRanks + r) + "_0.distcp";
      open.push_back(CreateAndWrite(n, step[i], shard, "shard bytes of " + shard));
      ASSERT_NE(open.back(), nullptr);
      ASSERT_TRUE(n.fs().Fsync(open.back(), false).ok());
    }
    for (FileHandle* fh : open) Close(n, fh);
    n.Background();
  }
  const std::vector<Requests> saved = all();

  // The commit, by node 0 (an explicit commit: the same gather and decision
  // as a marker's, without writing DCP metadata for 8,000 files).
  nodes[0]->Commit(step[0]);
  ASSERT_EQ(nodes[0]->State(step[0]), "committed") << nodes[0]->Xattr(step[0], "user.ckptfs.error");
  ASSERT_EQ(nodes[0]->Xattr(step[0], "user.ckptfs.files"), std::to_string(n_nodes * kRanks));
  const Requests commit = since(saved, 0);

  // Every other node's commit watch finds the commit 100 ms after its last
  // publication.
  const std::vector<Requests> committed = all();
  book_clock.Advance(150'000'000);
  for (size_t i = 1; i < n_nodes; i++) nodes[i]->Background();
  for (size_t i = 1; i < n_nodes; i++) ASSERT_EQ(nodes[i]->State(step[i]), "committed") << i;
  const std::vector<Requests> learnt = all();

  // An idle hour, nobody looking: every node's background work runs once a
  // minute, the committing node's every second (its own timer). It alone
  // still polls the parts it waits for: nobody uploads here, as when nodes
  // never finish.
  for (int second = 1; second <= 3600; second++) {
    book_clock.Advance(1'000'000'000);
    nodes[0]->Background();
    if (second % 60 != 0) continue;
    for (size_t i = 1; i < n_nodes; i++) nodes[i]->Background();
  }

  Requests per_node_save{0, 0, 0}, worst_save{0, 0, 0}, per_node_learn{0, 0, 0},
      idle_others{0, 0, 0};
  for (size_t i = 0; i < n_nodes; i++) {
    const Requests s{saved[i].puts, saved[i].gets, saved[i].lists};
    worst_save.puts = std::max(worst_save.puts, s.puts);
    worst_save.gets = std::max(worst_save.gets, s.gets);
    worst_save.lists = std::max(worst_save.lists, s.lists);
    per_node_save.puts += s.puts;
    if (i == 0) continue;
    const Requests l = since(committed, i);
    per_node_learn.puts = std::max(per_node_learn.puts, l.puts);
    per_node_learn.gets = std::max(per_node_learn.gets, l.gets);
    per_node_learn.lists = std::max(per_node_learn.lists, l.lists);
    const Requests idle = since(learnt, i);
    idle_others.puts += idle.puts;
    idle_others.gets += idle.gets;
    idle_others.lists += idle.lists;
  }
  const Requests idle_committer = since(learnt, 0);
  std::printf(
      "cluster requests, %zu nodes x %d ranks, one step (counted):\n"
      "  save, per node (at most):             %llu PUT, %llu GET, %llu LIST\n"
      "  save, all nodes:                      %llu PUT\n"
      "  commit, by the committing node:       %llu PUT, %llu GET, %llu LIST\n"
      "  learning the commit, per other node:  %llu PUT, %llu GET, %llu LIST (at most)\n"
      "  idle hour, all other nodes together:  %llu requests\n"
      "  idle hour, committing node (persist polls, parts never uploaded): %llu GET, %llu LIST\n"
      "  bucket PUTs in all: %zu\n",
      n_nodes, kRanks, static_cast<unsigned long long>(worst_save.puts),
      static_cast<unsigned long long>(worst_save.gets),
      static_cast<unsigned long long>(worst_save.lists),
      static_cast<unsigned long long>(per_node_save.puts),
      static_cast<unsigned long long>(commit.puts), static_cast<unsigned long long>(commit.gets),
      static_cast<unsigned long long>(commit.lists),
      static_cast<unsigned long long>(per_node_learn.puts),
      static_cast<unsigned long long>(per_node_learn.gets),
      static_cast<unsigned long long>(per_node_learn.lists),
      static_cast<unsigned long long>(idle_others.puts + idle_others.gets + idle_others.lists),
      static_cast<unsigned long long>(idle_committer.gets),
      static_cast<unsigned long long>(idle_committer.lists),
      bucket.put_calls() - bucket_puts_before);
  // SPEC section 9, "Cost": the committing node's requests are linear in
  // the nodes; every other node makes a constant number per step; a mount
  // nobody uses makes none.
  EXPECT_LE(worst_save.puts, 2u) << "the first open's, then the book's one PUT for the closes";
  EXPECT_EQ(worst_save.gets, 0u);
  EXPECT_LE(worst_save.lists, 2u)
      << "the first lookup's refresh, the first open's look at the node's own name (NodeFence)";
  EXPECT_LE(commit.gets, n_nodes) << "a GET of each other part, the decision's GET";
  EXPECT_LE(commit.lists, 3u)
      << "the parts, the node registry (NodeFence), the step's index entries (a tombstone)";
  EXPECT_LE(commit.puts, 2u) << "the decision, its index entry";
  EXPECT_EQ(per_node_learn.puts + per_node_learn.lists, 0u);
  EXPECT_EQ(per_node_learn.gets, 2u) << "the index entry, and the step's tombstone key (absent)";
  EXPECT_EQ(idle_others.puts + idle_others.gets + idle_others.lists, 0u);
}

TEST(ClusterCommitTest, StepIndexKeysRoundTrip) {
  for (const std::string path : {"run/step1", "step1", "a~b/%x/step2", "deep/run/x/step3"}) {
    for (char state : {'c', 'p', 'r', 'f'}) {
      std::string back;
      char got = 0;
      const std::string key = StepIndexKey(path, state);
      ASSERT_TRUE(ParseStepIndexKey(key, &back, &got)) << key;
      EXPECT_EQ(back, path);
      EXPECT_EQ(got, state);
      EXPECT_EQ(key.find('/', std::string(kStepIndexDir).size()), std::string::npos) << key;
    }
  }
  std::string p;
  char s;
  EXPECT_FALSE(ParseStepIndexKey(".ckptfs-index/x~q.json", &p, &s));
  EXPECT_FALSE(ParseStepIndexKey(".ckptfs-index/%zz~c.json", &p, &s));
  EXPECT_FALSE(ParseStepIndexKey("run/.ckptfs-index/x~c.json", &p, &s));
}

// Writes data over the start of an existing file and closes it.
void Overwrite(FileSystem& fs, uint64_t ino, const std::string& data) {
  auto o = fs.OpenFile(ino, O_WRONLY);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_TRUE(fs.Write(o->fh, data.data(), data.size(), 0).ok());
  ASSERT_TRUE(fs.Flush(o->fh).ok());
  ASSERT_TRUE(fs.Release(o->fh).ok());
}

// Uploads the node's run-level file at path (as its RemoteTier would: the
// object in the bucket, then NoteUploaded), once the steps it may name are
// persisted there. Returns the version's mtime.
int64_t UploadRunFile(Node& n, MemoryObjectStore* bucket, const std::string& path,
                      const std::string& data) {
  n.fs().RepairUploadQueue();  // the tier's control pass: run directories, run-level files
  for (const auto& job : n.fs().NextUploads(100, {})) {
    if (job.key != path) continue;
    EXPECT_EQ(job.size, data.size());
    EXPECT_TRUE(bucket->Put(path, data).ok());
    const uint32_t crc = Crc32c(0, data.data(), data.size());
    EXPECT_TRUE(n.fs().NoteUploaded(job, crc).ok());
    n.book().RunOnceForTest();  // the record in the step index
    return job.mtime_ns;
  }
  ADD_FAILURE() << path << " is not queued for upload on " << n.book().node();
  return 0;
}

// SPEC section 9: a run-level file (DeepSpeed's `latest`) written on one node
// is read on every node. Its uploading node records each version in the step
// index; a refresh elsewhere shows it as a file read from the bucket, and
// reads the record again only when its tag moves.
TEST(ClusterCommitTest, ARunLevelFileUploadedOnOneNodeAppearsOnTheOthers) {
  MemoryObjectStore bucket;
  Node a("a", &bucket);
  Node b("b", &bucket);
  const uint64_t step = a.Step("global_step10");
  WriteFile(a.fs(), step, "mp_rank_00_model_states.pt", "AAA");
  WriteFile(b.fs(), b.Step("global_step10"), "zero_pp_rank_1_mp_rank_00_optim_states.pt", "BBBB");
  b.Background();
  a.Commit(step);
  ASSERT_EQ(a.State(step), "committed");
  ASSERT_TRUE(a.fs().ApplyClusterPersisted("run/global_step10").ok());
  const uint64_t run_a = a.fs().Lookup(kRootIno, "run")->ino;
  WriteFile(a.fs(), run_a, "latest", "global_step10");
  const int64_t mtime1 = UploadRunFile(a, &bucket, "run/latest", "global_step10");
  ASSERT_TRUE(bucket.Peek(StepIndexKey("run/latest", 'f')).has_value());
  EXPECT_EQ(a.book().counters().run_file_puts.load(), 1u);

  auto run_b = b.fs().Lookup(kRootIno, "run");  // refreshes: the record is applied
  ASSERT_TRUE(run_b.ok()) << run_b.status().ToString();
  auto latest = b.fs().Lookup(run_b->ino, "latest");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->attr.st_size, 13);
  EXPECT_EQ(TimespecToNanos(latest->attr.st_mtim), mtime1);
  EXPECT_EQ(b.book().counters().run_file_gets.load(), 1u);
  // Nothing moved: the next refresh reads no record.
  ASSERT_TRUE(b.fs().Lookup(kRootIno, "run").ok());
  EXPECT_EQ(b.book().counters().run_file_gets.load(), 1u);
  // a's refresh finds its own record and leaves its file alone.
  ASSERT_TRUE(a.fs().Lookup(kRootIno, "run").ok());
  const uint64_t latest_a = a.fs().Lookup(run_a, "latest")->ino;
  EXPECT_EQ(ReadFile(a.fs(), latest_a), "global_step10");

  // A newer version replaces b's copy, without deleting the object the
  // record names (b's copy was read from it).
  a.env().clock.Advance(1'000'000'000);
  Overwrite(a.fs(), latest_a, "global_step20");
  const int64_t mtime2 = UploadRunFile(a, &bucket, "run/latest", "global_step20");
  ASSERT_GT(mtime2, mtime1);
  ASSERT_TRUE(b.fs().Lookup(kRootIno, "run").ok());
  latest = b.fs().Lookup(run_b->ino, "latest");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(TimespecToNanos(latest->attr.st_mtim), mtime2);
  EXPECT_EQ(b.book().counters().run_file_gets.load(), 2u);
  EXPECT_EQ(b.fs().RemoteDeletionsQueued(), 0u);

  // b's own later version wins over an older record; while b writes it, a
  // record is not applied over it.
  b.env().clock.Advance(5'000'000'000);
  ASSERT_TRUE(b.fs().Unlink(run_b->ino, "latest").ok());
  EXPECT_EQ(b.fs().RemoteDeletionsQueued(), 0u) << "a's object stays";
  auto created = b.fs().Create(kRoot, run_b->ino, "latest", 0644, O_WRONLY);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  FileHandle* mine = created->second.fh;
  ASSERT_TRUE(b.fs().Write(mine, "global_step30", 13, 0).ok());
  RunFileRecord newer{
      .path = "run/latest", .node = "a", .size = 13, .mtime_ns = INT64_MAX, .crc32c = 7};
  auto busy = b.fs().ApplyClusterRunFile(newer);
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.status().err(), EAGAIN);
  ASSERT_TRUE(b.fs().Flush(mine).ok());
  ASSERT_TRUE(b.fs().Release(mine).ok());
  RunFileRecord older{
      .path = "run/latest", .node = "a", .size = 13, .mtime_ns = mtime2 + 1, .crc32c = 7};
  auto kept = b.fs().ApplyClusterRunFile(older);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_FALSE(*kept);
  EXPECT_EQ(ReadFile(b.fs(), created->first.ino), "global_step30");
}

TEST(ClusterCommitTest, ARunFileRecordForARunThisNodeHasNotSeenWaits) {
  MemoryObjectStore bucket;
  Node b("b", &bucket);
  RunFileRecord record{.path = "run/latest", .node = "a", .size = 3, .mtime_ns = 1, .crc32c = 7};
  auto applied = b.fs().ApplyClusterRunFile(record);
  ASSERT_FALSE(applied.ok());
  EXPECT_EQ(applied.status().err(), EAGAIN);
  record.path = "run/.ckptfs-x";
  applied = b.fs().ApplyClusterRunFile(record);
  ASSERT_FALSE(applied.ok());
  EXPECT_EQ(applied.status().err(), EINVAL);
}

}  // namespace
}  // namespace ckptfs::testing
