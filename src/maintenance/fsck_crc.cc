// --crc: the CRC32C of each committed, local file that the remote also
// holds, against the one recorded when it was uploaded, and of each file a
// writer-library client wrote, against the one it reported at close. Only sealed files
// of committed steps are read: a file still being written may have changed
// after a crash without its record (size, mtime) showing it.
#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
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
      if (!file.sealed || !st.backing.count(ino)) continue;
      if ((!obj || !obj->resident) && !reported) continue;
      if (!done.insert(ino).second) continue;
      auto crc = CrcOf(st.data, ino, file.size, &buf);
      if (!crc.ok()) continue;  // a short or unreadable file is the data pass's finding
      st.report->counts.crc_files++;
      st.report->counts.crc_bytes += file.size;
      if (reported && *crc != reported->crc32c) {
        // The writer library reported this CRC32C at close, for this very
        // version: the bytes changed afterwards.
        const std::string problem = "local data has CRC32C " + Hex32(*crc) + ", its writer reported " +
                                    Hex32(reported->crc32c) + " when it closed the file (the local copy is corrupt)";
        if (obj && obj->crc32c == reported->crc32c) {
          // The remote holds the bytes the writer wrote.
          st.Fixable(FsckSeverity::kError, "crc", ino, path, problem, kRemoteOnlyRepair, kFilesGroup);
          MarkRemoteOnly(st, ino);
        } else {
          st.Problem(FsckSeverity::kError, "crc", ino, path, problem,
                     "no good copy is known: restore the file from the trainer's own copy, or delete the step");
        }
        continue;
      }
      if (!obj || !obj->resident || *crc == obj->crc32c) continue;
      st.Fixable(FsckSeverity::kError, "crc", ino, path,
                 "local data has CRC32C " + Hex32(*crc) + ", the remote object's (" + obj->key + ") is " +
                     Hex32(obj->crc32c) + " (the local copy is corrupt)",
                 kRemoteOnlyRepair, kFilesGroup);
      MarkRemoteOnly(st, ino);
    }
  }
}

}  // namespace ckptfs::fsck
