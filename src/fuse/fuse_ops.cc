#include "fuse/fuse_ops.h"

#include <sys/xattr.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

#include "fuse/passthrough_channel.h"
#include "namespace/file_handle.h"
#include "namespace/filesystem.h"

namespace ckptfs {

namespace {

FileSystem* Fs(fuse_req_t req) { return static_cast<FileSystem*>(fuse_req_userdata(req)); }
FileHandle* Fh(const fuse_file_info* fi) { return reinterpret_cast<FileHandle*>(fi->fh); }

Caller CallerOf(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  return Caller{.uid = ctx->uid, .gid = ctx->gid, .pid = static_cast<uint32_t>(ctx->pid)};
}

// The one place a Status becomes a reply. Expected outcomes (ENOENT on
// lookup, ENODATA on getxattr...) are not logged; failures of the daemon
// itself are.
void ReplyError(fuse_req_t req, const Status& st) {
  const int err = st.ok() ? 0 : st.err();
  if (err == EIO || err == ENOSPC || err == ENOMEM) {
    std::fprintf(stderr, "ckptfs: %s\n", st.ToString().c_str());
  }
  fuse_reply_err(req, err);
}

// FUSE_BUFVEC_INIT is a C compound literal; this is the same in C++.
fuse_bufvec BufVec(size_t size) {
  fuse_bufvec v{};
  v.count = 1;
  v.buf[0].size = size;
  v.buf[0].fd = -1;
  return v;
}

fuse_bufvec FdBufVec(size_t size, int fd, off_t pos) {
  fuse_bufvec v = BufVec(size);
  v.buf[0].flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
  v.buf[0].fd = fd;
  v.buf[0].pos = pos;
  return v;
}

fuse_entry_param ToEntry(const Entry& e) {
  fuse_entry_param p{};
  p.ino = e.ino;
  p.generation = 1;
  p.attr = e.attr;
  p.attr_timeout = e.attr_timeout;
  p.entry_timeout = e.entry_timeout;
  return p;
}

void ReplyEntry(fuse_req_t req, const Result<Entry>& r) {
  if (!r.ok()) return ReplyError(req, r.status());
  fuse_entry_param p = ToEntry(*r);
  fuse_reply_entry(req, &p);
}

void OnInit(void* /*userdata*/, fuse_conn_info* conn) {
  // Read replies move backing-file pages into the FUSE device with splice.
  // Write requests are NOT spliced: measured here, splicing 1 MiB writes
  // through a pipe into the backing file was about half as fast as reading
  // them into memory and pwrite()ing them (bench/write_throughput).
  for (unsigned cap : {FUSE_CAP_SPLICE_WRITE, FUSE_CAP_SPLICE_MOVE}) {
    if (conn->capable & cap) conn->want |= cap;
  }
  conn->want &= ~FUSE_CAP_SPLICE_READ;
  // Without writeback caching every write reaches us in order and close()
  // means the data is in the backing file, which commit relies on.
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // Setuid/setgid bits on write, truncate and chown: without the
  // passthrough channel the kernel drops them itself (with a SETATTR of the
  // mode); with it, the channel accepts FUSE_HANDLE_KILLPRIV_V2 and the
  // daemon drops them where the kernel marks a request so. Never the first
  // FUSE_HANDLE_KILLPRIV, which would leave it to a daemon that does not
  // drop them on its own.
  conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  // Every listing carries the entries' attributes (READDIRPLUS), not only
  // the first page of it (the "auto" mode): rm -rf and ls -l of a step of
  // thousands of files then need no LOOKUP per file.
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
}

void OnLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  ReplyEntry(req, Fs(req)->Lookup(parent, name));
}

void OnForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Fs(req)->Forget(ino, nlookup);
  fuse_reply_none(req);
}

void OnForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) Fs(req)->Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void OnGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
  auto r = Fs(req)->GetAttr(ino);
  if (!r.ok()) return ReplyError(req, r.status());
  fuse_reply_attr(req, &r->attr, r->timeout);
}

void OnSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  SetAttrRequest s;
  if (to_set & FUSE_SET_ATTR_MODE) s.mode = attr->st_mode;
  if (to_set & FUSE_SET_ATTR_UID) s.uid = attr->st_uid;
  if (to_set & FUSE_SET_ATTR_GID) s.gid = attr->st_gid;
  if (to_set & FUSE_SET_ATTR_SIZE) s.size = static_cast<uint64_t>(attr->st_size);
  if (to_set & FUSE_SET_ATTR_ATIME) s.atime = attr->st_atim;
  if (to_set & FUSE_SET_ATTR_MTIME) s.mtime = attr->st_mtim;
  s.atime_now = (to_set & FUSE_SET_ATTR_ATIME_NOW) != 0;
  s.mtime_now = (to_set & FUSE_SET_ATTR_MTIME_NOW) != 0;
  s.kill_suidgid = PassthroughChannel::RequestKillsSuidgid();
  auto r = Fs(req)->SetAttr(ino, s, fi ? Fh(fi) : nullptr);
  if (!r.ok()) return ReplyError(req, r.status());
  fuse_reply_attr(req, &r->attr, r->timeout);
}

void OnReadlink(fuse_req_t req, fuse_ino_t ino) {
  auto r = Fs(req)->Readlink(ino);
  if (!r.ok()) return ReplyError(req, r.status());
  fuse_reply_readlink(req, r->c_str());
}

void OnMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t /*rdev*/) {
  ReplyEntry(req, Fs(req)->Mknod(CallerOf(req), parent, name, mode));
}

void OnMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  ReplyEntry(req, Fs(req)->Mkdir(CallerOf(req), parent, name, mode));
}

void OnSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  ReplyEntry(req, Fs(req)->Symlink(CallerOf(req), parent, name, link));
}

void OnLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  ReplyEntry(req, Fs(req)->Link(ino, newparent, newname));
}

void OnUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  ReplyError(req, Fs(req)->Unlink(parent, name));
}

void OnRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  ReplyError(req, Fs(req)->Rmdir(parent, name));
}

void OnRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned int flags) {
  ReplyError(req, Fs(req)->Rename(parent, name, newparent, newname, flags));
}

void ReplyOpen(fuse_req_t req, fuse_file_info* fi, const FileSystem::Opened& o) {
  fi->fh = reinterpret_cast<uint64_t>(o.fh);
  fi->keep_cache = o.keep_cache;
  fi->direct_io = o.direct_io;
  if (o.backing_id >= 0) PassthroughChannel::SetReplyBackingId(o.backing_id);
  if (fuse_reply_open(req, fi) == -ENOENT) {
    // The opener was interrupted: nobody will release this handle.
    (void)Fs(req)->Release(o.fh);
  }
}

// The caller's supplementary groups (libfuse reads /proc/PID/status); only
// asked for where the daemon checks permissions itself.
std::vector<uint32_t> GroupsOf(fuse_req_t req) {
  std::vector<gid_t> groups(32);
  int n = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
  if (n > static_cast<int>(groups.size())) {
    groups.resize(static_cast<size_t>(n));
    n = fuse_req_getgroups(req, n, groups.data());
  }
  if (n < 0) return {};  // unknown: judged by uid and primary gid only
  groups.resize(std::min(groups.size(), static_cast<size_t>(n)));
  return {groups.begin(), groups.end()};
}

void OnOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Caller who = CallerOf(req);
  if (FileSystem::NeedsGroups(ino)) who.groups = GroupsOf(req);
  auto r = Fs(req)->OpenFile(ino, fi->flags, who.pid, &who, OpenFor::kKernel);
  if (!r.ok()) return ReplyError(req, r.status());
  if (PassthroughChannel::RequestKillsSuidgid()) Fs(req)->DropSetIdBits(r->fh);  // O_TRUNC
  ReplyOpen(req, fi, *r);
}

void OnCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  auto r = Fs(req)->Create(CallerOf(req), parent, name, mode, fi->flags, OpenFor::kKernel);
  if (!r.ok()) return ReplyError(req, r.status());
  fi->fh = reinterpret_cast<uint64_t>(r->second.fh);
  fuse_entry_param p = ToEntry(r->first);
  if (r->second.backing_id >= 0) PassthroughChannel::SetReplyBackingId(r->second.backing_id);
  if (fuse_reply_create(req, &p, fi) == -ENOENT) {
    (void)Fs(req)->Release(r->second.fh);
    Fs(req)->Forget(p.ino, 1);
  }
}

void OnRead(fuse_req_t req, fuse_ino_t /*ino*/, size_t size, off_t off, fuse_file_info* fi) {
  FileSystem* fs = Fs(req);
  FileHandle* fh = Fh(fi);
  const int fd = fs->BackingFd(fh);
  if (fd >= 0) {
    if (Status st = fs->PrepareRead(fh, static_cast<uint64_t>(off), size); !st.ok()) {
      return ReplyError(req, st);
    }
    fuse_bufvec buf = FdBufVec(size, fd, off);
    fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
    return;
  }
  std::vector<char> data(size);
  auto n = fs->Read(fh, data.data(), size, static_cast<uint64_t>(off));
  if (!n.ok()) return ReplyError(req, n.status());
  fuse_reply_buf(req, data.data(), *n);
}

void OnWriteBuf(fuse_req_t req, fuse_ino_t /*ino*/, fuse_bufvec* in, off_t off, fuse_file_info* fi) {
  FileSystem* fs = Fs(req);
  FileHandle* fh = Fh(fi);
  const int fd = fs->BackingFd(fh);
  if (!fh->writable) {
    fuse_reply_err(req, EBADF);
    return;
  }
  if (fd >= 0) {
    if (Status st = fs->PrepareWrite(fh, fuse_buf_size(in)); !st.ok()) return ReplyError(req, st);
    fuse_bufvec out = FdBufVec(fuse_buf_size(in), fd, off);
    const ssize_t n = fuse_buf_copy(&out, in, static_cast<fuse_buf_copy_flags>(0));
    if (n < 0) return ReplyError(req, Status::FromErrno(static_cast<int>(-n), "write to backing file"));
    fs->NoteWritten(fh, static_cast<uint64_t>(off), static_cast<size_t>(n),
                    PassthroughChannel::RequestKillsSuidgid());
    fuse_reply_write(req, static_cast<size_t>(n));
    return;
  }
  std::vector<char> data(fuse_buf_size(in));
  fuse_bufvec mem = BufVec(data.size());
  mem.buf[0].mem = data.data();
  const ssize_t copied = fuse_buf_copy(&mem, in, static_cast<fuse_buf_copy_flags>(0));
  if (copied < 0) {
    fuse_reply_err(req, static_cast<int>(-copied));
    return;
  }
  auto n = fs->Write(fh, data.data(), static_cast<size_t>(copied), static_cast<uint64_t>(off),
                     PassthroughChannel::RequestKillsSuidgid());
  if (!n.ok()) return ReplyError(req, n.status());
  fuse_reply_write(req, *n);
}

void OnFlush(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  ReplyError(req, Fs(req)->Flush(Fh(fi)));
}

void OnRelease(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  ReplyError(req, Fs(req)->Release(Fh(fi)));
}

void OnFsync(fuse_req_t req, fuse_ino_t /*ino*/, int datasync, fuse_file_info* fi) {
  ReplyError(req, Fs(req)->Fsync(Fh(fi), datasync != 0));
}

void OnOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Status st = Fs(req)->OpenDir(ino);
  if (!st.ok()) return ReplyError(req, st);
  fi->fh = 0;
  fuse_reply_open(req, fi);
}

void OnReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* /*fi*/) {
  // Each entry takes at least 32 bytes, which bounds how many can fit.
  auto r = Fs(req)->Readdir(ino, static_cast<uint64_t>(off), size / 32 + 1);
  if (!r.ok()) return ReplyError(req, r.status());
  std::vector<char> buf(size);
  size_t used = 0;
  for (const DirEntry& d : *r) {
    struct stat st {};
    st.st_ino = d.ino;
    st.st_mode = d.mode;
    const size_t need = fuse_add_direntry(req, buf.data() + used, size - used, d.name.c_str(), &st,
                                          static_cast<off_t>(d.next_offset));
    if (need > size - used) break;
    used += need;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void OnReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* /*fi*/) {
  // The same size function the buffer is filled with: every entry the
  // daemon counted a lookup for reaches the kernel.
  auto size_of = [req](const std::string& name) {
    return fuse_add_direntry_plus(req, nullptr, 0, name.c_str(), nullptr, 0);
  };
  auto r = Fs(req)->ReaddirPlus(ino, static_cast<uint64_t>(off), size, size_of);
  if (!r.ok()) return ReplyError(req, r.status());
  std::vector<char> buf(size);
  size_t used = 0;
  for (const DirEntry& d : *r) {
    const fuse_entry_param p = ToEntry(*d.plus);
    used += fuse_add_direntry_plus(req, buf.data() + used, size - used, d.name.c_str(), &p,
                                   static_cast<off_t>(d.next_offset));
  }
  fuse_reply_buf(req, buf.data(), used);
}

void OnReleasedir(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* /*fi*/) { fuse_reply_err(req, 0); }

void OnFsyncdir(fuse_req_t req, fuse_ino_t /*ino*/, int /*datasync*/, fuse_file_info* /*fi*/) {
  ReplyError(req, Fs(req)->FsyncDir());
}

void OnStatfs(fuse_req_t req, fuse_ino_t /*ino*/) {
  auto r = Fs(req)->StatFs();
  if (!r.ok()) return ReplyError(req, r.status());
  fuse_reply_statfs(req, &*r);
}

void OnSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                int flags) {
  ReplyError(req, Fs(req)->SetXattr(ino, name, std::string(value, size), flags));
}

void ReplyXattrValue(fuse_req_t req, const std::string& value, size_t size) {
  if (size == 0) {
    fuse_reply_xattr(req, value.size());
  } else if (size < value.size()) {
    fuse_reply_err(req, ERANGE);
  } else {
    fuse_reply_buf(req, value.data(), value.size());
  }
}

void OnGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  auto r = Fs(req)->GetXattr(ino, name);
  if (!r.ok()) return ReplyError(req, r.status());
  ReplyXattrValue(req, *r, size);
}

void OnListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  auto r = Fs(req)->ListXattr(ino);
  if (!r.ok()) return ReplyError(req, r.status());
  std::string joined;
  for (const auto& n : *r) {
    joined += n;
    joined.push_back('\0');
  }
  ReplyXattrValue(req, joined, size);
}

void OnRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  ReplyError(req, Fs(req)->RemoveXattr(ino, name));
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops{};
  ops.init = OnInit;
  ops.lookup = OnLookup;
  ops.forget = OnForget;
  ops.forget_multi = OnForgetMulti;
  ops.getattr = OnGetattr;
  ops.setattr = OnSetattr;
  ops.readlink = OnReadlink;
  ops.mknod = OnMknod;
  ops.mkdir = OnMkdir;
  ops.symlink = OnSymlink;
  ops.link = OnLink;
  ops.unlink = OnUnlink;
  ops.rmdir = OnRmdir;
  ops.rename = OnRename;
  ops.open = OnOpen;
  ops.create = OnCreate;
  ops.read = OnRead;
  ops.write_buf = OnWriteBuf;
  ops.flush = OnFlush;
  ops.release = OnRelease;
  ops.fsync = OnFsync;
  ops.opendir = OnOpendir;
  ops.readdir = OnReaddir;
  ops.readdirplus = OnReaddirplus;
  ops.releasedir = OnReleasedir;
  ops.fsyncdir = OnFsyncdir;
  ops.statfs = OnStatfs;
  ops.setxattr = OnSetxattr;
  ops.getxattr = OnGetxattr;
  ops.listxattr = OnListxattr;
  ops.removexattr = OnRemovexattr;
  return ops;
}

}  // namespace

const fuse_lowlevel_ops& FuseOperations() {
  static const fuse_lowlevel_ops ops = MakeOps();
  return ops;
}

}  // namespace ckptfs
