// The records of cluster mode (SPEC section 9; several nodes, one checkpoint)
// in the remote, next to a step's data:
//
//   <step path>/.ckptfs-parts/<node>.json   PartRecord: what one node wrote
//                                           into the step (its part), written
//                                           only by that node, seq growing
//   <step path>/.ckptfs-step.json           ClusterStepRecord: the commit
//                                           decision, every file with its node
//   .ckptfs-index/<path>~f.json             RunFileRecord: the newest version
//                                           of a run-level file in the bucket
//
// Pure encodings, modelled on the commit object (commit_object.h): a decoder
// validates everything another node will trust (JSON shape and types, every
// field present, paths inside the step, no duplicates, limits, sums), an
// encoder never fails or throws. JSON strings are UTF-8: Validate* refuses a
// name that is not, and Encode* writes such a string as null, so that the
// record is refused when read rather than read with another name.
// Encoding is canonical: keys in a fixed order, files, directories and
// symlinks sorted by path, parts by node, compact JSON plus "\n". So two nodes
// encoding the same record (the same sets, in any order) write identical
// bytes, and Encode(Decode(Encode(r))) == Encode(r). Decoders return entries
// in the same sorted order, ignore keys they do not know, and refuse anything
// else with EIO (what the remote holds is damaged; as every reader of
// formats/ refuses) and a message "part record: <field>: <why>" (or "step
// record: ..."); callers add the key (Status::Annotate). A decoder does not
// know the key it read: callers check that step_path (and a part's node)
// match it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "formats/commit_object.h"  // CommitObject::Symlink

namespace ckptfs {

inline constexpr const char* kPartRecordDir = ".ckptfs-parts";
inline constexpr const char* kStepRecordName = ".ckptfs-step.json";

// Limits a decoder (and Validate*) accepts. Paths are those of commit objects
// (components up to 255 bytes) and at most PATH_MAX long in all.
inline constexpr size_t kMaxRecordPathLength = 4096;
inline constexpr size_t kMaxRecordComponentLength = 255;
// Per record: entries of each of `files`, `dirs` and `symlinks`.
inline constexpr size_t kMaxRecordEntries = 1'000'000;
// Nodes in a step record's `parts`.
inline constexpr size_t kMaxRecordNodes = 65'536;
// cache_id, best_ref, symlink targets, a proposal's nonce.
inline constexpr size_t kMaxRecordStringLength = 4096;
inline constexpr size_t kMaxProposalNonceLength = 64;

// One node's part of one step (`<step path>/.ckptfs-parts/<node>.json`).
struct PartRecord {
  std::string node;           // ValidateNodeName
  std::string cache_id;       // the node's cache (1-4096 printable ASCII characters, no space)
  // The node name's epoch its cache holds (>= 1; ClusterMembership::epoch):
  // a gather drops a part whose epoch is below the name's, the part of a
  // daemon whose name was taken over with --replace-node.
  uint64_t epoch = 1;
  std::string step_path;      // relative to the remote prefix, e.g. "run1/step100"
  uint64_t seq = 0;           // grows with every publication of this part
  std::string staged_as;      // the staging directory the files sit in ("" = none)
  double published_at = 0;    // seconds since the epoch, finite and >= 0
  uint32_t open_writers = 0;  // files of the step open for writing at publication
  double last_activity = 0;   // seconds since the epoch of the last change, finite and >= 0
  struct File {
    std::string path;  // relative to the step directory
    uint64_t size = 0;
    uint32_t mode = 0644;  // permission bits (<= 07777)
    int64_t mtime_ns = 0;
    std::optional<uint32_t> crc32c;  // nullopt until known; required once uploaded
    bool uploaded = false;
    // CRC32C of each chunk_size bytes (covering size exactly), or empty.
    std::vector<uint32_t> chunks;
    bool operator==(const File&) const = default;
  };
  std::vector<File> files;
  std::vector<std::string> dirs;  // relative to the step directory
  std::vector<CommitObject::Symlink> symlinks;
  // The chunk size of every file's `chunks`: 0 (no file has chunks) or
  // within [kMinChecksumChunk, kMaxChecksumChunk] (common/crc32c_chunks.h).
  uint64_t chunk_size = 0;
  bool all_uploaded = false;  // requires every file uploaded
  // Every file of the part not yet uploaded, and its name, is durable on the
  // node's disk (fsynced, with the node's manifest), as it is named here:
  // the committing node commits nothing that a power loss there could undo
  // (SPEC section 9, "committed means durable"). Requires open_writers 0.
  bool synced = false;
  bool operator==(const PartRecord&) const = default;
};

// The commit decision (`<step path>/.ckptfs-step.json`).
struct ClusterStepRecord {
  std::string step_path;
  int64_t step = 0;
  std::string proposal;      // "<node>~<nonce>" (ParseProposal)
  std::string committer;     // ValidateNodeName
  double committed_at = 0;   // seconds since the epoch, finite and >= 0
  int64_t dir_mtime_ns = 0;  // the step directory's mtime (>= 0; 0 = not recorded)
  bool ephemeral = false;
  std::string best_ref;  // as CommitPlan::best_ref; "" = none
  uint64_t bytes = 0;    // the sum of the files' sizes
  struct Part {
    uint64_t seq = 0;    // the part record's seq the decision used
    uint64_t files = 0;  // files of that part
    bool operator==(const Part&) const = default;
  };
  std::map<std::string, Part> parts;  // node -> part
  struct File {
    std::string path;  // relative to the step directory
    std::string node;  // a key of `parts`
    uint64_t size = 0;
    std::optional<uint32_t> crc32c;
    uint32_t mode = 0644;
    int64_t mtime_ns = 0;
    bool operator==(const File&) const = default;
  };
  std::vector<File> files;
  std::vector<std::string> dirs;
  std::vector<CommitObject::Symlink> symlinks;
  bool operator==(const ClusterStepRecord&) const = default;
};

// "<step path>/.ckptfs-parts/<node>.json"
std::string PartRecordKey(const std::string& step_path, const std::string& node);
// A run-level file (DeepSpeed's `latest`, RecIS's `checkpoint`) as the node
// that uploaded it to its natural key (`path`) describes that version, so
// that every other node shows it (SPEC section 9). Rewritten by each upload
// of a newer version, by whichever node made it.
struct RunFileRecord {
  std::string path;  // relative to the remote prefix, e.g. "run1/latest"
  std::string node;  // the node that wrote and uploaded this version
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t crc32c = 0;  // of the whole object
  bool operator==(const RunFileRecord&) const = default;
};

// "<step path>/.ckptfs-step.json"
std::string StepRecordKey(const std::string& step_path);
// True when key names a part record of a valid step path and node name;
// fills the outputs that are not null.
bool ParsePartRecordKey(const std::string& key, std::string* step_path, std::string* node);
// Splits "<node>~<nonce>": a valid node name, '~', then 1-64 characters from
// [A-Za-z0-9._-]. Outputs may be null.
bool ParseProposal(const std::string& proposal, std::string* node, std::string* nonce);

// Everything Decode* checks beyond JSON types, for writers that want to check
// a record before they PUT it (sorted order is not required here).
Status ValidatePartRecord(const PartRecord& record);
Status ValidateClusterStepRecord(const ClusterStepRecord& record);

std::string EncodePartRecord(const PartRecord& record);
Result<PartRecord> DecodePartRecord(const std::string& json);

std::string EncodeClusterStepRecord(const ClusterStepRecord& record);
Result<ClusterStepRecord> DecodeClusterStepRecord(const std::string& json);

// "run file record: <field>: <why>" as the others.
Status ValidateRunFileRecord(const RunFileRecord& record);
std::string EncodeRunFileRecord(const RunFileRecord& record);
Result<RunFileRecord> DecodeRunFileRecord(const std::string& json);

}  // namespace ckptfs
