// --crc: the CRC32C of each committed, local file that the remote also
// holds, against the one recorded when it was uploaded, and of each file a
// writer-library client wrote, against the one it reported at close. Only sealed files
// of committed steps are read: a file still being written may have changed
// after a crash without its record (size, mtime) showing it. With --remote
// the remote objects are checked too (fsck_remote.cc), so the report says
// which copy is bad and offers only the repair that fixes it: re-fetch for
// a bad local copy, re-upload for a bad remote object, none when both are.
#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <set>

#include "common/crc32c.h"
#include "maintenance/fsck_state.h"

namespace ckptfs::fsck {

namespace {

constexpr size_t kChunk = 4 << 20;

std::string Hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08" PRIx32, v);
  return buf;
}

Result<uint32_t> CrcOf(DataStore* data, uint64_t ino, uint64_t size, std::string* buf) {
  auto file = data->Open(ino, /*create=*/false);
  if (!file.ok()) return file.status();
  uint32_t crc = 0;
  for (uint64_t off = 0; off < size;) {
    auto n = (*file)->PRead(buf->data(), std::min<uint64_t>(kChunk, size - off), off);
    if (!n.ok()) return n.status();
    if (*n == 0) return Status::Error(EIO, "backing file shorter than its record");
    crc = Crc32c(crc, buf->data(), *n);
    off += *n;
  }
  return crc;
}

// The writer library's checksum when it describes the file's current version.
const ChecksumRecord* CurrentChecksum(const State& st, uint64_t ino) {
  auto it = st.checksums.find(ino);
  if (it == st.checksums.end()) return nullptr;
  const InodeRecord& file = st.inodes.at(ino);
  if (it->second.size != file.size || it->second.mtime_ns != TimespecToNanos(file.mtime)) return nullptr;
  return &it->second;
}

}  // namespace

void CheckCrc(State& st) {
  if (!st.options.verify_crc) return;
  std::set<uint64_t> done;  // a file linked twice is read once
  std::string buf(kChunk, '\0');
  for (const auto& [step, rec] : st.steps) {
    if (rec.state != StepState::kCommitted) continue;
    for (const auto& [ino, path] : FilesUnder(st, step)) {
      const InodeRecord& file = st.inodes.at(ino);
      const ObjectRecord* obj = CurrentObject(st, ino);
      const ChecksumRecord* reported = CurrentChecksum(st, ino);
      if (!file.sealed || !done.insert(ino).second) continue;
      // The local copy, when there is one to check: what its writer
      // reported at close, else what was uploaded, is what it must hold.
      std::optional<uint32_t> local_crc;
      if (st.backing.count(ino) && ((obj && obj->resident) || reported)) {
        auto crc = CrcOf(st.data, ino, file.size, &buf);
        if (crc.ok()) {  // a short or unreadable file is the data pass's finding
          local_crc = *crc;
          st.report->counts.crc_files++;
          st.report->counts.crc_bytes += file.size;
        }
      }
      const uint32_t local_expected = reported ? reported->crc32c : (obj ? obj->crc32c : 0);
      const bool local_bad = local_crc && *local_crc != local_expected;
      // The remote copy, when a remote was given and the upload's CRC32C is known.
      std::optional<RemoteCopy> remote;
      if (st.options.remote && obj && obj->crc_known) {
        auto copy = CheckRemoteCopy(st.options.remote, *obj);
        if (copy.ok()) {
          remote = *copy;
          st.report->counts.remote_crc_files++;
          st.report->counts.remote_crc_bytes += obj->size;
        } else {
          st.Problem(FsckSeverity::kWarning, "crc", ino, path,
                     "its remote object could not be checked: " + copy.status().message(),
                     "run fsck --crc --remote again once the remote answers");
        }
      }
      // The remote holds the bytes the writer wrote (no report: by definition).
      const bool remote_matches_writer = obj && (!reported || obj->crc32c == reported->crc32c);
      const bool remote_good = remote && remote->good && remote_matches_writer;
      const bool remote_bad = remote && !remote_good;
      const std::string remote_problem =
          !remote ? "" : (!remote->good ? remote->detail : "the remote object holds other bytes than the writer wrote");
      std::string local_problem;
      if (local_bad) {
        local_problem = "local data has CRC32C " + Hex32(*local_crc) + ", " +
                        (reported ? "its writer reported " + Hex32(reported->crc32c) + " when it closed the file"
                                  : "the remote object's (" + obj->key + ") was recorded as " + Hex32(obj->crc32c));
      }
      if (local_bad && remote_good) {
        st.Fixable(FsckSeverity::kError, "crc", ino, path,
                   "local copy corrupt (remote good: re-fetch fixes it): " + local_problem, kRemoteOnlyRepair,
                   kFilesGroup);
        MarkRemoteOnly(st, ino);
      } else if (local_bad && remote_bad) {
        st.Problem(FsckSeverity::kError, "crc", ino, path,
                   "committed data lost: the local copy is corrupt (" + local_problem +
                       ") and so is the remote object (" + remote_problem + ")",
                   "restore the file from the trainer's own copy, or delete the step");
      } else if (local_bad && !remote_matches_writer) {
        st.Problem(FsckSeverity::kError, "crc", ino, path, local_problem + " (the local copy is corrupt)",
                   "no good copy is known: restore the file from the trainer's own copy, or delete the step");
      } else if (local_bad) {
        // Without a look at the remote, re-fetching may bring back the
        // same bad bytes: say so instead of offering it.
        st.Problem(FsckSeverity::kError, "crc", ino, path,
                   "local copy corrupt: " + local_problem + "; the remote object was not checked",
                   "run fsck --crc --remote URL (the mount's remote): it tells whether the remote copy is good "
                   "and --repair then makes the file fetch it again");
      } else if (remote_bad && local_crc) {
        st.Fixable(FsckSeverity::kError, "crc", ino, path,
                   "remote object corrupt (local good: re-upload fixes it): " + remote_problem, kReuploadRepair,
                   kFilesGroup);
        QueueReupload(st, ino);
      } else if (remote_bad) {
        st.Problem(FsckSeverity::kError, "crc", ino, path,
                   "committed data lost: remote object corrupt and no local copy: " + remote_problem,
                   "restore the file from the trainer's own copy, or delete the step");
      }
    }
  }
}

}  // namespace ckptfs::fsck
