// `ckptfs status [MOUNTPOINT] [--json]`: what is saved, at a glance. Reads
// MOUNTPOINT/.ckptfs/status.json, so it works for any user who can read the
// mount and never talks to the daemon otherwise.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ckptfs {

// The table for a parsed status.json; now_s is the current unix time (ages).
std::string RenderStatusTable(const nlohmann::json& status, double now_s);

// argv[0] is "status". Returns the exit code.
int StatusCommand(int argc, char** argv);

}  // namespace ckptfs
