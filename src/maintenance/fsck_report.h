// How `ckptfs fsck` shows a report: one line per finding and a summary for
// people, or one JSON document for programs, and the exit code
// (docs/operations.md, "fsck").
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "maintenance/fsck.h"

namespace ckptfs {

// Exit codes. Like e2fsck, a run that changed the cache says so with its own
// code, so a script can tell "repaired, now clean" from "clean".
inline constexpr int kFsckClean = 0;         // nothing found
inline constexpr int kFsckProblemsLeft = 1;  // findings not repaired (all of them without --repair)
inline constexpr int kFsckOperational = 2;   // bad usage, not a cache, cache in use, unreadable
inline constexpr int kFsckAllRepaired = 3;   // --repair fixed everything it found

int FsckExitCode(const FsckReport& report);

// "error: run1/step100/model.pt: backing file ... (committed data lost: ...)"
std::string RenderFsckFinding(const FsckFinding& finding);
// Every finding, then "fsck: N files, M steps checked; E errors, W warnings, R repaired".
std::string RenderFsckText(const FsckReport& report);
nlohmann::json FsckReportJson(const FsckReport& report);

}  // namespace ckptfs
