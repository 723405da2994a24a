// A trainer process's identity across pid reuse: its pid and its start time
// (/proc/<pid>/stat), so that a restarted trainer is a new session even when
// it gets the same pid. The recis retention preset counts only the steps one
// trainer process saved, as RecIS's Saver does.
#pragma once

#include <cstdint>
#include <string>

namespace ckptfs {

// 0 never names a session; pid itself when the start time cannot be read
// (the process is gone, or /proc is not this pid namespace's).
uint64_t ProcessSession(uint32_t pid);

// The start time field of a /proc/<pid>/stat line, or 0 when malformed
// (the command name may hold spaces and parentheses).
uint64_t StartTimeFromStat(const std::string& stat_line);

}  // namespace ckptfs
