// The commit object `<step path>/.ckptfs-commit.json` (SPEC section 4): the
// remote copy of a step is complete once it exists, and it is written after
// every other object of the step. It lists what a cold mount needs to show
// the step without its data: files (size, CRC32C, mode, mtime), directories
// and symlinks, plus the step's own facts. docs/formats.md shows an example.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "common/status.h"

namespace ckptfs {

inline constexpr const char* kCommitObjectName = ".ckptfs-commit.json";

struct CommitObject {
  std::string step_path;  // relative to the remote prefix, e.g. "run1/step100"
  int64_t step = 0;
  timespec committed_at{};
  // The step directory's own mtime (0 = not recorded, objects written before
  // it existed): a cold mount restores it, because trainers order their
  // checkpoints by directory mtime (Hugging Face's rotation), and commit
  // times need not follow the save order (steps settling together).
  int64_t dir_mtime_ns = 0;
  bool ephemeral = false;
  uint64_t bytes = 0;
  // The chunk size of every file's `chunk_crcs` (0 = no file has them:
  // objects written before they were recorded).
  uint64_t chunk_size = 0;
  struct File {
    std::string path;  // relative to the step directory
    uint64_t size = 0;
    uint32_t crc32c = 0;
    uint32_t mode = 0644;  // permission bits
    int64_t mtime_ns = 0;
    // CRC32C of each chunk_size bytes, so a cold mount verifies each fetched
    // chunk before serving it; empty = only the whole file can be verified.
    std::vector<uint32_t> chunk_crcs;
    bool operator==(const File&) const = default;
  };
  std::vector<File> files;
  std::vector<std::string> dirs;  // relative to the step directory, parents first
  struct Symlink {
    std::string path;
    std::string target;
    bool operator==(const Symlink&) const = default;
  };
  std::vector<Symlink> symlinks;
};

// "<step path>/.ckptfs-commit.json"
std::string CommitObjectKey(const std::string& step_path);
// True for keys that name a commit object; *step_path gets the step's path.
bool IsCommitObjectKey(const std::string& key, std::string* step_path);

std::string EncodeCommitObject(const CommitObject& obj);
// Validates everything a cold mount will trust: JSON shape, relative paths
// without "." or ".." components, no duplicates, sizes. EIO with the reason.
Result<CommitObject> DecodeCommitObject(const std::string& json, const std::string& step_path);

}  // namespace ckptfs
