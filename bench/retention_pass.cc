// Times one retention pass over a run directory of N committed steps (default
// 1,000), the way the daemon runs it inside a commit: FileSystem's plan over
// its in-memory steps (pinned and scored steps included) through the
// RetentionPlanner. Uses in-memory stores, so it measures the pass itself,
// not the disk. Prints the median of R passes and the 100 ms target.
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/clock.h"
#include "control/event_log.h"
#include "data/memory_data_store.h"
#include "lifecycle/commit_coordinator.h"
#include "manifest/memory_manifest_store.h"
#include "namespace/filesystem.h"

using namespace ckptfs;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 50;
  ManualClock clock;
  EventLog events;
  FileSystemOptions options;
  // Every rule at once, none of which removes anything from this history,
  // so each pass plans the same 1,000 steps.
  for (auto [rule, value] : std::vector<std::pair<const char*, const char*>>{
           {"keep_last", "1000000"}, {"keep_every", "10"}, {"keep_steps", "1,2,3"},
           {"keep_interval", "1h"}, {"keep_best", "5"}}) {
    if (!SetPolicyRule(rule, value, &options.retention).ok()) return 1;
  }
  auto fs = FileSystem::Open(options, std::make_unique<MemoryManifestStore>(),
                             std::make_unique<MemoryDataStore>(), &clock, &events);
  if (!fs.ok()) {
    std::fprintf(stderr, "%s\n", fs.status().ToString().c_str());
    return 1;
  }
  auto coordinator = CommitCoordinator::CreateWithoutThreads(fs->get(), (*fs)->data(), (*fs)->clock());
  const Caller root{.uid = 0, .gid = 0};
  auto run = (*fs)->Mkdir(root, kRootIno, "run", 0755);
  for (int i = 1; i <= steps; ++i) {
    auto step = (*fs)->Mkdir(root, run->ino, "step" + std::to_string(i), 0755);
    auto file = (*fs)->Create(root, step->ino, "shard", 0644, O_WRONLY);
    (void)(*fs)->Write(file->second.fh, "x", 1, 0);
    (void)(*fs)->Release(file->second.fh);
    (void)(*fs)->SetXattr(step->ino, "user.ckptfs.score", std::to_string(i % 97), 0);
    if (i % 50 == 0) (void)(*fs)->SetXattr(step->ino, "user.ckptfs.pin", "1", 0);
    (*fs)->RequestCommit(step->ino);
    coordinator->DrainForTest();
    clock.Advance(60'000'000'000);
  }
  std::vector<double> ms;
  size_t kept = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto plan = (*fs)->PlanRetentionFor(run->ino);
    const auto t1 = std::chrono::steady_clock::now();
    if (!plan.ok() || plan->size() != static_cast<size_t>(steps)) return 1;
    kept = static_cast<size_t>(std::count_if(plan->begin(), plan->end(), [](auto& d) { return d.keep; }));
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("retention pass over %d committed steps (%zu kept): median %.3f ms, max %.3f ms over %d passes\n",
              steps, kept, ms[ms.size() / 2], ms.back(), rounds);
  std::printf("target < 100 ms: %s\n", ms[ms.size() / 2] < 100 ? "met" : "NOT met");
  return 0;
}
