// PassthroughBook: the namespace's record of kernel FUSE passthrough (Linux
// 6.9+, docs/architecture.md "Passthrough"): the setting the mount
// negotiated, the backing ids registered for inodes, which inodes have
// passthrough writers, and why opens went through the daemon instead.
//
// The kernel's rules shape it: one backing id per inode, shared by every
// concurrent open; an inode is opened either all through passthrough or
// all through the daemon; the id is closed at the inode's last RELEASE.
// The book keeps those rules and nothing else: whether an open may pass at
// all (resident data, a cache limit, the manifest's reserve) is FileSystem's
// to decide, and the sizes the kernel wrote are FileSystem's to learn.
//
// Not thread-safe by itself: FileSystem owns it under its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "data/data_store.h"
#include "namespace/backing_registry.h"
#include "namespace/file_handle.h"
#include "namespace/inode.h"

namespace ckptfs {

// What the mount negotiated with the kernel; set once, before requests are
// served, and shown in status.json.
struct PassthroughSetting {
  std::string mode = "off";  // as asked for: auto, on, off
  bool active = false;
  std::string reason;  // why not active (empty when active)
  // FUSE_HANDLE_KILLPRIV_V2 accepted: no security.capability lookup
  // before each write; the daemon drops setuid/setgid bits itself.
  bool handles_killpriv = false;
};

class PassthroughBook {
 public:
  // registry: where backing files are registered (ignored unless active).
  void Configure(BackingRegistry* registry, PassthroughSetting setting);
  bool active() const { return registry_ != nullptr; }

  // An open the daemon serves itself, counted under why (status.json's
  // daemon_opens).
  void ServeInDaemon(const char* why) { daemon_opens_[why]++; }
  // Passes fh's open of inode to the kernel: registers the inode's backing
  // file (opened from data) or shares the id it has. -1: the open goes
  // through the daemon (the reason counted).
  int32_t Open(Inode* inode, FileHandle* fh, DataStore* data);
  // fh's RELEASE: the inode's last passthrough open closes its id.
  void Release(Inode* inode, FileHandle* fh);

  // Inodes with a passthrough writer: their sizes are read from the backing
  // file at getattr and listings.
  const std::set<uint64_t>& writing() const { return writing_; }
  uint64_t opens() const { return opens_; }
  nlohmann::json Status() const;

 private:
  BackingRegistry* registry_ = nullptr;
  PassthroughSetting setting_;
  std::set<uint64_t> writing_;
  std::map<std::string, uint64_t> daemon_opens_;  // by reason
  uint64_t opens_ = 0;
  uint64_t files_open_ = 0;
  uint64_t register_errors_ = 0;
};

}  // namespace ckptfs
