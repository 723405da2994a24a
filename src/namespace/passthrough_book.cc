#include "namespace/passthrough_book.h"

#include <cstdio>
#include <utility>

namespace ckptfs {

void PassthroughBook::Configure(BackingRegistry* registry, PassthroughSetting setting) {
  registry_ = setting.active ? registry : nullptr;
  setting_ = std::move(setting);
}

int32_t PassthroughBook::Open(Inode* inode, FileHandle* fh, DataStore* data) {
  if (!registry_) return -1;
  if (inode->backing_id < 0) {
    // The kernel keeps a reference to the file registered: one of the
    // inode's own, opened read-write where it may be written, so that any
    // later open of the inode can share it.
    auto backing = data->Open(inode->rec.ino, /*create=*/false);
    if (!backing.ok()) return ServeInDaemon("backing_open_failed"), -1;
    auto seen = (*backing)->Stat();
    if (!seen.ok()) return ServeInDaemon("backing_open_failed"), -1;
    auto id = registry_->Register((*backing)->fd());
    if (!id.ok()) {
      if (register_errors_++ == 0) {
        std::fprintf(stderr,
                     "ckptfs: passthrough: registering a backing file failed: %s; "
                     "such opens go through the daemon\n",
                     id.status().ToString().c_str());
      }
      return ServeInDaemon("register_failed"), -1;
    }
    inode->backing_id = *id;
    files_open_++;
    inode->passthrough_backing = std::move(backing).value();
    inode->backing_seen = *seen;
  } else if (fh->writable) {
    // A rewrite of a file a writer-library client sealed gets a new backing
    // inode (DataStore::Unseal); the registered one must be that file.
    auto mine = fh->file->Stat();
    auto registered = inode->passthrough_backing->Stat();
    if (!mine.ok() || !registered.ok() || mine->inode != registered->inode) {
      return ServeInDaemon("backing_replaced"), -1;
    }
  }
  inode->passthrough_opens++;
  if (fh->writable) {
    inode->passthrough_writers++;
    writing_.insert(inode->rec.ino);
  }
  fh->passthrough = true;
  opens_++;
  return inode->backing_id;
}

void PassthroughBook::Release(Inode* inode, FileHandle* fh) {
  if (!fh->passthrough) return;
  if (inode->passthrough_opens > 0) inode->passthrough_opens--;
  if (fh->writable && inode->passthrough_writers > 0) inode->passthrough_writers--;
  if (inode->passthrough_writers == 0) writing_.erase(inode->rec.ino);
  if (inode->passthrough_opens > 0) return;
  // The inode's last passthrough open is gone: the kernel has let go of
  // the file, and a later open registers it again.
  if (registry_ && inode->backing_id >= 0) {
    registry_->Unregister(inode->backing_id);
    files_open_--;
  }
  inode->backing_id = -1;
  inode->passthrough_backing.reset();
}

nlohmann::json PassthroughBook::Status() const {
  nlohmann::json daemon_opens = nlohmann::json::object();
  for (const auto& [why, n] : daemon_opens_) daemon_opens[why] = n;
  return {{"mode", setting_.mode},       {"active", setting_.active},
          {"reason", setting_.reason},   {"opens", opens_},
          {"files_open", files_open_},   {"handles_killpriv", setting_.handles_killpriv},
          {"daemon_opens", daemon_opens}};
}

}  // namespace ckptfs
