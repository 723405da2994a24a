// CheckCache runs the passes over one image; RepairCache applies the plan.
// See fsck.h.
#include "maintenance/fsck.h"

#include <sys/stat.h>

#include <algorithm>

#include "maintenance/fsck_state.h"

namespace ckptfs {

const char* FsckSeverityName(FsckSeverity severity) {
  return severity == FsckSeverity::kError ? "error" : "warning";
}

size_t FsckReport::errors() const {
  return static_cast<size_t>(std::count_if(findings.begin(), findings.end(), [](const FsckFinding& f) {
    return f.severity == FsckSeverity::kError;
  }));
}

size_t FsckReport::warnings() const { return findings.size() - errors(); }

size_t FsckReport::repaired() const {
  return static_cast<size_t>(
      std::count_if(findings.begin(), findings.end(), [](const FsckFinding& f) { return f.repaired; }));
}

size_t FsckReport::remaining() const { return findings.size() - repaired(); }

namespace {

void Count(const fsck::State& st, FsckCounts* counts) {
  counts->inodes = st.inodes.size();
  for (const auto& [ino, rec] : st.inodes) {
    if (S_ISDIR(rec.mode)) counts->directories++;
    if (S_ISREG(rec.mode)) counts->files++;
    if (S_ISLNK(rec.mode)) counts->symlinks++;
  }
  counts->steps = st.steps.size();
  for (const auto& [ino, rec] : st.steps) {
    if (rec.state == StepState::kCommitted) counts->committed_steps++;
  }
  counts->backing_files = st.backing.size();
}

}  // namespace

Result<FsckReport> CheckCache(ManifestStore* manifest, DataStore* data, const FsckOptions& options) {
  FsckReport report;
  fsck::State st(manifest, data, options, &report);
  CKPTFS_RETURN_IF_ERROR(fsck::LoadImage(st));
  Count(st, &report.counts);  // what the cache holds, before any planned fix
  st.EndPass();
  fsck::CheckRecords(st);
  st.EndPass();
  fsck::CheckTree(st);
  st.EndPass();
  fsck::CheckData(st);
  st.EndPass();
  fsck::CheckSteps(st);
  fsck::CheckCrc(st);
  st.FinishPlan();
  return report;
}

Status RepairCache(ManifestStore* manifest, DataStore* data, FsckReport* report) {
  if (!report->repair_blocked.empty()) return Status::Ok();  // nothing was planned
  for (size_t g = 0; g < report->plan.size(); ++g) {
    const FsckRepairGroup& group = report->plan[g];
    // The manifest first and synced: data is removed only once nothing
    // durable names it any more (as recovery and the GC do).
    if (!group.batch.empty()) {
      CKPTFS_RETURN_IF_ERROR(
          manifest->Write(group.batch, /*sync=*/true).Annotate("fsck " + group.name + " fixes"));
    }
    for (uint64_t ino : group.remove_backing) {
      CKPTFS_RETURN_IF_ERROR(data->Remove(ino).Annotate("fsck " + group.name + " fixes"));
    }
    for (uint64_t ino : group.create_backing) {
      auto file = data->Open(ino, /*create=*/true);
      if (!file.ok()) return file.status().Annotate("fsck " + group.name + " fixes");
    }
    if (!group.remove_backing.empty() || !group.create_backing.empty()) {
      CKPTFS_RETURN_IF_ERROR(data->SyncDir().Annotate("fsck " + group.name + " fixes"));
    }
    for (FsckFinding& f : report->findings) {
      if (f.group == static_cast<int>(g)) f.repaired = true;
    }
  }
  return Status::Ok();
}

}  // namespace ckptfs
