#include "cli/status_command.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "cli/mount_table.h"

namespace ckptfs {

namespace {

std::string HumanBytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, kUnits[unit]);
  return buf;
}

std::string HumanAge(double seconds) {
  if (seconds < 0) seconds = 0;
  char buf[32];
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.0fs", seconds);
  } else if (seconds < 3600) {
    std::snprintf(buf, sizeof buf, "%.0fm", seconds / 60);
  } else if (seconds < 86400) {
    std::snprintf(buf, sizeof buf, "%.1fh", seconds / 3600);
  } else {
    std::snprintf(buf, sizeof buf, "%.1fd", seconds / 86400);
  }
  return buf;
}

// Where a step's data is: "local" (no remote, or not committed yet),
// "remote" once persisted (safe in the remote; may be cached here too),
// "up 42%" while its upload runs.
std::string Where(const nlohmann::json& step) {
  if (step.value("persisted", false)) return "remote";
  if (!step.contains("upload") || !step["upload"].is_object()) return "local";
  const double total = step["upload"].value("bytes_total", 0.0);
  const double done = step["upload"].value("bytes_done", 0.0);
  char buf[32];
  std::snprintf(buf, sizeof buf, "up %.0f%%", total > 0 ? 100.0 * done / total : 100.0);
  return buf;
}

std::string ProgressBar(double fraction, int width) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  const int full = static_cast<int>(fraction * width + 0.5);
  return "[" + std::string(static_cast<size_t>(full), '#') + std::string(static_cast<size_t>(width - full), '.') + "]";
}

// Steps still uploading, oldest commit first (the order uploads drain in):
// a bar, bytes, the remote's recent rate and an ETA that counts the steps
// ahead of each one.
void RenderUploads(const nlohmann::json& status, std::ostringstream& out) {
  std::vector<nlohmann::json> uploading;
  for (const auto& s : status.value("steps", nlohmann::json::array())) {
    if (s.value("persisted", false) || !s.contains("upload") || !s["upload"].is_object()) continue;
    if (s.value("state", "") != "committed") continue;
    uploading.push_back(s);
  }
  if (uploading.empty()) return;
  std::sort(uploading.begin(), uploading.end(), [](const auto& a, const auto& b) {
    const auto& ta = a["committed_at"];
    const auto& tb = b["committed_at"];
    return (ta.is_number() ? ta.template get<double>() : 0) < (tb.is_number() ? tb.template get<double>() : 0);
  });
  double rate = 0;
  if (status.contains("remote") && status["remote"].is_object()) {
    rate = status["remote"].value("upload_rate_bytes_per_s", 0.0);
  }
  out << "\nuploading (" << (rate > 0 ? HumanBytes(rate) + "/s" : std::string("rate not known yet")) << ")\n";
  double ahead = 0;  // bytes of older steps still to upload
  for (const auto& s : uploading) {
    const double total = s["upload"].value("bytes_total", 0.0);
    const double done = s["upload"].value("bytes_done", 0.0);
    const double left = std::max(0.0, total - done);
    ahead += left;
    std::string eta = "-";
    if (rate > 0) eta = "ETA " + HumanAge(ahead / rate);
    char line[320];
    std::snprintf(line, sizeof line, "  %-24s %s %3.0f%%  %s of %s  %s\n", s.value("path", "?").c_str(),
                  ProgressBar(total > 0 ? done / total : 1.0, 20).c_str(), total > 0 ? 100.0 * done / total : 100.0,
                  HumanBytes(done).c_str(), HumanBytes(total).c_str(), eta.c_str());
    out << line;
  }
}

// What ckptfs holds, then the cache filesystem's free space beside it: the
// filesystem's own "used" counts whatever else shares the disk, so it is not
// shown. A status.json from a daemon without the holdings (older versions)
// shows the disk alone.
void RenderCache(const nlohmann::json& status, std::ostringstream& out) {
  const auto& cache = status["cache"];
  const double total = cache.value("bytes_total", 0.0);
  const double free_bytes = cache.value("bytes_free", 0.0);
  out << "cache: " << cache.value("dir", "?");
  if (cache.contains("local_bytes")) out << ", ckptfs holds " << HumanBytes(cache.value("local_bytes", 0.0));
  out << "; disk " << HumanBytes(free_bytes) << " free of " << HumanBytes(total) << "\n";
  if (cache.contains("committed_bytes")) {
    out << "  steps: " << HumanBytes(cache.value("committed_bytes", 0.0)) << " committed";
    // Persisted and evictable mean something only with a remote.
    if (status.contains("remote")) {
      out << " (" << HumanBytes(cache.value("persisted_bytes", 0.0)) << " persisted, "
          << HumanBytes(cache.value("evictable_bytes", 0.0)) << " evictable)";
    }
    out << ", " << HumanBytes(cache.value("writing_bytes", 0.0)) << " being written\n";
  }
  if (cache.value("bytes_limit", 0.0) > 0) {
    out << "  --cache-size: " << HumanBytes(cache.value("bytes_used", 0.0)) << " of "
        << HumanBytes(cache.value("bytes_limit", 0.0)) << " used\n";
  }
}

}  // namespace

std::string RenderStatusTable(const nlohmann::json& status, double now_s) {
  std::ostringstream out;
  out << "ckptfs " << status.value("version", "?") << " (pid " << status.value("pid", 0) << ") on "
      << status.value("mountpoint", "?") << "\n";
  if (status.contains("cache") && status["cache"].is_object()) RenderCache(status, out);
  // Only when something is wrong: a healthy manifest is the normal case.
  if (status.contains("manifest") && status["manifest"].is_object() &&
      status["manifest"].value("state", "ok") != "ok") {
    const auto& manifest = status["manifest"];
    out << "manifest: FAILING, read-only (" << manifest.value("errno", "?") << "): "
        << manifest.value("error", "?") << "\n";
    out << "  " << (manifest.value("needs_remount", false)
                         ? "remount once space is freed"
                         : "free space on the cache filesystem; writes resume by themselves")
        << "\n";
  }
  if (status.contains("passthrough") && status["passthrough"].is_object()) {
    // Whether reads and writes of local files bypass the daemon, and if not why.
    const auto& pt = status["passthrough"];
    out << "passthrough: ";
    if (pt.value("active", false)) {
      out << "on, " << pt.value("opens", 0) << " open(s) passed to the kernel\n";
    } else {
      out << "off: " << pt.value("reason", std::string("?")) << "\n";
    }
  }
  if (status.contains("fuse") && status["fuse"].is_object() &&
      status["fuse"].contains("io_uring")) {
    // How requests reach the daemon: io_uring answers them on the CPU that
    // made them, which matters most for many small files.
    const auto& ring = status["fuse"]["io_uring"];
    out << "fuse transport: ";
    if (ring.value("active", false)) {
      out << "io_uring, " << ring.value("requests", 0) << " request(s) served through it\n";
    } else {
      out << "/dev/fuse (io_uring: " << ring.value("reason", std::string("?")) << ")\n";
    }
  }
  if (status.contains("remote") && status["remote"].is_object()) {
    const auto& remote = status["remote"];
    out << "remote: " << remote.value("url", "?") << ", ";
    if (remote.value("healthy", false)) {
      out << "ok";
    } else {
      out << "FAILING: " << (remote["last_error"].is_string() ? remote["last_error"].get<std::string>() : "?");
    }
    out << "; " << remote.value("uploads_in_flight", 0) << " upload(s) in flight, "
        << HumanBytes(remote.value("bytes_uploaded", 0.0)) << " uploaded\n";
  }
  // One table per run directory, in path order; steps by number.
  std::map<std::string, std::vector<nlohmann::json>> runs;
  for (const auto& step : status.value("steps", nlohmann::json::array())) {
    const std::string path = step.value("path", "");
    const size_t slash = path.rfind('/');
    runs[slash == std::string::npos ? "/" : path.substr(0, slash)].push_back(step);
  }
  if (runs.empty()) out << "\nno checkpoint steps yet\n";
  for (auto& [run, steps] : runs) {
    std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) {
      return a.value("step", 0LL) < b.value("step", 0LL);
    });
    out << "\n" << run << "\n";
    char line[256];
    std::snprintf(line, sizeof line, "  %-10s %-11s %10s %7s  %-7s %6s  %s\n", "STEP", "STATE", "SIZE",
                  "FILES", "WHERE", "AGE", "NOTE");
    out << line;
    for (const auto& s : steps) {
      const bool committed = s.value("state", "") == "committed";
      const auto& at = s["committed_at"];
      const std::string age = committed && at.is_number() ? HumanAge(now_s - at.get<double>()) : "-";
      std::snprintf(line, sizeof line, "  %-10lld %-11s %10s %7lld  %-7s %6s  %s\n",
                    static_cast<long long>(s.value("step", 0LL)), s.value("state", "?").c_str(),
                    HumanBytes(s.value("bytes", 0.0)).c_str(), static_cast<long long>(s.value("files", 0LL)),
                    Where(s).c_str(), age.c_str(), s.value("error", "").c_str());
      out << line;
    }
  }
  RenderUploads(status, out);
  return out.str();
}

int StatusCommand(int argc, char** argv) {
  std::string mnt = "/ckpt";
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "-h" || arg == "--help") {
      std::puts("usage: ckptfs status [MOUNTPOINT] [--json]   (MOUNTPOINT defaults to /ckpt)");
      return 0;
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "ckptfs status: unknown option %s\n", arg.c_str());
      return 2;
    } else {
      mnt = arg;
    }
  }
  if (FsTypeOf(mnt) != "fuse.ckptfs") {
    std::fprintf(stderr, "ckptfs status: %s is not a ckptfs mount\n", mnt.c_str());
    return 1;
  }
  std::ifstream in(mnt + "/.ckptfs/status.json");
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    std::fprintf(stderr, "ckptfs status: cannot read %s/.ckptfs/status.json\n", mnt.c_str());
    return 1;
  }
  if (json) {
    std::fputs(text.str().c_str(), stdout);
    return 0;
  }
  auto status = nlohmann::json::parse(text.str(), nullptr, false);
  if (status.is_discarded()) {
    std::fprintf(stderr, "ckptfs status: %s/.ckptfs/status.json is not valid JSON\n", mnt.c_str());
    return 1;
  }
  std::fputs(RenderStatusTable(status, static_cast<double>(std::time(nullptr))).c_str(), stdout);
  return 0;
}

}  // namespace ckptfs
