// A deterministic simulation of cluster mode (SPEC section 9, docs/cluster.md), in the
// manner of FoundationDB's: one seed picks the cluster (2 or 3 nodes, --refresh 0 or
// 1 s; the bucket honours conditional PUTs, as cluster mode requires) and a schedule of operations
// interleaved across the nodes; after every operation the test checks what each node
// shows against a model of what was written, and a failure names the seed, the
// operation and the last 20 operations, so that RunSeed(seed, ops) replays it exactly.
//
// Everything runs on the test's thread over one MemoryObjectStore (the bucket) and ONE
// ManualClock, shared by every node's FileSystem, RemoteTier and ClusterBook: nothing
// sleeps, and time moves only when an operation advances it. The books and tiers run
// no thread; their background work is an operation of its own (RunOnceForTest), as
// commits are (the coordinator's DrainForTest). A node is not an FsEnv (which owns a
// clock of its own) but the same pieces: SimNode.
//
// Operations: make a step directory run/stepN (N increasing) on a node; write a rank
// file with seed-derived bytes into a step on a node and close it (a third of them
// fsync first, so that the close leaves its publication to the book's thread); ask a
// node for an explicit commit (RequestCommit + DrainCommits); let a node refresh its
// view (lookup, user.ckptfs.state getxattr or readdir); advance the clock (1 ms to
// 7 s); run a node's ClusterBook pass, RemoteTier pass (uploads, commit objects,
// deletions) or delayed commits; rm -r an old committed step on a node (Unlink of
// each file, then Rmdir); kill -9 a node and restart it (its manifest and data
// survive, as FsEnv::KillAndRestart; its book, tier and coordinator are new); read
// every file a node shows. The run ends with 6 settling rounds (clock +1 s, then every
// node's tier pass, book pass and delayed commits, and a readdir of run/).
//
// Invariants, after every operation, on every node, looking without refreshing:
//  1. Nothing partial looks complete: the step record decided in the bucket names
//     exactly the files closed (on any node) before the operation that decided it,
//     and a step committed on a node lists exactly those files, with their sizes.
//  2. A step committed on one node is never seen with other contents on another:
//     every file of a committed step reads back the model's bytes through each
//     node's FileSystem (another node's file from the bucket, once its owner has
//     uploaded it), is local on the node that wrote it and remote, owned by its
//     writer, elsewhere. The decision never changes once made, and a removed step
//     is never decided again.
//  3. States only move forward on each node: writing (or incomplete) -> committed
//     -> persisted -> deleted (rm'd here or removed by the cluster); never back.
//  4. `latest` in run/ names the highest step the node sees committed, and is absent
//     when it sees none.
// After a refresh operation that read the index, the node shows every step the index
// says committed (and nobody rm'd) and none it says removed. After settling, every node
// shows every committed step persisted, no node shows a removed step, and the bucket
// holds nothing of a removed step.
//
// Known issues: the product fails some of these; the DISABLED_Seed tests at the end name
// each, and SimOptions steers RandomSchedules around each until it is fixed.
//
// Not covered, and why:
//  * Power loss mid-save in RandomSchedulesWithPowerLoss (SimOptions::power_loss:
//    unsynced data and manifest batches dropped, a new boot): like kills, only on a
//    node whose steps are all committed, which checks that a committed step survives
//    any node's power loss (its files synced before the commit: SPEC section 9).
//    Mid-save it still fails on causes not fixed yet (DISABLED_Seed7 below).
//  * Bucket faults (FailNext, SetUnavailable): a failed request makes the book or the
//    tier back off on the manual clock, which nothing advances while the test's only
//    thread waits.
//  * Reads of a file whose owner has not uploaded it yet: they would wait on the manual
//    clock; SimHooks refuses them and the checks read the file once it is uploaded. The
//    committer's reads of other nodes' files wait for its persist duty (a read would
//    teach it their CRC32Cs and leave the poll of the part records untested), except
//    in the read operation.
//  * Several writers of one path (rank names are unique; SPEC says the copy written
//    last wins, docs/cluster.md and the code the committer's), files left open across
//    operations (one never published is invisible to the committing node, which the
//    trainer's barrier makes harmless), a step saved again under a removed step's
//    name, retention rules (keep_last), staging directories (step<N>-tmp), commit
//    markers and formats that list their files.
//
// CLUSTER_SIM_SEEDS=N makes RandomSchedules run seeds 1..N (a campaign).
// To look into a failure: CLUSTER_SIM_SEED=N runs that seed alone in RandomSchedules,
// CLUSTER_SIM_TRACE=1 prints the whole trace and CLUSTER_SIM_EVENTS=1 every node's
// events.jsonl.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cluster/cluster_book.h"
#include "cluster/cluster_join.h"
#include "common/clock.h"
#include "control/event_log.h"
#include "data/memory_data_store.h"
#include "formats/cluster_records.h"
#include "lifecycle/commit_coordinator.h"
#include "manifest/memory_manifest_store.h"
#include "namespace/filesystem.h"
#include "namespace/fs_test_env.h"
#include "remote/memory_object_store.h"
#include "tiering/remote_tier.h"
#include "tiering/remote_tier_test_util.h"

namespace ckptfs::testing {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSecond = 1'000'000'000;

// ---- seams -------------------------------------------------------------------------

// Forwards FileSystem's cluster calls to the node's ClusterBook, with two changes
// the simulation needs. While muted, MaybeRefresh does nothing, so that the checks
// look at a node without refreshing its view (which would hide every stale-view
// interleaving). AwaitUpload (a read of another node's file) only goes ahead when
// the owner's part record already says the file is uploaded: otherwise the book
// would wait for it on the manual clock, which nothing advances; it fails with
// EAGAIN instead and counts the refusal, and the checks read the file later. (The
// book's ReadPartFile waits the same way, but only for commit checks that read
// metadata files, which no layout of the simulation has.)
class SimHooks final : public ClusterHooks {
 public:
  explicit SimHooks(MemoryObjectStore* bucket) : bucket_(bucket) {}
  void set_book(ClusterBook* book) { book_ = book; }
  void set_muted(bool muted) { muted_ = muted; }
  uint64_t refused() const { return refused_; }

  const std::string& node() const override { return book_->node(); }
  Status PublishPart(const std::string& step_path) override {
    return book_->PublishPart(step_path);
  }
  void PublishLater(const std::string& step_path) override { book_->PublishLater(step_path); }
  Result<std::vector<PartRecord>> GatherParts(const std::string& step_path) override {
    return book_->GatherParts(step_path);
  }
  Result<std::string> ReadPartFile(const std::string& step_path, const PartRecord::File& file,
                                   const std::string& owner, uint64_t offset,
                                   uint64_t length) override {
    return book_->ReadPartFile(step_path, file, owner, offset, length);
  }
  Result<ClusterStepRecord> DecideStep(const ClusterStepRecord& proposal,
                                       const std::string& follows_removal) override {
    return book_->DecideStep(proposal, follows_removal);
  }
  std::string RemovalSeen(const std::string& step_path) override {
    return book_->RemovalSeen(step_path);
  }
  void MaybeRefresh() override {
    if (!muted_) book_->MaybeRefresh();
  }
  Result<bool> StepSavedAgain(const std::string& step_path) override {
    return book_->StepSavedAgain(step_path);
  }
  void RefreshForNewStep() override {
    if (!muted_) book_->RefreshForNewStep();
  }
  void RefreshForRetention() override {
    if (!muted_) book_->RefreshForRetention();
  }
  Result<PartRecord> AwaitUpload(const std::string& step_path, const std::string& rel_path,
                                 const std::string& owner) override {
    if (!Uploaded(step_path, rel_path, owner)) {
      refused_++;
      return Status::Error(EAGAIN, "the simulation does not wait for node " + owner + "'s upload");
    }
    return book_->AwaitUpload(step_path, rel_path, owner);
  }
  void PartUploadsChanged(const std::string& step_path) override {
    book_->PartUploadsChanged(step_path);
  }
  void StepPersisted(const std::string& step_path) override { book_->StepPersisted(step_path); }
  void AwaitingParts() override { book_->AwaitingParts(); }
  void StepRemoved(const std::string& step_path) override { book_->StepRemoved(step_path); }
  void RunFileUploaded(const RunFileRecord& record) override { book_->RunFileUploaded(record); }
  void WatchForCommit(const std::string& step_path) override { book_->WatchForCommit(step_path); }
  void AddStatus(nlohmann::json* status) const override { book_->AddStatus(status); }

 private:
  // What ClusterBook::AwaitUpload waits for, read once (Peek: no request counted).
  bool Uploaded(const std::string& step_path, const std::string& rel_path,
                const std::string& owner) const {
    auto body = bucket_->Peek(PartRecordKey(step_path, owner));
    if (!body) return false;
    auto part = DecodePartRecord(*body);
    if (!part.ok()) return false;
    for (const auto& f : part->files) {
      if (f.path == rel_path && f.uploaded && f.crc32c) return true;
    }
    return false;
  }

  MemoryObjectStore* const bucket_;
  ClusterBook* book_ = nullptr;
  bool muted_ = false;
  uint64_t refused_ = 0;
};

// Mutes a node's refreshes for a scope (the checks').
class Muted {
 public:
  explicit Muted(SimHooks* hooks) : hooks_(hooks) { hooks_->set_muted(true); }
  ~Muted() { hooks_->set_muted(false); }
  Muted(const Muted&) = delete;
  Muted& operator=(const Muted&) = delete;

 private:
  SimHooks* hooks_;
};

// What a schedule may do. Everything by default; each flag set false steers the
// schedule (or a check) around one known issue of the product, named by the
// DISABLED_Seed tests at the end of this file, which run with that one flag left on.
struct SimOptions {
  // rm -r of a committed step without files (an rmdir alone); fixed, kept so that
  // the seeds drawn before the fix can still be replayed without it.
  bool rm_empty_steps = true;
  // A kill while the node's ClusterBook has work queued for its thread (a removal
  // to announce, a part to republish after an upload, a persisted step to record);
  // false: the node's book runs a pass first.
  bool kill_with_queued_work = true;
  // A kill of a node that has a step it has not seen committed (a save in progress).
  bool kill_mid_save = true;
  // rm -r of a committed step that some node still holds uncommitted (it has not
  // learnt of the commit yet, and may have asked for one).
  bool rm_before_every_node_applied = true;
  // After settling, nothing is left of a removed step: no node keeps it (as writing,
  // when it never saw it committed), and the bucket holds no part record, upload or
  // persisted index entry under it. false: only what a node that saw the step
  // committed uploaded, the step record, the commit object and the committed index
  // entry are checked.
  bool check_leftovers = true;
  // Power losses (FsEnv::CrashAndRestart: unsynced data and manifest batches
  // dropped, a new boot). Off in RandomSchedules, whose kept seeds replay the
  // draws they had; RandomSchedulesWithPowerLoss turns it on.
  bool power_loss = false;
};

// Every flag off: the schedule RandomSchedules runs until the known issues are fixed.
SimOptions AroundKnownIssues() {
  SimOptions o;
  // Fixed; off so that the seeds kept below replay their draws (the campaigns
  // turn them on: CampaignOptions).
  o.rm_empty_steps = false;
  o.kill_with_queued_work = false;
  o.kill_mid_save = false;
  o.rm_before_every_node_applied = false;
  o.check_leftovers = false;
  return o;
}

struct SimConfig {
  int nodes = 2;
  int64_t refresh_ns = 0;
};

// One node: the pieces FsEnv puts together (a FileSystem over an in-memory manifest
// and data store that outlive it, a coordinator without threads), plus a RemoteTier
// and a ClusterBook over the shared bucket. Not an FsEnv: FsEnv owns a ManualClock of
// its own, and every node here must run on the simulation's one clock.
class SimNode {
 public:
  SimNode(std::string name, MemoryObjectStore* bucket, ManualClock* clock, const SimConfig& config)
      : name_(std::move(name)), bucket_(bucket), clock_(clock), config_(config), hooks_(bucket) {
    Start();
  }
  ~SimNode() { Stop(); }
  SimNode(const SimNode&) = delete;
  SimNode& operator=(const SimNode&) = delete;

  const std::string& name() const { return name_; }
  FileSystem& fs() { return *fs_; }
  ClusterBook& book() { return *book_; }
  RemoteTier& tier() { return *tier_; }
  SimHooks& hooks() { return hooks_; }
  EventLog& events() { return events_; }
  void DrainCommits() { coordinator_->DrainForTest(); }

  // kill -9 and start again in the same boot (FsEnv::KillAndRestart): every manifest
  // batch and every byte written reached the kernel and survives; what the book, the
  // tier and the coordinator held in memory (queued publications, removals not yet
  // announced, commit requests) is lost.
  void KillAndRestart() {
    TearDown();
    manifest_.SimulateCrash(SIZE_MAX);
    Start();
  }
  // Power loss and a new boot (FsEnv::CrashAndRestart): manifest batches not
  // synced and file data not synced are gone.
  void PowerLossAndRestart() {
    TearDown();
    manifest_.SimulateCrash(0);
    data_.SimulateCrash();
    boot_++;
    Start();
  }

 private:
  void Start() {
    FileSystemOptions o;
    o.remote = true;
    o.node = name_;
    o.refresh_ns = config_.refresh_ns;
    o.commit_settle_ns = 0;  // as FsEnv: explicit commits do not wait for quiet anyway
    o.boot_id = "boot-" + std::to_string(boot_);
    auto fs = FileSystem::Open(o, std::make_unique<SharedManifest>(&manifest_, &manifest_writes_),
                               std::make_unique<SharedData>(&data_), clock_, &events_);
    if (!fs.ok()) throw std::runtime_error("node " + name_ + ": " + fs.status().ToString());
    fs_ = std::move(fs).value();
    coordinator_ = CommitCoordinator::CreateWithoutThreads(fs_.get(), fs_->data(), fs_->clock());
    RemoteTierOptions t;
    t.min_part_size = kMiB;
    t.fetch_chunk = kMiB;
    t.checksum_chunk = kMiB;
    t.retry_min_ns = 0;
    t.clock = clock_;
    tier_ = std::make_unique<RemoteTier>(fs_.get(), fs_->data(),
                                         std::make_unique<SharedStore>(bucket_), &events_, t);
    fs_->SetTierHooks(tier_.get());
    ClusterBookOptions b;
    b.node = name_;
    b.cache_id = "cache-" + name_;
    b.refresh_ns = config_.refresh_ns;
    b.publish_timeout_ns = 0;  // a failed PUT is final: no back-off on the manual clock
    b.clock = clock_;
    // As a mount joins before it writes: gathers leave out parts of names
    // nobody registered. (Already there after a restart.)
    (void)bucket_->PutIfAbsent(NodeRegistrationKey(name_),
                               EncodeNodeRegistration(name_, b.cache_id, "sim"));
    book_ = std::make_unique<ClusterBook>(fs_.get(), bucket_, &events_, b);
    hooks_.set_book(book_.get());
    fs_->SetClusterHooks(&hooks_);
    book_->QueueRestartWork();  // as ClusterBook::Start does in the daemon
  }

  // The daemon's order (cli/daemon.cc), except that the FileSystem is destroyed with
  // its manifest failing, as FsEnv::Die does: a killed process writes no final batch.
  void TearDown() {
    coordinator_.reset();
    fs_->SetClusterHooks(nullptr);
    book_.reset();
    hooks_.set_book(nullptr);
    fs_->SetTierHooks(nullptr);
    tier_.reset();
    manifest_.FailWritesAfter(0, EIO);
    fs_.reset();
    manifest_.ClearFailure();
  }

  void Stop() {
    if (!fs_) return;
    coordinator_.reset();
    fs_->SetClusterHooks(nullptr);
    book_.reset();
    fs_->SetTierHooks(nullptr);
    tier_.reset();
    fs_.reset();
  }

  const std::string name_;
  MemoryObjectStore* const bucket_;
  ManualClock* const clock_;
  const SimConfig config_;
  MemoryManifestStore manifest_;
  int manifest_writes_ = 0;
  MemoryDataStore data_;
  int boot_ = 1;
  EventLog events_;
  SimHooks hooks_;
  std::unique_ptr<FileSystem> fs_;
  std::unique_ptr<CommitCoordinator> coordinator_;
  std::unique_ptr<RemoteTier> tier_;
  std::unique_ptr<ClusterBook> book_;
};

// A hang is a failure too (a wait on the manual clock that nothing will advance): an
// operation that runs for kStuckAfter of real time is reported, and the clock is then
// pushed forward an hour at a time until it returns, so the test fails with its trace
// instead of hanging.
class Watchdog {
 public:
  static constexpr auto kStuckAfter = std::chrono::seconds(20);

  explicit Watchdog(ManualClock* clock) : clock_(clock), thread_([this] { Loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Begin(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    what_ = what;
    began_ = std::chrono::steady_clock::now();
    active_ = true;
  }
  // True when the operation since Begin got stuck.
  bool End() {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = false;
    return std::exchange(fired_, false);
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (!active_ || std::chrono::steady_clock::now() - began_ < kStuckAfter) continue;
      if (!fired_) {
        std::fprintf(stderr, "cluster_sim: stuck in %s; advancing the manual clock\n",
                     what_.c_str());
        fired_ = true;
      }
      lock.unlock();
      clock_->Advance(3600 * kSecond);
      lock.lock();
    }
  }

  ManualClock* const clock_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string what_;
  std::chrono::steady_clock::time_point began_;
  bool active_ = false;
  bool fired_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

// ---- the model ---------------------------------------------------------------------

struct FileModel {
  std::string node;   // where it was written
  std::string bytes;  // what was written
  int op = 0;         // the operation that closed it
};

struct StepModel {
  int64_t number = 0;
  std::string name;  // stepN
  std::string path;  // run/stepN
  // Files whose create, writes and close all succeeded, by name.
  std::map<std::string, FileModel> closed;
  // Files created whose write or close failed: the commit may hold them or not.
  std::map<std::string, FileModel> maybe;
  // From the operation after which the bucket first held the step's decision.
  bool decided = false;
  int decided_op = 0;
  std::string decision;                      // the record's bytes, which never change
  std::string committer;                     // the record's committer
  std::map<std::string, FileModel> content;  // what the committed step must hold
  // From the first successful unlink of an rm of the committed step.
  bool removed = false;
  int removed_op = 0;
  std::string removed_by;
};

// Where a step stands on a node, in the order it may only move forward in.
enum Rank { kNotCommitted = 0, kCommitted = 1, kPersisted = 2, kDeleted = 3 };

const char* RankName(int rank) {
  static const char* kNames[] = {"not committed", "committed", "persisted", "deleted"};
  return kNames[rank];
}

std::string Join(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return "{" + out + "}";
}

std::set<std::string> Names(const std::map<std::string, FileModel>& files) {
  std::set<std::string> out;
  for (const auto& [name, f] : files) out.insert(name);
  return out;
}

// "{a, b} (missing: ..., extra: ...)" for a listing against the model.
std::string Diff(const std::set<std::string>& got, const std::set<std::string>& want) {
  std::set<std::string> missing, extra;
  std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                      std::inserter(missing, missing.end()));
  std::set_difference(got.begin(), got.end(), want.begin(), want.end(),
                      std::inserter(extra, extra.end()));
  return Join(got) + " where the model has " + Join(want) + " (missing " + Join(missing) +
         ", extra " + Join(extra) + ")";
}

// "rank4 on b at #21, ..." for every file closed in the step.
std::string WhereWritten(const StepModel& s) {
  std::string out;
  for (const auto& [name, f] : s.closed) {
    out += (out.empty() ? "" : ", ") + name + " on " + f.node + " at #" + std::to_string(f.op);
  }
  return "closed: " + (out.empty() ? std::string("none") : out);
}

// ---- the simulation ----------------------------------------------------------------

class ClusterSim {
 public:
  ClusterSim(uint64_t seed, SimOptions options)
      : seed_(seed), options_(options), rng_(seed), bucket_(kMiB), watchdog_(&clock_) {
    config_.nodes = 2 + static_cast<int>(Pick(2));
    // Was the decision mode (votes or conditional puts) until cluster mode
    // came to require conditional writes: still drawn, so every seed keeps
    // the schedule it had (the kept failing seeds replay what they found).
    (void)Pick(2);
    config_.refresh_ns = Pick(2) ? 0 : kSecond;
    for (int i = 0; i < config_.nodes; i++) {
      nodes_.push_back(std::make_unique<SimNode>(std::string(1, static_cast<char>('a' + i)),
                                                 &bucket_, &clock_, config_));
    }
    max_rank_.resize(nodes_.size());
  }

  // Runs `ops` operations, then the settling rounds; the first violation ends it.
  ::testing::AssertionResult Run(int ops) {
    while (op_ < ops && !failed_) Step([this] { RandomOp(); });
    if (!failed_) Settle();
    if (failed_) return ::testing::AssertionFailure() << failure_;
    return ::testing::AssertionSuccess();
  }

 private:
  // ---- scheduling ----

  // Uniform in [0, n): the modulo keeps a seed's schedule the same on every standard
  // library (uniform_int_distribution is implementation-defined).
  uint64_t Pick(uint64_t n) { return rng_() % n; }
  SimNode& AnyNode() { return *nodes_[Pick(nodes_.size())]; }

  // One operation, its trace line, and the invariants after it.
  template <typename Fn>
  void Step(Fn op) {
    line_.str("");
    watchdog_.Begin("seed " + std::to_string(seed_) + " op " + std::to_string(op_));
    traced_ = false;
    op();
    trace_.push_back("#" + std::to_string(op_) + " " + line_.str());
    traced_ = true;
    if (!failed_) CheckAll();
    if (watchdog_.End()) {
      const std::string stuck = "the operation or its checks waited on the manual clock for " +
                                std::to_string(Watchdog::kStuckAfter.count()) +
                                " s of real time (the watchdog advanced it)";
      if (failed_) {
        failure_ += "  and " + stuck + "\n";
      } else {
        Fail(stuck);
      }
    }
    op_++;
  }

  void RandomOp() {
    // Weights: writes and commits dominate, as in a save; removals and kills are rare.
    // Power loss weighs nothing unless turned on: the draws stay those of the
    // kept seeds.
    const struct {
      int weight;
      void (ClusterSim::*op)();
    } kOps[] = {
        {8, &ClusterSim::MakeStepOp}, {24, &ClusterSim::WriteOp},
        {12, &ClusterSim::CommitOp},  {10, &ClusterSim::RefreshOp},
        {10, &ClusterSim::AdvanceOp}, {10, &ClusterSim::BookPassOp},
        {8, &ClusterSim::TierPassOp}, {5, &ClusterSim::DrainOp},
        {4, &ClusterSim::RemoveOp},   {3, &ClusterSim::KillOp},
        {4, &ClusterSim::ReadOp},     {options_.power_loss ? 2 : 0, &ClusterSim::PowerLossOp},
    };
    int total = 0;
    for (const auto& o : kOps) total += o.weight;
    int at = static_cast<int>(Pick(total));
    for (const auto& o : kOps) {
      if (at < o.weight) return (this->*o.op)();
      at -= o.weight;
    }
  }

  // A step for a write or a commit: mostly one not yet decided (the save in progress),
  // sometimes a decided one (a late writer, a second trigger). Never a removed one:
  // saving a removed step again under its name makes a new step (SPEC section 9),
  // which the model does not follow.
  StepModel* PickStep() {
    std::vector<StepModel*> open, decided;
    for (auto& s : steps_) {
      if (s.removed) continue;
      (s.decided ? decided : open).push_back(&s);
    }
    if (!open.empty() && (decided.empty() || Pick(5) != 0)) return open[Pick(open.size())];
    if (!decided.empty()) return decided[Pick(decided.size())];
    return nullptr;
  }

  // ---- operations ----

  void MakeStepOp() {
    int open = 0;
    for (const auto& s : steps_) open += !s.decided && !s.removed;
    if (open >= 3) return WriteOp();  // a trainer has one or two saves in flight, not more
    SimNode& n = AnyNode();
    StepModel s;
    s.number = ++last_step_;
    s.name = "step" + std::to_string(s.number);
    s.path = "run/" + s.name;
    steps_.push_back(s);
    line_ << n.name() << ": mkdir " << s.path;
    auto run = RunDir(n, /*make=*/true);
    if (!run.ok()) {
      line_ << ": " << run.status().ToString();
      return;
    }
    auto made = n.fs().Mkdir(kRoot, *run, s.name, 0755);
    line_ << ": " << (made.ok() ? "ok" : made.status().ToString());
  }

  void WriteOp() {
    StepModel* s = PickStep();
    if (!s) return MakeStepOp();
    SimNode& n = AnyNode();
    const std::string name = "rank" + std::to_string(++last_file_);
    std::string bytes(1 + Pick(48), '\0');
    for (char& c : bytes) c = static_cast<char>('a' + Pick(26));
    // DCP's order (write, fsync, close) leaves the close's publication to the book's
    // thread; a plain close publishes before it returns.
    const bool fsync = Pick(3) == 0;
    line_ << n.name() << ": write " << s->path << "/" << name << " (" << bytes.size() << " B"
          << (fsync ? ", fsync" : "") << ")";
    auto dir = StepDir(n, *s, /*make=*/true);
    if (!dir.ok()) {
      line_ << ": step dir " << dir.status().ToString();
      return;
    }
    auto created = n.fs().Create(kRoot, *dir, name, 0644, O_WRONLY);
    if (!created.ok()) {
      line_ << ": create " << created.status().ToString();
      return;
    }
    FileHandle* fh = created->second.fh;
    std::string failed;
    auto note = [&](const char* what, const Status& st) {
      if (!st.ok() && failed.empty()) failed = std::string(what) + " " + st.ToString();
    };
    auto wrote = n.fs().Write(fh, bytes.data(), bytes.size(), 0);
    note("write", wrote.status());
    if (wrote.ok() && *wrote != bytes.size()) failed = "short write";
    if (fsync) note("fsync", n.fs().Fsync(fh, false));
    note("flush", n.fs().Flush(fh));
    note("release", n.fs().Release(fh));
    const FileModel f{n.name(), bytes, op_};
    if (failed.empty()) {
      s->closed[name] = f;
      line_ << ": ok";
    } else {
      s->maybe[name] = f;
      line_ << ": " << failed;
    }
  }

  void CommitOp() {
    StepModel* s = PickStep();
    if (!s) return MakeStepOp();
    SimNode& n = AnyNode();
    line_ << n.name() << ": commit " << s->path;
    auto dir = StepDir(n, *s, /*make=*/false);
    if (!dir.ok()) {
      line_ << ": skipped (" << dir.status().ToString() << ")";
      return;
    }
    n.fs().RequestCommit(*dir);
    n.DrainCommits();
    line_ << ": " << StateOn(n, *s);
  }

  void RefreshOp() {
    SimNode& n = AnyNode();
    const uint64_t before = n.book().counters().refreshes.load();
    const int how = static_cast<int>(Pick(3));
    line_ << n.name() << ": refresh by "
          << (how == 0   ? "lookup"
              : how == 1 ? "getxattr"
                         : "readdir");
    auto run = n.fs().Lookup(kRootIno, "run");
    if (run.ok() && !steps_.empty()) {
      const StepModel& s = steps_[Pick(steps_.size())];
      if (how == 2) {
        (void)n.fs().Readdir(run->ino, 0, 4096);
      } else if (auto step = n.fs().Lookup(run->ino, s.name); step.ok() && how == 1) {
        (void)n.fs().GetXattr(step->ino, "user.ckptfs.state");
      }
    }
    const bool refreshed = n.book().counters().refreshes.load() != before;
    line_ << (refreshed ? ": refreshed" : ": view still fresh");
    if (refreshed) CheckRefreshed(n);
  }

  void AdvanceOp() {
    static const int64_t kSteps[] = {1 * kMs, 10 * kMs,   100 * kMs,  250 * kMs,
                                     kSecond, 2500 * kMs, 7 * kSecond};
    const int64_t by = kSteps[Pick(std::size(kSteps))];
    clock_.Advance(by);
    line_ << "clock +" << by / kMs << " ms";
  }

  void BookPassOp() {
    SimNode& n = AnyNode();
    const auto& c = n.book().counters();
    const uint64_t puts = c.part_puts.load(),
                   gets = c.part_gets.load() + c.commit_watch_gets.load();
    n.book().RunOnceForTest();
    line_ << n.name() << ": book pass (part puts +" << c.part_puts.load() - puts << ", gets +"
          << c.part_gets.load() + c.commit_watch_gets.load() - gets << ")";
  }

  void TierPassOp() {
    SimNode& n = AnyNode();
    Status st = n.tier().RunOnceForTest();
    line_ << n.name() << ": tier pass: " << (st.ok() ? "ok" : st.ToString());
  }

  void DrainOp() {
    SimNode& n = AnyNode();
    n.DrainCommits();
    line_ << n.name() << ": delayed commits";
  }

  // rm -r of a committed step that is not the newest one, on a node that sees it
  // committed: the first unlink makes it a removal for the cluster.
  void RemoveOp() {
    std::vector<StepModel*> old;
    int64_t newest = 0;
    for (auto& s : steps_) {
      if (s.decided && !s.removed) newest = std::max(newest, s.number);
    }
    for (auto& s : steps_) {
      if (!s.decided || s.removed || s.number == newest) continue;
      if (s.content.empty() && !options_.rm_empty_steps) continue;
      if (!options_.rm_before_every_node_applied && HeldUncommitted(s)) continue;
      old.push_back(&s);
    }
    if (old.empty()) return RefreshOp();
    StepModel& s = *old[Pick(old.size())];
    SimNode& n = AnyNode();
    line_ << n.name() << ": rm -r " << s.path;
    auto dir = StepDir(n, s, /*make=*/false);
    if (!dir.ok() || !CommittedOn(n, s)) {
      line_ << ": skipped (" << (dir.ok() ? StateOn(n, s) : dir.status().ToString()) << " here)";
      return;
    }
    auto entries = n.fs().Readdir(*dir, 0, 4096);
    if (!entries.ok()) {
      line_ << ": readdir " << entries.status().ToString();
      return;
    }
    for (const auto& e : *entries) {
      if (IsVirtualName(e.name)) continue;
      Status st = n.fs().Unlink(*dir, e.name);
      if (!st.ok()) {
        line_ << ": unlink " << e.name << " " << st.ToString();
        continue;
      }
      MarkRemoved(s, n);
    }
    auto run = RunDir(n, /*make=*/false);
    Status st = run.ok() ? n.fs().Rmdir(*run, s.name) : run.status();
    line_ << ": rmdir " << (st.ok() ? "ok" : st.ToString());
    if (st.ok()) MarkRemoved(s, n);  // a step without files: the rmdir removes it
    // The node saw it committed (above), perhaps only within this operation: from now
    // on it must never show it again.
    if (s.removed) max_rank_[NodeIndex(n)][s.number] = kDeleted;
  }

  void MarkRemoved(StepModel& s, const SimNode& n) {
    if (s.removed) return;
    s.removed = true;
    s.removed_op = op_;
    s.removed_by = n.name();
  }

  void KillOp() {
    SimNode& n = AnyNode();
    if (!options_.kill_mid_save) {
      for (const auto& v : n.fs().Steps()) {
        if (v.rec.state != StepState::kCommitted && v.rec.state != StepState::kDeleting) {
          line_ << n.name() << ": kill skipped (" << v.path << " " << StepStateName(v.rec.state)
                << " here)";
          return;
        }
      }
    }
    line_ << n.name() << ": ";
    if (!options_.kill_with_queued_work) {
      n.book().RunOnceForTest();
      line_ << "book pass, ";
    }
    n.KillAndRestart();
    line_ << "kill -9 and restart";
  }

  // A node loses power and boots again. What it had not synced is gone: files of
  // steps not decided yet may be (the model moves them to `maybe`: a decision may
  // hold them only if they survived, and then with their bytes), while every file
  // of a decided step must survive, which the checks read (SPEC section 9,
  // "committed means durable").
  void PowerLossOp() {
    SimNode& n = AnyNode();
    if (!options_.kill_mid_save) {
      for (const auto& v : n.fs().Steps()) {
        if (v.rec.state != StepState::kCommitted && v.rec.state != StepState::kDeleting) {
          line_ << n.name() << ": power loss skipped (" << v.path << " "
                << StepStateName(v.rec.state) << " here)";
          return;
        }
      }
    }
    line_ << n.name() << ": ";
    if (!options_.kill_with_queued_work) {
      n.book().RunOnceForTest();
      line_ << "book pass, ";
    }
    for (auto& s : steps_) {
      if (s.decided) continue;
      for (auto it = s.closed.begin(); it != s.closed.end();) {
        if (it->second.node != n.name()) {
          ++it;
          continue;
        }
        s.maybe[it->first] = it->second;
        it = s.closed.erase(it);
      }
    }
    n.PowerLossAndRestart();
    line_ << "power loss and restart";
    // An rm of a committed step that neither reached the bucket (no tombstone)
    // nor stayed owed in the node's manifest (the batch that removed it was
    // dropped) is undone, as an unsynced unlink may be on any filesystem: the
    // step stays committed everywhere.
    const auto owed = n.fs().PendingClusterRemovals();
    for (auto& s : steps_) {
      if (!s.removed || s.removed_by != n.name()) continue;
      if (bucket_.Peek(StepIndexKey(s.path, 'r')).has_value()) continue;
      if (std::find(owed.begin(), owed.end(), s.path) != owed.end()) continue;
      s.removed = false;
      s.removed_by.clear();
      line_ << " (rm of " << s.path << " undone)";
    }
    // An rm that returned is not durable before a sync (as on any POSIX
    // filesystem): the step may show again here until the node learns of its
    // removal from the bucket, which the settling checks. Nor is the note that
    // a step is persisted (the bucket's copy is what counts; the node learns it
    // again). A committed step must stay committed.
    for (auto& [number, rank] : max_rank_[NodeIndex(n)]) {
      if (rank == kDeleted) rank = kNotCommitted;
      if (rank == kPersisted) rank = kCommitted;
    }
  }

  void ReadOp() {
    SimNode& n = AnyNode();
    line_ << n.name() << ": read every committed file";
    CheckNode(NodeIndex(n), /*read_all=*/true);
  }

  // Rounds of every node's background work and a refresh, the clock moving a second
  // each time: what the cluster does once the trainer stops. Then every node must show
  // the same committed steps, persisted, and nothing is left of removed steps.
  void Settle() {
    settle_from_ = op_;
    for (int round = 0; round < 6 && !failed_; round++) {
      Step([&] {
        clock_.Advance(kSecond);
        line_ << "settle: clock +1000 ms";
      });
      for (auto& node : nodes_) {
        SimNode& n = *node;
        Step([&] {
          Status st = n.tier().RunOnceForTest();
          line_ << n.name() << ": settle: tier pass: " << (st.ok() ? "ok" : st.ToString());
        });
        Step([&] {
          n.book().RunOnceForTest();
          n.DrainCommits();
          line_ << n.name() << ": settle: book pass, delayed commits";
        });
        Step([&] {
          auto run = n.fs().Lookup(kRootIno, "run");
          if (run.ok()) (void)n.fs().Readdir(run->ino, 0, 4096);
          line_ << n.name() << ": settle: readdir run";
        });
      }
    }
    if (!failed_) CheckConverged();
  }

  // ---- helpers ----

  static bool IsVirtualName(const std::string& name) {
    return name == "." || name == ".." || name == ".full" || name == ".ckptfs";
  }

  size_t NodeIndex(const SimNode& n) const {
    for (size_t i = 0; i < nodes_.size(); i++) {
      if (nodes_[i].get() == &n) return i;
    }
    return 0;
  }

  Result<uint64_t> RunDir(SimNode& n, bool make) {
    auto run = n.fs().Lookup(kRootIno, "run");
    if (run.ok()) return run->ino;
    if (!make || run.status().err() != ENOENT) return run.status();
    auto made = n.fs().Mkdir(kRoot, kRootIno, "run", 0755);
    if (!made.ok()) return made.status();
    return made->ino;
  }

  // The step's directory on the node (every rank makes it, as DCP's do), found by
  // lookups that refresh the node's view as a trainer's would.
  Result<uint64_t> StepDir(SimNode& n, const StepModel& s, bool make) {
    auto run = RunDir(n, make);
    if (!run.ok()) return run.status();
    auto step = n.fs().Lookup(*run, s.name);
    if (step.ok()) return step->ino;
    if (!make || step.status().err() != ENOENT) return step.status();
    auto made = n.fs().Mkdir(kRoot, *run, s.name, 0755);
    if (!made.ok()) return made.status();
    return made->ino;
  }

  // The node's record of the step, without refreshing its view.
  const StepSummary* ViewOf(const std::vector<StepSummary>& views, const StepModel& s) {
    for (const auto& v : views) {
      if (v.path == s.path) return &v;
    }
    return nullptr;
  }

  std::string StateOn(SimNode& n, const StepModel& s) {
    const auto views = n.fs().Steps();
    const StepSummary* v = ViewOf(views, s);
    if (!v) return "absent";
    std::string out = StepStateName(v->rec.state);
    if (v->rec.persisted) out += ", persisted";
    if (!v->rec.error.empty()) out += " (" + v->rec.error + ")";
    return out;
  }

  // Some node holds the step but has not seen it committed.
  bool HeldUncommitted(const StepModel& s) {
    for (auto& n : nodes_) {
      const auto views = n->fs().Steps();
      const StepSummary* v = ViewOf(views, s);
      if (v && v->rec.state != StepState::kCommitted && v->rec.state != StepState::kDeleting) {
        return true;
      }
    }
    return false;
  }

  bool CommittedOn(SimNode& n, const StepModel& s) {
    const auto views = n.fs().Steps();
    const StepSummary* v = ViewOf(views, s);
    return v && v->rec.state == StepState::kCommitted;
  }

  int RankOf(const StepSummary* v, int before) {
    if (!v) return before >= kCommitted ? kDeleted : kNotCommitted;
    switch (v->rec.state) {
      case StepState::kCommitted:
        return v->rec.persisted ? kPersisted : kCommitted;
      case StepState::kDeleting:
        return kDeleted;
      default:
        return kNotCommitted;
    }
  }

  // ---- invariants ----

  void Fail(const std::string& what) {
    if (failed_) return;
    failed_ = true;
    std::ostringstream out;
    out << "seed " << seed_ << ", operation " << op_ << ": " << what
        << "\n  cluster: " << config_.nodes << " nodes, refresh " << config_.refresh_ns / kMs
        << " ms\n  last operations:\n";
    // The last 20 operations; in the settling rounds, the last 20 before them (the
    // settling operations are always the same) and the settling ones that decided
    // something. CLUSTER_SIM_TRACE=1: the whole trace.
    const bool whole = std::getenv("CLUSTER_SIM_TRACE") != nullptr;
    const size_t end =
        settle_from_ >= 0 && !whole ? static_cast<size_t>(settle_from_) : trace_.size();
    for (size_t i = whole || end <= 20 ? 0 : end - 20; i < end; i++) {
      out << "    " << trace_[i] << "\n";
    }
    if (end < trace_.size()) {
      out << "    (then the settling rounds, #" << end << " to #" << trace_.size() - 1 << ")\n";
      for (size_t i = end; i < trace_.size(); i++) {
        if (trace_[i].find("[decided") != std::string::npos) out << "    " << trace_[i] << "\n";
      }
    }
    // A violation found by the operation itself (a refresh's or a read's check).
    if (!traced_) out << "    #" << op_ << " " << line_.str() << " <- here\n";
    // CLUSTER_SIM_EVENTS=1: every node's events.jsonl too, to see why.
    if (std::getenv("CLUSTER_SIM_EVENTS")) {
      for (auto& n : nodes_) {
        out << "  events of node " << n->name() << ":\n" << n->events().Render();
      }
    }
    failure_ = out.str();
  }

  void CheckAll() {
    CheckBucket();
    for (size_t i = 0; i < nodes_.size() && !failed_; i++) CheckNode(i, /*read_all=*/false);
  }

  // The decisions in the bucket: each made once, never changed, and naming exactly
  // the files closed before the operation that made it (invariant 1 at its source).
  void CheckBucket() {
    for (auto& s : steps_) {
      if (failed_) return;
      const auto decision = bucket_.Peek(StepRecordKey(s.path));
      const auto index = bucket_.Peek(StepIndexKey(s.path, 'c'));
      if (index && (!decision || *index != *decision)) {
        return Fail("the step index says " + s.path + " is committed, but " +
                    (decision ? "with another record than its decision" : "it has no decision"));
      }
      if (!decision) continue;
      if (s.decided) {
        if (*decision != s.decision) {
          return Fail(s.path + "'s decision changed" +
                      (s.removed ? " after its removal (the removed step came back)" : ""));
        }
        continue;
      }
      if (s.removed) return Fail(s.path + " was decided again after its removal");
      auto record = DecodeClusterStepRecord(*decision);
      if (!record.ok()) {
        return Fail(s.path + "'s decision does not decode: " + record.status().ToString());
      }
      s.decided = true;
      s.decided_op = op_;
      s.decision = *decision;
      s.committer = record->committer;
      s.content = s.closed;
      std::set<std::string> names;
      for (const auto& f : record->files) {
        names.insert(f.path);
        if (auto m = s.maybe.find(f.path); m != s.maybe.end()) s.content[f.path] = m->second;
        auto want = s.content.find(f.path);
        if (want == s.content.end()) continue;
        if (f.node != want->second.node || f.size != want->second.bytes.size()) {
          return Fail(s.path + "'s decision names " + f.path + " on node " + f.node + " with " +
                      std::to_string(f.size) + " B; it was written on node " + want->second.node +
                      " with " + std::to_string(want->second.bytes.size()) + " B");
        }
      }
      if (names != Names(s.content)) {
        return Fail(s.path + " was decided (committer " + s.committer + ") with files " +
                    Diff(names, Names(s.content)) + "; " + WhereWritten(s));
      }
      // Shown on the line of the operation that decided it.
      trace_.back() += " [decided " + s.path + " by " + s.committer + ": " + Join(names) + "]";
    }
  }

  // Invariants 1-4 on one node, looking without refreshing its view. read_all: also
  // the committer's reads of other nodes' files before the step is persisted there,
  // which the checks otherwise leave to the committer's persist duty (a read teaches
  // it the file's CRC32C, and the poll of the part records would go untested).
  void CheckNode(size_t i, bool read_all) {
    SimNode& n = *nodes_[i];
    Muted muted(&n.hooks());
    const auto views = n.fs().Steps();
    int64_t latest = -1;
    for (auto& s : steps_) {
      if (failed_) return;
      const StepSummary* v = ViewOf(views, s);
      int& max_rank = max_rank_[i][s.number];
      const int rank = RankOf(v, max_rank);
      if (rank < max_rank) {
        return Fail(s.path + " went back from " + RankName(max_rank) + " to " + RankName(rank) +
                    " (" + StateOn(n, s) + ") on node " + n.name());
      }
      max_rank = rank;
      if (v && v->rec.state == StepState::kCommitted) {
        latest = std::max(latest, s.number);
        CheckCommittedStep(n, s, *v, read_all);
      }
    }
    if (!failed_) CheckLatest(n, latest);
  }

  void CheckCommittedStep(SimNode& n, StepModel& s, const StepSummary& v, bool read_all) {
    const std::string where = s.path + " on node " + n.name();
    if (!s.decided) return Fail(where + " is committed, but the bucket holds no decision for it");
    auto entries = n.fs().Readdir(v.ino, 0, 4096);
    if (!entries.ok()) return Fail("readdir of " + where + ": " + entries.status().ToString());
    std::set<std::string> names;
    for (const auto& e : *entries) {
      if (!IsVirtualName(e.name)) names.insert(e.name);
    }
    if (names != Names(s.content)) {
      return Fail(where + " is committed (decided at #" + std::to_string(s.decided_op) + " by " +
                  s.committer + ") with files " + Diff(names, Names(s.content)));
    }
    for (const auto& [name, want] : s.content) {
      if (failed_) return;
      CheckFile(n, s, v, name, want, read_all);
    }
  }

  void CheckFile(SimNode& n, const StepModel& s, const StepSummary& v, const std::string& name,
                 const FileModel& want, bool read_all) {
    const std::string where = s.path + "/" + name + " on node " + n.name();
    auto e = n.fs().Lookup(v.ino, name);
    if (!e.ok()) return Fail("lookup of " + where + ": " + e.status().ToString());
    if (static_cast<uint64_t>(e->attr.st_size) != want.bytes.size()) {
      return Fail(where + " has " + std::to_string(e->attr.st_size) + " B; " +
                  std::to_string(want.bytes.size()) + " were written");
    }
    const auto object = n.fs().ObjectRecordFor(e->ino, s.path + "/" + name);
    const std::string owner = object ? object->owner_node : "";
    if (owner.empty() && want.node != n.name()) {
      return Fail(where + " is local there, but node " + want.node + " wrote it");
    }
    if (owner == n.name()) {
      return Fail(where + " is to be read from node " + owner +
                  "'s own upload: the node lost the copy it wrote");
    }
    if (!owner.empty() && owner != want.node) {
      return Fail(where + " is read from node " + owner + "'s upload, but node " + want.node +
                  " wrote it");
    }
    // Another node's file of a removed step may be gone from the bucket already; the
    // committer's reads wait for its persist duty unless asked (read_all).
    if (!owner.empty() &&
        (s.removed || (!read_all && s.committer == n.name() && !v.rec.persisted))) {
      return;
    }
    const uint64_t refused = n.hooks().refused();
    auto opened = n.fs().OpenFile(e->ino, O_RDONLY);
    if (!opened.ok()) return Fail("open of " + where + ": " + opened.status().ToString());
    std::string got(want.bytes.size() + 16, '\0');
    auto read = n.fs().Read(opened->fh, got.data(), got.size(), 0);
    (void)n.fs().Release(opened->fh);
    if (!read.ok()) {
      if (n.hooks().refused() != refused || s.removed) return;  // not uploaded yet, or gone
      return Fail("read of " + where + ": " + read.status().ToString());
    }
    got.resize(*read);
    if (got != want.bytes) {
      return Fail(where + " reads \"" + got + "\"; node " + want.node + " wrote \"" + want.bytes +
                  "\"");
    }
  }

  // Invariant 4: `latest` names the newest step committed in this node's view.
  void CheckLatest(SimNode& n, int64_t newest) {
    auto run = n.fs().Lookup(kRootIno, "run");
    if (!run.ok()) return;
    auto link = n.fs().Lookup(run->ino, "latest");
    if (newest < 0) {
      if (link.ok()) {
        auto target = n.fs().Readlink(link->ino);
        Fail("run/latest on node " + n.name() + " names " +
             (target.ok() ? *target : target.status().ToString()) +
             " but no step is committed there");
      }
      return;
    }
    const std::string want = "step" + std::to_string(newest);
    if (!link.ok()) {
      return Fail("run/latest is missing on node " + n.name() + "; " + want + " is committed");
    }
    auto target = n.fs().Readlink(link->ino);
    if (!target.ok() || *target != want) {
      Fail("run/latest on node " + n.name() + " names " +
           (target.ok() ? *target : target.status().ToString()) +
           "; the newest committed step is " + want);
    }
  }

  // After a refresh that read the index: the node shows every step the index says is
  // committed (and nobody rm'd), and none it says was removed.
  void CheckRefreshed(SimNode& n) {
    const auto views = n.fs().Steps();
    for (const auto& s : steps_) {
      const StepSummary* v = ViewOf(views, s);
      const bool committed = v && v->rec.state == StepState::kCommitted;
      const bool in_index = bucket_.Peek(StepIndexKey(s.path, 'c')).has_value();
      const bool tombstone = bucket_.Peek(StepIndexKey(s.path, 'r')).has_value();
      // A step rm'd on some node may still be in the index without a tombstone
      // (its book has not written it yet): the rank check covers it.
      if (in_index && !tombstone && !committed && !s.removed) {
        return Fail("node " + n.name() + " refreshed, but shows " + s.path + " " + StateOn(n, s) +
                    "; the index says committed");
      }
      if (tombstone && committed) {
        return Fail("node " + n.name() + " refreshed, but still shows " + s.path +
                    " committed; the index says removed");
      }
    }
  }

  // The step's part records as the bucket has them: "b: {rank3 uploaded, rank4}" (a
  // file "in the bucket" is uploaded, but its part does not say so yet).
  std::string PartsOf(const StepModel& s) {
    std::string out;
    auto listed = bucket_.List(s.path + "/" + kPartRecordDir);
    if (!listed.ok()) return listed.status().ToString();
    for (const auto& obj : *listed) {
      auto part = DecodePartRecord(bucket_.Peek(obj.key).value_or(""));
      if (!part.ok()) continue;
      std::set<std::string> files;
      for (const auto& f : part->files) {
        const bool object = bucket_.Peek(s.path + "/" + f.path).has_value();
        files.insert(f.path + (f.uploaded ? " uploaded" : object ? " in the bucket" : ""));
      }
      out += (out.empty() ? "" : "; ") + part->node + ": " + Join(files);
    }
    return out.empty() ? "none" : out;
  }

  // A part record under a removed step, or the upload of a file whose node never saw
  // the step committed: what nodes that learn of a removal late leave behind.
  bool LeftByALateNode(const StepModel& s, const std::string& key) {
    if (key.find("/" + std::string(kPartRecordDir) + "/") != std::string::npos) return true;
    const std::string name = key.substr(s.path.size() + 1);
    const FileModel* f = nullptr;
    if (auto it = s.closed.find(name); it != s.closed.end()) f = &it->second;
    if (auto it = s.maybe.find(name); it != s.maybe.end()) f = &it->second;
    for (size_t i = 0; f && i < nodes_.size(); i++) {
      if (nodes_[i]->name() == f->node) return max_rank_[i][s.number] == kNotCommitted;
    }
    return false;
  }

  // After the settling rounds.
  void CheckConverged() {
    line_.str("");
    for (const auto& s : steps_) {
      for (auto& node : nodes_) {
        if (failed_) return;
        SimNode& n = *node;
        const auto views = n.fs().Steps();
        const StepSummary* v = ViewOf(views, s);
        const bool committed = v && v->rec.state == StepState::kCommitted;
        if (s.decided && !s.removed && !(committed && v->rec.persisted)) {
          Fail("after settling, node " + n.name() + " shows " + s.path + " " + StateOn(n, s) +
               "; it was committed (by " + s.committer +
               ") and never removed, so it should be persisted; its parts: " + PartsOf(s));
        } else if (s.removed && committed) {
          Fail("after settling, node " + n.name() + " still shows " + s.path + " committed; node " +
               s.removed_by + " removed it at #" + std::to_string(s.removed_op));
        } else if (s.removed && v && options_.check_leftovers) {
          Fail("after settling, node " + n.name() + " keeps removed " + s.path + " as " +
               StateOn(n, s));
        }
      }
      if (!s.removed) continue;
      auto listed = bucket_.List(s.path + "/");
      std::vector<std::string> left;
      for (const auto& obj : listed.ok() ? *listed : std::vector<ObjectInfo>{}) {
        if (options_.check_leftovers || !LeftByALateNode(s, obj.key)) left.push_back(obj.key);
      }
      if (!left.empty()) {
        return Fail("after settling, " + std::to_string(left.size()) +
                    " objects are left under removed " + s.path + ", e.g. " + left[0]);
      }
      if (bucket_.Peek(StepIndexKey(s.path, 'c')) ||
          (options_.check_leftovers && bucket_.Peek(StepIndexKey(s.path, 'p')))) {
        return Fail("after settling, the index still lists removed " + s.path + " as " +
                    (bucket_.Peek(StepIndexKey(s.path, 'c')) ? "committed" : "persisted"));
      }
    }
  }

  const uint64_t seed_;
  const SimOptions options_;
  std::mt19937_64 rng_;
  SimConfig config_;
  ManualClock clock_;
  MemoryObjectStore bucket_;
  Watchdog watchdog_;
  std::vector<std::unique_ptr<SimNode>> nodes_;
  std::vector<StepModel> steps_;
  // Per node, per step number: the furthest rank the step has reached there.
  std::vector<std::map<int64_t, int>> max_rank_;
  int64_t last_step_ = 0;
  int last_file_ = 0;
  int op_ = 0;
  std::ostringstream line_;  // the current operation's trace line
  std::vector<std::string> trace_;
  bool traced_ = true;    // the current operation's line is in trace_
  int settle_from_ = -1;  // the first settling operation
  bool failed_ = false;
  std::string failure_;
};

::testing::AssertionResult RunSeed(uint64_t seed, int ops,
                                   SimOptions options = AroundKnownIssues()) {
  return ClusterSim(seed, options).Run(ops);
}

// 200 seeds x 100 operations (and 42 or 60 settling ones each): 3.6 to 5.2 s on the
// 2-core development machine, measured; about 27 ms a seed.
constexpr uint64_t kSeeds = 200;
constexpr int kOps = 100;

// The campaigns' schedules: around the known issues, with the fixed ones drawn.
SimOptions CampaignOptions() {
  SimOptions o = AroundKnownIssues();
  o.rm_empty_steps = true;
  o.kill_with_queued_work = true;
  o.kill_mid_save = true;
  o.rm_before_every_node_applied = true;
  o.check_leftovers = true;
  return o;
}

TEST(ClusterSimTest, RandomSchedules) {
  SimOptions o = CampaignOptions();
  // CLUSTER_SIM_SEED=N runs that seed alone (to read its trace).
  if (const char* one = std::getenv("CLUSTER_SIM_SEED")) {
    EXPECT_TRUE(RunSeed(std::strtoull(one, nullptr, 10), kOps, o));
    return;
  }
  // CLUSTER_SIM_SEEDS=N runs seeds 1..N instead (the campaign in docs/cluster.md).
  uint64_t seeds = kSeeds;
  if (const char* n = std::getenv("CLUSTER_SIM_SEEDS")) seeds = std::strtoull(n, nullptr, 10);
  // A change that breaks the product usually fails many seeds: three traces are enough.
  int failed = 0;
  for (uint64_t seed = 1; seed <= seeds && failed < 3; seed++) {
    auto result = RunSeed(seed, kOps, o);
    EXPECT_TRUE(result);
    failed += !result;
  }
}

// The same with power losses (SimOptions::power_loss): other draws, so other schedules.
SimOptions PowerLossCampaignOptions() {
  SimOptions o = CampaignOptions();
  o.kill_mid_save = false;  // a power loss mid-save: DISABLED_Seed7 (the save identity)
  o.power_loss = true;      // as kills, only on a node with every step committed (kill_mid_save)
  return o;
}

TEST(ClusterSimTest, RandomSchedulesWithPowerLoss) {
  SimOptions o = PowerLossCampaignOptions();
  if (const char* one = std::getenv("CLUSTER_SIM_SEED")) {
    EXPECT_TRUE(RunSeed(std::strtoull(one, nullptr, 10), kOps, o));
    return;
  }
  uint64_t seeds = kSeeds;
  if (const char* n = std::getenv("CLUSTER_SIM_SEEDS")) seeds = std::strtoull(n, nullptr, 10);
  int failed = 0;
  for (uint64_t seed = 1; seed <= seeds && failed < 3; seed++) {
    auto result = RunSeed(seed, kOps, o);
    EXPECT_TRUE(result) << "seed " << seed;
    failed += !result;
  }
}

SimOptions WithPowerLoss(bool mid_save) {
  SimOptions o = AroundKnownIssues();
  o.power_loss = true;
  o.kill_mid_save = mid_save;
  return o;
}

// Invariant 1 failed after a power loss: "run/step2 went back from committed to not
// committed (broken (committed file run/step2/rank7 lost data: 0 of 43 bytes)) on node
// b". b's rank7 was uploaded before a's commit, so b's part did not sync it (the
// bucket held it), and the power loss cut b's local copy short: recovery broke the
// committed step. Now recovery drops a local copy the remote holds as this version
// and reads the file from there (a `local_copy_lost` warning).
//   #27 b: write run/step2/rank7 (43 B): ok
//   #43 b: book pass (part puts +3, gets +0)
//   #46 a: commit run/step2: committed [decided run/step2 by a: {rank6, rank7, rank8}]
//   #97 b: book pass, power loss and restart
TEST(ClusterSimTest, Seed245APowerLossCutsAnUploadedFilesLocalCopy) {
  EXPECT_TRUE(RunSeed(245, kOps, WithPowerLoss(false)));
}

// Power losses mid-save (a node with a step not committed loses power) fail on
// causes not fixed yet, so RandomSchedulesWithPowerLoss skips them:
// "run/step1's decision names rank11 on node b with 0 B; it was written on node b
// with 45 B". b's rank11 was never fsynced; the power loss kept its name (an earlier
// synced manifest write) and lost its bytes. The step is incomplete on b, but b
// wrote into it again, which put b's part (rank11 at 0 B, durable as it now is), and
// c committed the step with the torn file: the save identity (files of an earlier
// attempt never enter a later one) is what closes this. Seed 9 there is the known
// prune of an incomplete step with a part elsewhere (Seed2 below).
TEST(ClusterSimTest, DISABLED_Seed7APowerLossMidSaveCommitsATornFile) {
  EXPECT_TRUE(RunSeed(7, kOps, WithPowerLoss(true)));
}

// Found by the 10,000-seed campaign with power losses (1 seed of 10,000): "after
// settling, 3 objects are left under removed run/step1, e.g. run/step1/rank2". Node b
// removed step1 for the cluster; node a, which had not learnt of it, uploaded its
// files after b's sweep, then learnt of the removal and queued their deletion in a
// batch not synced, and lost power: the removal, applied again after the boot, found
// nothing saying those objects were uploaded. A leak, not a loss. Now a removal
// applied from the cluster is a synced write.
//   #21 a: commit run/step1: committed [decided run/step1 by a: {rank1, rank2, rank3, rank4}]
//   #55 b: rm -r run/step1: rmdir ok
//   #57 a: tier pass: ok                (rank2-4 uploaded after b's sweep)
//   #61 a: power loss and restart
TEST(ClusterSimTest, Seed9263APowerLossLosesQueuedRemoteDeletions) {
  EXPECT_TRUE(RunSeed(9263, kOps, PowerLossCampaignOptions()));
}

// Seeds that failed stay here as tests of their own, named after the seed and what
// failed, with the operation count that reproduced it. The ones below found real
// issues of the product (not of the simulation): each runs its seed with only the
// SimOptions flag that steers around its issue left on, and is disabled until the
// issue is fixed; then enable it and drop the flag from AroundKnownIssues. The traces
// quoted are excerpts; run the test (--gtest_also_run_disabled_tests, and
// CLUSTER_SIM_TRACE=1 / CLUSTER_SIM_EVENTS=1) for the whole of it.

SimOptions AroundKnownIssuesBut(bool SimOptions::*flag) {
  SimOptions o = AroundKnownIssues();
  o.*flag = true;
  return o;
}

// Invariant 3 failed: "run/step1 went back from deleted to committed (committed) on
// node a". rmdir of a committed step that has no files (nothing to unlink first)
// never announced the removal: FileSystem::Rmdir called NoteDeletionLocked for the
// parent only, so ClusterBook::StepRemoved was not called, the index kept the
// step's ~c entry, and the next refresh (here, #14's lookup) applied it again. Now
// the rmdir of a finished step starts its removal.
//   #9 b: commit run/step1: committed [decided run/step1 by b: {}]
//   #10 b: refresh by getxattr: refreshed
//   #12 a: rm -r run/step1: rmdir ok
//   #13 clock +1 ms
//   #14 a: commit run/step2: committed
TEST(ClusterSimTest, Seed52RmdirOfAnEmptyCommittedStepIsAnnounced) {
  EXPECT_TRUE(RunSeed(52, 60, AroundKnownIssuesBut(&SimOptions::rm_empty_steps)));
}

// Invariant 3 failed: "run/step1 went back from deleted to committed (committed) on
// node c". The rm's removal was queued in ClusterBook memory only (StepRemoved:
// removed_, removing_) for the book's thread; a kill -9 before its pass lost it, so
// the next refresh applied the ~c entry again on the remover and the other nodes
// never dropped the step. Now the rm's batch records the removal (meta key
// cluster_removal/<step>) until the book has done it, and a restart does it again.
//   #28 c: rm -r run/step1: rmdir ok
//   #37 c: kill -9 and restart          (no book pass on c since #28)
//   #38 c: mkdir run/step5: ok          (its lookup refreshes: step1 is back)
TEST(ClusterSimTest, Seed14KillLosesAnRmNotYetAnnounced) {
  EXPECT_TRUE(RunSeed(14, 60, AroundKnownIssuesBut(&SimOptions::kill_with_queued_work)));
}

// Failed after settling: "node b shows run/step1 committed; it was committed (by a)
// and never removed, so it should be persisted". The committer persisted the step
// and queued the ~p index entry in memory (StepPersisted); a kill -9 lost it, and
// nothing wrote ~p again. Now a refresh on the committer that finds ~c without ~p
// for a step it persisted puts ~p again, and a restart asks for one refresh.
//   #5 a: commit run/step1: committed [decided run/step1 by a: {}]
//   #9 a: tier pass: ok                 (persisted on a, ~p queued)
//   #17 a: commit run/step1: committed, persisted
//   #34 a: kill -9 and restart          (no book pass on a since #9)
TEST(ClusterSimTest, Seed32KillLosesThePersistedIndexEntry) {
  EXPECT_TRUE(RunSeed(32, 60, AroundKnownIssuesBut(&SimOptions::kill_with_queued_work)));
}

// Fails after settling: "node a shows run/step1 committed; it was committed (by b)
// and never removed, so it should be persisted; its parts: a: {rank3 in the bucket};
// b: {rank1 uploaded, rank2 uploaded}". Node a uploaded rank3 and queued the
// republication of its part in memory (PartUploadsChanged); a kill -9 lost it and
// nothing republished after the restart, so the committer's persist duty waited for
// a's part for ever. Now a restart puts again the part of every committed step not
// yet persisted that holds files of the node (PartsToRepublish).
//   #8 a: write run/step1/rank3 (40 B): ok
//   #9 b: commit run/step1: committed [decided run/step1 by b: {rank1, rank2, rank3}]
//   #24 a: tier pass: ok                (rank3 uploaded)
//   #31 a: kill -9 and restart          (no book pass on a since #24)
TEST(ClusterSimTest, Seed149KillLosesThePartRepublishedAfterAnUpload) {
  EXPECT_TRUE(RunSeed(149, 60, AroundKnownIssuesBut(&SimOptions::kill_with_queued_work)));
}

// Fixed (issue 28, 2), kept as a test. Invariant 1 failed: "run/step2 was decided
// (committer a) with files {rank3, rank5} where the model has {rank3, rank4, rank5}
// (missing {rank4})". Node b closed (and published) rank4, then was killed. Recovery
// at restart turned its uncommitted step2 `incomplete` and, running before the
// cluster hooks were set, applied single-node retention, which pruned "incomplete and
// older than the newest committed step" (events: recovered, then prune, on b). SPEC 9
// says a node that restarts never prunes from what it remembers; recovery no longer
// does in cluster mode.
//   #21 b: write run/step2/rank4 (6 B): ok
//   #23 b: book pass, kill -9 and restart
//   #28 b: write run/step2/rank5 (47 B): ok
//   #31 a: commit run/step2: committed
TEST(ClusterSimTest, Seed22ARestartPrunesNothingTheClusterStillCommits) {
  EXPECT_TRUE(RunSeed(22, 60, AroundKnownIssuesBut(&SimOptions::kill_mid_save)));
}

// Invariant 2 failed: "run/step2/rank2 on node b is to be read from node b's own
// upload: the node lost the copy it wrote". Pruning as Seed22 did, but by the
// committer's retention, which pruned an incomplete step another node has a
// part of: b's part record still named rank2, rank4 and rank6 after b pruned
// step2 (at its commit of step4, as the committer), so a committed step2 with them;
// no node had their bytes any more. Now retention in cluster mode never removes a
// step that is not committed (the cluster may still commit it).
//   #8 b: write run/step2/rank2 (23 B, fsync): ok
//   #13 b: book pass, kill -9 and restart
//   #15 b: write run/step2/rank6 (36 B): ok
//   #33 b: commit run/step4: committed [decided run/step4 by b: {}]
//   #37 a: commit run/step2: committed [decided run/step2 by a: {rank2, ... rank6}]
TEST(ClusterSimTest, Seed2PrunedPartIsCommittedWithoutItsData) {
  EXPECT_TRUE(RunSeed(2, 60, AroundKnownIssuesBut(&SimOptions::kill_mid_save)));
}

// Fixed, kept as a test. Failed: "run/step1's decision changed after its removal
// (the removed step came back)". Node a asked for step1's commit while b's part still counted an
// open writer (its close after an fsync publishes from the book's thread): the request waits as a
// delayed retry, and a never learns of b's commit (--refresh 1 s, no lookup of it since). b then
// removes step1 for the cluster (tombstone, ~c and every part deleted), and a's retry gathers what
// is left (its own empty part) and decides step1 again: a removed step is back, as a new, empty
// record nobody saved. Now a step records which removal of its name it follows (the tombstone's tag
// in the node's view when it made the directory), and a decision first looks at the name's
// tombstone: a's step1 follows none, so it is left over from the removed save, and goes (a
// `cluster_leftover` warning) instead of being decided again.
//   #18 b: commit run/step1: committed [decided run/step1 by b: {rank1, rank2, rank3}]
//   #19 a: commit run/step1: writing (waiting for 1 file(s) open for writing on node b)
//   #44 b: commit run/step1: committed, persisted
//   #50 b: rm -r run/step1: rmdir ok
//   #62 a: settle: book pass, delayed commits  (decides run/step1 again, 0 files)
TEST(ClusterSimTest, Seed179PendingCommitRequestDecidesARemovedStepAgain) {
  EXPECT_TRUE(RunSeed(179, 60, AroundKnownIssuesBut(&SimOptions::rm_before_every_node_applied)));
}

// Fixed, kept as a test. Failed after settling: "node b keeps removed run/step2 as
// writing". b wrote into step2 but had not applied its commit (--refresh 1 s) when
// a removed it. The removal deletes the ~c entry, so b's refreshes saw a tombstone
// for a step it never had committed and left it alone: b kept step2 as a writing
// step for ever, with its files (rank1 and rank5 were in the removed commit), and
// its uploads and part records would land under the removed step's prefix again. A
// commit request on b (any close in the step) would decide it again, as in Seed179.
// Now a refresh that finds the name's tombstone, for a step held here uncommitted
// that does not follow it, drops the step and deletes what this node put of it in
// the bucket since. (Kept first as seed 60, which no longer draws this schedule.)
//   #7 b: write run/step2/rank1 (36 B): ok
//   #16 b: write run/step2/rank5 (22 B): ok
//   #21 a: commit run/step2: committed [decided run/step2 by a: {rank1, rank2, rank5}]
//   #31 a: rm -r run/step2: rmdir ok
TEST(ClusterSimTest, Seed106ANodeThatNeverAppliedTheCommitKeepsARemovedStep) {
  SimOptions o = AroundKnownIssuesBut(&SimOptions::rm_before_every_node_applied);
  o.check_leftovers = true;
  EXPECT_TRUE(RunSeed(106, 60, o));
}

// Fixed, kept as a test. Failed after settling: "1 objects are left under removed
// run/step1, e.g. run/step1/.ckptfs-parts/b.json". Node b had the step committed
// and its upload queued a republication of its part; a removed the step (#46), and
// b's book made the PUT after a's sweep, before b learnt of the removal. Nothing
// deleted it: a leak per node and removed step, and a stale part a step saved
// again under the name would gather. Now a node that puts a part of a step
// committed here then lists the step's index entries: when the committed one is
// gone (a removal deletes it before its sweep), it deletes the part again and
// applies the removal. (Kept first as seed 16, which no longer draws this schedule.)
//   #19 b: commit run/step1: committed [decided run/step1 by b: {rank1, rank2, rank3, rank4}]
//   #46 a: rm -r run/step1: rmdir ok
TEST(ClusterSimTest, Seed17PartRecordRepublishedAfterTheRemoval) {
  EXPECT_TRUE(RunSeed(17, 60, AroundKnownIssuesBut(&SimOptions::check_leftovers)));
}

// Fixed, kept as a test. Failed after settling: "the index still lists removed
// run/step1 as persisted".
// The committer c persisted step1 (#49) and queued its ~p entry; b removed the step
// (#40, from the bucket at #51), then c's book wrote ~p: the index keeps a persisted
// entry for a step that no longer exists. Now the ~p PUT is followed by a LIST of
// the step's index entries, and undone when the committed entry is gone.
//   #11 c: commit run/step1: committed [decided run/step1 by c: {rank1}]
//   #40 b: rm -r run/step1: rmdir ok
//   #49 c: tier pass: ok
//   #51 b: book pass (part puts +1, gets +0)
TEST(ClusterSimTest, Seed23PersistedIndexEntryWrittenAfterTheRemoval) {
  EXPECT_TRUE(RunSeed(23, 60, AroundKnownIssuesBut(&SimOptions::check_leftovers)));
}

}  // namespace
}  // namespace ckptfs::testing
