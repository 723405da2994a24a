// CommitCoordinator runs step commits on its own thread, so that the close
// or rename that triggers a commit returns at once (SPEC section 3):
//
//   1. CommitPort::BeginCommit reserves the step once no file in it is open
//      for writing (until then the request waits; the last close asks again;
//      after --commit-wait it is dropped with an error);
//   2. the completeness check of known formats (DCP .metadata, OLMo-core
//      metadata.json): missing or short files keep the step writing, bad
//      metadata makes it broken; a layout whose metadata lists no files
//      (Hugging Face, DeepSpeed, unknown) first waits until the step was
//      quiet for --commit-settle, so late ranks still land in it;
//   3. every file of the step is made durable (DataStore::SyncFiles: one
//      syncfs of the cache filesystem for many files), then the backing
//      directory;
//   4. CommitPort::FinishCommit writes the one synced manifest batch.
//
// Run index files (DeepSpeed `latest`, RecIS `checkpoint`) are read on the
// worker thread too, and ask for the commits of the steps they name.
// A second thread asks for idle and settled commits once a second.
// The coordinator sees the namespace only through CommitPort (FileSystem
// implements it), and reads and fsyncs backing files in the DataStore.
// Thread safety: Request() may be called from any thread, including with
// the namespace lock held (it only takes queue_mu_).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "data/data_store.h"
#include "namespace/commit_port.h"

namespace ckptfs {

class CommitCoordinator {
 public:
  // steps, data and clock must outlive the coordinator.
  CommitCoordinator(CommitPort* steps, DataStore* data, const Clock* clock);
  ~CommitCoordinator();  // finishes the commit in progress, drops the queue
  CommitCoordinator(const CommitCoordinator&) = delete;
  CommitCoordinator& operator=(const CommitCoordinator&) = delete;

  void Request(uint64_t step_ino);
  // Asks again after delay_ns (cluster commits waiting for other nodes).
  void RequestAfter(uint64_t step_ino, int64_t delay_ns);
  // A run index file was closed: read it and commit the steps it names.
  void RequestIndex(uint64_t file_ino, uint64_t session);
  // Runs queued commits on the calling thread until the queue is empty; for
  // tests that construct the coordinator with threads off.
  void DrainForTest();

  // Without threads: Request only queues; DrainForTest runs the commits.
  static std::unique_ptr<CommitCoordinator> CreateWithoutThreads(CommitPort* steps, DataStore* data,
                                                                 const Clock* clock);

 private:
  CommitCoordinator(CommitPort* steps, DataStore* data, const Clock* clock, bool threads);
  void WorkerLoop();
  void IdleLoop();
  // Both call into the CommitPort, which may call Request back (it takes
  // queue_mu_): never with queue_mu_ held.
  void Commit(uint64_t step_ino) EXCLUDES(queue_mu_);
  void ReadIndex(uint64_t file_ino, uint64_t session) EXCLUDES(queue_mu_);
  // The delay before the next attempt of a cluster commit that waits for
  // another node's open writers (doubling per step), and its reset once a
  // gather of the step's parts finds none.
  int64_t OpenWritersBackoff(uint64_t step_ino) EXCLUDES(queue_mu_);
  void ForgetOpenWritersBackoff(uint64_t step_ino) EXCLUDES(queue_mu_);

  CommitPort* const steps_;
  DataStore* const data_;
  const Clock* const clock_;
  Mutex queue_mu_;
  std::condition_variable queue_cv_;  // the worker waits here for requests
  std::condition_variable stop_cv_;   // the idle thread sleeps here between scans
  std::deque<uint64_t> queue_ GUARDED_BY(queue_mu_);
  std::set<uint64_t> queued_ GUARDED_BY(queue_mu_);
  // Requests to make later: (monotonic deadline, step), by deadline.
  std::multimap<int64_t, uint64_t> delayed_ GUARDED_BY(queue_mu_);
  // Steps whose commit waits for another node's open writers: the next delay.
  std::map<uint64_t, int64_t> open_writers_backoff_ GUARDED_BY(queue_mu_);
  // Index files to read, with the session of their writer.
  std::deque<std::pair<uint64_t, uint64_t>> index_queue_ GUARDED_BY(queue_mu_);
  bool stopping_ GUARDED_BY(queue_mu_) = false;
  std::thread worker_;
  std::thread idle_;
};

}  // namespace ckptfs
