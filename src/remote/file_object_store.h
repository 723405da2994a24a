// The file:// remote (SPEC section 4): a local directory with the object
// store's semantics, for single machines and tests. An object is the regular
// file dir/<key>, at its natural path, so other tools read checkpoints
// without ckptfs. Two hidden directories hold work in progress and are never
// objects:
//
//   dir/.ckptfs-tmp/<random hex>          Put and Complete write here, fsync,
//                                         then rename into place, so readers
//                                         only ever see whole objects.
//   dir/.ckptfs-multipart/<upload id>/    one upload: "key" (the object key)
//                                         and part-00001... (each written
//                                         like a Put), until Complete/Abort.
//
// Keys whose first component is one of those names are refused (EINVAL).
// A crash can leave files in both; they are ignored by List and Head, and
// never cleaned up here, since another process may be using the directory.
//
// Unlike S3, a directory cannot hold both an object "a" and an object "a/b":
// the second Put fails (ENOTDIR or EISDIR). ckptfs never needs both, since
// its keys mirror a filesystem tree.
//
// Thread safety: all methods may be called from any thread. The only state
// is the filesystem plus a mutex that orders parent directory creation
// against Delete's pruning of empty directories (so a Put never renames into
// a directory that was just removed). It does not protect against another
// process pruning the same tree. Temporary names and upload ids are 128 bits
// from getrandom(), created with O_EXCL/mkdir, so processes sharing the
// directory do not collide.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "remote/object_store.h"

namespace ckptfs {

class FileObjectStore final : public ObjectStore {
 public:
  static constexpr uint64_t kDefaultMinPartSize = uint64_t{5} << 20;
  // ReadRange hands the sink pieces of at most this many bytes: small
  // enough that a sink writing a cache file stays cheap (see
  // S3ObjectStore::kSinkPiece), large enough that a system call per piece
  // does not matter.
  static constexpr uint64_t kReadPiece = uint64_t{64} << 10;

  // dir must be an existing directory (ENOENT/ENOTDIR otherwise); nothing is
  // created until the first write. A smaller min_part_size is for tests.
  static Result<std::unique_ptr<FileObjectStore>> Open(
      const std::string& dir, uint64_t min_part_size = kDefaultMinPartSize);

  FileObjectStore(const FileObjectStore&) = delete;
  FileObjectStore& operator=(const FileObjectStore&) = delete;

  Status Put(const std::string& key, const std::string& data) override;
  Status PutIfAbsent(const std::string& key, const std::string& data) override;
  Result<std::string> BeginMultipart(const std::string& key) override;  // 32 random hex digits
  // The ETag names the part file (inode, size, modification time), so
  // Complete can tell that a part is still the upload the caller has the
  // ETag of, without hashing the data, across restarts of the process.
  Result<std::string> UploadPart(const std::string& key, const std::string& upload_id,
                                 int part_number, const std::string& data) override;
  // Parts beyond part_etags.size() are discarded, as S3 does. EINVAL when an
  // ETag is not that of the part's latest upload (S3's InvalidPart).
  Status CompleteMultipart(const std::string& key, const std::string& upload_id,
                           const std::vector<std::string>& part_etags) override;
  // ENOENT for an unknown (or already completed or aborted) upload, as S3's
  // NoSuchUpload.
  Status AbortMultipart(const std::string& key, const std::string& upload_id) override;
  uint64_t min_part_size() const override { return min_part_size_; }
  // An offset at or past the end gives an empty string, not an error: the
  // caller asked for bytes that do not exist, and "fewer at the end" covers it.
  Result<std::string> GetRange(const std::string& key, uint64_t offset, uint64_t length) override;
  Result<uint64_t> ReadRange(const std::string& key, uint64_t offset, uint64_t length,
                             const RangeSink& sink) override;
  Result<ObjectInfo> Head(const std::string& key) override;
  // Walks only the directory the prefix names up to its last '/', so listing
  // one step does not read the whole tree. Only regular files are objects.
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override;
  // Also removes directories the deletions left empty, up to (not including)
  // dir, as an object store has no directories to leave behind.
  Status Delete(const std::vector<std::string>& keys) override;
  std::string Describe() const override { return "file://" + dir_; }

  const std::string& dir() const { return dir_; }

 private:
  FileObjectStore(std::string dir, uint64_t min_part_size)
      : dir_(std::move(dir)), min_part_size_(min_part_size) {}

  // EINVAL for keys ValidateObjectKey refuses and for the reserved names.
  static Status CheckKey(const std::string& key);
  // Writes data to a fresh file under dir/.ckptfs-tmp and fsyncs it.
  Result<std::string> WriteTemp(const std::string& data);
  // Creates the parents of key, moves tmp to dir/key and fsyncs the
  // directories that changed; tmp is gone afterwards either way. replace =
  // false: EEXIST when dir/key exists (link(2), never an overwrite).
  Status Publish(const std::string& tmp, const std::string& key, bool replace);
  // dir/.ckptfs-multipart/<upload_id> after checking that the upload exists
  // and belongs to key (ENOENT otherwise).
  Result<std::string> UploadDir(const std::string& key, const std::string& upload_id);

  const std::string dir_;
  const uint64_t min_part_size_;

  // Held while creating parent directories and renaming into them, and while
  // deleting and pruning; never while writing or fsyncing data. It guards the
  // tree on disk, not a member: nothing here is GUARDED_BY it.
  Mutex tree_mu_;
};

}  // namespace ckptfs
