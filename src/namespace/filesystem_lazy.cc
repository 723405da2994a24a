// The lazy namespace: a mount reads only what recovery must see, and the
// subtree of each settled step stays in the manifest until something looks
// inside it (docs/architecture.md, "Inodes"). Also the inode-number
// reservation that lets a mount start without listing every backing file,
// and the background pass that does what a mount no longer does for the
// steps it left unloaded: the size check of committed files and the removal
// of backing files no inode owns.
#include <unistd.h>

#include <algorithm>
#include <set>

#include "common/parallel_for.h"
#include "manifest/schema.h"
#include "namespace/filesystem.h"

namespace ckptfs {
namespace {

// Inode numbers are reserved this many at a time: one synced manifest write
// per 65,536 creates, and a mount skips at most that many numbers.
constexpr uint64_t kInoReserveBlock = 65536;

// Manifest lookups made at once when many inodes spread wide are read.
constexpr size_t kParallelLookups = 8;

Result<bool> KeySpaceEmpty(ManifestStore& manifest, KeySpace space) {
  bool empty = true;
  CKPTFS_RETURN_IF_ERROR(manifest.Scan(space, "", [&](std::string_view, std::string_view) {
    empty = false;
    return false;
  }));
  return empty;
}

}  // namespace

Status FileSystemCore::LoadLocked() {
  CKPTFS_RETURN_IF_ERROR(CheckFormatVersion(*manifest_));
  auto version = manifest_->Get(KeySpace::kMeta, kFormatVersionKey);
  if (!version.ok()) return version.status();
  auto reserved = manifest_->Get(KeySpace::kMeta, kInoReservedKey);
  if (!reserved.ok()) return reserved.status();
  if (reserved->has_value()) {
    ino_reserved_ = std::strtoull((*reserved)->c_str(), nullptr, 10);
    inodes_.ReserveThrough(ino_reserved_);
  }
  // Lazy only where every guarantee holds without the whole namespace: a
  // manifest that keeps the reservation and the orphan index (version 2).
  // A local mount of a cache a remote mount left object records or queued
  // uploads in loads whole: only LoadWholeLocked reads those for a mount
  // without a tier (a remote mount reads them for what it loads).
  bool lazy = version->has_value() && **version == kFormatVersion && reserved->has_value();
  for (KeySpace space : {KeySpace::kObjects, KeySpace::kUploads}) {
    if (!lazy || options_.remote) break;
    auto empty = KeySpaceEmpty(*manifest_, space);
    if (!empty.ok()) return empty.status();
    lazy = *empty;
  }
  lazy_ = lazy;
  inodes_.SetSubtreeLoader([this](Inode* dir) {
    mu_.AssertHeld();  // the table calls it under the lock, as all its calls
    return LoadSubtreeLocked(dir);
  });
  return lazy ? LoadSettledStepsLazilyLocked() : LoadWholeLocked();
}

Status FileSystemCore::LoadSettledStepsLazilyLocked() {
  std::map<uint64_t, StepRecord> steps;
  Status decode_error;
  CKPTFS_RETURN_IF_ERROR(
      manifest_->Scan(KeySpace::kSteps, "", [&](std::string_view k, std::string_view v) {
        auto ino = DecodeInoKey(k);
        auto rec = DecodeStep(v);
        if (!ino.ok() || !rec.ok()) {
          decode_error = ino.ok() ? rec.status() : ino.status();
          return false;
        }
        steps.emplace(*ino, std::move(rec).value());
        return true;
      }));
  CKPTFS_RETURN_IF_ERROR(decode_error);

  auto root = ReadInodeLocked(kRootIno);
  if (!root.ok()) return root.status();
  if (!*root) return Status::Ok();  // a new cache: recovery makes the root
  std::vector<Inode*> dirs{*root};
  while (!dirs.empty()) {
    Inode* dir = dirs.back();
    dirs.pop_back();
    auto step = steps.find(dir->rec.ino);
    // A remote mount's step stays loaded until it is all in the bucket:
    // its uploads and commit object work over its files in memory.
    if (step != steps.end() && SettledStep(step->second) &&
        (!options_.remote || step->second.persisted)) {
      dir->entries_unloaded = true;
      unchecked_steps_.insert(dir->rec.ino);
      continue;
    }
    CKPTFS_RETURN_IF_ERROR(LoadEntriesLocked(dir, &dirs, nullptr));
  }
  // Orphans (unlinked while open) are in no directory: recovery deletes them.
  std::vector<uint64_t> orphans;
  CKPTFS_RETURN_IF_ERROR(
      manifest_->Scan(KeySpace::kMeta, kOrphanPrefix, [&](std::string_view k, std::string_view) {
        auto ino = DecodeInoKey(k.substr(std::string_view(kOrphanPrefix).size()));
        if (ino.ok()) orphans.push_back(*ino);
        return true;
      }));
  for (uint64_t ino : orphans) {
    if (inodes_.Find(ino)) continue;
    auto orphan = ReadInodeLocked(ino);
    if (!orphan.ok()) return orphan.status();
  }
  for (auto& [ino, rec] : steps) {
    if (inodes_.Find(ino)) steps_.Load(ino, std::move(rec));
  }
  return options_.remote ? LoadTierStateLazilyLocked() : Status::Ok();
}

namespace {

// A step's files were mostly made one after another: their numbers form a
// run, and a range scan per key space reads them all. Numbers spread wide (a
// directory filled over a long time) are read one by one rather than
// scanning what lies between. inos sorted, unique, not empty.
bool Dense(const std::vector<uint64_t>& inos) {
  return inos.back() - inos.front() < 4 * inos.size() + 64;
}

}  // namespace

Result<std::map<uint64_t, InodeRecord>> FileSystemCore::ReadRecordsLocked(
    const std::vector<uint64_t>& inos) {
  std::map<uint64_t, InodeRecord> out;
  if (inos.empty()) return out;
  if (!Dense(inos)) {
    // One lookup each (the run's step directories at mount, a thousand
    // numbers a thousand apart), several at once from 64 on: on a cold
    // disk each reads a block of its own, and their reads then overlap
    // instead of waiting one after another.
    std::vector<std::optional<Result<std::optional<std::string>>>> got(inos.size());
    ParallelFor(inos.size(), inos.size() < 64 ? 1 : kParallelLookups,
                [&](size_t i) { got[i] = manifest_->Get(KeySpace::kInodes, InoKey(inos[i])); });
    for (size_t i = 0; i < inos.size(); i++) {
      const Result<std::optional<std::string>>& value = *got[i];
      if (!value.ok()) return value.status();
      if (!value->has_value()) continue;
      auto rec = DecodeInode(**value);
      if (!rec.ok()) return rec.status();
      out.emplace(inos[i], std::move(rec).value());
    }
    return out;
  }
  Status decode_error;
  CKPTFS_RETURN_IF_ERROR(
      manifest_->ScanRange(KeySpace::kInodes, InoKey(inos.front()), InoKey(inos.back() + 1),
                           [&](std::string_view k, std::string_view v) {
                             auto ino = DecodeInoKey(k);
                             if (!ino.ok()) decode_error = ino.status();
                             if (!ino.ok() || !std::binary_search(inos.begin(), inos.end(), *ino))
                               return ino.ok();
                             auto rec = DecodeInode(v);
                             if (!rec.ok()) {
                               decode_error = rec.status();
                               return false;
                             }
                             out.emplace(*ino, std::move(rec).value());  // not another directory's
                             return true;
                           }));
  CKPTFS_RETURN_IF_ERROR(decode_error);
  return out;
}

Status FileSystemCore::ReadInodesLocked(std::vector<uint64_t> inos) {
  std::sort(inos.begin(), inos.end());
  inos.erase(std::unique(inos.begin(), inos.end()), inos.end());
  if (inos.empty()) return Status::Ok();
  auto records = ReadRecordsLocked(inos);
  if (!records.ok()) return records.status();
  if (!Dense(inos)) {
    for (auto& [ino, rec] : *records) {
      auto read = AddInodeLocked(std::move(rec));
      if (!read.ok()) return read.status();
    }
    return Status::Ok();
  }
  // Then two more range scans: xattrs, checksums.
  std::map<uint64_t, Inode> read;
  for (auto& [ino, rec] : *records) read[ino].rec = std::move(rec);
  const std::string begin = InoKey(inos.front()), end = InoKey(inos.back() + 1);
  Status decode_error;
  auto fail = [&](const Status& st) {
    decode_error = st;
    return false;
  };
  CKPTFS_RETURN_IF_ERROR(manifest_->ScanRange(
      KeySpace::kXattrs, begin, end, [&](std::string_view k, std::string_view v) {
        auto key = DecodeNamedKey(k);
        if (!key.ok()) return fail(key.status());
        if (auto it = read.find(key->first); it != read.end())
          it->second.xattrs[key->second] = std::string(v);
        return true;
      }));
  CKPTFS_RETURN_IF_ERROR(decode_error);
  CKPTFS_RETURN_IF_ERROR(manifest_->ScanRange(KeySpace::kChecksums, begin, end,
                                              [&](std::string_view k, std::string_view v) {
                                                auto ino = DecodeInoKey(k);
                                                if (!ino.ok()) return fail(ino.status());
                                                auto it = read.find(*ino);
                                                if (it == read.end() || !it->second.is_reg())
                                                  return true;
                                                auto crc = DecodeChecksum(v);
                                                if (!crc.ok()) return fail(crc.status());
                                                it->second.checksum = *crc;
                                                return true;
                                              }));
  CKPTFS_RETURN_IF_ERROR(decode_error);
  for (auto& [ino, inode] : read) inodes_.Insert(std::move(inode));
  return Status::Ok();
}

Result<Inode*> FileSystemCore::ReadInodeLocked(uint64_t ino) {
  auto value = manifest_->Get(KeySpace::kInodes, InoKey(ino));
  if (!value.ok()) return value.status();
  if (!value->has_value()) return static_cast<Inode*>(nullptr);
  auto rec = DecodeInode(**value);
  if (!rec.ok()) return rec.status();
  return AddInodeLocked(std::move(rec).value());
}

Result<Inode*> FileSystemCore::AddInodeLocked(InodeRecord rec) {
  const uint64_t ino = rec.ino;
  Inode inode;
  inode.rec = std::move(rec);
  Status decode_error;
  std::vector<std::pair<std::string, std::string>> xattrs;
  CKPTFS_RETURN_IF_ERROR(manifest_->Scan(KeySpace::kXattrs, XattrPrefix(ino),
                                         [&](std::string_view k, std::string_view v) {
                                           auto key = DecodeNamedKey(k);
                                           if (!key.ok()) {
                                             decode_error = key.status();
                                             return false;
                                           }
                                           xattrs.emplace_back(key->second, std::string(v));
                                           return true;
                                         }));
  CKPTFS_RETURN_IF_ERROR(decode_error);
  for (auto& [name, value] : xattrs) inode.xattrs[name] = std::move(value);
  if (inode.is_reg()) {
    auto checksum = manifest_->Get(KeySpace::kChecksums, InoKey(ino));
    if (!checksum.ok()) return checksum.status();
    if (checksum->has_value()) {
      auto crc = DecodeChecksum(**checksum);
      if (!crc.ok()) return crc.status();
      inode.checksum = *crc;
    }
  }
  return inodes_.Insert(std::move(inode));
}

Result<std::vector<std::pair<std::string, DentryRecord>>> FileSystemCore::ReadEntriesLocked(
    uint64_t dir_ino) {
  std::vector<std::pair<std::string, DentryRecord>> entries;
  Status decode_error;
  CKPTFS_RETURN_IF_ERROR(manifest_->Scan(KeySpace::kDentries, DentryPrefix(dir_ino),
                                         [&](std::string_view k, std::string_view v) {
                                           auto key = DecodeNamedKey(k);
                                           auto dent = DecodeDentry(v);
                                           if (!key.ok() || !dent.ok()) {
                                             decode_error = key.ok() ? dent.status() : key.status();
                                             return false;
                                           }
                                           entries.emplace_back(std::move(key->second), *dent);
                                           return true;
                                         }));
  CKPTFS_RETURN_IF_ERROR(decode_error);
  return entries;
}

Status FileSystemCore::LoadEntriesLocked(Inode* dir, std::vector<Inode*>* dirs,
                                         std::vector<Inode*>* files) {
  const uint64_t dir_ino = dir->rec.ino;
  // Read first, look up after: a store may hold its lock through a scan.
  auto read = ReadEntriesLocked(dir_ino);
  if (!read.ok()) return read.status();
  std::vector<std::pair<std::string, DentryRecord>>& entries = *read;
  std::vector<uint64_t> missing;  // not in memory (a hard link may be)
  for (const auto& [name, dent] : entries) {
    if (!inodes_.Find(dent.ino)) missing.push_back(dent.ino);
  }
  CKPTFS_RETURN_IF_ERROR(ReadInodesLocked(std::move(missing)));
  for (auto& [name, dent] : entries) {
    Inode* child = inodes_.Find(dent.ino);
    if (!child) return Status::Error(EIO, "manifest entry " + name + " points to a missing inode");
    dir->children[name] = dent;
    dir->by_cookie[dent.cookie] = name;
    child->name = name;
    if (child->is_dir()) {
      child->rec.parent = dir_ino;
      dirs->push_back(child);
    } else if (files && child->is_reg()) {
      files->push_back(child);
    }
  }
  return Status::Ok();
}

Status FileSystemCore::LoadEntriesBelowLocked(Inode* step_dir, std::vector<Inode*>* files) {
  step_dir->entries_unloaded = false;
  std::vector<Inode*> dirs{step_dir};
  Status st;
  while (st.ok() && !dirs.empty()) {
    Inode* dir = dirs.back();
    dirs.pop_back();
    st = LoadEntriesLocked(dir, &dirs, files);
  }
  return st;
}

Status FileSystemCore::LoadSubtreeLocked(Inode* step_dir) {
  std::vector<Inode*> files;
  Status st = LoadEntriesBelowLocked(step_dir, &files);
  if (!st.ok()) {
    // Left unloaded (what was read stays, unreachable, until a retry links
    // it): the step must not look empty or half there.
    step_dir->children.clear();
    step_dir->by_cookie.clear();
    step_dir->entries_unloaded = true;
    const std::string why =
        "cannot read " + inodes_.PathOf(step_dir->rec.ino) + " from the manifest: " + st.message();
    events_->Append(
        {{"event", "error"}, {"path", inodes_.PathOf(step_dir->rec.ino)}, {"error", why}});
    return Status::Error(EIO, why);
  }
  if (options_.remote) {
    // What the tier knows of the files is read back with them.
    Status objects = LoadObjectsLocked(step_dir->rec.ino, files);
    if (!objects.ok()) {
      events_->Append(
          {{"event", "error"},
           {"path", inodes_.PathOf(step_dir->rec.ino)},
           {"error", "cannot read the remote objects of the step: " + objects.message()}});
      return Status::Error(EIO, objects.message());
    }
  }
  metrics_.lazy_step_loads++;
  NoteStepUsedLocked(step_dir->rec.ino);
  if (unchecked_steps_.erase(step_dir->rec.ino) == 0) return Status::Ok();
  std::vector<CommittedSize> sealed;
  for (const Inode* f : files) {
    if (!f->rec.sealed) continue;
    sealed.push_back(CommittedSize{f->rec.ino, f->rec.size, TimespecToNanos(f->rec.mtime),
                                   inodes_.PathOf(f->rec.ino), std::nullopt});
    if (f->object) sealed.back().object = *f->object;
  }
  Transaction txn = BeginLocked();
  CheckCommittedSizesLocked(step_dir->rec.ino, std::move(sealed), txn.batch());
  return txn.Write();
}

uint64_t FileSystemCore::CheckCommittedSizesLocked(uint64_t step_ino,
                                                   std::vector<CommittedSize> files,
                                                   ManifestBatch* batch) {
  // A file whose data is only in the bucket (evicted, or another node's
  // never fetched) has no local copy to check.
  files.erase(
      std::remove_if(files.begin(), files.end(),
                     [](const CommittedSize& f) { return f.object && !f.object->resident; }),
      files.end());
  // In ino order: backing files made one after another sit together on disk.
  std::sort(files.begin(), files.end(),
            [](const CommittedSize& a, const CommittedSize& b) { return a.ino < b.ino; });
  std::vector<uint64_t> inos;
  inos.reserve(files.size());
  for (const CommittedSize& f : files) inos.push_back(f.ino);
  const std::vector<Result<uint64_t>> actual = data_->SizesOf(inos);
  uint64_t resident = 0;
  for (size_t i = 0; i < files.size(); i++) {
    const CommittedSize& f = files[i];
    const uint64_t have = actual[i].ok() ? *actual[i] : 0;
    if (have < f.size && f.object && f.object->crc_known && f.object->key == f.path &&
        f.object->size == f.size && f.object->mtime_ns == f.mtime_ns) {
      // The bucket holds this very version, checked: only the local copy
      // was cut short, and the file is read from there again.
      DropLostLocalCopyLocked(f.ino, *f.object, f.path, have, batch);
      continue;
    }
    resident += f.size;  // as ResidentBytesLocked counts a resident file
    if (have >= f.size) continue;
    // Committed data must be there; if the disk lost it, say so loudly.
    const std::string why = "committed file " + f.path + " lost data: " + std::to_string(have) +
                            " of " + std::to_string(f.size) + " bytes";
    events_->Append({{"event", "error"}, {"path", f.path}, {"error", why}});
    auto step = steps_.find(step_ino);
    if (step != steps_.end() && step->second.state == StepState::kCommitted) {
      steps_.MarkBroken(step_ino, why, batch);
    }
  }
  return resident;
}

Result<std::vector<FileSystemCore::CommittedSize>> FileSystemCore::ReadSealedFilesLocked(
    uint64_t step_ino) {
  // The step's records straight from the manifest, nothing kept in memory:
  // the background check must not load what nobody asked for.
  std::vector<CommittedSize> out;
  std::vector<std::pair<uint64_t, std::string>> dirs{{step_ino, inodes_.PathOf(step_ino)}};
  std::set<uint64_t> seen;
  while (!dirs.empty()) {
    const auto [dir, dir_path] = dirs.back();
    dirs.pop_back();
    auto entries = ReadEntriesLocked(dir);
    if (!entries.ok()) return entries.status();
    std::vector<uint64_t> inos;
    for (const auto& [name, dent] : *entries) inos.push_back(dent.ino);
    std::sort(inos.begin(), inos.end());
    inos.erase(std::unique(inos.begin(), inos.end()), inos.end());
    auto records = ReadRecordsLocked(inos);
    if (!records.ok()) return records.status();
    for (const auto& [name, dent] : *entries) {
      auto rec = records->find(dent.ino);
      if (rec == records->end() || !seen.insert(dent.ino).second) continue;  // hard links: once
      const std::string path = dir_path + "/" + name;
      if (S_ISDIR(rec->second.mode)) dirs.emplace_back(dent.ino, path);
      if (S_ISREG(rec->second.mode) && rec->second.sealed)
        out.push_back(CommittedSize{dent.ino, rec->second.size, TimespecToNanos(rec->second.mtime),
                                    path, std::nullopt});
    }
  }
  // A remote mount checks only what is local, and counts it.
  if (options_.remote) CKPTFS_RETURN_IF_ERROR(AttachObjectsLocked(&out));
  return out;
}

Result<size_t> FileSystem::CheckUnloadedSteps(size_t max) {
  size_t checked = 0;
  while (checked < max) {
    MutexLock lock(&mu_);
    if (unchecked_steps_.empty()) break;
    const uint64_t step_ino = *unchecked_steps_.begin();
    unchecked_steps_.erase(unchecked_steps_.begin());
    Inode* step = inodes_.Find(step_ino);
    // Loaded since the mount (checked then), or gone (removed, renamed away).
    if (!step || !step->entries_unloaded) continue;
    auto files = ReadSealedFilesLocked(step_ino);
    if (!files.ok()) {
      unchecked_steps_.insert(step_ino);  // tried again at the next tick
      return files.status();
    }
    Transaction txn = BeginLocked();
    const uint64_t resident =
        CheckCommittedSizesLocked(step_ino, std::move(files).value(), txn.batch());
    if (options_.remote) SetUnloadedResidentBytesLocked(step_ino, resident);
    CKPTFS_RETURN_IF_ERROR(txn.Write());
    checked++;
  }
  if (checked == 0) CKPTFS_RETURN_IF_ERROR(SweepStrayBackingFiles());
  return checked;
}

Status FileSystem::SweepStrayBackingFiles() {
  {
    MutexLock lock(&mu_);
    if (!lazy_ || strays_swept_) return Status::Ok();
    strays_swept_ = true;
  }
  // Backing files no inode owns: made just before a crash, or left by a
  // removal the crash cut short. Their numbers are at or below the
  // reservation, so no new file takes them; they only take space. A mount
  // that loads everything removes them itself (RecoverLocked).
  auto listed = data_->List();
  if (!listed.ok()) return listed.status();
  std::vector<uint64_t> strays;
  for (size_t at = 0; at < listed->size();) {
    MutexLock lock(&mu_);  // a bounded time at once: requests go on between
    for (const size_t end = std::min(listed->size(), at + 4096); at < end; at++) {
      const uint64_t ino = (*listed)[at];
      if (inodes_.Find(ino)) continue;
      auto owned = manifest_->Get(KeySpace::kInodes, InoKey(ino));
      if (!owned.ok()) return owned.status();
      auto queued = manifest_->Get(KeySpace::kGc, InoKey(ino));
      if (!queued.ok()) return queued.status();
      if (!owned->has_value() && !queued->has_value()) strays.push_back(ino);
    }
  }
  for (uint64_t ino : strays) (void)data_->Remove(ino);
  return Status::Ok();
}

Status FileSystemCore::ReserveInoLocked() {
  if (inodes_.next_ino() <= ino_reserved_) return Status::Ok();
  const uint64_t through = inodes_.next_ino() + kInoReserveBlock - 1;
  // Durable before the number names a backing file: a power loss must not
  // take the reservation back and leave a file the next mount hands out.
  Transaction txn = BeginLocked();
  txn.batch()->Put(KeySpace::kMeta, kInoReservedKey, std::to_string(through));
  CKPTFS_RETURN_IF_ERROR(txn.WriteSyncedOrDiscard());
  ino_reserved_ = through;
  return Status::Ok();
}

void FileSystemCore::FinishFormatUpgradeLocked(ManifestBatch* batch) {
  // Version 2's promises hold once this batch is written: the reservation
  // covers every number seen (recovery removed every orphan, so the empty
  // orphan index is exact). A block ahead, in this synced batch: the first
  // creates after a mount write nothing more.
  if (inodes_.next_ino() > ino_reserved_) {
    ino_reserved_ = inodes_.next_ino() + kInoReserveBlock - 1;
    batch->Put(KeySpace::kMeta, kInoReservedKey, std::to_string(ino_reserved_));
  }
  batch->Put(KeySpace::kMeta, kFormatVersionKey, kFormatVersion);
}

}  // namespace ckptfs
