// InodeTable: the owner of the in-memory inodes, their names and links. It
// hands out inode numbers, keeps directories' entries (name -> inode, and
// cookie -> name for readdir order) and each inode's parent and name, and
// writes every change it makes into the caller's manifest batch, so one
// namespace operation stays one batch.
//
// Not thread-safe by itself: FileSystem holds it GUARDED_BY its one mutex
// (as LevelDB's DBImpl holds its VersionSet), and the compiler checks that
// every call is made with that mutex held.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "manifest/manifest_store.h"
#include "namespace/inode.h"

namespace ckptfs {

class InodeTable {
 public:
  // Inodes live in the map's nodes (one allocation each, not two); an
  // unordered_map never moves a node, so Inode* stays valid until Erase.
  using Map = std::unordered_map<uint64_t, Inode>;

  Inode* Find(uint64_t ino) const;
  // ENOENT when there is no such inode, ENOTDIR when it is no directory.
  // A directory whose entries are not loaded yet is loaded first.
  Result<Inode*> FindDir(uint64_t ino) const;

  // The lazy namespace: a directory marked entries_unloaded has its
  // subtree read from the manifest by the loader the first time anything
  // needs what it holds. FindDir and WalkBelow do this themselves; code that
  // reaches a directory through Find and reads its children calls
  // EnsureLoaded first. The loader runs under the owner's lock, as every
  // call here does; when it fails (the manifest cannot be read) the
  // directory stays unloaded and FindDir returns the loader's error, so a
  // step never looks empty because its entries could not be read.
  using SubtreeLoader = std::function<Status(Inode* dir)>;
  void SetSubtreeLoader(SubtreeLoader loader) { loader_ = std::move(loader); }
  Status EnsureLoaded(const Inode* dir) const;
  // ino's path relative to the root ("" for the root).
  std::string PathOf(uint64_t ino) const;
  // The one subtree walk: visits every inode below dir (not dir itself),
  // depth first in name order, a directory before what it holds, with its
  // path relative to dir. visit returns false to skip what a directory
  // holds (its return value is ignored for other inodes). Directories it
  // descends into are loaded first.
  using SubtreeVisitor = std::function<bool(Inode* inode, const std::string& rel)>;
  void WalkBelow(const Inode* dir, const SubtreeVisitor& visit) const { Walk(dir, visit, true); }
  // The same over what is in memory only, for questions about open files:
  // nothing in a subtree never loaded was ever opened.
  void WalkLoadedBelow(const Inode* dir, const SubtreeVisitor& visit) const {
    Walk(dir, visit, false);
  }
  size_t size() const { return inodes_.size(); }
  Map::const_iterator begin() const { return inodes_.begin(); }
  Map::const_iterator end() const { return inodes_.end(); }

  // A new inode with the next free number (the caller fills in the rest).
  Inode* Allocate();
  // An inode loaded from the manifest (or the root, created once).
  Inode* Insert(Inode&& inode);
  // Numbers up to ino are taken (by backing files or queued garbage found
  // at recovery): Allocate never hands them out.
  void ReserveThrough(uint64_t ino);
  // The number Allocate hands out next.
  uint64_t next_ino() const { return next_ino_; }
  void Erase(uint64_t ino) { inodes_.erase(ino); }
  // Drops ino from memory once nothing refers to it any more: no link, no
  // open handle, no kernel lookup (the root stays).
  void ForgetIfUnused(uint64_t ino);

  // Links child into dir as name (dir's mtime and ctime set to now).
  void AddChild(Inode* dir, const std::string& name, Inode* child, const timespec& now,
                ManifestBatch* batch);
  // Removes dir's entry name (the child itself is the caller's).
  void RemoveChild(Inode* dir, const std::string& name, const timespec& now, ManifestBatch* batch);
  // Records the inode's current record in the batch; a record with nlink 0
  // (unlinked while open) goes into the orphan index too.
  static void Put(const Inode& inode, ManifestBatch* batch);
  // Deletes an orphan's record, its xattrs and its orphan index key.
  static void EraseOrphanRecord(const Inode& inode, ManifestBatch* batch);

 private:
  void Walk(const Inode* dir, const SubtreeVisitor& visit, bool load) const;

  Map inodes_;
  uint64_t next_ino_ = 2;  // 1 is the root
  SubtreeLoader loader_;
};

}  // namespace ckptfs
