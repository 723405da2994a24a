#include "cli/mount_options.h"

#include "cli/cache_dir.h"
#include "cli/mount_table.h"
#include "formats/node_name.h"

#include <fcntl.h>
#include <getopt.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ckptfs {

const char* const kMountUsage =
    "usage: ckptfs mount MOUNTPOINT [options]\n"
    "\n"
    "  --cache DIR            local cache: manifest and file data (default /var/lib/ckptfs;\n"
    "                         a directory given here must exist)\n"
    "  --metadata-reserve SIZE|PCT%  free space on the cache filesystem kept for the\n"
    "                         manifest: file data gets ENOSPC below it, so mkdir, xattrs and\n"
    "                         commits still work on a full disk (default: 64M or 1%, the\n"
    "                         larger; 0 = off)\n"
    "  -f, --foreground       stay attached instead of running in the background\n"
    "  --step-pattern REGEX   checkpoint directory names; one capture group = step number\n"
    "                         (default: step100, step-100, step_100, ckpt_100,\n"
    "                         checkpoint-100, global_step100, iter_0000100)\n"
    "  --commit-marker NAME   file whose close commits its step; repeatable, replaces the\n"
    "                         defaults .metadata, .metadata.json, metadata.json,\n"
    "                         trainer_state.json\n"
    "  --commit-idle SECONDS  commit a step after SECONDS without writes or open files\n"
    "  --commit-wait SECONDS  how long a commit waits for open files to close (default 600)\n"
    "  --commit-settle SECONDS  steps whose metadata lists no files (Hugging Face, DeepSpeed)\n"
    "                         commit after SECONDS without writes, for late ranks (default 2;\n"
    "                         0 = at once)\n"
    "  --show-full            list the hidden .full/ directories of committed checkpoints\n"
    "                         (full-tensor views; always reachable by name)\n"
    "  --show-latest          list the virtual latest links of run directories (hidden by\n"
    "                         default: trainers parse every entry; reachable by name)\n"
    "  --nonempty             mount over a mountpoint that is not empty (its files are hidden\n"
    "                         while mounted; refused by default)\n"
    "  -o OPTIONS             FUSE mount options (comma-separated), e.g. -o allow_other\n"
    "  --inode-cache N        inodes of committed steps kept in memory (default 250000): past\n"
    "                         it, steps nobody uses are dropped, least recently used first,\n"
    "                         and read again from the manifest when next used (with --remote,\n"
    "                         once persisted)\n"
    "  --log-level LEVEL      events also logged to stderr (journald; CACHE/ckptfs.log in the\n"
    "                         background): debug, info (default), warning, error\n"
    "\n"
    "object storage (committed steps are uploaded in the background; see ckptfs(1)):\n"
    "  --remote URL           s3://BUCKET/PREFIX or file:///DIR\n"
    "  --s3-endpoint URL      S3 endpoint, e.g. http://127.0.0.1:9000 (default: AWS for the "
    "region)\n"
    "  --s3-region REGION     signing region (default: AWS_REGION, else us-east-1)\n"
    "  --s3-addressing path|virtual  bucket in the path or in the host name (default: virtual\n"
    "                         for AWS, path for other endpoints)\n"
    "                         credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /\n"
    "                         AWS_SESSION_TOKEN, else ~/.aws/credentials (AWS_PROFILE);\n"
    "                         AWS_CA_BUNDLE names extra trusted certificates\n"
    "  --cache-size BYTES     cap on cached file data (e.g. 500G); persisted data is evicted\n"
    "                         least recently used first; needs --remote\n"
    "  --cache-full-wait SECONDS  how long a write waits for room before ENOSPC (default 60)\n"
    "  --upload-parallel N    files uploaded at once (default 8)\n"
    "\n"
    "cluster mode (several nodes, one checkpoint; see docs/cluster.md):\n"
    "  --node NAME            this node's name in the cluster sharing --remote (needed):\n"
    "                         1-63 characters from A-Z a-z 0-9 . _ -; the cache is bound\n"
    "                         to it from its first cluster mount\n"
    "  --nodes N              the job's node count (as torchrun's --nnodes), the same on\n"
    "                         every node: a step whose format lists no files (Hugging\n"
    "                         Face, DeepSpeed, Megatron) commits once N nodes have\n"
    "                         published their parts with nothing open; without it such a\n"
    "                         step waits (DCP and OLMo-core steps do not need it)\n"
    "  --replace-node         take the --node name over from the cache that holds it (a\n"
    "                         node that is gone for good); its daemon, if it still runs,\n"
    "                         can no longer write into the cluster's steps\n"
    "  --refresh SECONDS      how old a run directory's view of the other nodes' steps may\n"
    "                         get before a lookup reads the remote again (default 1)\n"
    "  --publish-timeout SECONDS  how long the first open for writing of a step on this\n"
    "                         node, or a rename in a step, waits for the bucket to take\n"
    "                         this node's part record before it fails with EIO (default\n"
    "                         60; up to 86400); close and fsync never wait for the bucket\n"
    "  --read-wait SECONDS    how long a read of another node's file waits for that node to\n"
    "                         upload it before it fails with EIO (default 600; up to 86400)\n"
    "\n"
    "kernel passthrough (reads and writes of local files bypass the daemon; Linux 6.9+):\n"
    "  --passthrough auto|on|off  auto (default): used when the kernel offers it and the\n"
    "                         daemon has CAP_SYS_ADMIN; on: the mount fails otherwise\n"
    "\n"
    "FUSE over io_uring (requests answered on the CPU that made them; Linux 6.14+):\n"
    "  --io-uring auto|on|off auto (default): used when the kernel offers it (the fuse\n"
    "                         module's enable_uring parameter); on: the mount fails otherwise\n"
    "\n"
    "writer library (libckptfs-writer writes backing files directly, bypassing FUSE):\n"
    "  --writer-socket PATH|none  its Unix socket (default CACHE/writer.sock); none turns\n"
    "                         the fast path off (the library then writes through FUSE)\n"
    "  --writer-idle-timeout SECONDS  close a writer connection that sends no request for\n"
    "                         this long (default 30); connections are also limited per user\n"
    "\n"
    "retention defaults for every run directory (override per run with\n"
    "setfattr -n user.ckptfs.keep_last -v 3 RUN_DIR; default: keep everything):\n"
    "  --keep-last N          keep the N newest committed steps\n"
    "  --keep-every K         steps divisible by K are permanent\n"
    "  --keep-steps A,B,C     these steps are permanent\n"
    "  --ephemeral-every E    steps divisible by E go once a newer step commits\n"
    "  --keep-interval DUR    keep one step per DUR of commit time (90s, 30m, 6h, 2d)\n"
    "  --keep-best N          keep the N best steps by user.ckptfs.score\n"
    "  --score-mode min|max   which scores are best (default min)\n"
    "  --retention PRESET     instead of the rules above, a trainer's own pruning (per run:\n"
    "                         setfattr -n user.ckptfs.retention -v PRESET RUN_DIR):\n"
    "                         olmo-core:save_interval=S[,ephemeral=E][,fixed=A,B][,remove=\n"
    "                         ephemeral_only|all_non_permanent|never], "
    "torchtitan:keep_latest_k=K,\n"
    "                         hf:save_total_limit=L, recis:max_keep=M\n";

namespace {

Result<double> ParseSeconds(const char* flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(v) || v <= 0 || v > 1e7) {
    return Status::Error(EINVAL, std::string(flag) + " takes a positive number of seconds, not '" +
                                     text + "'");
  }
  return v;
}

Result<std::string> AbsolutePath(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  if (!real) return Status::FromErrno(path);
  std::string out(real);
  free(real);
  return out;
}

// ENOTEMPTY when dir has an entry (its files would be hidden by the mount,
// which is rarely meant: a wrong path, or a cache left in the mountpoint).
Status CheckEmptyMountpoint(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return Status::FromErrno("mountpoint " + dir);
  std::string first;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      first = e->d_name;
      break;
    }
  }
  closedir(d);
  if (first.empty()) return Status::Ok();
  return Status::Error(ENOTEMPTY, "mountpoint " + dir + " is not empty (it holds " + first +
                                      "; the mount would hide its files): empty it, choose another "
                                      "directory, or pass --nonempty to mount over it anyway");
}

bool IsMountPoint(const std::string& path) {
  for (const MountEntry& m : ReadMountTable()) {
    if (m.mountpoint == path) return true;
  }
  return false;
}

}  // namespace

Result<uint64_t> ParseByteSize(const std::string& flag, const std::string& text) {
  auto bad = [&] {
    return Status::Error(EINVAL, flag + " takes a size such as 500G, 64MiB or 1073741824, not '" + text + "'");
  };
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || !std::isfinite(v) || v <= 0) return bad();
  std::string unit(end);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() == 3 && unit.substr(1) == "IB") unit = unit.substr(0, 1);
  if (unit.size() == 2 && unit[1] == 'B') unit = unit.substr(0, 1);
  double mult = 1;
  if (unit.empty() || unit == "B") {
    mult = 1;
  } else if (unit == "K") {
    mult = 1024.0;
  } else if (unit == "M") {
    mult = 1024.0 * 1024;
  } else if (unit == "G") {
    mult = 1024.0 * 1024 * 1024;
  } else if (unit == "T") {
    mult = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return bad();
  }
  const double bytes = v * mult;
  if (bytes < 1 || bytes > 9.0e18) return bad();
  return static_cast<uint64_t>(bytes);
}

Result<MetadataReserveSpec> ParseMetadataReserve(const std::string& text) {
  // One number, not the default's "larger of two": an operator who names a
  // size or a share means exactly that.
  if (text == "0") return MetadataReserveSpec{0, 0};
  if (!text.empty() && text.back() == '%') {
    char* end = nullptr;
    errno = 0;
    const std::string number = text.substr(0, text.size() - 1);
    const double pct = std::strtod(number.c_str(), &end);
    if (errno != 0 || number.empty() || *end != '\0' || !std::isfinite(pct) || pct < 0 || pct > 50) {
      return Status::Error(EINVAL, "--metadata-reserve takes a size such as 256M or a share of the "
                                   "cache filesystem from 0% to 50%, not '" + text + "'");
    }
    return MetadataReserveSpec{0, pct};
  }
  auto bytes = ParseByteSize("--metadata-reserve", text);
  if (!bytes.ok()) return bytes.status();
  return MetadataReserveSpec{*bytes, 0};
}

const char* SwitchName(MountOptions::Switch p) {
  switch (p) {
    case MountOptions::Passthrough::kOn:
      return "on";
    case MountOptions::Passthrough::kOff:
      return "off";
    case MountOptions::Passthrough::kAuto:
      break;
  }
  return "auto";
}

Result<MountOptions> ParseMountArgs(int argc, char** argv) {
  enum {
    kCache = 256,
    kWriterIdleTimeout,
    kStepPattern,
    kCommitMarker,
    kCommitIdle,
    kCommitWait,
    kRetentionRule,
    kRemote,
    kS3Endpoint,
    kS3Region,
    kS3Addressing,
    kCacheSize,
    kCacheFullWait,
    kUploadParallel,
    kWriterSocket,
    kLogLevel,
    kShowFull,
    kShowLatest,
    kCommitSettle,
    kNonEmpty,
    kMetadataReserve,
    kNode,
    kNodes,
    kReplaceNode,
    kRefresh,
    kPublishTimeout,
    kReadWait,
    kPassthrough,
    kIoUring,
    kInodeCache,
  };
  static const option kLong[] = {
      {"cache", required_argument, nullptr, kCache},
      {"foreground", no_argument, nullptr, 'f'},
      {"step-pattern", required_argument, nullptr, kStepPattern},
      {"commit-marker", required_argument, nullptr, kCommitMarker},
      {"commit-idle", required_argument, nullptr, kCommitIdle},
      {"commit-wait", required_argument, nullptr, kCommitWait},
      {"keep-last", required_argument, nullptr, kRetentionRule},
      {"keep-every", required_argument, nullptr, kRetentionRule},
      {"keep-steps", required_argument, nullptr, kRetentionRule},
      {"ephemeral-every", required_argument, nullptr, kRetentionRule},
      {"keep-interval", required_argument, nullptr, kRetentionRule},
      {"keep-best", required_argument, nullptr, kRetentionRule},
      {"score-mode", required_argument, nullptr, kRetentionRule},
      {"retention", required_argument, nullptr, kRetentionRule},
      {"remote", required_argument, nullptr, kRemote},
      {"s3-endpoint", required_argument, nullptr, kS3Endpoint},
      {"s3-region", required_argument, nullptr, kS3Region},
      {"s3-addressing", required_argument, nullptr, kS3Addressing},
      {"cache-size", required_argument, nullptr, kCacheSize},
      {"cache-full-wait", required_argument, nullptr, kCacheFullWait},
      {"upload-parallel", required_argument, nullptr, kUploadParallel},
      {"writer-socket", required_argument, nullptr, kWriterSocket},
      {"writer-idle-timeout", required_argument, nullptr, kWriterIdleTimeout},
      {"log-level", required_argument, nullptr, kLogLevel},
      {"show-full", no_argument, nullptr, kShowFull},
      {"show-latest", no_argument, nullptr, kShowLatest},
      {"metadata-reserve", required_argument, nullptr, kMetadataReserve},
      {"commit-settle", required_argument, nullptr, kCommitSettle},
      {"nonempty", no_argument, nullptr, kNonEmpty},
      {"node", required_argument, nullptr, kNode},
      {"nodes", required_argument, nullptr, kNodes},
      {"replace-node", no_argument, nullptr, kReplaceNode},
      {"refresh", required_argument, nullptr, kRefresh},
      {"publish-timeout", required_argument, nullptr, kPublishTimeout},
      {"read-wait", required_argument, nullptr, kReadWait},
      {"passthrough", required_argument, nullptr, kPassthrough},
      {"io-uring", required_argument, nullptr, kIoUring},
      {"inode-cache", required_argument, nullptr, kInodeCache},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  MountOptions o;
  bool markers_given = false;
  bool refresh_given = false;
  bool publish_timeout_given = false;
  bool read_wait_given = false;
  optind = 1;
  opterr = 0;
  int c;
  int long_index = -1;
  while ((c = getopt_long(argc, argv, ":fho:", kLong, &long_index)) != -1) {
    switch (c) {
      case kRetentionRule: {
        // --keep-last 3 is the rule keep_last (SPEC section 5), --retention
        // PRESET the rule retention; SetPolicyRule refuses a preset mixed
        // with rules, in either order.
        std::string rule = kLong[long_index].name;
        for (char& ch : rule) ch = ch == '-' ? '_' : ch;
        Status st = SetPolicyRule(rule, optarg, &o.fs.retention);
        if (!st.ok()) return Status::Error(EINVAL, "--" + std::string(kLong[long_index].name) + ": " + st.message());
        break;
      }
      case kCache:
        // An empty value would silently mean the default directory.
        if (optarg[0] == '\0') return Status::Error(EINVAL, "--cache takes a directory, not an empty string");
        o.cache_dir = optarg;
        break;
      case kNonEmpty:
        o.nonempty = true;
        break;
      case 'f':
        o.foreground = true;
        break;
      case kShowFull:
        o.fs.show_full = true;
        break;
      case kShowLatest:
        o.fs.show_latest = true;
        break;
      case kMetadataReserve: {
        auto spec = ParseMetadataReserve(optarg);
        if (!spec.ok()) return spec.status();
        o.fs.metadata_reserve = *spec;
        break;
      }
      case kCommitSettle: {
        if (std::string(optarg) == "0") {
          o.fs.commit_settle_ns = 0;
          break;
        }
        auto s = ParseSeconds("--commit-settle", optarg);
        if (!s.ok()) return Status::Error(EINVAL, "--commit-settle takes 0 or a positive number of seconds, not '" + std::string(optarg) + "'");
        o.fs.commit_settle_ns = static_cast<int64_t>(*s * 1e9);
        break;
      }
      case kStepPattern: {
        auto p = StepPattern::Compile(optarg);
        if (!p.ok()) return p.status();
        o.fs.step_pattern = optarg;
        break;
      }
      case kCommitMarker: {
        const std::string name = optarg;
        if (name.empty() || name.find('/') != std::string::npos || name.size() > 255) {
          return Status::Error(EINVAL, "--commit-marker takes a file name, not '" + name + "'");
        }
        if (!markers_given) o.fs.commit_markers.clear();
        markers_given = true;
        o.fs.commit_markers.push_back(name);
        break;
      }
      case kCommitIdle: {
        auto s = ParseSeconds("--commit-idle", optarg);
        if (!s.ok()) return s.status();
        o.fs.commit_idle_ns = static_cast<int64_t>(*s * 1e9);
        break;
      }
      case kWriterIdleTimeout: {
        auto s = ParseSeconds("--writer-idle-timeout", optarg);
        if (!s.ok()) return s.status();
        o.writer_idle_timeout_s = *s;
        break;
      }
      case kCommitWait: {
        auto s = ParseSeconds("--commit-wait", optarg);
        if (!s.ok()) return s.status();
        o.fs.commit_wait_ns = static_cast<int64_t>(*s * 1e9);
        break;
      }
      case 'o': {
        std::stringstream ss(optarg);
        std::string item;
        while (std::getline(ss, item, ',')) {
          if (!item.empty()) o.fuse_options.push_back(item);
        }
        break;
      }
      case kRemote:
        o.remote.url = optarg;
        break;
      case kS3Endpoint:
        o.remote.s3_endpoint = optarg;
        break;
      case kS3Region:
        o.remote.s3_region = optarg;
        break;
      case kS3Addressing:
        o.remote.s3_addressing = optarg;
        if (o.remote.s3_addressing != "path" && o.remote.s3_addressing != "virtual") {
          return Status::Error(EINVAL, "--s3-addressing takes path or virtual, not '" + o.remote.s3_addressing + "'");
        }
        break;
      case kCacheSize: {
        auto n = ParseByteSize("--cache-size", optarg);
        if (!n.ok()) return n.status();
        o.tier.cache_size = *n;
        break;
      }
      case kCacheFullWait: {
        auto s = ParseSeconds("--cache-full-wait", optarg);
        if (!s.ok()) return s.status();
        o.tier.cache_full_wait_ns = static_cast<int64_t>(*s * 1e9);
        break;
      }
      case kUploadParallel: {
        char* end = nullptr;
        const long n = std::strtol(optarg, &end, 10);
        if (end == optarg || *end != '\0' || n < 1 || n > 256) {
          return Status::Error(EINVAL, std::string("--upload-parallel takes a number from 1 to 256, not '") + optarg + "'");
        }
        o.tier.upload_files = static_cast<int>(n);
        break;
      }
      case kInodeCache: {
        char* end = nullptr;
        errno = 0;
        const unsigned long long n = std::strtoull(optarg, &end, 10);
        if (errno != 0 || end == optarg || *end != '\0' || optarg[0] == '-' || n < 1000 ||
            n > (1ULL << 32)) {
          return Status::Error(
              EINVAL,
              std::string("--inode-cache takes a number of inodes from 1000 to 4294967296, not '") +
                  optarg + "'");
        }
        o.fs.max_cached_inodes = static_cast<size_t>(n);
        break;
      }
      case kLogLevel:
        if (!ParseLogLevel(optarg, &o.log_level)) {
          return Status::Error(EINVAL, std::string("--log-level takes debug, info, warning or error, not '") + optarg + "'");
        }
        break;
      case kWriterSocket:
        if (std::string(optarg) == "none") {
          o.writer_socket_off = true;
        } else if (optarg[0] != '/') {
          return Status::Error(EINVAL, std::string("--writer-socket takes an absolute path or 'none', not '") + optarg + "'");
        } else {
          o.writer_socket = optarg;
        }
        break;
      case kNode: {
        Status valid = ValidateNodeName(optarg);
        if (!valid.ok()) return Status::Error(EINVAL, "--node: " + valid.message());
        o.fs.node = optarg;
        break;
      }
      case kReplaceNode:
        o.replace_node = true;
        break;
      case kNodes: {
        // 100,000 is far past any job; a larger number is a typo.
        char* end = nullptr;
        errno = 0;
        const unsigned long n = std::strtoul(optarg, &end, 10);
        if (optarg[0] < '1' || optarg[0] > '9' || *end != '\0' || errno != 0 || n > 100000) {
          return Status::Error(
              EINVAL,
              std::string("--nodes takes the job's node count, 1 to 100000, not '") + optarg + "'");
        }
        o.fs.job_nodes = static_cast<uint32_t>(n);
        break;
      }
      case kRefresh: {
        // Above an hour, other nodes' steps would stay unseen too long to be
        // what anyone means.
        auto s = ParseSeconds("--refresh", optarg);
        if (!s.ok() || *s > 3600) {
          return Status::Error(EINVAL, std::string("--refresh takes a number of seconds above 0 and up to 3600, "
                                                   "not '") + optarg + "'");
        }
        o.fs.refresh_ns = static_cast<int64_t>(*s * 1e9);
        refresh_given = true;
        break;
      }
      case kPublishTimeout: {
        // The trainer's close() waits this long while the bucket is down;
        // a day is past any outage worth waiting out inside a save.
        auto s = ParseSeconds("--publish-timeout", optarg);
        if (!s.ok() || *s > 86400) {
          return Status::Error(EINVAL, std::string("--publish-timeout takes a number of seconds above 0 and up "
                                                   "to 86400, not '") + optarg + "'");
        }
        o.publish_timeout_ns = static_cast<int64_t>(*s * 1e9);
        publish_timeout_given = true;
        break;
      }
      case kReadWait: {
        // A reader of another node's file waits for that node's upload; a
        // node that died before uploading never sends it, and a restore
        // should hear so in seconds or minutes, not hang. A day is the cap,
        // as for --publish-timeout.
        auto s = ParseSeconds("--read-wait", optarg);
        if (!s.ok() || *s > 86400) {
          return Status::Error(EINVAL, std::string("--read-wait takes a number of seconds above 0 and up "
                                                   "to 86400, not '") + optarg + "'");
        }
        o.read_wait_ns = static_cast<int64_t>(*s * 1e9);
        read_wait_given = true;
        break;
      }
      case kPassthrough:
      case kIoUring: {
        const std::string v = optarg;
        MountOptions::Switch& to = c == kPassthrough ? o.passthrough : o.io_uring;
        if (v == "auto") {
          to = MountOptions::Switch::kAuto;
        } else if (v == "on") {
          to = MountOptions::Switch::kOn;
        } else if (v == "off") {
          to = MountOptions::Switch::kOff;
        } else {
          return Status::Error(EINVAL,
                               std::string(c == kPassthrough ? "--passthrough" : "--io-uring") +
                                   " takes auto, on or off, not '" + v + "'");
        }
        break;
      }
      case 'h':
        return Status::Error(EAGAIN, kMountUsage);  // the caller prints usage, exits 0
      case ':':
        return Status::Error(EINVAL, std::string("option ") + argv[optind - 1] + " needs a value");
      default:
        return Status::Error(EINVAL, std::string("unknown option ") + argv[optind - 1]);
    }
  }
  if (optind >= argc) return Status::Error(EINVAL, "missing MOUNTPOINT");
  if (optind + 1 < argc) return Status::Error(EINVAL, std::string("unexpected argument ") + argv[optind + 1]);
  o.mountpoint = argv[optind];
  if (!o.remote.url.empty()) {
    CKPTFS_RETURN_IF_ERROR(ValidateRemoteSpec(o.remote));
    o.fs.remote = true;
  } else if (!o.remote.s3_endpoint.empty() || !o.remote.s3_region.empty() || !o.remote.s3_addressing.empty()) {
    return Status::Error(EINVAL, "--s3-endpoint, --s3-region and --s3-addressing need --remote s3://BUCKET/PREFIX");
  }
  if (!o.fs.node.empty() && o.remote.url.empty()) {
    return Status::Error(EINVAL, "--node needs --remote: the bucket is what the nodes share");
  }
  if (o.replace_node && o.fs.node.empty()) {
    return Status::Error(EINVAL, "--replace-node needs --node: it takes that node name over");
  }
  if (o.fs.job_nodes > 0 && o.fs.node.empty()) {
    return Status::Error(
        EINVAL, "--nodes needs --node: it gives the size of the job whose nodes share --remote");
  }
  if (refresh_given && o.fs.node.empty()) {
    return Status::Error(EINVAL, "--refresh needs --node: it says how often a cluster node looks for the "
                                 "other nodes' steps");
  }
  if (publish_timeout_given && o.fs.node.empty()) {
    return Status::Error(EINVAL, "--publish-timeout needs --node: only a cluster node publishes its part "
                                 "of a step");
  }
  if (read_wait_given && o.fs.node.empty()) {
    return Status::Error(EINVAL, "--read-wait needs --node: only a cluster node reads files other nodes "
                                 "have not uploaded yet");
  }
  if (o.tier.cache_size > 0 && o.remote.url.empty()) {
    return Status::Error(EINVAL, "--cache-size needs --remote: only data already in the remote can be evicted");
  }
  if (o.cache_dir.empty()) {
    o.cache_dir = kDefaultCacheDir;
    o.cache_is_default = true;
  }
  return o;
}

Status CheckMountTargets(MountOptions* o) {
  struct stat st {};
  if (stat(o->mountpoint.c_str(), &st) != 0) {
    if (errno == ENOTCONN) {
      return Status::Error(EBUSY, "mountpoint " + o->mountpoint +
                                      " is a dead FUSE mount; clean it up with: fusermount3 -u " +
                                      o->mountpoint);
    }
    return Status::FromErrno("mountpoint " + o->mountpoint);
  }
  if (!S_ISDIR(st.st_mode)) return Status::Error(ENOTDIR, "mountpoint " + o->mountpoint + " is not a directory");
  auto mnt = AbsolutePath(o->mountpoint);
  if (!mnt.ok()) return mnt.status();
  o->mountpoint = *mnt;
  if (IsMountPoint(o->mountpoint)) {
    return Status::Error(EBUSY, "mountpoint " + o->mountpoint +
                                    " is already mounted (unmount it first: fusermount3 -u " +
                                    o->mountpoint + ")");
  }
  if (!o->nonempty) CKPTFS_RETURN_IF_ERROR(CheckEmptyMountpoint(o->mountpoint));

  if (o->cache_is_default && mkdir(o->cache_dir.c_str(), kCacheDirMode) != 0 && errno != EEXIST) {
    return Status::FromErrno("cannot create cache directory " + o->cache_dir);
  }
  if (stat(o->cache_dir.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return Status::Error(ENOENT, "cache directory " + o->cache_dir +
                                       " does not exist (create it first: mkdir -p " + o->cache_dir + ")");
    }
    return Status::FromErrno("cache directory " + o->cache_dir);
  }
  if (!S_ISDIR(st.st_mode)) return Status::Error(ENOTDIR, "cache " + o->cache_dir + " is not a directory");
  auto cache = AbsolutePath(o->cache_dir);
  if (!cache.ok()) return cache.status();
  o->cache_dir = *cache;
  if (o->cache_dir == o->mountpoint || o->cache_dir.rfind(o->mountpoint + "/", 0) == 0) {
    return Status::Error(EINVAL, "cache directory " + o->cache_dir + " must not be inside the mountpoint");
  }
  CKPTFS_RETURN_IF_ERROR(SecureCacheDir(o->cache_dir, &o->notices));
  // access() says yes to root even on a read-only filesystem: really write.
  const std::string probe = o->cache_dir + "/.ckptfs-write-probe";
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno("cache directory " + o->cache_dir + " is not writable");
  close(fd);
  unlink(probe.c_str());
  o->fs.mountpoint = o->mountpoint;
  o->fs.owner_uid = geteuid();
  o->fs.cache_dir = o->cache_dir;
  if (!o->writer_socket_off && o->writer_socket.empty()) o->writer_socket = o->cache_dir + "/writer.sock";
  // The daemon replaces a stale socket at this path, nothing else: a file
  // named by mistake must not be deleted (checked again when binding).
  if (!o->writer_socket_off && lstat(o->writer_socket.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
    return Status::Error(EEXIST, "--writer-socket " + o->writer_socket +
                                     " exists and is not a socket: refusing to replace it (remove it or "
                                     "choose another path)");
  }
  return Status::Ok();
}

}  // namespace ckptfs
