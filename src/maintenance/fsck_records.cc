// Records that name an inode the manifest does not have (or one of the wrong
// kind). The daemon ignores most of them when it loads, so they are
// leftovers, not damage: removing them loses nothing.
#include <sys/stat.h>

#include "maintenance/fsck_state.h"

namespace ckptfs::fsck {

namespace {

std::string RecordPath(KeySpace space, uint64_t ino) {
  return std::string("manifest/") + KeySpaceName(space) + "/" + HexIno(ino);
}

}  // namespace

void CheckRecords(State& st) {
  for (const auto& [ino, names] : st.xattrs) {
    if (st.Find(ino)) continue;
    st.Fixable(FsckSeverity::kWarning, "records", ino, RecordPath(KeySpace::kXattrs, ino),
               std::to_string(names.size()) + " xattr record(s) of inode " + std::to_string(ino) +
                   ", which does not exist",
               "delete the records", kRecordsGroup);
    for (const std::string& name : names) st.Delete(kRecordsGroup, KeySpace::kXattrs, XattrKey(ino, name));
  }
  std::erase_if(st.xattrs, [&](const auto& x) { return !st.Find(x.first); });

  for (auto it = st.steps.begin(); it != st.steps.end();) {
    const InodeRecord* dir = st.Find(it->first);
    if (dir && S_ISDIR(dir->mode)) {
      ++it;
      continue;
    }
    st.Fixable(FsckSeverity::kWarning, "records", it->first, RecordPath(KeySpace::kSteps, it->first),
               std::string("step record (") + StepStateName(it->second.state) + ") of inode " +
                   std::to_string(it->first) +
                   (dir ? ", which is not a directory" : ", which does not exist"),
               "delete the record (files stay as they are)", kRecordsGroup);
    st.Delete(kRecordsGroup, KeySpace::kSteps, InoKey(it->first));
    it = st.steps.erase(it);
  }

  for (auto it = st.uploads.begin(); it != st.uploads.end();) {
    const InodeRecord* file = st.Find(it->first);
    if (file && S_ISREG(file->mode)) {
      ++it;
      continue;
    }
    st.Fixable(FsckSeverity::kWarning, "records", it->first, RecordPath(KeySpace::kUploads, it->first),
               "queued upload of inode " + std::to_string(it->first) +
                   (file ? ", which is not a regular file" : ", which does not exist"),
               "delete the record", kRecordsGroup);
    st.Delete(kRecordsGroup, KeySpace::kUploads, InoKey(it->first));
    it = st.uploads.erase(it);
  }

  // The remote object of a record nobody owns is left where it is: without
  // the inode there is no telling whether a commit object in the remote
  // still names it, and a stray object costs only space.
  for (auto it = st.objects.begin(); it != st.objects.end();) {
    const InodeRecord* file = st.Find(it->first);
    if (file && S_ISREG(file->mode)) {
      ++it;
      continue;
    }
    st.Fixable(FsckSeverity::kWarning, "records", it->first, RecordPath(KeySpace::kObjects, it->first),
               "object record (" + it->second.key + ") of inode " + std::to_string(it->first) +
                   (file ? ", which is not a regular file" : ", which does not exist"),
               "delete the record; the remote object stays", kRecordsGroup);
    st.Delete(kRecordsGroup, KeySpace::kObjects, InoKey(it->first));
    it = st.objects.erase(it);
  }

  for (auto it = st.checksums.begin(); it != st.checksums.end();) {
    const InodeRecord* file = st.Find(it->first);
    if (file && S_ISREG(file->mode)) {
      ++it;
      continue;
    }
    st.Fixable(FsckSeverity::kWarning, "records", it->first, RecordPath(KeySpace::kChecksums, it->first),
               "checksum record of inode " + std::to_string(it->first) +
                   (file ? ", which is not a regular file" : ", which does not exist"),
               "delete the record", kRecordsGroup);
    st.Delete(kRecordsGroup, KeySpace::kChecksums, InoKey(it->first));
    it = st.checksums.erase(it);
  }

  // The GC skips a live inode's data, so this is harmless; but a queue
  // entry for a live file is wrong, and the next one to trust it may not be.
  for (auto it = st.gc.begin(); it != st.gc.end();) {
    if (!st.Find(*it)) {
      ++it;
      continue;
    }
    st.Fixable(FsckSeverity::kWarning, "records", *it, RecordPath(KeySpace::kGc, *it),
               "the GC queue lists inode " + std::to_string(*it) + ", which still exists",
               "delete the queue entry (the file keeps its data)", kRecordsGroup);
    st.Delete(kRecordsGroup, KeySpace::kGc, InoKey(*it));
    it = st.gc.erase(it);
  }
}

}  // namespace ckptfs::fsck
