// The first pass: every manifest record is decoded into the image. A record
// that does not decode is reported where it is; one in the inode or entry key
// spaces blocks every repair, because a fix planned without it (a backing
// file that looks unowned, an entry that looks dangling) could remove the
// very data it describes.
#include <sys/stat.h>

#include <algorithm>

#include "maintenance/fsck_state.h"
#include "manifest/schema.h"

namespace ckptfs::fsck {

namespace {

std::string RecordPath(KeySpace space, std::string_view key) {
  return std::string("manifest/") + KeySpaceName(space) + "/" + HexKey(key);
}

constexpr const char* kUnreadable =
    "the manifest is damaged and ckptfs cannot mount this cache: restore the steps from the "
    "remote (mount an empty cache on it) or keep the data in CACHE_DIR/data and report the bug";

void Undecodable(State& st, KeySpace space, std::string_view key, const Status& why, bool blocks) {
  st.Problem(FsckSeverity::kError, "records", 0, RecordPath(space, key),
             std::string(KeySpaceName(space)) + " record does not decode: " + why.message(), kUnreadable);
  if (blocks && st.report->repair_blocked.empty()) {
    st.report->repair_blocked = std::string(KeySpaceName(space)) + " records that do not decode";
  }
}

}  // namespace

Status LoadImage(State& st) {
  CKPTFS_RETURN_IF_ERROR(CheckFormatVersion(*st.manifest));

  CKPTFS_RETURN_IF_ERROR(
      st.manifest->Scan(KeySpace::kInodes, "", [&](std::string_view k, std::string_view v) {
        auto ino = DecodeInoKey(k);
        auto rec = DecodeInode(v);
        if (!ino.ok() || !rec.ok()) {
          Undecodable(st, KeySpace::kInodes, k, ino.ok() ? rec.status() : ino.status(), true);
        } else if (rec->ino != *ino) {
          Undecodable(st, KeySpace::kInodes, k,
                      Status::Error(EIO, "its key names inode " + std::to_string(*ino) +
                                             ", the record inode " + std::to_string(rec->ino)),
                      true);
        } else {
          st.inodes[*ino] = std::move(rec).value();
        }
        return true;
      }));
  CKPTFS_RETURN_IF_ERROR(
      st.manifest->Scan(KeySpace::kDentries, "", [&](std::string_view k, std::string_view v) {
        auto key = DecodeNamedKey(k);
        auto rec = DecodeDentry(v);
        if (!key.ok() || !rec.ok()) {
          Undecodable(st, KeySpace::kDentries, k, key.ok() ? rec.status() : key.status(), true);
          return true;
        }
        const size_t index = st.entries.size();
        st.entries.push_back(Entry{key->first, key->second, *rec, false});
        st.entries_in[key->first].push_back(index);
        st.entries_to[rec->ino].push_back(index);
        return true;
      }));
  CKPTFS_RETURN_IF_ERROR(st.manifest->Scan(KeySpace::kXattrs, "", [&](std::string_view k, std::string_view) {
    auto key = DecodeNamedKey(k);
    if (!key.ok()) {
      // It names no inode, so it can be nobody's attribute.
      st.Fixable(FsckSeverity::kError, "records", 0, RecordPath(KeySpace::kXattrs, k),
                 "xattr key does not decode (the mount would fail): " + key.status().message(),
                 "delete the record", kRecordsGroup);
      st.Delete(kRecordsGroup, KeySpace::kXattrs, std::string(k));
      return true;
    }
    st.xattrs[key->first].push_back(key->second);
    return true;
  }));
  CKPTFS_RETURN_IF_ERROR(st.manifest->Scan(KeySpace::kSteps, "", [&](std::string_view k, std::string_view v) {
    auto ino = DecodeInoKey(k);
    auto rec = DecodeStep(v);
    if (!ino.ok() || !rec.ok()) {
      // Not rewritten: a committed step turned into anything else would be
      // pruned by retention.
      Undecodable(st, KeySpace::kSteps, k, ino.ok() ? rec.status() : ino.status(), false);
      return true;
    }
    st.steps[*ino] = std::move(rec).value();
    return true;
  }));
  CKPTFS_RETURN_IF_ERROR(st.manifest->Scan(KeySpace::kGc, "", [&](std::string_view k, std::string_view) {
    auto ino = DecodeInoKey(k);
    if (!ino.ok()) {
      st.Fixable(FsckSeverity::kWarning, "records", 0, RecordPath(KeySpace::kGc, k),
                 "GC queue key does not decode: it names no backing file", "delete the record",
                 kRecordsGroup);
      st.Delete(kRecordsGroup, KeySpace::kGc, std::string(k));
      return true;
    }
    st.gc.insert(*ino);
    return true;
  }));
  CKPTFS_RETURN_IF_ERROR(
      st.manifest->Scan(KeySpace::kUploads, "", [&](std::string_view k, std::string_view v) {
        auto ino = DecodeInoKey(k);
        auto rec = DecodeUpload(v);
        if (ino.ok() && rec.ok()) {
          st.uploads[*ino] = std::move(rec).value();
          return true;
        }
        const InodeRecord* file = ino.ok() ? st.Find(*ino) : nullptr;
        if (file && S_ISREG(file->mode)) {
          // Queued again for the file's current contents, as a close would.
          UploadRecord fresh;
          fresh.size = file->size;
          fresh.mtime_ns = TimespecToNanos(file->mtime);
          st.Fixable(FsckSeverity::kError, "records", *ino, RecordPath(KeySpace::kUploads, k),
                     "queued upload does not decode (the mount would fail): " + rec.status().message(),
                     "queue the file's upload afresh", kRecordsGroup);
          st.Put(kRecordsGroup, KeySpace::kUploads, std::string(k), EncodeUpload(fresh));
          st.uploads[*ino] = fresh;
        } else {
          st.Fixable(FsckSeverity::kError, "records", 0, RecordPath(KeySpace::kUploads, k),
                     "queued upload does not decode and names no file (the mount would fail): " +
                         (ino.ok() ? rec.status() : ino.status()).message(),
                     "delete the record", kRecordsGroup);
          st.Delete(kRecordsGroup, KeySpace::kUploads, std::string(k));
        }
        return true;
      }));
  CKPTFS_RETURN_IF_ERROR(
      st.manifest->Scan(KeySpace::kObjects, "", [&](std::string_view k, std::string_view v) {
        auto ino = DecodeInoKey(k);
        auto rec = DecodeObject(v);
        if (!ino.ok() || !rec.ok()) {
          // Not removed: for a file evicted from the cache it is the only way
          // to its data.
          Undecodable(st, KeySpace::kObjects, k, ino.ok() ? rec.status() : ino.status(), false);
          return true;
        }
        st.objects[*ino] = std::move(rec).value();
        return true;
      }));
  CKPTFS_RETURN_IF_ERROR(
      st.manifest->Scan(KeySpace::kChecksums, "", [&](std::string_view k, std::string_view v) {
        auto ino = DecodeInoKey(k);
        auto rec = DecodeChecksum(v);
        if (!ino.ok() || !rec.ok()) {
          // Only a cross-check: dropping it loses no data.
          st.Fixable(FsckSeverity::kWarning, "records", 0, RecordPath(KeySpace::kChecksums, k),
                     "checksums record does not decode: " + (ino.ok() ? rec.status() : ino.status()).message(),
                     "delete the record", kRecordsGroup);
          st.Delete(kRecordsGroup, KeySpace::kChecksums, std::string(k));
          return true;
        }
        st.checksums[*ino] = *rec;
        return true;
      }));
  CKPTFS_RETURN_IF_ERROR(
      st.manifest->Scan(KeySpace::kRemoteGc, "", [&](std::string_view k, std::string_view) {
        const bool known_prefix =
            k.size() > 1 && (k[0] == kRemoteGcCommitPrefix || k[0] == kRemoteGcDataPrefix);
        if (!known_prefix) {
          st.Fixable(FsckSeverity::kWarning, "records", 0, RecordPath(KeySpace::kRemoteGc, k),
                     "remote deletion queue key is malformed: it names no object", "delete the record",
                     kRecordsGroup);
          st.Delete(kRecordsGroup, KeySpace::kRemoteGc, std::string(k));
        }
        return true;
      }));

  auto listed = st.data->List();
  if (!listed.ok()) return listed.status().Annotate("listing backing files");
  st.backing.insert(listed->begin(), listed->end());

  // New numbers (a lost+found directory) stay above everything in use, as
  // recovery's counter does: never an ino still in the GC queue.
  uint64_t max_ino = kRootIno;
  if (!st.inodes.empty()) max_ino = std::max(max_ino, st.inodes.rbegin()->first);
  if (!st.gc.empty()) max_ino = std::max(max_ino, *st.gc.rbegin());
  if (!st.backing.empty()) max_ino = std::max(max_ino, *st.backing.rbegin());
  st.next_ino = max_ino + 1;
  return Status::Ok();
}

}  // namespace ckptfs::fsck
