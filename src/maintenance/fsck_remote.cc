// --crc with a remote (`fsck --crc --remote URL`): the remote object of a
// committed file is read (streamed, never held whole) and checksummed
// against the CRC32Cs recorded at upload, per recorded chunk when the
// record has them, so the report can say which copy is bad and where.
#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "common/crc32c_chunks.h"
#include "maintenance/fsck_state.h"

namespace ckptfs::fsck {

namespace {

std::string Hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08" PRIx32, v);
  return buf;
}

}  // namespace

Result<RemoteCopy> CheckRemoteCopy(ObjectStore* store, const ObjectRecord& obj) {
  const bool chunked = obj.chunk_size > 0 && !obj.chunk_crcs.empty();
  ChunkCrc32c sums(chunked ? obj.chunk_size : std::max<uint64_t>(obj.size, 1));
  // One byte past the recorded size: a longer object is as wrong as a shorter one.
  auto got = store->ReadRange(obj.key, 0, obj.size + 1, [&](uint64_t at, std::string_view piece) -> Status {
    if (at == 0) sums.Reset();  // a retried request starts over
    if (at != sums.bytes()) return Status::Error(EIO, "the body did not arrive in order");
    sums.Add(piece.data(), piece.size());
    return Status::Ok();
  });
  RemoteCopy out;
  if (!got.ok()) {
    if (got.err() == ENOENT) {
      out.detail = "the remote object " + obj.key + " is missing";
      return out;
    }
    return got.status().Annotate("reading the remote object " + obj.key);
  }
  if (sums.bytes() != obj.size) {
    out.detail = "the remote object " + obj.key + " has " + std::to_string(sums.bytes()) + " bytes, " +
                 std::to_string(obj.size) + " were uploaded";
    return out;
  }
  const uint32_t whole = sums.Whole();
  if (chunked) {
    const std::vector<uint32_t> chunks = sums.Chunks();
    for (size_t i = 0; i < chunks.size() && i < obj.chunk_crcs.size(); i++) {
      if (chunks[i] == obj.chunk_crcs[i]) continue;
      const uint64_t from = i * obj.chunk_size;
      const uint64_t to = std::min(obj.size, from + obj.chunk_size);
      out.detail = "the remote object " + obj.key + " has CRC32C " + Hex32(chunks[i]) + " in bytes " +
                   std::to_string(from) + "-" + std::to_string(to) + ", " + Hex32(obj.chunk_crcs[i]) +
                   " was recorded";
      return out;
    }
  }
  if (whole != obj.crc32c) {
    out.detail = "the remote object " + obj.key + " has CRC32C " + Hex32(whole) + ", " + Hex32(obj.crc32c) +
                 " was recorded";
    return out;
  }
  out.good = true;
  return out;
}

}  // namespace ckptfs::fsck
