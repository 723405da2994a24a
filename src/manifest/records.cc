// Encodings of the manifest's keys and records (see records.h and
// docs/manifest.md). Every field is written with explicit shifts rather than
// memcpy of host integers, so the bytes do not depend on the host's byte
// order. Decoders never trust a length they have not checked: a short,
// overlong or otherwise malformed value is EIO, never an out-of-bounds read.
#include "manifest/records.h"

#include "common/crc32c_chunks.h"

namespace ckptfs {

namespace {

constexpr uint8_t kRecordVersion = 1;
constexpr size_t kInoKeySize = 8;

// Appends little-endian fixed-width fields and length-prefixed strings.
class Encoder {
 public:
  explicit Encoder(size_t reserve) { out_.reserve(reserve); }

  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; i++) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; i++) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void Time(const timespec& ts) {
    U64(static_cast<uint64_t>(static_cast<int64_t>(ts.tv_sec)));
    U32(static_cast<uint32_t>(ts.tv_nsec));
  }
  void String(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  std::string Finish() && { return std::move(out_); }

 private:
  std::string out_;
};

// Reads what Encoder wrote. The first failed read latches ok() to false and
// every later read returns zero, so callers check once at the end.
class Decoder {
 public:
  explicit Decoder(std::string_view in) : in_(in) {}

  uint8_t U8() {
    if (!Need(1)) return 0;
    const auto v = static_cast<uint8_t>(in_[pos_]);
    pos_ += 1;
    return v;
  }
  uint32_t U32() {
    if (!Need(4)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= uint32_t{static_cast<uint8_t>(in_[pos_ + i])} << (8 * i);
    pos_ += 4;
    return v;
  }
  uint64_t U64() {
    if (!Need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= uint64_t{static_cast<uint8_t>(in_[pos_ + i])} << (8 * i);
    pos_ += 8;
    return v;
  }
  bool Bool() {
    const uint8_t v = U8();
    if (v > 1) ok_ = false;
    return v == 1;
  }
  timespec Time() {
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(static_cast<int64_t>(U64()));
    const uint32_t nsec = U32();
    if (nsec >= kNanosPerSecond) ok_ = false;
    ts.tv_nsec = static_cast<long>(nsec);
    return ts;
  }
  std::string String() {
    const uint32_t len = U32();
    if (!Need(len)) return {};
    std::string s(in_.substr(pos_, len));
    pos_ += len;
    return s;
  }
  // The version byte must be the one we write; a newer one is not guessed at.
  void Version() {
    if (U8() != kRecordVersion) ok_ = false;
  }
  // Optional trailing fields added after a record type first shipped.
  bool HasMore() const { return ok_ && pos_ < in_.size(); }
  // True when every read succeeded and nothing is left over.
  bool Done() const { return ok_ && pos_ == in_.size(); }

 private:
  bool Need(size_t n) {
    if (!ok_ || in_.size() - pos_ < n) {
      ok_ = false;
      return false;
    }
    return true;
  }

  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

bool SameTime(const timespec& a, const timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

Status Corrupt(const char* what) {
  return Status::Error(EIO, std::string("corrupt ") + what + " record");
}

}  // namespace

bool InodeRecord::operator==(const InodeRecord& o) const {
  return ino == o.ino && mode == o.mode && uid == o.uid && gid == o.gid && nlink == o.nlink &&
         size == o.size && SameTime(atime, o.atime) && SameTime(mtime, o.mtime) &&
         SameTime(ctime, o.ctime) && parent == o.parent && sealed == o.sealed &&
         next_cookie == o.next_cookie && symlink_target == o.symlink_target;
}

bool StepRecord::operator==(const StepRecord& o) const {
  return state == o.state && step == o.step && SameTime(committed_at, o.committed_at) &&
         bytes == o.bytes && files == o.files && error == o.error && ephemeral == o.ephemeral &&
         persisted == o.persisted && session == o.session && best_ref == o.best_ref &&
         pending_commit == o.pending_commit && committer == o.committer &&
         follows_removal == o.follows_removal && decision == o.decision;
}

const char* StepStateName(StepState state) {
  switch (state) {
    case StepState::kWriting:
      return "writing";
    case StepState::kCommitted:
      return "committed";
    case StepState::kIncomplete:
      return "incomplete";
    case StepState::kBroken:
      return "broken";
    case StepState::kDeleting:
      return "deleting";
  }
  return "unknown";
}

// ---- Keys: big-endian so bytewise order is numeric order. ----

std::string InoKey(uint64_t ino) {
  std::string key(kInoKeySize, '\0');
  for (size_t i = 0; i < kInoKeySize; i++) {
    key[i] = static_cast<char>(ino >> (8 * (kInoKeySize - 1 - i)));
  }
  return key;
}

Result<uint64_t> DecodeInoKey(std::string_view key) {
  if (key.size() != kInoKeySize) return Status::Error(EIO, "corrupt manifest key");
  uint64_t ino = 0;
  for (size_t i = 0; i < kInoKeySize; i++) ino = (ino << 8) | static_cast<uint8_t>(key[i]);
  return ino;
}

std::string DentryKey(uint64_t parent, std::string_view name) {
  std::string key = InoKey(parent);
  key.append(name);
  return key;
}

std::string DentryPrefix(uint64_t parent) { return InoKey(parent); }

Result<std::pair<uint64_t, std::string>> DecodeNamedKey(std::string_view key) {
  // Names are never empty, so a key of just an ino is as corrupt as a short one.
  if (key.size() <= kInoKeySize) return Status::Error(EIO, "corrupt manifest key");
  Result<uint64_t> ino = DecodeInoKey(key.substr(0, kInoKeySize));
  if (!ino.ok()) return ino.status();
  return std::pair<uint64_t, std::string>(*ino, std::string(key.substr(kInoKeySize)));
}

std::string XattrKey(uint64_t ino, std::string_view name) { return DentryKey(ino, name); }

std::string XattrPrefix(uint64_t ino) { return InoKey(ino); }

// ---- Values ----

std::string EncodeInode(const InodeRecord& rec) {
  Encoder e(96 + rec.symlink_target.size());
  e.U8(kRecordVersion);
  e.U64(rec.ino);
  e.U32(rec.mode);
  e.U32(rec.uid);
  e.U32(rec.gid);
  e.U32(rec.nlink);
  e.U64(rec.size);
  e.Time(rec.atime);
  e.Time(rec.mtime);
  e.Time(rec.ctime);
  e.U64(rec.parent);
  e.U8(rec.sealed ? 1 : 0);
  e.U64(rec.next_cookie);
  e.String(rec.symlink_target);
  return std::move(e).Finish();
}

Result<InodeRecord> DecodeInode(std::string_view value) {
  Decoder d(value);
  InodeRecord rec;
  d.Version();
  rec.ino = d.U64();
  rec.mode = d.U32();
  rec.uid = d.U32();
  rec.gid = d.U32();
  rec.nlink = d.U32();
  rec.size = d.U64();
  rec.atime = d.Time();
  rec.mtime = d.Time();
  rec.ctime = d.Time();
  rec.parent = d.U64();
  rec.sealed = d.Bool();
  rec.next_cookie = d.U64();
  rec.symlink_target = d.String();
  if (!d.Done()) return Corrupt("inode");
  return rec;
}

std::string EncodeDentry(const DentryRecord& rec) {
  Encoder e(17);
  e.U8(kRecordVersion);
  e.U64(rec.ino);
  e.U64(rec.cookie);
  return std::move(e).Finish();
}

Result<DentryRecord> DecodeDentry(std::string_view value) {
  Decoder d(value);
  DentryRecord rec;
  d.Version();
  rec.ino = d.U64();
  rec.cookie = d.U64();
  if (!d.Done()) return Corrupt("dentry");
  return rec;
}

std::string EncodeStep(const StepRecord& rec) {
  Encoder e(48 + rec.error.size());
  e.U8(kRecordVersion);
  e.U8(static_cast<uint8_t>(rec.state));
  e.U64(static_cast<uint64_t>(rec.step));
  e.Time(rec.committed_at);
  e.U64(rec.bytes);
  e.U64(rec.files);
  e.String(rec.error);
  e.U8(rec.ephemeral ? 1 : 0);
  e.U8(rec.persisted ? 1 : 0);
  // Trailing fields added later are written only when set, so records of
  // steps that do not use them stay readable by older versions.
  const bool decided = !rec.decision.empty();
  const bool follows = !rec.follows_removal.empty() || decided;
  const bool cluster = !rec.committer.empty() || follows;
  if (rec.session != 0 || !rec.best_ref.empty() || rec.pending_commit != 0 || cluster) {
    e.U64(rec.session);
    e.String(rec.best_ref);
  }
  if (rec.pending_commit != 0 || cluster) e.U8(rec.pending_commit);
  if (cluster) e.String(rec.committer);
  if (follows) e.String(rec.follows_removal);
  if (decided) e.String(rec.decision);
  return std::move(e).Finish();
}

Result<StepRecord> DecodeStep(std::string_view value) {
  Decoder d(value);
  StepRecord rec;
  d.Version();
  const uint8_t state = d.U8();
  if (state > static_cast<uint8_t>(StepState::kDeleting)) return Corrupt("step");
  rec.state = static_cast<StepState>(state);
  rec.step = static_cast<int64_t>(d.U64());
  rec.committed_at = d.Time();
  rec.bytes = d.U64();
  rec.files = d.U64();
  rec.error = d.String();
  rec.ephemeral = d.Bool();
  if (d.HasMore()) rec.persisted = d.Bool();
  if (d.HasMore()) {
    rec.session = d.U64();
    rec.best_ref = d.String();
  }
  if (d.HasMore()) rec.pending_commit = d.U8();
  if (d.HasMore()) rec.committer = d.String();
  if (d.HasMore()) rec.follows_removal = d.String();
  if (d.HasMore()) rec.decision = d.String();
  if (!d.Done()) return Corrupt("step");
  return rec;
}

std::string EncodeObject(const ObjectRecord& rec) {
  Encoder e(48 + rec.key.size() + 4 * rec.chunk_crcs.size());
  e.U8(kRecordVersion);
  e.String(rec.key);
  e.U64(rec.size);
  e.U64(static_cast<uint64_t>(rec.mtime_ns));
  e.U32(rec.crc32c);
  e.U8(rec.resident ? 1 : 0);
  // Appended fields (records written before them end here).
  e.U8(rec.crc_known ? 1 : 0);
  e.U64(rec.chunk_size);
  e.U32(static_cast<uint32_t>(rec.chunk_crcs.size()));
  for (uint32_t c : rec.chunk_crcs) e.U32(c);
  if (!rec.owner_node.empty()) e.String(rec.owner_node);
  return std::move(e).Finish();
}

Result<ObjectRecord> DecodeObject(std::string_view value) {
  Decoder d(value);
  ObjectRecord rec;
  d.Version();
  rec.key = d.String();
  rec.size = d.U64();
  rec.mtime_ns = static_cast<int64_t>(d.U64());
  rec.crc32c = d.U32();
  rec.resident = d.Bool();
  if (d.HasMore()) {
    rec.crc_known = d.Bool();
    rec.chunk_size = d.U64();
    const uint32_t n = d.U32();
    // Bounded by what is left, so a corrupt count cannot make a huge vector.
    if (n > value.size() / 4) return Corrupt("object");
    rec.chunk_crcs.reserve(n);
    for (uint32_t i = 0; i < n; i++) rec.chunk_crcs.push_back(d.U32());
    if (!rec.chunk_crcs.empty() && (rec.chunk_size == 0 || ChunkCount(rec.size, rec.chunk_size) != n)) {
      return Corrupt("object");
    }
    if (d.HasMore()) rec.owner_node = d.String();
  } else {
    // Before crc_known was recorded, the only objects recorded without a
    // CRC32C were run-level files imported from a listing, with 0.
    rec.crc_known = !(rec.crc32c == 0 && rec.size > 0);
  }
  if (!d.Done()) return Corrupt("object");
  return rec;
}

std::string EncodeUpload(const UploadRecord& rec) {
  Encoder e(32 + rec.upload_id.size() + rec.upload_key.size());
  e.U8(kRecordVersion);
  e.U64(rec.size);
  e.U64(static_cast<uint64_t>(rec.mtime_ns));
  e.String(rec.upload_id);
  e.String(rec.upload_key);
  return std::move(e).Finish();
}

Result<UploadRecord> DecodeUpload(std::string_view value) {
  Decoder d(value);
  UploadRecord rec;
  d.Version();
  rec.size = d.U64();
  rec.mtime_ns = static_cast<int64_t>(d.U64());
  rec.upload_id = d.String();
  rec.upload_key = d.String();
  if (!d.Done()) return Corrupt("upload");
  return rec;
}

std::string EncodeChecksum(const ChecksumRecord& rec) {
  Encoder e(24);
  e.U8(kRecordVersion);
  e.U64(rec.size);
  e.U64(static_cast<uint64_t>(rec.mtime_ns));
  e.U32(rec.crc32c);
  if (rec.backing_inode != 0) {
    e.U64(rec.backing_inode);
    e.U64(static_cast<uint64_t>(rec.backing_ctime_ns));
  }
  return std::move(e).Finish();
}

Result<ChecksumRecord> DecodeChecksum(std::string_view value) {
  Decoder d(value);
  ChecksumRecord rec;
  d.Version();
  rec.size = d.U64();
  rec.mtime_ns = static_cast<int64_t>(d.U64());
  rec.crc32c = d.U32();
  if (d.HasMore()) {
    rec.backing_inode = d.U64();
    rec.backing_ctime_ns = static_cast<int64_t>(d.U64());
  }
  if (!d.Done()) return Corrupt("checksum");
  return rec;
}

std::string RemoteGcKey(std::string_view object_key, bool commit_object) {
  std::string key(1, commit_object ? kRemoteGcCommitPrefix : kRemoteGcDataPrefix);
  key.append(object_key);
  return key;
}

std::string_view RemoteGcObjectKey(std::string_view gc_key) {
  return gc_key.empty() ? gc_key : gc_key.substr(1);
}

}  // namespace ckptfs
