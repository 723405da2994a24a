#include "lifecycle/commit_coordinator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <unordered_map>

#include "formats/step_completeness.h"

namespace ckptfs {

namespace {

// How often a cluster commit that waits for other nodes' parts asks again:
// the commit lands within this of the last part (docs/cluster.md).
constexpr int64_t kClusterPollNs = 100'000'000;
// Another node's part still counts files open for writing: most often the
// trainer closed them a moment ago and that close's PUT is on its way
// (ClusterHooks::PublishLater), so the first attempts come sooner: 5, 10,
// 20, 40, 80 ms, then every kClusterPollNs. Each attempt is a LIST and a GET
// of each part that moved, so the burst is bounded (5 more gathers per wait).
constexpr int64_t kOpenWritersFirstPollNs = 5'000'000;

// Cluster mode, a step whose format lists no files (Hugging Face,
// DeepSpeed, Megatron, unknown): nothing says which files make it whole,
// so it commits only once every node of the job has published its part
// with nothing open (SPEC section 9). GatherCluster already refused parts
// with open files; this counts the nodes. EAGAIN with the reason while
// nodes are missing; ENODATA when the job's size is unknown (no --nodes).
Status CheckJobNodes(const CommitPort::CommitPlan& plan) {
  std::vector<std::string> nodes;
  for (const auto& p : plan.other_parts) nodes.push_back(p.node);
  std::sort(nodes.begin(), nodes.end());
  if (plan.job_nodes == 0) {
    return Status::Error(
        ENODATA,
        "this step's format lists no files, so in cluster mode it commits only once every "
        "node of the job has published its part: mount every node with --nodes N (the "
        "job's node count), or commit it with `ckptfs commit` once the save is done");
  }
  const size_t have = nodes.size() + 1;  // with this node's own part
  if (have >= plan.job_nodes) return Status::Ok();
  std::string named = "this node";
  for (const auto& n : nodes) named += ", " + n;
  return Status::Error(EAGAIN, "waiting for the parts of " + std::to_string(plan.job_nodes - have) +
                                   " more node(s): " + std::to_string(have) + " of --nodes " +
                                   std::to_string(plan.job_nodes) + " published (" + named +
                                   "); this step's format lists no files");
}

// The step's files as the completeness check sees them: sizes from the
// plan, contents read from the backing files; in cluster mode, other nodes'
// files with sizes from their part records, contents read from the bucket.
class PlanFiles final : public StepFiles {
 public:
  PlanFiles(DataStore* data, CommitPort* port, const CommitPort::CommitPlan& plan)
      : data_(data), port_(port), plan_(plan) {
    for (const auto& p : plan.other_parts) {
      for (const auto& f : p.files) files_.emplace(f.path, Info{0, f.size});
    }
    // This node's copy of a path wins, as in the step record.
    for (const auto& f : plan.files) files_[f.path] = {f.ino, f.size};
  }

  std::optional<uint64_t> FileSize(const std::string& rel_path) const override {
    auto it = files_.find(rel_path);
    if (it == files_.end()) return std::nullopt;
    return it->second.size;
  }

  Result<std::string> ReadFile(const std::string& rel_path, uint64_t max_bytes) const override {
    auto size = FileSize(rel_path);
    if (!size) return Status::Error(ENOENT, rel_path + " does not exist");
    if (*size > max_bytes) {
      return Status::Error(EFBIG, rel_path + " is larger than " + std::to_string(max_bytes) + " bytes");
    }
    return ReadRange(rel_path, 0, *size);
  }

  Result<std::string> ReadRange(const std::string& rel_path, uint64_t offset,
                                uint64_t length) const override {
    auto it = files_.find(rel_path);
    if (it == files_.end()) return Status::Error(ENOENT, rel_path + " does not exist");
    if (it->second.ino == 0) return port_->ReadClusterFile(plan_, rel_path, offset, length);
    auto file = data_->Open(it->second.ino, /*create=*/false);
    if (!file.ok()) return file.status();
    std::string out(length, '\0');
    size_t done = 0;
    while (done < length) {
      auto n = (*file)->PRead(out.data() + done, length - done, offset + done);
      if (!n.ok()) return n.status();
      if (*n == 0) break;
      done += *n;
    }
    if (done < length) {
      return Status::Error(EIO, rel_path + ": short read (" + std::to_string(done) + " of " +
                                    std::to_string(length) + " bytes)");
    }
    return out;
  }

 private:
  struct Info {
    uint64_t ino;
    uint64_t size;
  };
  DataStore* data_;
  CommitPort* port_;
  const CommitPort::CommitPlan& plan_;
  std::unordered_map<std::string, Info> files_;
};

}  // namespace

CommitCoordinator::CommitCoordinator(CommitPort* steps, DataStore* data, const Clock* clock)
    : CommitCoordinator(steps, data, clock, true) {}

CommitCoordinator::CommitCoordinator(CommitPort* steps, DataStore* data, const Clock* clock,
                                     bool threads)
    : steps_(steps), data_(data), clock_(clock) {
  steps_->SetCommitRequester([this](uint64_t step) { Request(step); });
  steps_->SetIndexRequester([this](uint64_t file, uint64_t session) { RequestIndex(file, session); });
  if (threads) {
    worker_ = std::thread([this] { WorkerLoop(); });
    idle_ = std::thread([this] { IdleLoop(); });
  }
  // Commits whose trigger survived a daemon crash are finished now.
  steps_->RequestRecoveredCommits();
}

std::unique_ptr<CommitCoordinator> CommitCoordinator::CreateWithoutThreads(CommitPort* steps,
                                                                          DataStore* data,
                                                                          const Clock* clock) {
  return std::unique_ptr<CommitCoordinator>(new CommitCoordinator(steps, data, clock, false));
}

CommitCoordinator::~CommitCoordinator() {
  steps_->SetCommitRequester(nullptr);
  steps_->SetIndexRequester(nullptr);
  {
    MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  stop_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (idle_.joinable()) idle_.join();
}

void CommitCoordinator::Request(uint64_t step_ino) {
  {
    MutexLock lock(&queue_mu_);
    if (stopping_ || !queued_.insert(step_ino).second) return;
    queue_.push_back(step_ino);
  }
  queue_cv_.notify_one();
}

void CommitCoordinator::RequestIndex(uint64_t file_ino, uint64_t session) {
  {
    MutexLock lock(&queue_mu_);
    if (stopping_) return;
    index_queue_.emplace_back(file_ino, session);
  }
  queue_cv_.notify_one();
}

void CommitCoordinator::ReadIndex(uint64_t file_ino, uint64_t session) {
  Status st = steps_->CommitStepsNamedBy(file_ino, session);
  if (!st.ok()) std::fprintf(stderr, "ckptfs: reading a run index file: %s\n", st.ToString().c_str());
}

void CommitCoordinator::DrainForTest() {
  for (;;) {
    steps_->FlushInvalidations();
    uint64_t step = 0;
    std::optional<std::pair<uint64_t, uint64_t>> index;
    {
      MutexLock lock(&queue_mu_);
      if (!index_queue_.empty()) {
        index = index_queue_.front();
        index_queue_.pop_front();
      } else if (!queue_.empty()) {
        step = queue_.front();
        queue_.pop_front();
        queued_.erase(step);
      } else if (!delayed_.empty() && delayed_.begin()->first <= clock_->MonotonicNanos()) {
        // Delayed requests that are due by the test's clock.
        step = delayed_.begin()->second;
        delayed_.erase(delayed_.begin());
      } else {
        return;
      }
    }
    if (index) {
      ReadIndex(index->first, index->second);
    } else {
      Commit(step);
    }
  }
}

void CommitCoordinator::WorkerLoop() {
  MutexLock lock(&queue_mu_);
  for (;;) {
    while (!stopping_ && queue_.empty() && index_queue_.empty()) lock.Wait(queue_cv_);
    if (stopping_) return;
    if (!index_queue_.empty()) {
      const auto [file, session] = index_queue_.front();
      index_queue_.pop_front();
      lock.Unlock();
      ReadIndex(file, session);
      lock.Lock();
      continue;
    }
    const uint64_t step = queue_.front();
    queue_.pop_front();
    queued_.erase(step);
    lock.Unlock();
    Commit(step);
    steps_->FlushInvalidations();  // steps the commit's retention removed
    lock.Lock();
  }
}

void CommitCoordinator::RequestAfter(uint64_t step_ino, int64_t delay_ns) {
  {
    MutexLock lock(&queue_mu_);
    if (stopping_) return;
    delayed_.emplace(clock_->MonotonicNanos() + delay_ns, step_ino);
  }
  stop_cv_.notify_all();
}

int64_t CommitCoordinator::OpenWritersBackoff(uint64_t step_ino) {
  MutexLock lock(&queue_mu_);
  int64_t& next = open_writers_backoff_[step_ino];
  if (next == 0) next = kOpenWritersFirstPollNs;
  const int64_t now = next;
  next = std::min(next * 2, kClusterPollNs);
  return now;
}

void CommitCoordinator::ForgetOpenWritersBackoff(uint64_t step_ino) {
  MutexLock lock(&queue_mu_);
  open_writers_backoff_.erase(step_ino);
}

void CommitCoordinator::IdleLoop() {
  MutexLock lock(&queue_mu_);
  int64_t next_tick = clock_->MonotonicNanos() + 1'000'000'000;
  while (!stopping_) {
    const int64_t now = clock_->MonotonicNanos();
    int64_t wait = next_tick - now;
    if (!delayed_.empty()) wait = std::min(wait, delayed_.begin()->first - now);
    if (wait > 0) {
      const size_t delayed_before = delayed_.size();
      lock.WaitFor(*clock_, stop_cv_, wait, [this, delayed_before] {
        queue_mu_.AssertHeld();  // WaitFor calls it with the lock held
        return stopping_ || delayed_.size() != delayed_before;
      });
    }
    if (stopping_) return;
    // Cluster commits that wait for other nodes' parts are asked again.
    bool queued = false;
    while (!delayed_.empty() && delayed_.begin()->first <= clock_->MonotonicNanos()) {
      const uint64_t step = delayed_.begin()->second;
      delayed_.erase(delayed_.begin());
      if (queued_.insert(step).second) {
        queue_.push_back(step);
        queued = true;
      }
    }
    if (queued) queue_cv_.notify_one();
    if (clock_->MonotonicNanos() < next_tick) continue;
    next_tick = clock_->MonotonicNanos() + 1'000'000'000;
    lock.Unlock();
    // A manifest that failed to take a write (full disk) is retried here
    // too, so writes resume once space is freed even if nobody writes.
    steps_->RetryManifest();
    steps_->RequestIdleCommits();
    steps_->RequestSettledCommits();
    // Data of removed steps is deleted here, in the background, a bounded
    // amount per tick so a huge prune never starves the idle commits.
    auto collected = steps_->CollectGarbage(4096);
    if (!collected.ok()) std::fprintf(stderr, "ckptfs: garbage collection: %s\n", collected.status().ToString().c_str());
    // Steps a lazy mount left unloaded get their size check here, a few
    // per tick, so a restart never waits for it.
    auto checked = steps_->CheckUnloadedSteps(64);
    if (!checked.ok())
      std::fprintf(stderr, "ckptfs: checking unloaded steps: %s\n",
                   checked.status().ToString().c_str());
    // And steps it loaded since are dropped again past the memory budget.
    auto unloaded = steps_->UnloadIdleSteps();
    if (!unloaded.ok())
      std::fprintf(stderr, "ckptfs: unloading idle steps: %s\n",
                   unloaded.status().ToString().c_str());
    lock.Lock();
  }
}

void CommitCoordinator::Commit(uint64_t step_ino) {
  auto plan = steps_->BeginCommit(step_ino);
  if (!plan.ok()) return;  // waiting for writers, already done, or timed out

  // Cluster mode: the other nodes' parts join the check. Their closes do
  // not reach this node, so a commit that waits for them asks again soon.
  Status gathered = steps_->GatherCluster(&*plan);
  if (gathered.err() != EBUSY) ForgetOpenWritersBackoff(step_ino);
  if (!gathered.ok()) {
    const bool broken = gathered.err() == EIO;
    steps_->AbortCommit(step_ino, gathered, /*waiting=*/!broken, broken);
    if (!broken) RequestAfter(step_ino, gathered.err() == EBUSY ? OpenWritersBackoff(step_ino) : kClusterPollNs);
    return;
  }
  Completeness check = CheckStepCompleteness(PlanFiles(data_, steps_, *plan));
  plan->ephemeral = check.ephemeral;
  plan->best_ref = check.best_ref;
  plan->listed_shards = check.listed_shards;
  using Verdict = Completeness::Verdict;
  // What only the layout suggests (OLMo-core's optim/ after model/) does not
  // hold a commit the user or --commit-idle asked for.
  if (check.verdict == Verdict::kWaiting && !(check.layout_only && plan->forced)) {
    steps_->AbortCommit(step_ino, Status::Error(EAGAIN, check.reason), /*waiting=*/true, /*broken=*/false);
    if (plan->cluster) RequestAfter(step_ino, kClusterPollNs);
    return;
  }
  if (check.verdict == Verdict::kBroken) {
    steps_->AbortCommit(step_ino, Status::Error(EIO, check.reason), /*waiting=*/false, /*broken=*/true);
    return;
  }
  // A marker in a subdirectory commits only a format the check knows: an
  // FSDP state dict's .metadata inside a Hugging Face checkpoint-N/ is not
  // the end of the checkpoint.
  if (plan->nested_only && !check.lists_every_file) {
    steps_->DropCommitRequest(step_ino);
    return;
  }
  if (plan->cluster && !check.lists_every_file && !plan->explicit_commit) {
    if (Status members = CheckJobNodes(*plan); !members.ok()) {
      steps_->AbortCommit(step_ino, members, /*waiting=*/true, /*broken=*/false);
      // Other nodes' publications do not reach this node: ask again (a LIST
      // of the parts, GETs only of those that moved). Without --nodes the
      // step waits for an explicit commit or a trigger after a remount.
      if (members.err() == EAGAIN) RequestAfter(step_ino, kClusterPollNs);
      return;
    }
  }
  // Nothing lists this step's files: wait until it is quiet, so a rank that
  // writes its file just after rank 0's marker is still part of the step.
  // An explicit commit is the user's word that the step is complete (SPEC
  // section 3): it does not wait for quiet.
  const int64_t settle_ns = plan->settle_ns;
  if (!check.lists_every_file && !plan->renamed && !plan->explicit_commit && settle_ns > 0 &&
      plan->quiet_ns < settle_ns) {
    char why[160];
    std::snprintf(why, sizeof why, "settling: commits after %.3g s without writes in the step (%s)",
                  static_cast<double>(settle_ns) / 1e9, check.reason.c_str());
    steps_->AbortCommit(step_ino, Status::Error(EAGAIN, why), /*waiting=*/true, /*broken=*/false, /*settling=*/true);
    // Asked again when the quiet is due (the idle tick, once a second, would
    // add up to 1 s to every settling commit); activity in the meantime
    // makes that attempt settle again.
    const int64_t due = settle_ns - plan->quiet_ns;
    RequestAfter(step_ino, plan->cluster ? std::max(kClusterPollNs, due) : due);
    return;
  }

  // A fast-path file changed around the daemon after its writer closed
  // it holds bytes nobody vouches for: the step is broken, not committed.
  // Only such files are opened here (a step of 1,000 files spent 7-10 ms
  // opening every one); SyncFiles finds any backing file that is missing.
  std::vector<uint64_t> inos;
  inos.reserve(plan->files.size());
  for (const auto& f : plan->files) {
    inos.push_back(f.ino);
    if (!f.closed_around_daemon) continue;
    auto file = data_->Open(f.ino, /*create=*/false);
    if (!file.ok()) {
      steps_->AbortCommit(step_ino, file.status().Annotate("fsync of " + f.path), false, false);
      return;
    }
    if (Status changed = steps_->CheckUnchangedSinceClose(f.ino, file->get()); !changed.ok()) {
      steps_->AbortCommit(step_ino, changed, /*waiting=*/false, /*broken=*/true);
      return;
    }
  }
  // Durability of every file and of its name before the batch that says
  // they are committed. Every file is synced, whatever the daemon saw of
  // it: kernel passthrough writes backing files without the daemon.
  const int64_t sync_began = clock_->MonotonicNanos();
  uint64_t failed_ino = 0;
  Status st = data_->SyncFiles(inos, &failed_ino);
  if (!st.ok()) {
    std::string what = "fsync of the step's " + std::to_string(inos.size()) + " files";
    for (const auto& f : plan->files) {
      if (f.ino == failed_ino) what = "fsync of " + f.path;
    }
    steps_->AbortCommit(step_ino, st.Annotate(what), false, false);
    return;
  }
  st = data_->SyncDir();
  if (!st.ok()) {
    steps_->AbortCommit(step_ino, st.Annotate("fsync of the data directory"), false, false);
    return;
  }
  plan->sync_ns = clock_->MonotonicNanos() - sync_began;
  // Sealed data never changes: its FUSE page-cache copy (the backing file's
  // cache holds the same bytes) can go now, before anyone waits on the commit.
  steps_->DropPageCache(inos);
  // Cluster mode: one record for the step, whichever nodes ask at once.
  if (st = steps_->DecideCluster(&*plan); !st.ok()) {
    // EALREADY: the step is gone (left over from a removed save), its request with it.
    if (st.err() == EALREADY) return;
    steps_->AbortCommit(step_ino, st.Annotate("deciding the cluster's step record"), /*waiting=*/true, false);
    RequestAfter(step_ino, kClusterPollNs);
    return;
  }
  st = steps_->FinishCommit(*plan);
  if (!st.ok() && st.err() != EALREADY) steps_->AbortCommit(step_ino, st, false, false);
}

}  // namespace ckptfs
