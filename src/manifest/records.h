// The manifest's record types and their encodings. Keys are big-endian so
// that RocksDB's bytewise order groups a directory's entries (and an inode's
// xattrs) under one prefix. Values are a version byte followed by
// little-endian fixed-width fields and length-prefixed strings; decoding
// checks lengths and returns EIO on a corrupt record instead of trusting it.
// docs/manifest.md describes the schema.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/time_convert.h"  // TimespecToNanos, for the callers of this header

namespace ckptfs {

struct InodeRecord {
  uint64_t ino = 0;
  uint32_t mode = 0;  // type bits and permissions, as st_mode
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t nlink = 0;
  uint64_t size = 0;
  timespec atime{};
  timespec mtime{};
  timespec ctime{};
  // The directory this inode was last linked into (for a directory, its only
  // parent). Used to find the step a file belongs to.
  uint64_t parent = 0;
  // Committed data: never written again (opens for write fail with EROFS).
  bool sealed = false;
  // Directories: the readdir cookie the next new entry gets. Cookies only
  // grow, which keeps readdir offsets stable while entries come and go.
  uint64_t next_cookie = 1;
  std::string symlink_target;  // symlinks only

  bool operator==(const InodeRecord&) const;
};

struct DentryRecord {
  uint64_t ino = 0;
  uint64_t cookie = 0;  // this entry's readdir offset within its directory
  bool operator==(const DentryRecord&) const = default;
};

enum class StepState : uint8_t {
  kWriting = 0,
  kCommitted = 1,
  kIncomplete = 2,  // was writing when the daemon stopped without committing it
  kBroken = 3,      // its checkpoint metadata is malformed or contradicted
  kDeleting = 4,    // a user started deleting it (rm -rf); never counted again
};
const char* StepStateName(StepState state);

struct StepRecord {
  StepState state = StepState::kWriting;
  int64_t step = 0;  // the number captured by the step pattern
  timespec committed_at{};
  uint64_t bytes = 0;  // at commit: total bytes of the step's regular files
  uint64_t files = 0;  // at commit: number of regular files
  std::string error;   // why it is not committed yet, or why it is broken
  bool ephemeral = false;  // the trainer marked it ephemeral (OLMo-core)
  // Committed, and every file plus the commit object are in the remote tier
  // (SPEC section 4). Encoded as an optional trailing byte: records written
  // before the remote tier existed decode as not persisted.
  bool persisted = false;
  // Who triggered the commit: an opaque identity of the trainer process that
  // closed the marker or wrote the run's index file (pid and start time), 0
  // when unknown (explicit, idle and rename commits). The recis retention
  // preset counts only steps of the newest step's session, as RecIS's Saver
  // only prunes what its own process saved. Optional trailing field.
  uint64_t session = 0;
  // The name of the checkpoint the trainer itself calls best, as this step
  // recorded it (Hugging Face trainer_state.json best_model_checkpoint,
  // basename only); "" when none. Used by the hf retention preset. Optional
  // trailing field.
  std::string best_ref;
  // A commit was asked for while nothing in the step was open for writing
  // (kPendingCommit* bits; 0 = none). Recovery after a daemon crash in the
  // same boot finishes that commit, with the same completeness check, instead
  // of leaving the step incomplete (filesystem_recovery.cc). Optional
  // trailing field.
  uint8_t pending_commit = 0;
  // Cluster mode (SPEC section 9): the node that decided the step's commit
  // for the whole cluster ("" = a single-node step). Only that node writes
  // the step's commit object. Optional trailing field.
  std::string committer;
  // Cluster mode: the tombstone of this path (its tag in the bucket's step
  // index) the node knew of when the step was created here,
  // kFollowsNoRemoval when it knew of none, kFollowsNextRemoval when it
  // could not know, "" in records written before the field existed (as
  // kFollowsNextRemoval). A tombstone with another tag removed an earlier
  // save of the name, which this step is left over from (docs/cluster.md,
  // "a removal a node has not seen"). Optional trailing field.
  std::string follows_removal;
  // Cluster mode: the proposal of the decision this step was committed with
  // (ClusterStepRecord::proposal), "" when not committed from a decision or
  // written before the field existed. A tombstone of the name that names it
  // removed this very save, also when the name has been saved again since
  // (docs/cluster.md, "a node that missed both"). Optional trailing field.
  std::string decision;

  bool operator==(const StepRecord&) const;
};

// StepRecord::follows_removal of a step created while this node's own
// removal of the name was still on its way to the bucket, or while its view
// of the step index was not fresh (its refreshes failed, or none ran yet):
// it follows the name's next tombstone, whichever that is.
inline constexpr const char* kFollowsNextRemoval = "~next";
// StepRecord::follows_removal of a step created while the node's view had no
// tombstone of the name. (Never a tag: S3's ETags are quoted.)
inline constexpr const char* kFollowsNoRemoval = "-";
// Whether a step follows whichever tombstone of its name comes next (it
// cannot be left over from a removed save).
inline bool FollowsAnyRemoval(const std::string& follows_removal) {
  return follows_removal.empty() || follows_removal == kFollowsNextRemoval;
}

// StepRecord::pending_commit bits: what the pending request was (the commit
// procedure treats a rename and an explicit commit differently).
inline constexpr uint8_t kPendingCommit = 1;
inline constexpr uint8_t kPendingCommitRenamed = 2;  // a directory renamed into the step name
inline constexpr uint8_t kPendingCommitForced = 4;   // explicit or idle
inline constexpr uint8_t kPendingCommitDirect = 8;   // any trigger but a subdirectory marker
inline constexpr uint8_t kPendingCommitExplicit = 16;  // ckptfs commit, setfattr: no settling

// A file's contents as the remote tier holds them (KeySpace::kObjects): the
// object `key` has these bytes. The version (size, mtime) is the file's at
// the time it was read for the upload; a file written again afterwards has
// a newer version and is uploaded again.
struct ObjectRecord {
  std::string key;  // relative to the remote prefix: the file's path then
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t crc32c = 0;
  // The backing file holds every byte. False once the data was evicted (or
  // never fetched, after a cold mount): reads fetch ranges from the remote.
  bool resident = true;
  // False when nothing is known of the object's contents (a run-level file
  // imported from a listing): its fetched bytes cannot be verified.
  bool crc_known = true;
  // CRC32C of each chunk_size bytes of the object (commit object "chunks"),
  // empty for objects uploaded before they were recorded: fetched chunks are
  // verified on their own; without them only the whole file can be.
  uint64_t chunk_size = 0;
  std::vector<uint32_t> chunk_crcs;
  // Cluster mode: the node whose part holds this file ("" = this node). The
  // data is that node's to upload; until its part record says it is
  // uploaded, crc_known is false and reads wait (docs/cluster.md).
  std::string owner_node;

  bool operator==(const ObjectRecord&) const = default;
};

// A queued upload (KeySpace::kUploads): the file's current contents must
// reach the remote. The version lets a finished upload tell whether the file
// changed while it ran. upload_id names a multipart upload in progress, so
// that one interrupted by a crash is aborted, not left behind.
struct UploadRecord {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::string upload_id;
  std::string upload_key;  // the key upload_id belongs to

  bool operator==(const UploadRecord&) const = default;
};

// The size and CRC32C a writer-library client reported when it closed the
// file (KeySpace::kChecksums), for the version (size, mtime) the file had
// then. A file written again afterwards has another version: the record no
// longer describes it and is ignored.
struct ChecksumRecord {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t crc32c = 0;
  // The backing file as the daemon left it at close (BackingFile::Identity),
  // to notice a later change around the daemon; 0 = not known (records of
  // older daemons, data stores without identities).
  uint64_t backing_inode = 0;
  int64_t backing_ctime_ns = 0;

  bool operator==(const ChecksumRecord&) const = default;
};

// Keys.
std::string InoKey(uint64_t ino);
Result<uint64_t> DecodeInoKey(std::string_view key);
std::string DentryKey(uint64_t parent, std::string_view name);
std::string DentryPrefix(uint64_t parent);  // == InoKey(parent)
// Splits a dentry or xattr key into its ino and name.
Result<std::pair<uint64_t, std::string>> DecodeNamedKey(std::string_view key);
std::string XattrKey(uint64_t ino, std::string_view name);
std::string XattrPrefix(uint64_t ino);  // == InoKey(ino)

// Values.
std::string EncodeInode(const InodeRecord& rec);
Result<InodeRecord> DecodeInode(std::string_view value);
std::string EncodeDentry(const DentryRecord& rec);
Result<DentryRecord> DecodeDentry(std::string_view value);
std::string EncodeStep(const StepRecord& rec);
Result<StepRecord> DecodeStep(std::string_view value);
std::string EncodeObject(const ObjectRecord& rec);
Result<ObjectRecord> DecodeObject(std::string_view value);
std::string EncodeUpload(const UploadRecord& rec);
Result<UploadRecord> DecodeUpload(std::string_view value);
std::string EncodeChecksum(const ChecksumRecord& rec);
Result<ChecksumRecord> DecodeChecksum(std::string_view value);

// Keys of the remote GC queue (KeySpace::kRemoteGc): commit objects sort
// before data objects, so a step's commit object is always deleted first and
// the remote never shows a complete-looking step with data missing.
std::string RemoteGcKey(std::string_view object_key, bool commit_object);
std::string_view RemoteGcObjectKey(std::string_view gc_key);
inline constexpr char kRemoteGcCommitPrefix = '\x00';
inline constexpr char kRemoteGcDataPrefix = '\x01';

}  // namespace ckptfs
