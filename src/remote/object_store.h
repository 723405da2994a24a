// The remote tier's seam (SPEC section 4): an object store addressed by keys
// relative to the configured prefix. S3 (src/remote/s3_*) and file:// (a
// local directory with the same semantics) implement it; MemoryObjectStore is
// the test double with fault injection. The filesystem logic never sees
// which one it talks to.
//
// Keys are relative paths ("run1/step100/__0_0.distcp"): no leading '/', no
// empty, "." or ".." components. Every method is thread-safe and blocking;
// callers run them on their own worker threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ckptfs {

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  // From List: a tag that changes whenever the object is replaced by other
  // bytes (S3's ETag); "" where the store gives none. A reader that keeps
  // the tag of what it last read GETs the object again only when it moved.
  std::string etag;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // Creates or replaces the object with data; it is visible whole or not at
  // all (no reader ever sees a partial object).
  virtual Status Put(const std::string& key, const std::string& data) = 0;
  // Put only if no object has the key yet (S3's `If-None-Match: *`): Ok when
  // this call created it; EEXIST when the key existed. A request retried
  // after a lost reply may get EEXIST for its own first attempt, so a caller
  // that must know whose object it is reads it back. EOPNOTSUPP when the
  // store cannot do it. A server that ignores the condition and overwrites
  // (s3rver 3.7.1) cannot be told apart here: ProbeConditionalPut
  // (conditional_put_probe.h) finds out once.
  virtual Status PutIfAbsent(const std::string& key, const std::string& data);

  // Large objects in parts: Begin, UploadPart (1-based part numbers, any
  // order, parts of at least min_part_size() except the last), Complete
  // with the ETags of parts 1..N in order; Abort discards. Until Complete
  // the object is not visible. UploadPart returns the part's ETag, an opaque
  // token the caller keeps (S3 needs it to assemble the object), so a store
  // holds no per-upload state in memory and an upload survives a restart of
  // the process as long as the caller persisted the id and the ETags. (The
  // S3 store's token also carries the part's CRC32C for Complete.)
  // Uploading a part number again replaces the part; only the ETag of its
  // latest upload completes the object.
  virtual Result<std::string> BeginMultipart(const std::string& key) = 0;  // upload id
  virtual Result<std::string> UploadPart(const std::string& key, const std::string& upload_id,
                                         int part_number, const std::string& data) = 0;  // ETag
  virtual Status CompleteMultipart(const std::string& key, const std::string& upload_id,
                                   const std::vector<std::string>& part_etags) = 0;
  virtual Status AbortMultipart(const std::string& key, const std::string& upload_id) = 0;
  virtual uint64_t min_part_size() const { return 5ULL << 20; }

  // length bytes from offset (fewer at the end of the object); ENOENT when
  // the object does not exist.
  virtual Result<std::string> GetRange(const std::string& key, uint64_t offset, uint64_t length) = 0;

  // The same bytes as GetRange, handed to sink piece by piece as they
  // arrive instead of gathered into one string: the read-through path
  // writes them straight into the cache file, so no buffer of the whole
  // range is allocated, grown or copied. `at` is the piece's position within
  // the range. A request that is retried starts again at 0, so the sink
  // must treat pieces as positional writes (the same bytes may come twice),
  // never as an append. A sink that fails stops the read, which returns its
  // status. Returns how many bytes the range has (fewer than length at the
  // end of the object). This default reads the range with GetRange; stores
  // that can stream do.
  using RangeSink = std::function<Status(uint64_t at, std::string_view piece)>;
  virtual Result<uint64_t> ReadRange(const std::string& key, uint64_t offset, uint64_t length,
                                     const RangeSink& sink);
  // ENOENT when absent.
  virtual Result<ObjectInfo> Head(const std::string& key) = 0;
  // Every object whose key starts with prefix, in key order.
  virtual Result<std::vector<ObjectInfo>> List(const std::string& prefix) = 0;
  // Deletes the objects; absent keys are not an error.
  virtual Status Delete(const std::vector<std::string>& keys) = 0;

  // For messages and status.json: "s3://bucket/prefix", "file:///dir". Never
  // contains credentials.
  virtual std::string Describe() const = 0;

  // Uploads (Put, UploadPart) whose body arrived damaged, as the store's
  // checksums caught them (each was retried or failed, never kept): for
  // status.json and the metrics. 0 for stores with nothing in between.
  virtual uint64_t UploadChecksumMismatches() const { return 0; }
};

// Checks a key against the rules above: EINVAL with the reason otherwise.
Status ValidateObjectKey(const std::string& key);

// file:///dir: objects are files under dir at their keys, written to a
// temporary name and renamed into place (whole or nothing), multipart parts
// kept under dir/.ckptfs-multipart/<upload id>/ until completed.
Result<std::unique_ptr<ObjectStore>> OpenFileObjectStore(const std::string& dir);

}  // namespace ckptfs
