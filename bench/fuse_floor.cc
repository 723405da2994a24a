// The least a FUSE daemon can cost, for bench/namespace to read ckptfs's
// metadata figures against. A filesystem that keeps everything in memory
// (directories, names, attributes; file contents are counted and dropped)
// and answers each request at once, mounted the way ckptfs mounts
// (default_permissions, allow_other as root, READDIRPLUS on every listing,
// libfuse's multi-threaded loop, 1 s entry and attribute timeouts). What a
// workload costs through it is what the kernel's requests and their round
// trips through /dev/fuse cost, and nothing a daemon does with them.
//
// It counts the requests it answers, by kind; reading the extended attribute
// user.floor.requests of the mount's root returns the counts so far
// ("lookup=5000 create=5000 ...") and starts them again from zero (that
// getxattr is not counted).
//
// usage: fuse_floor_bin MOUNTPOINT
// Runs in the foreground until the mount is unmounted (fusermount3 -u).
#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr double kTimeout = 1.0;  // ckptfs's default entry and attribute timeouts
constexpr char kCountsXattr[] = "user.floor.requests";

enum Kind {
  kLookup,
  kForget,
  kGetattr,
  kSetattr,
  kMkdir,
  kUnlink,
  kRmdir,
  kCreate,
  kOpen,
  kWrite,
  kFlush,
  kRelease,
  kOpendir,
  kReaddirplus,
  kReleasedir,
  kGetxattr,
  kIoctl,
  kStatfs,
  kKinds
};
constexpr std::array<const char*, kKinds> kKindNames = {
    "lookup",  "forget",      "getattr",    "setattr",  "mkdir", "unlink",
    "rmdir",   "create",      "open",       "write",    "flush", "release",
    "opendir", "readdirplus", "releasedir", "getxattr", "ioctl", "statfs"};

struct Node {
  struct stat attr {};
  uint64_t lookups = 0;  // the kernel's references, as FORGET returns them
  // Directories: names to inodes, and the cookies readdir resumes from (a
  // name keeps its cookie, so entries removed mid-listing skip nothing).
  std::map<std::string, std::pair<fuse_ino_t, off_t>> children;
  std::map<off_t, std::string> by_cookie;
  off_t next_cookie = 3;  // 1 and 2 are "." and ".."
};

class Floor {
 public:
  Floor() {
    Node root;
    root.attr.st_ino = FUSE_ROOT_ID;
    root.attr.st_mode = S_IFDIR | 0755;
    root.attr.st_nlink = 2;
    Stamp(&root.attr);
    nodes_.emplace(FUSE_ROOT_ID, std::move(root));
  }

  void Count(Kind k) { counts_[k].fetch_add(1, std::memory_order_relaxed); }

  std::string TakeCounts() {
    std::string out;
    for (int k = 0; k < kKinds; ++k) {
      const uint64_t n = counts_[k].exchange(0, std::memory_order_relaxed);
      if (n == 0) continue;
      if (!out.empty()) out += ' ';
      out += std::string(kKindNames[k]) + "=" + std::to_string(n);
    }
    return out;
  }

  // Each returns 0 or an errno; entries come back with a kernel reference taken.
  int Lookup(fuse_ino_t parent, const char* name, fuse_entry_param* e) {
    std::lock_guard<std::mutex> lock(mu_);
    Node* dir = Find(parent);
    if (!dir) return ENOENT;
    auto it = dir->children.find(name);
    if (it == dir->children.end()) return ENOENT;
    return Reference(it->second.first, e);
  }

  void Forget(fuse_ino_t ino, uint64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    Node* node = Find(ino);
    if (!node) return;
    node->lookups -= std::min(node->lookups, n);
    if (node->lookups == 0 && node->attr.st_nlink == 0) nodes_.erase(ino);
  }

  int Getattr(fuse_ino_t ino, struct stat* out) {
    std::lock_guard<std::mutex> lock(mu_);
    Node* node = Find(ino);
    if (!node) return ENOENT;
    *out = node->attr;
    return 0;
  }

  int Setattr(fuse_ino_t ino, const struct stat& in, int to_set, struct stat* out) {
    std::lock_guard<std::mutex> lock(mu_);
    Node* node = Find(ino);
    if (!node) return ENOENT;
    if (to_set & FUSE_SET_ATTR_MODE)
      node->attr.st_mode = (node->attr.st_mode & S_IFMT) | (in.st_mode & 07777);
    if (to_set & FUSE_SET_ATTR_UID) node->attr.st_uid = in.st_uid;
    if (to_set & FUSE_SET_ATTR_GID) node->attr.st_gid = in.st_gid;
    if (to_set & FUSE_SET_ATTR_SIZE) node->attr.st_size = in.st_size;
    if (to_set & FUSE_SET_ATTR_MTIME) node->attr.st_mtim = in.st_mtim;
    if (to_set & FUSE_SET_ATTR_ATIME) node->attr.st_atim = in.st_atim;
    clock_gettime(CLOCK_REALTIME, &node->attr.st_ctim);
    *out = node->attr;
    return 0;
  }

  int Make(fuse_ino_t parent, const char* name, mode_t mode, const fuse_ctx* who,
           fuse_entry_param* e) {
    std::lock_guard<std::mutex> lock(mu_);
    Node* dir = Find(parent);
    if (!dir) return ENOENT;
    if (dir->children.count(name)) return EEXIST;
    const fuse_ino_t ino = next_ino_++;
    Node node;
    node.attr.st_ino = ino;
    node.attr.st_mode = mode;
    node.attr.st_nlink = S_ISDIR(mode) ? 2 : 1;
    node.attr.st_uid = who->uid;
    node.attr.st_gid = who->gid;
    Stamp(&node.attr);
    nodes_.emplace(ino, std::move(node));
    const off_t cookie = dir->next_cookie++;
    dir->children.emplace(name, std::make_pair(ino, cookie));
    dir->by_cookie.emplace(cookie, name);
    if (S_ISDIR(mode)) dir->attr.st_nlink++;
    Stamp(&dir->attr);
    return Reference(ino, e);
  }

  int Remove(fuse_ino_t parent, const char* name, bool dir_wanted) {
    std::lock_guard<std::mutex> lock(mu_);
    Node* dir = Find(parent);
    if (!dir) return ENOENT;
    auto it = dir->children.find(name);
    if (it == dir->children.end()) return ENOENT;
    Node* node = Find(it->second.first);
    const bool is_dir = S_ISDIR(node->attr.st_mode);
    if (dir_wanted && !is_dir) return ENOTDIR;
    if (!dir_wanted && is_dir) return EISDIR;
    if (is_dir && !node->children.empty()) return ENOTEMPTY;
    node->attr.st_nlink = 0;
    const fuse_ino_t ino = it->second.first;
    dir->by_cookie.erase(it->second.second);
    dir->children.erase(it);
    if (is_dir) dir->attr.st_nlink--;
    Stamp(&dir->attr);
    if (node->lookups == 0) nodes_.erase(ino);
    return 0;
  }

  void Wrote(fuse_ino_t ino, off_t end) {
    std::lock_guard<std::mutex> lock(mu_);
    if (Node* node = Find(ino)) {
      node->attr.st_size = std::max<off_t>(node->attr.st_size, end);
      clock_gettime(CLOCK_REALTIME, &node->attr.st_mtim);
    }
  }

  // One READDIRPLUS reply: entries after cookie `off`, as many as fit in `size`.
  int Readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, std::vector<char>* buf) {
    std::lock_guard<std::mutex> lock(mu_);
    Node* dir = Find(ino);
    if (!dir) return ENOENT;
    buf->assign(size, 0);
    size_t used = 0;
    auto add = [&](const std::string& name, fuse_ino_t child, off_t cookie) {
      fuse_entry_param e{};
      const bool dot = name == "." || name == "..";
      e.ino = child;
      e.attr = Find(child)->attr;
      e.attr_timeout = e.entry_timeout = kTimeout;
      const size_t n =
          fuse_add_direntry_plus(req, buf->data() + used, size - used, name.c_str(), &e, cookie);
      if (n > size - used) return false;
      used += n;
      if (!dot) Find(child)->lookups++;  // the kernel does not count "." and ".."
      return true;
    };
    bool room = true;
    if (off < 1) room = add(".", ino, 1);
    if (room && off < 2) room = add("..", ino, 2);  // the parent is not kept; "." stands in
    for (auto it = dir->by_cookie.upper_bound(std::max<off_t>(off, 2));
         room && it != dir->by_cookie.end(); ++it) {
      room = add(it->second, dir->children.at(it->second).first, it->first);
    }
    buf->resize(used);
    return 0;
  }

 private:
  Node* Find(fuse_ino_t ino) {
    auto it = nodes_.find(ino);
    return it == nodes_.end() ? nullptr : &it->second;
  }

  int Reference(fuse_ino_t ino, fuse_entry_param* e) {
    Node* node = Find(ino);
    node->lookups++;
    *e = fuse_entry_param{};
    e->ino = ino;
    e->attr = node->attr;
    e->attr_timeout = e->entry_timeout = kTimeout;
    return 0;
  }

  static void Stamp(struct stat* a) {
    clock_gettime(CLOCK_REALTIME, &a->st_mtim);
    a->st_ctim = a->st_atim = a->st_mtim;
  }

  std::mutex mu_;
  std::unordered_map<fuse_ino_t, Node> nodes_;
  fuse_ino_t next_ino_ = FUSE_ROOT_ID + 1;
  std::array<std::atomic<uint64_t>, kKinds> counts_{};
};

Floor* F(fuse_req_t req) { return static_cast<Floor*>(fuse_req_userdata(req)); }

void ReplyEntryOr(fuse_req_t req, int err, const fuse_entry_param& e) {
  if (err) {
    fuse_reply_err(req, err);
  } else {
    fuse_reply_entry(req, &e);
  }
}

void OnInit(void*, fuse_conn_info* conn) {
  // As ckptfs negotiates (src/fuse/fuse_ops.cc OnInit).
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
}

void OnLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  F(req)->Count(kLookup);
  fuse_entry_param e{};
  ReplyEntryOr(req, F(req)->Lookup(parent, name, &e), e);
}

void OnForget(fuse_req_t req, fuse_ino_t ino, uint64_t n) {
  F(req)->Count(kForget);
  F(req)->Forget(ino, n);
  fuse_reply_none(req);
}

void OnForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  F(req)->Count(kForget);
  for (size_t i = 0; i < count; ++i) F(req)->Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void OnGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  F(req)->Count(kGetattr);
  struct stat st {};
  if (int err = F(req)->Getattr(ino, &st)) return (void)fuse_reply_err(req, err);
  fuse_reply_attr(req, &st, kTimeout);
}

void OnSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  F(req)->Count(kSetattr);
  struct stat st {};
  if (int err = F(req)->Setattr(ino, *attr, to_set, &st)) return (void)fuse_reply_err(req, err);
  fuse_reply_attr(req, &st, kTimeout);
}

void OnMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  F(req)->Count(kMkdir);
  fuse_entry_param e{};
  ReplyEntryOr(req, F(req)->Make(parent, name, S_IFDIR | (mode & 07777), fuse_req_ctx(req), &e), e);
}

void OnUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  F(req)->Count(kUnlink);
  fuse_reply_err(req, F(req)->Remove(parent, name, /*dir_wanted=*/false));
}

void OnRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  F(req)->Count(kRmdir);
  fuse_reply_err(req, F(req)->Remove(parent, name, /*dir_wanted=*/true));
}

void OnCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
              fuse_file_info* fi) {
  F(req)->Count(kCreate);
  fuse_entry_param e{};
  if (int err = F(req)->Make(parent, name, S_IFREG | (mode & 07777), fuse_req_ctx(req), &e)) {
    return (void)fuse_reply_err(req, err);
  }
  fi->fh = 0;
  fuse_reply_create(req, &e, fi);
}

void OnOpen(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  F(req)->Count(kOpen);
  fi->fh = 0;
  fuse_reply_open(req, fi);
}

void OnWrite(fuse_req_t req, fuse_ino_t ino, const char*, size_t size, off_t off, fuse_file_info*) {
  F(req)->Count(kWrite);
  F(req)->Wrote(ino, off + static_cast<off_t>(size));
  fuse_reply_write(req, size);
}

void OnFlush(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  F(req)->Count(kFlush);
  fuse_reply_err(req, 0);
}

void OnRelease(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  F(req)->Count(kRelease);
  fuse_reply_err(req, 0);
}

void OnOpendir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  F(req)->Count(kOpendir);
  fi->fh = 0;
  fuse_reply_open(req, fi);
}

void OnReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  F(req)->Count(kReaddirplus);
  std::vector<char> buf;
  if (int err = F(req)->Readdirplus(req, ino, size, off, &buf))
    return (void)fuse_reply_err(req, err);
  fuse_reply_buf(req, buf.data(), buf.size());
}

void OnReleasedir(fuse_req_t req, fuse_ino_t, fuse_file_info*) {
  F(req)->Count(kReleasedir);
  fuse_reply_err(req, 0);
}

void OnGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  if (ino == FUSE_ROOT_ID && std::strcmp(name, kCountsXattr) == 0) {
    const std::string counts = F(req)->TakeCounts();
    if (size == 0) return (void)fuse_reply_xattr(req, counts.size());
    if (size < counts.size()) return (void)fuse_reply_err(req, ERANGE);
    return (void)fuse_reply_buf(req, counts.data(), counts.size());
  }
  F(req)->Count(kGetxattr);
  // Not ENOSYS: ckptfs has extended attributes, so the kernel keeps asking
  // it (security.capability at a file's first write).
  fuse_reply_err(req, ENODATA);
}

void OnIoctl(fuse_req_t req, fuse_ino_t, unsigned int, void*, fuse_file_info*, unsigned,
             const void*, size_t, size_t) {
  F(req)->Count(kIoctl);  // isatty() of Python's open(), as ckptfs gets it
  fuse_reply_err(req, ENOTTY);
}

void OnStatfs(fuse_req_t req, fuse_ino_t) {
  F(req)->Count(kStatfs);
  struct statvfs s {};
  s.f_bsize = s.f_frsize = 4096;
  s.f_blocks = s.f_bfree = s.f_bavail = 1ull << 30;
  s.f_files = s.f_ffree = 1ull << 30;
  s.f_namemax = 255;
  fuse_reply_statfs(req, &s);
}

fuse_lowlevel_ops Operations() {
  fuse_lowlevel_ops ops{};
  ops.init = OnInit;
  ops.lookup = OnLookup;
  ops.forget = OnForget;
  ops.forget_multi = OnForgetMulti;
  ops.getattr = OnGetattr;
  ops.setattr = OnSetattr;
  ops.mkdir = OnMkdir;
  ops.unlink = OnUnlink;
  ops.rmdir = OnRmdir;
  ops.create = OnCreate;
  ops.open = OnOpen;
  ops.write = OnWrite;
  ops.flush = OnFlush;
  ops.release = OnRelease;
  ops.opendir = OnOpendir;
  ops.readdirplus = OnReaddirplus;
  ops.releasedir = OnReleasedir;
  ops.getxattr = OnGetxattr;
  ops.ioctl = OnIoctl;
  ops.statfs = OnStatfs;
  return ops;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MOUNTPOINT\n", argv[0]);
    return 2;
  }
  std::string opts = "default_permissions,fsname=fuse_floor,subtype=fuse_floor";
  if (geteuid() == 0) opts += ",allow_other";
  std::vector<std::string> storage = {argv[0], "-o", opts};
  std::vector<char*> args_v;
  for (auto& s : storage) args_v.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(args_v.size()), args_v.data());
  Floor floor;
  const fuse_lowlevel_ops ops = Operations();
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &floor);
  if (!se) return 1;
  if (fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, argv[1]) != 0) {
    fuse_session_destroy(se);
    return 1;
  }
  fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, 0);
  fuse_loop_cfg_set_max_threads(cfg, 16);
  const int rc = fuse_session_loop_mt(se, cfg);
  fuse_loop_cfg_destroy(cfg);
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  return rc == 0 ? 0 : 1;
}
