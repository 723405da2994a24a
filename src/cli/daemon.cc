#include "cli/daemon.h"

#include <fuse_lowlevel.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>

#include <string>
#include <thread>
#include <vector>

#include "cli/cluster_identity.h"
#include "cli/passthrough_setup.h"
#include "common/boot_id.h"
#include "common/process_session.h"
#include "fastpath/fast_path_server.h"
#include "fuse/fuse_ops.h"

namespace ckptfs {

namespace {

// How long a mount waits for the daemon of the previous mount of its cache
// to exit and release it.
constexpr auto kCacheReleaseWait = std::chrono::seconds(5);

// Commits recovery resumed (a trigger that survived a daemon crash) finish
// before the mount is served, so a trainer resuming at once finds the step
// committed and `latest` on it. Those waiting for quiet (--commit-settle) are
// not waited for; nor is anything past a minute (the mount serves, the
// commit goes on).
void WaitForRecoveredCommits(FileSystem* fs) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    bool pending = false;
    for (const StepSummary& s : fs->Steps()) {
      if (s.rec.state == StepState::kWriting && s.rec.pending_commit != 0 &&
          s.rec.error.rfind("settling", 0) != 0) {
        pending = true;
      }
    }
    if (!pending || std::chrono::steady_clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::Start(const MountOptions& options) {
  // glibc gives each new thread (16 FUSE workers, uploaders, writer
  // connections) its own malloc arena, up to 8 per core, and memory freed in
  // one is not reused by the others: in bench/soak the daemon's RSS kept
  // creeping with the default and levelled off with a few arenas. The
  // daemon's allocations are small and short-lived (names, records,
  // batches), so a few shared arenas cost little contention.
  (void)mallopt(M_ARENA_MAX, 4);
  std::unique_ptr<Daemon> d(new Daemon());
  d->options_ = options;
  d->events_ = std::make_unique<EventLog>(options.cache_dir + "/events.jsonl");
  d->events_->SetLogSink(stderr, options.log_level);
  for (const std::string& notice : options.notices) {
    d->events_->Append({{"event", "cache_permissions"}, {"cache", options.cache_dir}, {"detail", notice}});
  }
  // `umount /ckpt && ckptfs mount /ckpt` must work: umount returns once the
  // kernel lets go, a few milliseconds (longer under load) before the old
  // daemon has closed the manifest. A cache still held after
  // kCacheReleaseWait is another daemon's.
  const auto release_deadline = std::chrono::steady_clock::now() + kCacheReleaseWait;
  auto manifest = OpenRocksDbManifestStore(options.cache_dir + "/manifest");
  while (!manifest.ok() && manifest.err() == EBUSY &&
         std::chrono::steady_clock::now() < release_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    manifest = OpenRocksDbManifestStore(options.cache_dir + "/manifest");
  }
  if (!manifest.ok()) {
    if (manifest.err() == EBUSY) {
      return Status::Error(EBUSY, "cache " + options.cache_dir + " is in use by another ckptfs daemon");
    }
    if (manifest.err() == ENOSPC) {
      // Opening replays the WAL into new files; nothing is lost meanwhile.
      return Status::Error(ENOSPC, "the cache filesystem of " + options.cache_dir +
                                       " is full: free space on it and mount again (" +
                                       manifest.status().message() + ")");
    }
    return manifest.status().Annotate("opening the manifest");
  }
  // Cluster mode (--node, SPEC section 9): before anything is loaded, the
  // cache must be this node's (a cache bound to a node also needs its
  // --node) and the remote must take this node into its cluster.
  std::unique_ptr<ObjectStore> remote_store;
  if (!options.remote.url.empty()) {
    auto store = OpenRemote(options.remote);
    if (!store.ok()) return store.status().Annotate("opening the remote " + options.remote.url);
    remote_store = std::move(store).value();
  }
  auto cluster = JoinClusterAtMount(manifest->get(), remote_store.get(), options.cache_dir,
                                    options.fs.node, d->events_.get(), options.replace_node);
  if (!cluster.ok()) return cluster.status();
  d->membership_ = std::move(cluster).value();
  auto data = OpenPosixDataStore(options.cache_dir + "/data");
  if (!data.ok()) return data.status().Annotate("opening the data store");
  FileSystemOptions fs_options = options.fs;
  fs_options.boot_id = CurrentBootId();
  fs_options.session_of = ProcessSession;
  auto fs = FileSystem::Open(fs_options, std::move(manifest).value(), std::move(data).value(),
                             &d->clock_, d->events_.get());
  if (!fs.ok()) return fs.status().Annotate("loading the manifest");
  d->fs_ = std::move(fs).value();
  if (remote_store) {
    // The tier sees the namespace through its TierPort, and times its waits
    // with the daemon's one clock.
    RemoteTierOptions tier_options = options.tier;
    tier_options.clock = &d->clock_;
    // A commit that settles for late ranks is still the trainer's save.
    tier_options.commit_hold_ns =
        std::max<int64_t>(tier_options.commit_hold_ns, options.fs.commit_settle_ns + 1'000'000'000);
    d->tier_ = std::make_unique<RemoteTier>(d->fs_.get(), d->fs_->data(), std::move(remote_store),
                                            d->events_.get(), tier_options);
    d->fs_->SetTierHooks(d->tier_.get());
    d->tier_->Start();
    if (d->membership_) {
      // Cluster mode (docs/cluster.md): the bucket is what the nodes share.
      ClusterBookOptions cluster_options;
      cluster_options.node = d->membership_->node;
      cluster_options.cache_id = d->membership_->cache_id;
      cluster_options.epoch = d->membership_->epoch;
      cluster_options.conditional_put = ConditionalPutName(d->membership_->probe);
      cluster_options.refresh_ns = options.fs.refresh_ns;
      cluster_options.job_nodes = options.fs.job_nodes;
      cluster_options.publish_timeout_ns = options.publish_timeout_ns;
      cluster_options.upload_wait_ns = options.read_wait_ns;
      cluster_options.clock = &d->clock_;
      d->cluster_ = std::make_unique<ClusterBook>(d->fs_.get(), d->tier_->store(), d->events_.get(),
                                                  cluster_options);
      d->fs_->SetClusterHooks(d->cluster_.get());
      d->cluster_->Start();
    }
    // A cold mount (a cache with no step yet) shows the remote's persisted
    // steps from the start; an unreachable remote does not hold it up for
    // long (the import goes on in the background and steps appear when it
    // succeeds). A warm mount serves at once: the import, a listing of the
    // whole bucket, finds in the background what is there and not here.
    if (!d->fs_->HasSteps() && !d->tier_->WaitForImport(std::chrono::seconds(5))) {
      std::fprintf(stderr,
                   "ckptfs: warning: the remote %s did not answer yet; serving local data, "
                   "retrying in the background (see .ckptfs/status.json)\n",
                   d->tier_->store()->Describe().c_str());
    }
  }
  d->coordinator_ = std::make_unique<CommitCoordinator>(d->fs_.get(), d->fs_->data(), d->fs_->clock());
  WaitForRecoveredCommits(d->fs_.get());

  // default_permissions: the kernel checks modes and owners for us.
  std::string opts = "default_permissions,fsname=ckptfs,subtype=ckptfs";
  if (geteuid() == 0) opts += ",allow_other";  // trainers often run as other users
  for (const auto& o : options.fuse_options) opts += "," + o;
  std::vector<std::string> argv_storage = {"ckptfs", "-o", opts};
  std::vector<char*> argv;
  for (auto& s : argv_storage) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  d->session_ = fuse_session_new(&args, &FuseOperations(), sizeof(fuse_lowlevel_ops), d->fs_.get());
  fuse_opt_free_args(&args);
  if (!d->session_) return Status::Error(EINVAL, "invalid FUSE options: " + opts);
  if (fuse_set_signal_handlers(d->session_) != 0) return Status::Error(EIO, "cannot install signal handlers");
  d->signals_set_ = true;
  if (fuse_session_mount(d->session_, options.mountpoint.c_str()) != 0) {
    return Status::Error(EIO, "mounting " + options.mountpoint + " failed (see the message above)");
  }
  d->mounted_ = true;
  auto passthrough = SetUpPassthrough(d->session_, options, d->fs_.get(), d->events_.get());
  if (!passthrough.ok()) return passthrough.status();
  d->passthrough_ = std::move(passthrough).value();
  // Steps the daemon prunes by itself must vanish from the kernel's dentry
  // cache. Called from the coordinator's thread, never inside a request.
  fuse_session* se = d->session_;
  d->fs_->SetInvalidateEntry([se](uint64_t parent, const std::string& name) {
    (void)fuse_lowlevel_notify_inval_entry(se, parent, name.c_str(), name.size());
  });
  d->fs_->SetInvalidateInode([se](uint64_t ino) {
    (void)fuse_lowlevel_notify_inval_inode(se, ino, 0, 0);  // whole page cache
  });
  // The writer library's fast path is an extra: a daemon that cannot serve
  // it (socket path too long, taken) still mounts, and clients fall back to
  // writing through FUSE.
  if (!options.writer_socket_off) {
    FastPathLimits limits;
    limits.idle_timeout_ms = static_cast<int64_t>(options.writer_idle_timeout_s * 1000);
    auto server = FastPathServer::Start(options.writer_socket, d->fs_.get(), limits);
    if (server.ok()) {
      d->fast_path_ = std::move(server).value();
      d->fs_->SetWriterSocket(options.writer_socket);
      // How a writer's access ends at its close depends on the cache's
      // filesystem (RevocationMode); operators see which one is in force.
      d->events_->Append({{"event", "writer_fast_path"},
                          {"socket", options.writer_socket},
                          {"revocation", RevocationModeName(d->fs_->data()->revocation_mode())}});
    } else {
      std::fprintf(stderr, "ckptfs: warning: writer fast path off: %s (use --writer-socket PATH)\n",
                   server.status().message().c_str());
    }
  }
  d->events_->Append({{"event", "mount"},
                      {"mountpoint", options.mountpoint},
                      {"cache", options.cache_dir},
                      {"pid", static_cast<int64_t>(getpid())},
                      {"version", CKPTFS_VERSION}});
  return d;
}

int Daemon::Run() {
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 0);
  fuse_loop_cfg_set_max_threads(cfg, 16);
  const int rc = fuse_session_loop_mt(session_, cfg);
  fuse_loop_cfg_destroy(cfg);
  // The io_uring threads run handlers too: stop them with libfuse's.
  if (passthrough_) passthrough_->StopUring();
  // libfuse reports the signal that ended the loop; SIGTERM, SIGINT and
  // SIGHUP are the clean ways to stop a daemon.
  const bool clean = rc == 0 || rc == SIGTERM || rc == SIGINT || rc == SIGHUP;
  if (!clean) std::fprintf(stderr, "ckptfs: the FUSE session ended with error %d\n", rc);
  return clean ? 0 : 1;
}

Daemon::~Daemon() {
  // No request may run while the rest is taken down (Run stopped them
  // unless it never ran).
  if (passthrough_) passthrough_->StopUring();
  // Writer clients first: their open files are released while the
  // filesystem is whole.
  if (fs_) fs_->SetWriterSocket("");
  fast_path_.reset();
  // The coordinator first: its threads use the session for invalidations.
  coordinator_.reset();
  if (fs_) {
    fs_->SetInvalidateEntry(nullptr);
    fs_->SetInvalidateInode(nullptr);
  }
  if (session_) {
    if (mounted_) fuse_session_unmount(session_);
    if (signals_set_) fuse_remove_signal_handlers(session_);
    fuse_session_destroy(session_);
  }
  coordinator_.reset();
  if (cluster_) {
    cluster_->Stop();
    fs_->SetClusterHooks(nullptr);
    cluster_.reset();
  }
  if (tier_) {
    fs_->SetTierHooks(nullptr);
    tier_.reset();
  }
  if (fs_) {
    events_->Append({{"event", "unmount"}, {"mountpoint", options_.mountpoint}});
    fs_.reset();
  }
  passthrough_.reset();  // after the session: its I/O went through the channel
}

}  // namespace ckptfs
