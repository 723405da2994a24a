#include "namespace/inode_table.h"

#include <algorithm>

#include "manifest/schema.h"

namespace ckptfs {

Inode* InodeTable::Find(uint64_t ino) const {
  auto it = inodes_.find(ino);
  return it == inodes_.end() ? nullptr : const_cast<Inode*>(&it->second);
}

void InodeTable::Walk(const Inode* dir, const SubtreeVisitor& visit, bool load) const {
  // Recursion depth is the tree's depth, which CheckName and PATH_MAX bound.
  std::function<void(const Inode*, const std::string&)> walk = [&](const Inode* d,
                                                                   const std::string& prefix) {
    if (load && !EnsureLoaded(d).ok()) return;  // the loader reported it
    for (const auto& [name, dent] : d->children) {
      Inode* child = Find(dent.ino);
      if (!child) continue;
      const std::string rel = prefix.empty() ? name : prefix + "/" + name;
      if (visit(child, rel) && child->is_dir()) walk(child, rel);
    }
  };
  walk(dir, "");
}

Result<Inode*> InodeTable::FindDir(uint64_t ino) const {
  Inode* inode = Find(ino);
  if (!inode) return Status::Error(ENOENT, "no inode " + std::to_string(ino));
  if (!inode->is_dir()) return Status::Error(ENOTDIR, "not a directory");
  CKPTFS_RETURN_IF_ERROR(EnsureLoaded(inode));
  return inode;
}

Status InodeTable::EnsureLoaded(const Inode* dir) const {
  if (!dir->entries_unloaded || !loader_) return Status::Ok();
  return loader_(const_cast<Inode*>(dir));
}

std::string InodeTable::PathOf(uint64_t ino) const {
  std::string path;
  // The depth bound only guards against a damaged parent chain.
  for (int depth = 0; ino != kRootIno && ino != 0 && depth < 4096; ++depth) {
    Inode* inode = Find(ino);
    if (!inode) break;
    path = path.empty() ? inode->name : inode->name + "/" + path;
    ino = inode->rec.parent;
  }
  return path;
}

Inode* InodeTable::Allocate() {
  const uint64_t ino = next_ino_++;
  Inode* inode = &inodes_[ino];  // made in its node, not moved there
  inode->rec.ino = ino;
  return inode;
}

Inode* InodeTable::Insert(Inode&& inode) {
  const uint64_t ino = inode.rec.ino;
  ReserveThrough(ino);
  return &inodes_.insert_or_assign(ino, std::move(inode)).first->second;
}

void InodeTable::ReserveThrough(uint64_t ino) { next_ino_ = std::max(next_ino_, ino + 1); }

void InodeTable::ForgetIfUnused(uint64_t ino) {
  Inode* inode = Find(ino);
  if (inode && inode->rec.nlink == 0 && inode->open_handles == 0 && inode->lookups == 0 &&
      ino != kRootIno) {
    inodes_.erase(ino);
  }
}

void InodeTable::AddChild(Inode* dir, const std::string& name, Inode* child, const timespec& now,
                          ManifestBatch* batch) {
  DentryRecord d{child->rec.ino, dir->rec.next_cookie++};
  dir->children[name] = d;
  dir->by_cookie[d.cookie] = name;
  batch->Put(KeySpace::kDentries, DentryKey(dir->rec.ino, name), EncodeDentry(d));
  if (child->is_dir()) dir->rec.nlink++;
  child->rec.parent = dir->rec.ino;
  child->name = name;
  dir->rec.mtime = dir->rec.ctime = now;
  Put(*dir, batch);
}

void InodeTable::RemoveChild(Inode* dir, const std::string& name, const timespec& now,
                             ManifestBatch* batch) {
  auto it = dir->children.find(name);
  if (it == dir->children.end()) return;
  Inode* child = Find(it->second.ino);
  dir->by_cookie.erase(it->second.cookie);
  dir->children.erase(it);
  batch->Delete(KeySpace::kDentries, DentryKey(dir->rec.ino, name));
  if (child && child->is_dir() && dir->rec.nlink > 2) dir->rec.nlink--;
  dir->rec.mtime = dir->rec.ctime = now;
  Put(*dir, batch);
}

void InodeTable::Put(const Inode& inode, ManifestBatch* batch) {
  batch->Put(KeySpace::kInodes, InoKey(inode.rec.ino), EncodeInode(inode.rec));
  if (inode.rec.nlink == 0 && inode.rec.ino != kRootIno)
    batch->Put(KeySpace::kMeta, OrphanKey(inode.rec.ino), "");
}

void InodeTable::EraseOrphanRecord(const Inode& inode, ManifestBatch* batch) {
  const uint64_t ino = inode.rec.ino;
  batch->Delete(KeySpace::kInodes, InoKey(ino));
  batch->Delete(KeySpace::kMeta, OrphanKey(ino));
  for (const auto& [name, value] : inode.xattrs)
    batch->Delete(KeySpace::kXattrs, XattrKey(ino, name));
}

}  // namespace ckptfs
