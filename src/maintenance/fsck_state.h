// Internal to src/maintenance: the decoded manifest the fsck passes check,
// and the helpers that record findings and plan fixes.
//
// A planned fix changes this image at once, so the passes after it check the
// cache as it will be after --repair (an orphan inode planned for removal is
// not reported again as a backing file nobody owns). Without --repair the
// plan is simply not applied. Inode records changed by a pass are written as
// they stand when that pass ends, in that pass's group: a later group's
// changes never leak into an earlier batch.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "maintenance/fsck.h"
#include "manifest/schema.h"

namespace ckptfs::fsck {


// Repair groups, applied in this order.
enum Group : int { kRecordsGroup = 0, kTreeGroup, kFilesGroup, kDataGroup, kGroupCount };

struct Entry {
  uint64_t parent = 0;
  std::string name;
  DentryRecord rec;
  bool removed = false;  // a planned fix deletes it
};

struct State {
  State(ManifestStore* m, DataStore* d, const FsckOptions& o, FsckReport* r)
      : manifest(m), data(d), options(o), report(r) {}

  ManifestStore* const manifest;
  DataStore* const data;
  const FsckOptions options;
  FsckReport* const report;

  // --- the image (filled by LoadImage)
  std::map<uint64_t, InodeRecord> inodes;               // live inodes (planned removals erased)
  std::vector<Entry> entries;                           // every decoded dentry, in key order
  std::map<uint64_t, std::vector<size_t>> entries_in;   // dir ino -> indexes into entries
  std::map<uint64_t, std::vector<size_t>> entries_to;   // child ino -> indexes into entries
  std::map<uint64_t, std::vector<std::string>> xattrs;  // ino -> names
  std::map<uint64_t, StepRecord> steps;
  std::set<uint64_t> gc;  // backing files queued for the background GC
  std::map<uint64_t, UploadRecord> uploads;
  std::map<uint64_t, ObjectRecord> objects;
  std::map<uint64_t, ChecksumRecord> checksums;  // what writer-library clients reported
  std::set<uint64_t> backing;  // inos with a backing file
  uint64_t next_ino = 2;       // above every number in use (new lost+found)

  // --- helpers (fsck_state.cc)
  // Live (not removed) entries in a directory / naming an inode.
  std::vector<const Entry*> LiveEntriesIn(uint64_t dir) const;
  std::vector<const Entry*> LiveEntriesTo(uint64_t ino) const;
  // The entry a path goes through: a directory's only one; for other inodes
  // the one in rec.parent, else the first.
  const Entry* PrimaryEntry(uint64_t ino) const;
  // Relative to the mount root: "." for the root, "#<ino>/..." where the
  // chain of entries breaks or loops (unreachable).
  std::string PathOf(uint64_t ino) const;
  const InodeRecord* Find(uint64_t ino) const;
  bool IsDir(uint64_t ino) const;

  // --- findings and planned fixes
  // A finding --repair leaves alone.
  void Problem(FsckSeverity severity, const char* check, uint64_t ino, std::string path, std::string problem,
               std::string advice);
  // A finding fixed by the changes the caller plans in `group`.
  void Fixable(FsckSeverity severity, const char* check, uint64_t ino, std::string path, std::string problem,
               std::string repair, Group group);
  // Plans writing inodes[ino] as it stands at the end of the current pass.
  void PutInode(Group group, uint64_t ino);
  void Put(Group group, KeySpace space, std::string key, std::string value);
  void Delete(Group group, KeySpace space, std::string key);
  // Plans an entry removal / addition, keeping the indexes and the link
  // counts current (as the daemon's RemoveChild/DropLink and AddChild do).
  void RemoveEntry(Group group, size_t index);
  // counts_link = false: the inode's link count already counts this entry
  // (an inode that lost its entry some other way).
  void AddEntry(Group group, uint64_t parent, const std::string& name, uint64_t child,
                bool counts_link = true);
  // Plans removing the inode with its xattrs, step record, upload and object
  // records (queueing its object for remote deletion unless another live
  // file's object uses that key, as recovery does), and then its backing file.
  void RemoveInode(Group group, uint64_t ino);
  void RemoveBacking(Group group, uint64_t ino);
  void CreateBacking(Group group, uint64_t ino);
  // Called after each pass: the inode records it changed join its group.
  void EndPass();
  // Moves the planned groups into the report (or drops them when
  // report->repair_blocked says repairs must not run).
  void FinishPlan();

 private:
  FsckRepairGroup& GroupOf(Group group);
  void AdjustLinks(Group group, uint64_t parent, uint64_t child, int delta);
  std::vector<FsckRepairGroup> groups_{static_cast<size_t>(kGroupCount)};
  std::map<uint64_t, Group> dirty_;  // inodes changed in the current pass
};

// The passes, in the order CheckCache runs them.
Status LoadImage(State& st);   // fsck_load.cc: decodes every record
void CheckRecords(State& st);  // fsck_records.cc: records that name nothing, queues
void CheckTree(State& st);     // fsck_tree.cc: entries, links, reachability
void CheckData(State& st);     // fsck_data.cc: backing files against sizes
void CheckSteps(State& st);    // fsck_steps.cc: committed steps' files and totals
void CheckCrc(State& st);      // fsck_crc.cc: --crc

// Helpers shared by passes.
std::string HexIno(uint64_t ino);  // 16 lower-case hex digits, as backing files are named
std::string HexKey(std::string_view key);
// The object record of a file when it holds the file's current version
// (same size and mtime, as the daemon's SameVersion): the remote then has
// exactly these bytes. nullptr otherwise.
const ObjectRecord* CurrentObject(const State& st, uint64_t ino);
// Plans marking the file remote-only (as eviction does, without removing
// the backing file): reads fetch it from the remote again.
void MarkRemoteOnly(State& st, uint64_t ino);
inline constexpr const char* kRemoteOnlyRepair =
    "mark it remote-only: reads fetch it from the remote (mount with --remote)";
// What the remote holds of a file (fsck_remote.cc): good when the object
// has the recorded size and CRC32C(s); detail says what is wrong otherwise.
// An error only when the remote could not be read (not for a missing object).
struct RemoteCopy {
  bool good = false;
  std::string detail;
};
Result<RemoteCopy> CheckRemoteCopy(ObjectStore* store, const ObjectRecord& obj);
// Plans queueing the file's upload again (the daemon re-uploads it at the
// next mount), for a remote object that is corrupt while the local copy is good.
void QueueReupload(State& st, uint64_t ino);
inline constexpr const char* kReuploadRepair =
    "queue the file's upload again: the next mount with --remote re-uploads the good local copy";

// Inodes of the regular files below a step directory, one per entry (a file
// linked twice counts twice, as the commit does), with their paths relative
// to the mount.
std::vector<std::pair<uint64_t, std::string>> FilesUnder(const State& st, uint64_t dir);
// Regular files below committed steps.
std::set<uint64_t> CommittedFiles(const State& st);

}  // namespace ckptfs::fsck
