// Backing files against the manifest: every backing file belongs to a
// regular file (or waits in the GC queue), and every file whose data is local
// has a backing file of its recorded size.
//
// The size a commit recorded is the truth for a committed (sealed) file: a
// shorter backing file is lost committed data. fsck never "repairs" that by
// shrinking the record or deleting the step; when the remote holds the
// file's current version it marks the file remote-only, so reads fetch the
// right bytes again. For a file not yet committed the backing file is the
// truth, as in recovery: the size was last recorded at a close, and bytes
// written after it may or may not have reached the disk.
#include <sys/stat.h>

#include "maintenance/fsck_state.h"

namespace ckptfs::fsck {

namespace {

constexpr const char* kLostCommitted = "committed data lost: restore from the remote or delete the step";

void CheckUnownedBackingFiles(State& st) {
  const std::vector<uint64_t> listed(st.backing.begin(), st.backing.end());
  for (uint64_t ino : listed) {
    const InodeRecord* rec = st.Find(ino);
    if (rec && S_ISREG(rec->mode)) continue;
    if (st.gc.count(ino)) continue;  // the background GC deletes it
    st.Fixable(FsckSeverity::kWarning, "data", ino, "data/" + HexIno(ino),
               rec ? "backing file of inode " + std::to_string(ino) + ", which is not a regular file"
                   : "backing file with no inode (left by a crash before its creation was recorded)",
               "remove it, as the next mount would", kDataGroup);
    st.RemoveBacking(kDataGroup, ino);
  }
}

void CheckSealed(State& st, uint64_t ino, const InodeRecord& rec, bool exists, uint64_t actual) {
  const std::string path = st.PathOf(ino);
  const std::string name = "backing file " + HexIno(ino);
  if (exists && actual == rec.size) return;
  if (exists && actual > rec.size) {
    st.Problem(FsckSeverity::kWarning, "data", ino, path,
               name + " is " + std::to_string(actual) + " bytes, manifest says " + std::to_string(rec.size),
               "the bytes past the recorded size are never read; nothing to do");
    return;
  }
  if (!exists && rec.size == 0) {
    st.Fixable(FsckSeverity::kWarning, "data", ino, path,
               "committed empty file has no backing file (opening it fails)", "create an empty backing file",
               kDataGroup);
    st.CreateBacking(kDataGroup, ino);
    return;
  }
  const std::string problem =
      exists ? name + " is " + std::to_string(actual) + " bytes, manifest says " + std::to_string(rec.size)
             : name + " is missing, manifest says " + std::to_string(rec.size) + " bytes";
  if (CurrentObject(st, ino)) {
    st.Fixable(FsckSeverity::kError, "data", ino, path,
               problem + " (committed data lost here; the remote has it)", kRemoteOnlyRepair, kFilesGroup);
    MarkRemoteOnly(st, ino);
    return;
  }
  st.Problem(FsckSeverity::kError, "data", ino, path, problem, kLostCommitted);
}

}  // namespace

void CheckData(State& st) {
  CheckUnownedBackingFiles(st);
  // A file of a committed step whose sealed flag is gone is still committed
  // data (the steps pass reports the flag): its recorded size stays the truth.
  const std::set<uint64_t> committed = CommittedFiles(st);
  for (auto& [ino, rec] : st.inodes) {
    if (!S_ISREG(rec.mode)) continue;
    auto obj = st.objects.find(ino);
    if (obj != st.objects.end() && !obj->second.resident) {
      // Remote-only: the backing file is a sparse cache of fetched ranges
      // (or absent); the object must hold the file's current version.
      if (!CurrentObject(st, ino)) {
        st.Problem(FsckSeverity::kError, "data", ino, st.PathOf(ino),
                   "data is not local and the remote object (" + obj->second.key + ", " +
                       std::to_string(obj->second.size) +
                       " bytes) holds another version than the manifest's (" + std::to_string(rec.size) +
                       " bytes)",
                   rec.sealed ? kLostCommitted : "the file's data is lost: delete it");
      }
      continue;
    }
    const bool exists = st.backing.count(ino) != 0;
    uint64_t actual = 0;
    if (exists) {
      auto file = st.data->Open(ino, /*create=*/false);
      Result<uint64_t> size = file.ok() ? (*file)->Size() : Result<uint64_t>(file.status());
      if (!size.ok()) {
        st.Problem(FsckSeverity::kError, "data", ino, st.PathOf(ino),
                   "cannot read backing file " + HexIno(ino) + ": " + size.status().message(),
                   "check the cache disk (permissions, I/O errors in dmesg)");
        continue;
      }
      actual = *size;
    }
    if (rec.sealed || committed.count(ino)) {
      CheckSealed(st, ino, rec, exists, actual);
      continue;
    }
    if (actual == rec.size) continue;
    st.Fixable(FsckSeverity::kWarning, "data", ino, st.PathOf(ino),
               (exists ? "backing file " + HexIno(ino) + " is " + std::to_string(actual) + " bytes"
                       : "backing file " + HexIno(ino) + " is missing") +
                   ", manifest says " + std::to_string(rec.size) +
                   " (not committed; the daemon stopped "
                   "before recording the size)",
               "set the size to " + std::to_string(actual) + ", as the next mount would", kFilesGroup);
    rec.size = actual;
    st.PutInode(kFilesGroup, ino);
  }
}

}  // namespace ckptfs::fsck
