#include "cluster/cluster_book.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/cluster_join.h"
#include "common/crc32c.h"
#include "common/parallel_for.h"
#include "common/random_hex.h"
#include "manifest/records.h"

namespace ckptfs {

namespace {

// Step paths may hold '/', '~' and '%': escaped so that a step's index keys
// are one path component and the state after the last '~' is unambiguous.
std::string EscapeStepPath(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == '%' || c == '/' || c == '~') {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

bool UnescapeStepPath(const std::string& in, std::string* out) {
  out->clear();
  for (size_t i = 0; i < in.size(); i++) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const std::string hex = in.substr(i + 1, 2);
    if (hex == "25")
      out->push_back('%');
    else if (hex == "2F")
      out->push_back('/');
    else if (hex == "7E")
      out->push_back('~');
    else
      return false;
    i += 2;
  }
  return !out->empty();
}

// How long a lookup waits for a refresh of the cluster's view before it
// answers from the view it has.
constexpr int64_t kRefreshWaitNs = 1'000'000'000;

// Part records read at once by a gathering commit.
constexpr size_t kGatherParallel = 32;

// The body of a persisted index entry: the same bytes whoever writes it.
constexpr const char* kPersistedBody = "{\"format\":\"ckptfs-index\",\"state\":\"persisted\"}\n";

}  // namespace

std::string StepIndexKey(const std::string& step_path, char state) {
  return std::string(kStepIndexDir) + EscapeStepPath(step_path) + "~" + state + ".json";
}

bool ParseStepIndexKey(const std::string& key, std::string* step_path, char* state) {
  const std::string dir = kStepIndexDir;
  if (key.compare(0, dir.size(), dir) != 0) return false;
  const std::string name = key.substr(dir.size());
  if (name.size() < 8 || name.compare(name.size() - 5, 5, ".json") != 0) return false;
  const size_t tilde = name.size() - 7;
  if (name[tilde] != '~') return false;
  *state = name[tilde + 1];
  if (*state != 'c' && *state != 'p' && *state != 'r' && *state != 'f') return false;
  return UnescapeStepPath(name.substr(0, tilde), step_path);
}

ClusterBook::ClusterBook(ClusterPort* port, ObjectStore* store, EventLog* events,
                         ClusterBookOptions options)
    : port_(port),
      store_(store),
      events_(events),
      options_(std::move(options)),
      clock_(options_.clock ? options_.clock : &SystemClockInstance()),
      fence_(store, events, clock_, &counters_.lists,
             // Both looks are as old as any view this node has may get (--refresh).
             NodeFenceOptions{options_.node, options_.epoch, options_.refresh_ns,
                              options_.refresh_ns}) {}

ClusterBook::~ClusterBook() { Stop(); }

void ClusterBook::QueueRestartWork() {
  // A daemon killed before it made its parts durable: they are synced and
  // put again, so that commits waiting for them go on.
  std::vector<std::string> resync = port_->PartsToResync();
  // Removals announced before a kill -9 and not finished in the bucket:
  // done again (before any refresh could bring the step back here).
  for (const std::string& step : port_->PendingClusterRemovals()) StepRemoved(step);
  // Committed steps whose uploads ended here: their part is put again, in
  // case the PUT saying so was lost (one PUT per step not yet persisted).
  std::vector<std::string> republish = port_->PartsToRepublish();
  MutexLock lock(&mu_);
  to_sync_.insert(resync.begin(), resync.end());
  republish_.insert(republish.begin(), republish.end());
  // One refresh (a LIST of the index): a persisted step whose ~p entry a
  // kill -9 lost is put again from there (RefreshNow).
  refresh_requested_ = true;
  cv_.notify_all();
}

void ClusterBook::Start() {
  QueueRestartWork();
  {
    MutexLock lock(&mu_);
    thread_running_ = true;
  }
  thread_ = std::thread([this] { Loop(); });
}

void ClusterBook::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ClusterBook::Sleep(int64_t ns) {
  MutexLock lock(&mu_);
  lock.WaitFor(*clock_, cv_, ns, [this] {
    mu_.AssertHeld();
    return stopping_;
  });
}

uint64_t ClusterBook::NextSeq() {
  // Wall-clock microseconds keep seq growing across restarts of the node.
  const uint64_t now_us = static_cast<uint64_t>(TimespecToNanos(clock_->Now()) / 1000);
  MutexLock lock(&mu_);
  last_seq_ = std::max(last_seq_ + 1, now_us);
  return last_seq_;
}

// ---- publication -------------------------------------------------------------

Status ClusterBook::PutPart(const std::string& step_path) {
  // Also the book's own republications look (at most once per --refresh):
  // an old holder must not overwrite the part record its replacement now
  // puts under the same key.
  CKPTFS_RETURN_IF_ERROR(fence_.CheckHolder());
  auto part = port_->PartSnapshot(step_path);
  if (!part.ok()) {
    // The step went away (renamed, removed): nothing of it to publish.
    return part.status().err() == ENOENT ? Status::Ok() : part.status();
  }
  part->node = options_.node;
  part->cache_id = options_.cache_id;
  part->epoch = options_.epoch;
  part->seq = NextSeq();
  part->published_at = static_cast<double>(TimespecToNanos(clock_->Now())) / 1e9;
  if (Status valid = ValidatePartRecord(*part); !valid.ok()) {
    return Status::Error(EIO, "part record of " + step_path + ": " + valid.message());
  }
  const std::string key = PartRecordKey(step_path, options_.node);
  const std::string body = EncodePartRecord(*part);
  // Quiet but not yet durable (its sync failed, or it changed meanwhile):
  // the book's thread syncs it and puts it again, and the committing node
  // waits for that (SPEC section 9, "committed means durable").
  const bool to_sync = !part->synced && part->open_writers == 0 &&
                       std::any_of(part->files.begin(), part->files.end(),
                                   [](const PartRecord::File& f) { return !f.uploaded; });
  // The store client retries each request; beyond that, a bucket that is
  // down holds the first open (or the book's thread) for up to
  // publish_timeout, then fails it.
  const int64_t deadline = Now() + options_.publish_timeout_ns;
  int64_t backoff = 100'000'000;
  for (;;) {
    counters_.part_puts++;
    Status st = store_->Put(key, body);
    if (st.ok()) {
      // A republication of a committed step (after uploads) may land after
      // another node removed the step: it must not stay in the bucket.
      if (auto view = port_->StepViewOf(step_path);
          view && view->committed && UndoneAfterRemoval(step_path, key)) {
        if (port_->RemoveClusterStep(step_path).ok()) {
          MutexLock lock(&mu_);
          flush_invalidations_ = true;
          cv_.notify_all();
        }
        return Status::Ok();
      }
      if (to_sync) {
        MutexLock lock(&mu_);
        to_sync_.insert(step_path);
        cv_.notify_all();
      }
      return st;
    }
    if (Now() + backoff > deadline) return st.Annotate("PUT " + key);
    Sleep(backoff);
    {
      MutexLock lock(&mu_);
      if (stopping_) return st;
    }
    backoff = std::min<int64_t>(backoff * 2, 5'000'000'000);
  }
}

Status ClusterBook::PublishPart(const std::string& step_path) {
  // The first open for writing of a step (or a rename in one): a daemon
  // whose name was taken over says so here, rather than write a part every
  // gather drops (NodeFence).
  CKPTFS_RETURN_IF_ERROR(fence_.CheckHolder());
  return PublishPartNow(step_path);
}

Status ClusterBook::PublishPartNow(const std::string& step_path) {
  MutexLock lock(&mu_);
  const uint64_t ticket = ++publications_[step_path].requested;
  for (;;) {
    Publication& p = publications_[step_path];
    if (p.published >= ticket) return Status::Ok();
    if (p.failed_through >= ticket) return p.failure;
    if (p.in_flight) {
      // The PUT in flight started before this change: the next one, which
      // carries every change queued meanwhile, is someone's to make.
      lock.Wait(cv_);
      continue;
    }
    p.in_flight = true;
    const uint64_t covers = p.requested;
    lock.Unlock();
    Status st = PutPart(step_path);
    lock.Lock();
    Publication& q = publications_[step_path];
    q.in_flight = false;
    if (st.ok()) {
      q.published = std::max(q.published, covers);
    } else {
      q.failed_through = std::max(q.failed_through, covers);
      q.failure = st;
    }
    cv_.notify_all();
  }
}

void ClusterBook::PublishLater(const std::string& step_path) {
  // A close returns at once; its PUT is the book's thread's, within
  // milliseconds, and carries every close made meanwhile (one PUT per step
  // per pass), the part made durable first when nothing is open.
  MutexLock lock(&mu_);
  counters_.closes_published_later++;
  republish_.insert(step_path);
  cv_.notify_all();
}

// ---- reading parts ------------------------------------------------------------

Result<PartRecord> ClusterBook::GetPart(const std::string& step_path, const std::string& node) {
  const std::string key = PartRecordKey(step_path, node);
  Status last;
  // A part record is rewritten in place by its node; on a store whose PUT
  // is not atomic (s3rver) a read can catch it half written: read again.
  for (int attempt = 0; attempt < 5; attempt++) {
    if (attempt > 0) Sleep(20'000'000LL << attempt);
    counters_.part_gets++;
    auto body = store_->GetRange(key, 0, UINT64_MAX);
    if (!body.ok()) return body.status();
    auto part = DecodePartRecord(*body);
    if (part.ok()) {
      if (part->node != node || part->step_path != step_path) {
        return Status::Error(EIO, "malformed part record " + key + ": it names node '" +
                                      part->node + "' and step '" + part->step_path + "'");
      }
      return part;
    }
    last = part.status();
  }
  return Status::Error(EIO, "malformed part record " + key + ": " + last.message());
}

Result<std::vector<PartRecord>> ClusterBook::GatherParts(const std::string& step_path) {
  // A bucket that fails to answer keeps the commit waiting (EAGAIN, asked
  // again); only a malformed record breaks the step (EIO).
  auto unreachable = [&](const Status& st, const std::string& what) {
    return Status::Error(EAGAIN, what + ": " + st.message());
  };
  counters_.lists++;
  auto listed = store_->List(step_path + "/" + kPartRecordDir);
  if (!listed.ok()) return unreachable(listed.status(), "listing the parts of " + step_path);
  // Only the parts whose tag moved since this node last gathered the step
  // are read again: a commit that waits for other nodes asks every 100 ms,
  // and re-reading 1,000 unchanged parts each time would be 10,000 GET/s.
  std::map<std::string, GatheredPart> known;
  {
    MutexLock lock(&mu_);
    auto it = gathered_.find(step_path);
    if (it != gathered_.end()) known = std::move(it->second);
    gathered_.erase(step_path);
  }
  std::vector<std::string> nodes;            // to read, in listing order
  std::vector<std::string> tags;             // their listed tags
  std::map<std::string, GatheredPart> kept;  // listed and unchanged
  for (const auto& obj : *listed) {
    std::string step, node;
    if (!ParsePartRecordKey(obj.key, &step, &node) || step != step_path) {
      return Status::Error(
          EIO, "malformed part record key " + obj.key + " among the parts of " + step_path);
    }
    if (node == options_.node) continue;
    auto seen = known.find(node);
    if (!obj.etag.empty() && seen != known.end() && seen->second.tag == obj.etag) {
      kept.emplace(node, std::move(seen->second));
      continue;
    }
    nodes.push_back(node);
    tags.push_back(obj.etag);
  }
  std::vector<ClusterPort::AwaitedPart> which;
  which.reserve(nodes.size());
  for (const auto& node : nodes) which.push_back({step_path, node});
  std::vector<Result<PartRecord>> got = GetParts(which);
  for (size_t i = 0; i < nodes.size(); i++) {
    Result<PartRecord>& part = got[i];
    if (!part.ok()) {
      // Deleted between the LIST and the GET: not a part any more.
      if (part.status().err() == ENOENT) continue;
      if (part.status().err() == EIO && part.status().message().rfind("malformed", 0) == 0) {
        events_->Append({{"event", "error"},
                         {"kind", "cluster_part"},
                         {"path", step_path},
                         {"error", part.status().message()}});
        return part.status();
      }
      return unreachable(part.status(), "reading the part of node " + nodes[i]);
    }
    // Kept under the listed tag: the body read is that version or a newer
    // one, and a newer one lists with another tag, so it is read again.
    kept[nodes[i]] = GatheredPart{tags[i], std::move(part).value()};
  }
  std::vector<PartRecord> out;
  out.reserve(kept.size());
  for (const auto& [node, g] : kept) out.push_back(g.part);
  // A replaced daemon's part never enters a commit nor counts as a node.
  if (Status fenced = fence_.DropFencedParts(step_path, &out); !fenced.ok()) {
    MutexLock lock(&mu_);
    gathered_[step_path] = std::move(kept);
    return fenced;
  }
  MutexLock lock(&mu_);
  // Bounded: steps are forgotten when decided or removed; a run of steps
  // that never commit is capped here.
  if (gathered_.size() >= kGatheredStepsMax) gathered_.clear();
  gathered_[step_path] = std::move(kept);
  return out;
}

Result<std::string> ClusterBook::GetStepRecord(const std::string& step_path) {
  counters_.index_gets++;
  return store_->GetRange(StepIndexKey(step_path, 'c'), 0, UINT64_MAX);
}

std::map<std::string, Result<std::string>> ClusterBook::GetStepRecords(
    const std::map<std::string, IndexedStep>& steps,
    const std::map<std::string, ClusterPort::StepView>& views,
    const std::set<std::string>& removing) {
  // The records RefreshNow applies: committed in the index and not here (or
  // removed and saved again, which it may apply too). Read together first:
  // one GET after another costs a round trip per new step (4 s for 1,000
  // steps on a local gateway, about 20 s on S3), and the run's listing
  // would show the steps applied so far meanwhile.
  std::vector<std::string> wanted;
  for (const auto& [step, seen] : steps) {
    if (!seen.committed || removing.count(step)) continue;
    auto view = views.find(step);
    if (view == views.end() || !view->second.committed || seen.removed) wanted.push_back(step);
  }
  std::vector<std::optional<Result<std::string>>> got(wanted.size());
  ParallelFor(wanted.size(), kGatherParallel, [&](size_t i) { got[i] = GetStepRecord(wanted[i]); });
  std::map<std::string, Result<std::string>> out;
  for (size_t i = 0; i < wanted.size(); i++) out.emplace(wanted[i], std::move(*got[i]));
  return out;
}

std::vector<Result<PartRecord>> ClusterBook::GetParts(
    const std::vector<ClusterPort::AwaitedPart>& which) {
  // In parallel: at 1,000 nodes one after another would take 1,000 round
  // trips, about 20 s on S3 (docs/cluster.md, request costs).
  std::vector<std::optional<Result<PartRecord>>> got(which.size());
  ParallelFor(which.size(), kGatherParallel,
              [&](size_t i) { got[i] = GetPart(which[i].step_path, which[i].owner); });
  std::vector<Result<PartRecord>> out;
  out.reserve(which.size());
  for (auto& g : got) out.push_back(std::move(*g));
  return out;
}

Result<PartRecord> ClusterBook::AwaitUpload(const std::string& step_path,
                                            const std::string& rel_path, const std::string& owner) {
  const int64_t deadline = Now() + options_.upload_wait_ns;
  int64_t backoff = 50'000'000;
  for (;;) {
    auto part = GetPart(step_path, owner);
    if (part.ok()) {
      for (const auto& f : part->files) {
        if (f.path == rel_path && f.uploaded && f.crc32c) return part;
      }
    } else if (part.status().err() != ENOENT) {
      return part.status();
    }
    if (Now() + backoff > deadline) {
      char waited[32];
      std::snprintf(waited, sizeof(waited), "%g",
                    static_cast<double>(options_.upload_wait_ns) / 1e9);
      return Status::Error(ETIMEDOUT, std::string("waited ") + waited +
                                          " s (--read-wait) for node " + owner + " to upload " +
                                          rel_path);
    }
    Sleep(backoff);
    {
      MutexLock lock(&mu_);
      if (stopping_) return Status::Error(EIO, "shutting down");
    }
    backoff = std::min<int64_t>(backoff * 2, 2'000'000'000);
  }
}

Result<std::string> ClusterBook::ReadPartFile(const std::string& step_path,
                                              const PartRecord::File& file,
                                              const std::string& owner, uint64_t offset,
                                              uint64_t length) {
  auto part = AwaitUpload(step_path, file.path, owner);
  if (!part.ok()) return part.status();
  const std::string key = step_path + "/" + file.path;
  if (offset == 0 && length == file.size) {
    // The whole file: checked against the CRC32C its node recorded.
    auto body = store_->GetRange(key, 0, length);
    if (!body.ok()) return body.status();
    for (const auto& f : part->files) {
      if (f.path == file.path && f.crc32c && Crc32c(0, body->data(), body->size()) != *f.crc32c) {
        return Status::Error(
            EIO, key + ": contents do not match the CRC32C node " + owner + " recorded");
      }
    }
    return body;
  }
  return store_->GetRange(key, offset, length);
}

// ---- the decision and the index ----------------------------------------------

Result<ClusterStepRecord> ClusterBook::DecideStep(const ClusterStepRecord& proposal,
                                                  const std::string& follows_removal) {
  CKPTFS_RETURN_IF_ERROR(fence_.Fenced());
  // A step left over here from a save of the name that another node has
  // removed (a request made before this node learnt of the commit, asked
  // again after the removal) is never decided again: the removed step would
  // come back, with what is left of it.
  {
    auto entries = IndexEntriesOf(proposal.step_path);
    if (!entries.ok()) {
      return Status::Error(EAGAIN, "reading the step index for " + proposal.step_path + ": " +
                                       entries.status().message());
    }
    auto tomb = entries->find('r');
    if (tomb != entries->end() && !tomb->second.empty() && follows_removal != tomb->second &&
        !FollowsAnyRemoval(follows_removal)) {
      // What this node put of it after the removal's sweep goes too.
      counters_.deletes++;
      (void)store_->Delete({PartRecordKey(proposal.step_path, options_.node)});
      return Status::Error(ESTALE, proposal.step_path +
                                       ": left over from a save of the name that another "
                                       "node removed for the cluster; not committed again");
    }
  }
  ClusterStepRecord mine = proposal;
  auto random = RandomHex(8);
  if (!random.ok()) return random.status();
  const std::string nonce = *random;
  mine.proposal = options_.node + "~" + nonce;
  mine.committer = options_.node;
  if (Status valid = ValidateClusterStepRecord(mine); !valid.ok()) {
    return Status::Error(EIO, "step record of " + mine.step_path + ": " + valid.message());
  }
  DecideOptions decide;
  decide.node = options_.node;
  decide.nonce = nonce;
  decide.valid = [](const std::string& body) { return DecodeClusterStepRecord(body).ok(); };
  decide.sleep = [this](int64_t ns) { Sleep(ns); };
  counters_.decisions++;
  auto decided =
      DecideOnce(store_, StepRecordKey(mine.step_path), EncodeClusterStepRecord(mine), decide);
  if (!decided.ok()) return decided.status();
  auto record = DecodeClusterStepRecord(*decided);
  if (!record.ok()) return record.status();
  if (record->proposal != mine.proposal && Tombstoned(mine.step_path, record->proposal)) {
    // The decision there is a removed step's, whose removal (another node's,
    // RemoveFromBucket) has not reached it yet: a save of the name now is a
    // new step, never that one (issue 28, 4: adopting it dropped the new
    // files, and the removal then erased the step). The removal deletes
    // the decision last; the commit is asked again until then.
    return Status::Error(EAGAIN, mine.step_path +
                                     ": the step of that name removed before is still "
                                     "being deleted from the bucket; this save commits "
                                     "as a new step once that ends");
  }
  // Every decider writes the same bytes, so a repeated or concurrent PUT of
  // the index entry is harmless even where PUT is not atomic.
  counters_.index_puts++;
  Status st = store_->Put(StepIndexKey(mine.step_path, 'c'), *decided);
  if (!st.ok())
    return st.Annotate("recording the commit of " + mine.step_path + " in the step index");
  {
    MutexLock lock(&mu_);
    gathered_.erase(mine.step_path);  // decided: no gather of it follows
  }
  fence_.ForgetStep(mine.step_path);
  events_->Append({{"event", "cluster_commit"},
                   {"path", mine.step_path},
                   {"committer", record->committer},
                   {"proposal", record->proposal},
                   {"won", record->proposal == mine.proposal},
                   {"nodes", record->parts.size()},
                   {"files", record->files.size()}});
  return record;
}

void ClusterBook::MaybeRefresh() { RefreshWithin(options_.refresh_ns); }

void ClusterBook::RefreshForNewStep() {
  RefreshWithin(std::min<int64_t>(options_.refresh_ns, kNewStepViewAgeNs));
}

void ClusterBook::RefreshForRetention() { RefreshWithin(0); }

void ClusterBook::RefreshWithin(int64_t max_age_ns) {
  const int64_t start = Now();
  if (ever_refreshed_ && start - refreshed_at_ < max_age_ns) return;
  // After a failed refresh, lookups use the view they have until the back-off ends.
  if (start < retry_refresh_at_) return;
  const uint64_t seen = refresh_generation_.load();
  {
    MutexLock lock(&mu_);
    if (thread_running_) {
      // The book's thread refreshes; a lookup waits for it only so long, so a
      // bucket that does not answer never holds the mount up (it serves the
      // view it has, which is at most that much older).
      // Every lookup during one refresh waits until the same deadline.
      if (!refresh_requested_ && !refresh_running_) {
        refresh_requested_ = true;
        refresh_wait_until_ = start + kRefreshWaitNs;
        cv_.notify_all();
      }
      const int64_t left = refresh_wait_until_ - Now();
      if (left <= 0) return;
      lock.WaitFor(*clock_, cv_, left, [this, seen] {
        mu_.AssertHeld();
        return stopping_ || refresh_generation_.load() != seen;
      });
      return;
    }
  }
  RefreshNow(seen);
}

void ClusterBook::RefreshNow(uint64_t seen) {
  MutexLock serial(&refresh_mu_);
  // Another caller refreshed while this one waited: its view is fresh.
  if (refresh_generation_.load() != seen) return;
  const int64_t began = Now();
  counters_.refreshes++;
  counters_.lists++;
  auto listed = store_->List(kStepIndexDir);
  refreshed_at_ = began;
  ever_refreshed_ = true;
  auto done = [this] {
    MutexLock lock(&mu_);
    refresh_generation_++;
    cv_.notify_all();
  };
  if (!listed.ok()) {
    {
      MutexLock lock(&mu_);
      tombstones_known_ = false;  // steps created now follow the next tombstone
    }
    // Lookups go on with the view they have; the event says why it is old.
    // Back off (1 s doubling to 30 s) so an outage costs lookups nothing.
    refresh_backoff_ns_ = std::min<int64_t>(
        std::max<int64_t>(refresh_backoff_ns_ * 2, 1'000'000'000), 30'000'000'000);
    retry_refresh_at_ = Now() + refresh_backoff_ns_;
    if (refresh_errors_++ % 60 == 0) {
      events_->Append(
          {{"event", "error"}, {"kind", "cluster_refresh"}, {"error", listed.status().message()}});
    }
    done();
    return;
  }
  refresh_backoff_ns_ = 0;
  retry_refresh_at_ = 0;
  std::map<std::string, IndexedStep> steps;
  std::vector<std::pair<ObjectInfo, std::string>> run_files;  // ~f keys and their paths
  for (const auto& obj : *listed) {
    std::string step;
    char state = 0;
    if (!ParseStepIndexKey(obj.key, &step, &state)) continue;
    if (state == 'f') {
      run_files.emplace_back(obj, step);
      continue;
    }
    IndexedStep& s = steps[step];
    s.committed |= state == 'c';
    s.persisted |= state == 'p';
    s.removed |= state == 'r';
    if (state == 'r') s.tombstone = obj.etag;
  }
  {
    std::map<std::string, std::string> tags;
    for (const auto& [step, seen] : steps) {
      if (seen.removed) tags[step] = seen.tombstone;
    }
    MutexLock lock(&mu_);
    tombstone_tags_ = std::move(tags);
    tombstones_known_ = true;
  }
  const auto views = port_->StepViews();
  std::set<std::string> removing;
  {
    MutexLock lock(&mu_);
    removing = removing_;
  }
  std::map<std::string, Result<std::string>> records = GetStepRecords(steps, views, removing);
  bool removed_here = false, applied_here = false;
  for (const auto& [step, seen] : steps) {
    // Removed here, its tombstone not yet written: the index still says
    // committed, which must not bring the step back.
    if (removing.count(step)) continue;
    auto found = views.find(step);
    const ClusterPort::StepView* view = found == views.end() ? nullptr : &found->second;
    // The step record this refresh would apply, read before the loop (or
    // now): whether a tombstone removed it is judged on this same copy, so a
    // save of the name committed meanwhile is never applied with the
    // removed save's record.
    std::optional<Result<std::string>> body;
    const std::string& step_path = step;  // C++17 lambdas cannot capture a structured binding
    auto take_body = [&]() -> Result<std::string>& {
      if (!body) {
        auto fetched = records.find(step_path);
        body.emplace(fetched != records.end() ? std::move(fetched->second)
                                              : GetStepRecord(step_path));
      }
      return *body;
    };
    if (seen.removed) {
      // A tombstone removes the record it names; a commit of the same name
      // made after it (another proposal) is a new step.
      const std::string removed_proposal =
          seen.committed ? ProposalIn(StepIndexKey(step, 'r')) : "";
      if (seen.committed && !take_body().ok()) continue;  // the next refresh reads it again
      bool removed = !seen.committed || removed_proposal == ProposalOf(*take_body());
      if (removed) {
        if (view && view->committed && port_->RemoveClusterStep(step).ok()) {
          removed_here = true;
        } else if (view && !view->committed && SettleLeftover(step, *view, seen.tombstone)) {
          removed_here = true;
        }
        continue;
      }
      // Saved again after the removal. A node that learnt of neither in
      // time still holds the removed save committed: it goes, and the new
      // save is applied below as any step this node does not have.
      if (view && view->committed && !view->decision.empty() &&
          view->decision == removed_proposal) {
        if (!port_->RemoveClusterStep(step).ok()) continue;
        removed_here = true;
        view = nullptr;
      }
    }
    if (!seen.committed) continue;
    bool committed = view && view->committed;
    if (!committed) {
      const Result<std::string>& fetched = take_body();
      if (!fetched.ok()) continue;
      auto record = DecodeClusterStepRecord(*fetched);
      if (!record.ok() || record->step_path != step) {
        ReportMalformedIndexEntry(step, "step record", record.status());
        continue;
      }
      Status st = port_->ApplyClusterStep(*record);
      // A local copy the record replaced leaves a kernel entry to drop.
      if (st.ok()) applied_here = true;
      if (!st.ok()) {
        if (st.err() != EAGAIN) {
          events_->Append({{"event", "error"},
                           {"kind", "cluster_apply"},
                           {"path", step},
                           {"error", st.message()}});
        }
        continue;
      }
      committed = true;
    }
    if (seen.persisted && committed && (!view || !view->persisted)) {
      (void)port_->ApplyClusterPersisted(step);
    }
    // Persisted by this node's duty, but the index does not say so: the PUT
    // of ~p was lost (a kill -9 before the book's pass). Put again.
    if (!seen.persisted && view && view->persisted && view->committed_here) {
      StepPersisted(step);
    }
  }
  // After the steps: a run-level file goes into a run directory, which a
  // step applied just now may have made.
  if (ApplyRunFileRecords(run_files)) applied_here = true;
  if (removed_here || applied_here) {
    // Kernel entries of removed steps (and of local files a commit replaced)
    // are dropped from the book's thread, never inside a FUSE request.
    MutexLock lock(&mu_);
    flush_invalidations_ = true;
    cv_.notify_all();
  }
  done();
}

bool ClusterBook::ApplyRunFileRecords(
    const std::vector<std::pair<ObjectInfo, std::string>>& records) {
  bool changed = false;
  for (const auto& [obj, path] : records) {
    auto seen = run_file_tags_.find(obj.key);
    if (seen != run_file_tags_.end() && !obj.etag.empty() && seen->second == obj.etag) continue;
    counters_.run_file_gets++;
    auto body = store_->GetRange(obj.key, 0, UINT64_MAX);
    if (!body.ok()) continue;  // the next refresh tries again
    auto record = DecodeRunFileRecord(*body);
    if (!record.ok() || record->path != path) {
      ReportMalformedIndexEntry(path, "run-level file record", record.status());
      run_file_tags_[obj.key] = obj.etag;  // not read again until it moves
      continue;
    }
    if (record->node != options_.node) {
      auto applied = port_->ApplyClusterRunFile(*record);
      if (!applied.ok()) {
        if (applied.status().err() != EAGAIN) {
          events_->Append({{"event", "error"},
                           {"kind", "cluster_run_file"},
                           {"path", path},
                           {"error", applied.status().message()}});
        }
        continue;  // the tag stays old: the next refresh applies it again
      }
      changed |= *applied;
    }
    run_file_tags_[obj.key] = obj.etag;
  }
  return changed;
}

void ClusterBook::RunFileUploaded(const RunFileRecord& record) {
  MutexLock lock(&mu_);
  run_files_to_record_[record.path] = record;
  cv_.notify_all();
}

void ClusterBook::RecordRunFiles(std::map<std::string, RunFileRecord> files) {
  if (!fence_.Fenced().ok()) return;  // a replaced daemon writes nothing into the cluster
  for (auto& [path, record] : files) {
    counters_.run_file_puts++;
    Status st = store_->Put(StepIndexKey(path, 'f'), EncodeRunFileRecord(record));
    if (st.ok()) continue;
    events_->Append({{"event", "error"},
                     {"kind", "cluster_run_file"},
                     {"path", path},
                     {"error", "recording the run-level file in the step index: " + st.message()}});
    // Again a second later (not at once: the bucket may be down for long).
    run_files_retry_.emplace(path, std::move(record));
  }
}

// ---- background work ---------------------------------------------------------

void ClusterBook::PartUploadsChanged(const std::string& step_path) {
  MutexLock lock(&mu_);
  republish_.insert(step_path);
  cv_.notify_all();
}

void ClusterBook::StepPersisted(const std::string& step_path) {
  MutexLock lock(&mu_);
  persisted_.insert(step_path);
  cv_.notify_all();
}

void ClusterBook::WatchForCommit(const std::string& step_path) {
  MutexLock lock(&mu_);
  // Each publication (a close, an fsync) postpones the first poll and gives
  // the watch its full count again: the step cannot commit while this
  // node's ranks are still writing it.
  CommitWatch& w = commit_watch_[step_path];
  w.delay_ns = options_.commit_watch_first_ns;
  w.next_ns = Now() + options_.commit_watch_first_ns;
  w.polls_left = kCommitWatchPolls;
  commit_watch_changed_ = true;
  cv_.notify_all();
}

int64_t ClusterBook::PollCommitWatch() {
  const int64_t now = Now();
  std::vector<std::string> due;
  {
    MutexLock lock(&mu_);
    commit_watch_changed_ = false;
    for (const auto& [step, w] : commit_watch_) {
      if (w.next_ns <= now) due.push_back(step);
    }
  }
  std::map<std::string, ClusterPort::StepView> views;
  if (!due.empty()) views = port_->StepViews();
  for (const auto& step : due) {
    bool done = false;
    auto view = views.find(step);
    if (view != views.end() && view->second.committed) {
      done = true;  // committed here, or learnt by a lookup's refresh
    } else if (auto mine = port_->PartSnapshot(step); mine.ok() && mine->open_writers > 0) {
      done = true;  // still writing here: its close publishes and watches again
    } else {
      counters_.commit_watch_gets++;
      auto body = store_->GetRange(StepIndexKey(step, 'c'), 0, UINT64_MAX);
      if (body.ok()) {
        done = true;
        auto record = DecodeClusterStepRecord(*body);
        if (!record.ok() || record->step_path != step) {
          ReportMalformedIndexEntry(step, "step record", record.status());
        } else if (Tombstoned(step, record->proposal)) {
          // The entry of a step of that name removed before, whose removal
          // has not deleted it yet (RemoveFromBucket): this node's save of
          // the name is a new step, never that one (issue 28, 4).
          done = false;
        } else {
          // As a refresh applies it (one at a time with refreshes).
          Status st;
          {
            MutexLock refresh_lock(&refresh_mu_);
            st = port_->ApplyClusterStep(*record);
          }
          if (st.ok()) port_->FlushInvalidations();  // not inside a FUSE request: safe here
          if (st.err() == EAGAIN) {
            done = false;  // a local commit of it is under way: look again
          } else if (!st.ok()) {
            events_->Append({{"event", "error"},
                             {"kind", "cluster_apply"},
                             {"path", step},
                             {"error", st.message()}});
          }
        }
      }
      // Not found: not committed yet. Other errors: the next poll tries again.
    }
    MutexLock lock(&mu_);
    auto it = commit_watch_.find(step);
    if (it == commit_watch_.end() || it->second.next_ns > now)
      continue;  // published again meanwhile
    if (done || --it->second.polls_left <= 0) {
      commit_watch_.erase(it);
      continue;
    }
    it->second.delay_ns *= 2;
    it->second.next_ns = Now() + it->second.delay_ns;
  }
  MutexLock lock(&mu_);
  int64_t next = 0;
  for (const auto& [step, w] : commit_watch_)
    next = next == 0 ? w.next_ns : std::min(next, w.next_ns);
  return next;
}

void ClusterBook::StepRemoved(const std::string& step_path) {
  fence_.ForgetStep(step_path);
  MutexLock lock(&mu_);
  gathered_.erase(step_path);
  removed_.insert(step_path);
  removing_.insert(step_path);
  cv_.notify_all();
}

std::string ClusterBook::RemovalSeen(const std::string& step_path) {
  MutexLock lock(&mu_);
  if (removing_.count(step_path) || !tombstones_known_) return kFollowsNextRemoval;
  auto it = tombstone_tags_.find(step_path);
  return it == tombstone_tags_.end() ? kFollowsNoRemoval : it->second;
}

Result<std::map<char, std::string>> ClusterBook::IndexEntriesOf(const std::string& step_path) {
  const std::string committed = StepIndexKey(step_path, 'c');
  const std::string prefix = committed.substr(0, committed.size() - std::strlen("c.json"));
  counters_.lists++;
  auto listed = store_->List(prefix);
  if (!listed.ok()) return listed.status();
  std::map<char, std::string> out;
  for (const auto& obj : *listed) {
    std::string path;
    char state = 0;
    if (ParseStepIndexKey(obj.key, &path, &state) && path == step_path) out[state] = obj.etag;
  }
  return out;
}

bool ClusterBook::UndoneAfterRemoval(const std::string& step_path, const std::string& key) {
  auto entries = IndexEntriesOf(step_path);
  if (!entries.ok() || entries->count('c')) return false;
  counters_.deletes++;
  (void)store_->Delete({key});  // failed: a leak, as any removal's failed deletion
  events_->Append({{"event", "cluster_removed_meanwhile"}, {"path", step_path}, {"key", key}});
  return true;
}

bool ClusterBook::SettleLeftover(const std::string& step_path, const ClusterPort::StepView& view,
                                 const std::string& tag) {
  if (tag.empty() || view.follows_removal == tag) return false;
  if (FollowsAnyRemoval(view.follows_removal)) {
    {
      MutexLock lock(&mu_);
      if (removing_.count(step_path)) return false;  // its own tombstone is not written yet
    }
    port_->FollowRemoval(step_path, tag);
    return false;
  }
  auto dropped = port_->DropLeftoverStep(step_path, tag);
  if (!dropped.ok() || !*dropped) return false;
  // What it put in the bucket after the removal's sweep goes too.
  counters_.deletes++;
  (void)store_->Delete({PartRecordKey(step_path, options_.node)});
  return true;
}

void ClusterBook::ReportMalformedIndexEntry(const std::string& path, const char* what,
                                            const Status& decoded) {
  events_->Append({{"event", "error"},
                   {"kind", "cluster_index"},
                   {"path", path},
                   {"error", std::string("malformed ") + what + " in the index: " +
                                 (decoded.ok() ? "it names another path" : decoded.message())}});
}

Result<bool> ClusterBook::StepSavedAgain(const std::string& step_path) {
  counters_.index_gets++;
  auto body = store_->GetRange(StepRecordKey(step_path), 0, UINT64_MAX);
  if (!body.ok()) {
    if (body.status().err() == ENOENT) return false;  // no decision of the name now
    return body.status();
  }
  auto record = DecodeClusterStepRecord(*body);
  if (!record.ok()) return record.status();
  // The removed step's own decision, not deleted yet (its removal deletes it last).
  return !Tombstoned(step_path, record->proposal);
}

bool ClusterBook::Tombstoned(const std::string& step_path, const std::string& proposal) {
  return ProposalIn(StepIndexKey(step_path, 'r')) == proposal;
}

std::string ClusterBook::ProposalIn(const std::string& key) {
  counters_.index_gets++;
  auto body = store_->GetRange(key, 0, UINT64_MAX);
  if (!body.ok()) return "";
  return ProposalOf(*body);
}

std::string ClusterBook::ProposalOf(const std::string& body) {
  auto doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("proposal") || !doc["proposal"].is_string()) return "";
  return doc["proposal"].get<std::string>();
}

Status ClusterBook::RemoveFromBucket(const std::string& step_path) {
  // The tombstone names the record it removes, so a step saved again later
  // under the same name (a new record, a new proposal) is not hidden by it.
  // The decision itself says which (a removal tried again after a failure
  // finds the index entry gone already; the decision goes last).
  std::string proposal = ProposalIn(StepRecordKey(step_path));
  if (proposal.empty()) proposal = ProposalIn(StepIndexKey(step_path, 'c'));
  nlohmann::json tomb = {{"format", "ckptfs-index"}, {"state", "removed"}, {"proposal", proposal}};
  counters_.index_puts++;
  CKPTFS_RETURN_IF_ERROR(store_->Put(StepIndexKey(step_path, 'r'), tomb.dump() + "\n"));
  // Its tag: what a save of the name here from now on follows.
  std::string tag;
  if (auto entries = IndexEntriesOf(step_path); entries.ok() && entries->count('r')) {
    tag = entries->at('r');
    MutexLock lock(&mu_);
    tombstone_tags_[step_path] = tag;
  }
  // Its index entries next, before a save of the name again can write new
  // ones (it cannot decide before the old decision is gone, below).
  counters_.deletes++;
  CKPTFS_RETURN_IF_ERROR(
      store_->Delete({StepIndexKey(step_path, 'p'), StepIndexKey(step_path, 'c')}));
  // Every object of the step: data of every node, parts, the commit object.
  // Deleting is idempotent, so two nodes removing one step at once do no
  // harm. This node's own part stays when it is saving the name again
  // already (it has the step here once more); other nodes' new parts that
  // this deletes are published again before their commit can use them.
  counters_.lists++;
  auto listed = store_->List(step_path + "/");
  if (!listed.ok()) return listed.status();
  const std::string decision = StepRecordKey(step_path);
  const bool saving_again = port_->PartSnapshot(step_path).ok();
  const std::string own_part = PartRecordKey(step_path, options_.node);
  std::vector<std::string> keys;
  bool has_decision = false;
  for (const auto& obj : *listed) {
    if (obj.key == decision) {
      has_decision = true;
    } else if (!(saving_again && obj.key == own_part)) {
      keys.push_back(obj.key);
    }
  }
  for (size_t i = 0; i < keys.size(); i += 1000) {
    std::vector<std::string> batch(keys.begin() + i,
                                   keys.begin() + std::min(keys.size(), i + 1000));
    counters_.deletes++;
    CKPTFS_RETURN_IF_ERROR(store_->Delete(batch));
  }
  // The decision last, once every old object is gone: until then a save of
  // the name again cannot commit (DecideStep), so its uploads, under the
  // same keys, never race these deletions.
  if (has_decision) {
    counters_.deletes++;
    CKPTFS_RETURN_IF_ERROR(store_->Delete({decision}));
  }
  events_->Append({{"event", "cluster_remove"},
                   {"path", step_path},
                   {"objects", keys.size() + (has_decision ? 1 : 0)}});
  // A save of the name made here meanwhile follows this removal.
  if (auto view = port_->StepViewOf(step_path);
      view && !tag.empty() && FollowsAnyRemoval(view->follows_removal)) {
    port_->FollowRemoval(step_path, tag);
  }
  return Status::Ok();
}

void ClusterBook::AwaitingParts() {
  MutexLock lock(&mu_);
  awaiting_ = true;
  cv_.notify_all();
}

bool ClusterBook::Pass() {
  std::set<std::string> republish, persisted, removed, to_sync;
  std::map<std::string, RunFileRecord> run_files;
  run_files.swap(run_files_retry_);
  to_sync.swap(sync_retry_);
  bool awaiting = false;
  bool flush = false;
  bool refresh = false;
  {
    MutexLock lock(&mu_);
    // A version queued since a failed PUT replaces the failed one.
    for (auto& [path, record] : run_files_to_record_) run_files[path] = std::move(record);
    run_files_to_record_.clear();
    refresh = refresh_requested_;
    refresh_requested_ = false;
    refresh_running_ = refresh;
    republish.swap(republish_);
    persisted.swap(persisted_);
    removed.swap(removed_);
    awaiting = awaiting_;
    awaiting_ = false;
    flush = flush_invalidations_;
    flush_invalidations_ = false;
  }
  if (refresh) RefreshNow(refresh_generation_.load());
  {
    MutexLock lock(&mu_);
    refresh_running_ = false;
    flush = flush || flush_invalidations_;
    flush_invalidations_ = false;
  }
  if (flush) port_->FlushInvalidations();
  for (const auto& step : removed) {
    // A replaced daemon removes nothing for the cluster: its removal stays
    // local (the new holder and the other nodes keep the step).
    Status st = fence_.Fenced();
    if (!st.ok()) {
      events_->Append({{"event", "error"},
                       {"kind", "cluster_remove"},
                       {"path", step},
                       {"error", "not removed for the cluster: " + st.message()}});
      port_->ClusterRemovalDone(step);
      MutexLock lock(&mu_);
      removing_.erase(step);
      continue;
    }
    st = RemoveFromBucket(step);
    if (st.ok()) {
      port_->ClusterRemovalDone(step);
      MutexLock lock(&mu_);
      if (!removed_.count(step)) removing_.erase(step);
    } else {
      events_->Append({{"event", "error"},
                       {"kind", "cluster_remove"},
                       {"path", step},
                       {"error", st.message()}});
      StepRemoved(step);  // again on the next pass
    }
  }
  auto publish = [this](const std::set<std::string>& steps) {
    for (const auto& step : steps) {
      Status st = PublishPartNow(step);
      if (st.err() == EROFS) continue;  // fenced (NodeFence): nothing to retry
      if (!st.ok()) {
        events_->Append({{"event", "error"},
                         {"kind", "cluster_publish"},
                         {"path", step},
                         {"error", st.message()}});
        PartUploadsChanged(step);  // again on the next pass
      }
    }
  };
  // Returns whether the step's part is durable now.
  auto sync = [this](const std::string& step) {
    auto synced = port_->SyncPart(step);
    if (synced.ok()) return *synced;  // false: a file is open, or it changed meanwhile
    if (synced.status().err() != ENOENT) {
      events_->Append({{"event", "error"},
                       {"kind", "cluster_sync"},
                       {"path", step},
                       {"error", synced.status().message()}});
      sync_retry_.insert(step);  // again a second later
    }
    return false;
  };
  // A part put again here (a close's, after an fsync published the file)
  // is made durable first when it is quiet: one PUT says both.
  for (const auto& step : republish) (void)sync(step);
  publish(republish);
  // Parts a trainer's close put quiet but not durable: synced, then put again.
  {
    MutexLock lock(&mu_);
    to_sync.insert(to_sync_.begin(), to_sync_.end());
    to_sync_.clear();
  }
  std::set<std::string> synced_parts;
  for (const auto& step : to_sync) {
    if (sync(step)) synced_parts.insert(step);
  }
  publish(synced_parts);
  for (const auto& step : persisted) {
    counters_.index_puts++;
    const std::string key = StepIndexKey(step, 'p');
    if (!store_->Put(key, kPersistedBody).ok()) {
      StepPersisted(step);
      continue;
    }
    // Removed by another node meanwhile: the entry goes again (the next
    // refresh applies the removal here).
    (void)UndoneAfterRemoval(step, key);
  }
  if (!run_files.empty()) RecordRunFiles(std::move(run_files));
  next_commit_watch_ = PollCommitWatch();
  // The committing node's persist duty: other nodes' uploads it waits for,
  // polled on its own back-off, not on every wake-up (refreshes, signals).
  if (!awaiting && Now() < next_parts_poll_) return true;
  const auto awaited = port_->PartsAwaited();
  if (awaited.empty()) {
    part_tags_.clear();
    parts_changed_at_ = 0;
    return false;
  }
  const int64_t now = Now();
  if (parts_changed_at_ == 0) parts_changed_at_ = now;  // the wait begins
  if (PollAwaitedParts(awaited)) parts_changed_at_ = Now();
  // A node whose upload stalls (or that is down) is not polled 5 times a
  // second for ever.
  next_parts_poll_ =
      Now() + (Now() - parts_changed_at_ < kPartsQuietNs ? kPartsPollNs : kPartsIdlePollNs);
  return true;
}

bool ClusterBook::PollAwaitedParts(const std::vector<ClusterPort::AwaitedPart>& awaited) {
  // The persisted state waits for this poll: it runs often, so it must be
  // cheap at 1,000 nodes. A LIST of a step's part records (one request per
  // 1,000 nodes) gives each record's tag; only the records that moved since
  // they were last read are fetched (in parallel, GetParts). A store that
  // gives no tags, or a LIST that fails, costs a GET of every awaited part.
  std::map<std::string, std::map<std::string, std::string>> tags;  // step -> key -> tag
  std::set<std::string> unlisted;
  for (const auto& a : awaited) {
    if (tags.count(a.step_path) || unlisted.count(a.step_path)) continue;
    counters_.lists++;
    auto listed = store_->List(a.step_path + "/" + kPartRecordDir + "/");
    if (!listed.ok()) {
      unlisted.insert(a.step_path);
      continue;
    }
    auto& step_tags = tags[a.step_path];
    for (const ObjectInfo& info : *listed) step_tags[info.key] = info.etag;
  }
  std::vector<ClusterPort::AwaitedPart> fetch;
  std::vector<std::string> fetch_tags;
  for (const auto& a : awaited) {
    const std::string key = PartRecordKey(a.step_path, a.owner);
    std::string tag;
    if (!unlisted.count(a.step_path)) {
      const auto& step_tags = tags[a.step_path];
      auto it = step_tags.find(key);
      if (it == step_tags.end()) continue;  // not in the bucket (yet, or any more)
      tag = it->second;
      auto seen = part_tags_.find(key);
      if (!tag.empty() && seen != part_tags_.end() && seen->second == tag) continue;  // unchanged
    }
    fetch.push_back(a);
    fetch_tags.push_back(tag);
  }
  if (fetch.empty()) return false;
  std::vector<Result<PartRecord>> parts = GetParts(fetch);
  bool moved = false;
  for (size_t i = 0; i < fetch.size(); i++) {
    if (!parts[i].ok()) continue;
    (void)port_->NoteRemoteUploads(fetch[i].step_path, *parts[i]);
    // The tag the LIST gave: if the record moved again since, the next
    // poll sees a new tag and reads it again.
    std::string& known = part_tags_[PartRecordKey(fetch[i].step_path, fetch[i].owner)];
    moved = moved || known != fetch_tags[i] || fetch_tags[i].empty();
    known = fetch_tags[i];
  }
  return moved;
}

void ClusterBook::RunOnceForTest() { (void)Pass(); }

void ClusterBook::Loop() {
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
    }
    const bool still_awaiting = Pass();
    MutexLock lock(&mu_);
    if (stopping_) return;
    if (!republish_.empty() || !to_sync_.empty() || !persisted_.empty() || !removed_.empty() ||
        flush_invalidations_ || refresh_requested_ || commit_watch_changed_) {
      continue;
    }
    // While parts are awaited or commits watched, poll with a back-off;
    // otherwise sleep until signalled (an idle node makes no requests).
    int64_t wait = still_awaiting ? std::max<int64_t>(next_parts_poll_ - Now(), 1'000'000)
                                  : 3600LL * 1'000'000'000;
    if (next_commit_watch_ != 0)
      wait = std::min(wait, std::max<int64_t>(next_commit_watch_ - Now(), 1'000'000));
    if (!run_files_retry_.empty() || !sync_retry_.empty())
      wait = std::min<int64_t>(wait, 1'000'000'000);
    lock.WaitFor(*clock_, cv_, wait, [this] {
      mu_.AssertHeld();
      return stopping_ || !republish_.empty() || !to_sync_.empty() || !persisted_.empty() ||
             !removed_.empty() || !run_files_to_record_.empty() || flush_invalidations_ ||
             refresh_requested_ || awaiting_ || commit_watch_changed_;
    });
  }
}

void ClusterBook::AddStatus(nlohmann::json* status) const {
  // The one writer of status.json's cluster block.
  nlohmann::json& block = (*status)["cluster"];
  block["node"] = options_.node;
  if (!options_.conditional_put.empty()) block["conditional_put"] = options_.conditional_put;
  block["refresh_s"] = static_cast<double>(options_.refresh_ns) / 1e9;
  // The job's size, or null: steps whose format lists no files then wait.
  block["job_nodes"] =
      options_.job_nodes > 0 ? nlohmann::json(options_.job_nodes) : nlohmann::json(nullptr);
  block["requests"] = {{"part_puts", counters_.part_puts.load()},
                       {"part_gets", counters_.part_gets.load()},
                       {"lists", counters_.lists.load()},
                       {"index_puts", counters_.index_puts.load()},
                       {"index_gets", counters_.index_gets.load()},
                       {"decisions", counters_.decisions.load()},
                       {"refreshes", counters_.refreshes.load()},
                       {"deletes", counters_.deletes.load()},
                       {"commit_watch_gets", counters_.commit_watch_gets.load()},
                       {"run_file_puts", counters_.run_file_puts.load()},
                       {"run_file_gets", counters_.run_file_gets.load()}};
  block["closes_published_later"] = counters_.closes_published_later.load();
  // Whether the last refresh read the step index: false before the first
  // one ends and while they fail. A step directory made meanwhile follows
  // whichever removal of its name comes next (docs/cluster.md).
  {
    MutexLock lock(&mu_);
    block["view_known"] = tombstones_known_;
  }
  fence_.AddStatus(&block);
}

}  // namespace ckptfs
