#include "cli/fsck_command.h"

#include <signal.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "data/posix_data_store.h"
#include "maintenance/fsck.h"
#include "maintenance/fsck_report.h"
#include "manifest/rocksdb_manifest_store.h"
#include "tiering/open_remote.h"

namespace ckptfs {

const char* const kFsckUsage =
    "usage: ckptfs fsck CACHE_DIR [--repair] [--crc [--remote URL [--s3-* ...]]] [--json]\n"
    "\n"
    "Checks an unmounted ckptfs cache: every manifest record decodes, the directory\n"
    "tree is consistent, every local file has a backing file of its recorded size,\n"
    "committed steps hold what their commit recorded. Refuses a cache in use.\n"
    "\n"
    "  --repair  fix what can be fixed without losing committed data (leftover\n"
    "            records and backing files, link counts, sizes of files not yet\n"
    "            committed, unreachable inodes go to lost+found); lost committed\n"
    "            data is reported, never deleted\n"
    "  --crc     also recompute the CRC32C of committed files the remote holds\n"
    "            and compare it with the one recorded at upload (reads all of it)\n"
    "  --remote URL  with --crc: the mount's remote (s3://BUCKET/PREFIX or file:///DIR);\n"
    "            every committed file's remote object is read and checked as well,\n"
    "            so fsck says which copy is bad: a corrupt local copy is re-fetched,\n"
    "            a corrupt remote object re-uploaded (by the next mount), both\n"
    "            corrupt is reported as lost; files with no local copy are checked\n"
    "            in the remote alone\n"
    "  --s3-endpoint URL, --s3-region REGION, --s3-addressing path|virtual\n"
    "            as for ckptfs mount\n"
    "  --json    print the report as one JSON document\n"
    "\n"
    "Exit status: 0 clean; 1 problems found (and not all repaired); 2 usage or\n"
    "operational error (not a cache, cache in use); 3 every problem found was\n"
    "repaired.\n";

namespace {

constexpr size_t kEventsTail = 1 << 20;  // the last mount is near the end

int Operational(const std::string& message) {
  std::fprintf(stderr, "ckptfs fsck: %s\n", message.c_str());
  return kFsckOperational;
}

bool IsDir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool PidAlive(long long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

std::string DescribeCacheInUse(const std::string& cache_dir) {
  std::string mountpoint;
  long long pid = 0;
  std::ifstream in(cache_dir + "/events.jsonl", std::ios::binary);
  if (in) {
    in.seekg(0, std::ios::end);
    const std::streamoff size = in.tellg();
    in.seekg(size > static_cast<std::streamoff>(kEventsTail) ? size - static_cast<std::streamoff>(kEventsTail)
                                                             : 0);
    std::string line;
    while (std::getline(in, line)) {
      auto e = nlohmann::json::parse(line, nullptr, false);
      if (e.is_discarded() || !e.is_object()) continue;  // a line cut by the seek
      const std::string event = e.value("event", "");
      if (event == "mount") {
        mountpoint = e.value("mountpoint", "");
        pid = e.value("pid", 0LL);
      } else if (event == "unmount" && e.value("mountpoint", "") == mountpoint) {
        mountpoint.clear();
        pid = 0;
      }
    }
  }
  if (!mountpoint.empty() && PidAlive(pid)) {
    return cache_dir + " is in use by a running ckptfs (mounted at " + mountpoint + ", pid " +
           std::to_string(pid) + "); unmount first: fusermount3 -u " + mountpoint;
  }
  return cache_dir +
         " is in use by another process (a running ckptfs daemon, or another ckptfs fsck); "
         "unmount it or let it finish first";
}

int FsckCommand(int argc, char** argv) {
  bool repair = false;
  bool json = false;
  FsckOptions options;
  RemoteSpec remote;
  std::string cache;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kFsckUsage, stdout);
      return kFsckClean;
    }
    if (arg == "--repair") {
      repair = true;
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--crc") {
      options.verify_crc = true;
    } else if (arg == "--remote" || arg == "--s3-endpoint" || arg == "--s3-region" || arg == "--s3-addressing") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ckptfs fsck: %s needs a value\n%s", arg.c_str(), kFsckUsage);
        return kFsckOperational;
      }
      const std::string value = argv[++i];
      if (arg == "--remote") remote.url = value;
      if (arg == "--s3-endpoint") remote.s3_endpoint = value;
      if (arg == "--s3-region") remote.s3_region = value;
      if (arg == "--s3-addressing") remote.s3_addressing = value;
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "ckptfs fsck: unknown option '%s'\n%s", arg.c_str(), kFsckUsage);
      return kFsckOperational;
    } else if (cache.empty()) {
      cache = arg;
    } else {
      std::fprintf(stderr, "ckptfs fsck: one CACHE_DIR only ('%s' and '%s')\n%s", cache.c_str(), arg.c_str(),
                   kFsckUsage);
      return kFsckOperational;
    }
  }
  if (cache.empty()) {
    std::fputs(kFsckUsage, stderr);
    return kFsckOperational;
  }
  std::unique_ptr<ObjectStore> store;
  if (!remote.url.empty() || !remote.s3_endpoint.empty() || !remote.s3_region.empty() ||
      !remote.s3_addressing.empty()) {
    if (!options.verify_crc || remote.url.empty()) {
      std::fprintf(stderr, "ckptfs fsck: --remote and the --s3-* options go with --crc --remote URL\n%s", kFsckUsage);
      return kFsckOperational;
    }
    Status valid = ValidateRemoteSpec(remote);
    if (!valid.ok()) return Operational(valid.message());
    auto opened = OpenRemote(remote);
    if (!opened.ok()) return Operational("cannot open the remote: " + opened.status().message());
    store = std::move(opened).value();
    options.remote = store.get();
  }
  char* real = ::realpath(cache.c_str(), nullptr);
  if (!real) return Operational(cache + ": " + std::strerror(errno));
  const std::string dir(real);
  std::free(real);
  if (!IsDir(dir)) return Operational(dir + " is not a directory");
  // Checked before opening: RocksDB would create a manifest where none is.
  if (!Exists(dir + "/manifest/CURRENT")) {
    return Operational(dir + " is not a ckptfs cache directory (no manifest/ in it)");
  }
  if (!IsDir(dir + "/data")) {
    return Operational(dir +
                       "/data is missing: not a ckptfs cache directory, or its data directory was removed");
  }

  // Opening takes RocksDB's LOCK, which a mounted daemon holds for as long as
  // it runs; holding it here also keeps a mount from starting meanwhile.
  auto manifest = RocksDbManifestStore::Open(dir + "/manifest");
  if (!manifest.ok() && manifest.err() == ENOSPC && !repair) {
    // Opening for writing replays the WAL into new files, which a full disk
    // refuses; checking needs no writes.
    std::fprintf(stderr,
                 "ckptfs fsck: warning: the cache filesystem is full (%s); checking the manifest "
                 "read-only (free space to mount or repair)\n",
                 manifest.status().message().c_str());
    manifest = RocksDbManifestStore::OpenReadOnly(dir + "/manifest");
  }
  if (!manifest.ok()) {
    if (manifest.err() == EBUSY) return Operational(DescribeCacheInUse(dir));
    if (manifest.err() == ENOSPC) {
      return Operational("cannot open the manifest: the cache filesystem is full (" +
                         manifest.status().message() + "); free space on it first");
    }
    return Operational("cannot open the manifest: " + manifest.status().message());
  }
  auto data = PosixDataStore::OpenDir(dir + "/data");
  if (!data.ok()) return Operational("cannot open the data directory: " + data.status().message());

  auto report = CheckCache(manifest->get(), data->get(), options);
  if (!report.ok()) return Operational(report.status().message());
  Status repaired;
  if (repair) repaired = RepairCache(manifest->get(), data->get(), &*report);

  if (json) {
    nlohmann::json j = FsckReportJson(*report);
    j["cache"] = dir;
    j["repair"] = repair;
    j["crc"] = options.verify_crc;
    if (store) j["remote"] = store->Describe();
    if (!repaired.ok()) {
      j["repair_error"] = repaired.message();
      j["exit_code"] = kFsckOperational;
    }
    std::fputs((j.dump(2) + "\n").c_str(), stdout);
  } else {
    std::fputs(RenderFsckText(*report).c_str(), stdout);
  }
  if (!repaired.ok()) return Operational("repair stopped: " + repaired.message());
  return FsckExitCode(*report);
}

}  // namespace ckptfs
