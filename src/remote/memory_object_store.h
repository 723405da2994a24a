// An in-memory ObjectStore for tests of the uploader, the fetcher and the
// commit logic, with the same semantics as the real stores (key rules,
// whole-or-nothing objects, the multipart rules) and fault injection:
//
//  * SetUnavailable(true): every call fails with EHOSTUNREACH, as when the
//    endpoint cannot be reached, until SetUnavailable(false).
//  * FailNext(n, err): the next n calls fail with err. Both kinds of failure
//    happen before anything else (before the key is even validated) and
//    change nothing. While the store is unavailable, calls do not use up
//    FailNext's count.
//  * CorruptNextUploads(n): the next n upload bodies (Put, UploadPart) get
//    one bit flipped on their way in, as a faulty link or proxy would. The
//    store then does what S3 does with the x-amz-checksum-crc32c the S3
//    store sends: it compares the CRC32C of what arrived with that of the
//    caller's bytes and refuses the upload (EIO "checksum mismatch", counted
//    in UploadChecksumMismatches). With SetVerifyUploads(false) it stores
//    the damaged bytes instead, as a store without checksums did: tests show
//    with it that the damage is real and would otherwise go unnoticed.
//  * IgnoreConditions(true): PutIfAbsent overwrites an existing object and
//    succeeds, as s3rver 3.7.1 does with `If-None-Match: *`.
//  * CorruptReads(key, offset, times): the byte at offset of key has its
//    lowest bit flipped in what the next `times` reads covering it return
//    (times < 0: every read), as a bad disk or a bad hop would; the stored
//    object is untouched.
//
// Every ObjectStore method counts as a call for both; Describe(),
// min_part_size() and the inspection methods below do not. The counters
// count calls made, failed ones included, so a test can see retries.
//
// Thread safety: every method may be called from any thread; one mutex
// guards all state. Objects are copied in and out, never shared.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "remote/object_store.h"

namespace ckptfs {

class MemoryObjectStore final : public ObjectStore {
 public:
  static constexpr uint64_t kDefaultMinPartSize = uint64_t{5} << 20;

  // A smaller min_part_size keeps multipart tests light on memory.
  explicit MemoryObjectStore(uint64_t min_part_size = kDefaultMinPartSize)
      : min_part_size_(min_part_size) {}
  MemoryObjectStore(const MemoryObjectStore&) = delete;
  MemoryObjectStore& operator=(const MemoryObjectStore&) = delete;

  Status Put(const std::string& key, const std::string& data) override;
  Status PutIfAbsent(const std::string& key, const std::string& data) override;
  Result<std::string> BeginMultipart(const std::string& key) override;
  // The ETag is "memetag" plus a number unique within this store, so an
  // ETag from a replaced part no longer matches, as with S3.
  Result<std::string> UploadPart(const std::string& key, const std::string& upload_id,
                                 int part_number, const std::string& data) override;
  // Parts beyond part_etags.size() are discarded, as S3 does. EINVAL when an
  // ETag is not that of the part's latest upload (S3's InvalidPart).
  Status CompleteMultipart(const std::string& key, const std::string& upload_id,
                           const std::vector<std::string>& part_etags) override;
  Status AbortMultipart(const std::string& key, const std::string& upload_id) override;
  uint64_t min_part_size() const override { return min_part_size_; }
  // An offset at or past the end gives an empty string.
  Result<std::string> GetRange(const std::string& key, uint64_t offset, uint64_t length) override;
  // The range in pieces of kReadPiece bytes, as a streaming store delivers
  // it, so callers' sinks are tested with more than one piece. Counted as
  // a get.
  static constexpr size_t kReadPiece = size_t{64} << 10;
  Result<uint64_t> ReadRange(const std::string& key, uint64_t offset, uint64_t length,
                             const RangeSink& sink) override;
  Result<ObjectInfo> Head(const std::string& key) override;
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override;
  Status Delete(const std::vector<std::string>& keys) override;
  std::string Describe() const override { return "memory://"; }

  // Fault injection; see the file comment. n <= 0 cancels a pending FailNext.
  void FailNext(int n, int err);
  void SetUnavailable(bool unavailable);
  void IgnoreConditions(bool ignore);
  void CorruptNextUploads(int n);
  void SetVerifyUploads(bool verify);
  uint64_t UploadChecksumMismatches() const override;
  void CorruptReads(const std::string& key, uint64_t offset, int times);
  // Heals the link: reads return the stored bytes again.
  void ClearReadCorruptions();

  // Calls made so far, failed ones included.
  size_t put_calls() const;
  size_t begin_calls() const;
  size_t part_calls() const;
  size_t complete_calls() const;
  size_t abort_calls() const;
  size_t get_calls() const;  // GetRange and ReadRange
  size_t head_calls() const;
  size_t list_calls() const;
  size_t delete_calls() const;  // Delete calls, not keys

  // Inspection without faults or counting.
  size_t object_count() const;
  size_t upload_count() const;  // multipart uploads begun and neither completed nor aborted
  std::optional<std::string> Peek(const std::string& key) const;

 private:
  struct Part {
    std::string data;
    std::string etag;
  };
  struct Upload {
    std::string key;
    std::map<int, Part> parts;  // by part number
  };
  struct Counters {
    size_t put = 0, begin = 0, part = 0, complete = 0, abort = 0;
    size_t get = 0, head = 0, list = 0, del = 0;
  };

  // data as it arrives: with a bit flipped while CorruptNextUploads lasts;
  // EIO when it then fails the checksum the caller's bytes had.
  Result<std::string> ReceiveLocked(const std::string& what, const std::string& data) REQUIRES(mu_);
  // Counts nothing; returns the injected failure for this call, if any.
  Status InjectedFaultLocked() REQUIRES(mu_);
  // The upload for (key, upload_id) or ENOENT.
  Result<Upload*> FindUploadLocked(const std::string& key, const std::string& upload_id)
      REQUIRES(mu_);

  const uint64_t min_part_size_;

  mutable Mutex mu_;
  std::map<std::string, std::string> objects_ GUARDED_BY(mu_);  // ordered = key order
  std::map<std::string, Upload> uploads_ GUARDED_BY(mu_);       // by upload id
  uint64_t next_upload_ GUARDED_BY(mu_) = 1;
  uint64_t next_etag_ GUARDED_BY(mu_) = 1;
  Counters counters_ GUARDED_BY(mu_);
  struct Corruption {
    std::string key;
    uint64_t offset = 0;
    int remaining = 0;  // < 0: forever
  };
  std::vector<Corruption> corruptions_ GUARDED_BY(mu_);
  int fail_next_ GUARDED_BY(mu_) = 0;
  int fail_err_ GUARDED_BY(mu_) = 0;
  bool unavailable_ GUARDED_BY(mu_) = false;
  bool ignore_conditions_ GUARDED_BY(mu_) = false;
  int corrupt_next_ GUARDED_BY(mu_) = 0;
  uint64_t corrupted_ GUARDED_BY(mu_) = 0;  // bodies damaged so far
  bool verify_uploads_ GUARDED_BY(mu_) = true;
  uint64_t mismatches_ GUARDED_BY(mu_) = 0;
};

}  // namespace ckptfs
