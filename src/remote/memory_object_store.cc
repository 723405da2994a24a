// The in-memory ObjectStore; see memory_object_store.h.
#include "remote/memory_object_store.h"

#include <algorithm>
#include <climits>
#include <cstdio>

#include "common/crc32c.h"

namespace ckptfs {

namespace {

// S3's bound on part numbers; the file store applies it too.
constexpr int kMaxPartNumber = 10000;

}  // namespace

Status MemoryObjectStore::InjectedFaultLocked() {
  if (unavailable_) return Status::Error(EHOSTUNREACH, Describe() + ": unavailable (injected)");
  if (fail_next_ > 0) {
    fail_next_--;
    return Status::Error(fail_err_, Describe() + ": injected failure");
  }
  return Status::Ok();
}

Result<std::string> MemoryObjectStore::ReceiveLocked(const std::string& what,
                                                     const std::string& data) {
  if (corrupt_next_ <= 0 || data.empty()) return data;
  corrupt_next_--;
  // The CRC32C the sender computed (and S3's client sends) before the flip.
  const uint32_t sent_crc = Crc32c(0, data.data(), data.size());
  std::string arrived = data;
  // A different bit each time, spread over the body.
  const uint64_t bit = (corrupted_++ * 2654435761u) % (arrived.size() * 8);
  arrived[bit / 8] = static_cast<char>(arrived[bit / 8] ^ (1 << (bit % 8)));
  if (verify_uploads_ && Crc32c(0, arrived.data(), arrived.size()) != sent_crc) {
    mismatches_++;
    return Status::Error(EIO, Describe() + ": " + what + ": checksum mismatch (body damaged on the way)");
  }
  return arrived;
}

Result<MemoryObjectStore::Upload*> MemoryObjectStore::FindUploadLocked(
    const std::string& key, const std::string& upload_id) {
  auto it = uploads_.find(upload_id);
  if (it == uploads_.end() || it->second.key != key) {
    return Status::Error(ENOENT, Describe() + ": no multipart upload " + upload_id + " for " + key);
  }
  return &it->second;
}

Status MemoryObjectStore::Put(const std::string& key, const std::string& data) {
  MutexLock lock(&mu_);
  counters_.put++;
  CKPTFS_RETURN_IF_ERROR(InjectedFaultLocked());
  CKPTFS_RETURN_IF_ERROR(ValidateObjectKey(key));
  Result<std::string> arrived = ReceiveLocked("put " + key, data);
  if (!arrived.ok()) return arrived.status();
  objects_[key] = std::move(arrived).value();
  return Status::Ok();
}

Status MemoryObjectStore::PutIfAbsent(const std::string& key, const std::string& data) {
  MutexLock lock(&mu_);
  counters_.put++;
  CKPTFS_RETURN_IF_ERROR(InjectedFaultLocked());
  CKPTFS_RETURN_IF_ERROR(ValidateObjectKey(key));
  if (!ignore_conditions_ && objects_.count(key)) {
    return Status::Error(EEXIST, Describe() + ": " + key + " exists");
  }
  Result<std::string> arrived = ReceiveLocked("put " + key, data);
  if (!arrived.ok()) return arrived.status();
  objects_[key] = std::move(arrived).value();
  return Status::Ok();
}

void MemoryObjectStore::IgnoreConditions(bool ignore) {
  MutexLock lock(&mu_);
  ignore_conditions_ = ignore;
}

Result<std::string> MemoryObjectStore::BeginMultipart(const std::string& key) {
  MutexLock lock(&mu_);
  counters_.begin++;
  CKPTFS_RETURN_IF_ERROR(InjectedFaultLocked());
  CKPTFS_RETURN_IF_ERROR(ValidateObjectKey(key));
  std::string id = "memupload" + std::to_string(next_upload_++);
  uploads_[id] = Upload{key, {}};
  return id;
}

Result<std::string> MemoryObjectStore::UploadPart(const std::string& key,
                                                  const std::string& upload_id, int part_number,
                                                  const std::string& data) {
  MutexLock lock(&mu_);
  counters_.part++;
  CKPTFS_RETURN_IF_ERROR(InjectedFaultLocked());
  CKPTFS_RETURN_IF_ERROR(ValidateObjectKey(key));
  if (part_number < 1 || part_number > kMaxPartNumber) {
    return Status::Error(EINVAL, "upload part of " + key + ": part number " +
                                     std::to_string(part_number) + " outside 1.." +
                                     std::to_string(kMaxPartNumber));
  }
  Result<Upload*> upload = FindUploadLocked(key, upload_id);
  if (!upload.ok()) return upload.status();
  Result<std::string> arrived =
      ReceiveLocked("upload part " + std::to_string(part_number) + " of " + key, data);
  if (!arrived.ok()) return arrived.status();
  std::string etag = "memetag" + std::to_string(next_etag_++);
  (*upload)->parts[part_number] = Part{std::move(arrived).value(), etag};
  return etag;
}

Status MemoryObjectStore::CompleteMultipart(const std::string& key, const std::string& upload_id,
                                            const std::vector<std::string>& part_etags) {
  MutexLock lock(&mu_);
  counters_.complete++;
  CKPTFS_RETURN_IF_ERROR(InjectedFaultLocked());
  CKPTFS_RETURN_IF_ERROR(ValidateObjectKey(key));
  Result<Upload*> found = FindUploadLocked(key, upload_id);
  if (!found.ok()) return found.status();
  const Upload& upload = **found;
  const int part_count = static_cast<int>(std::min<size_t>(part_etags.size(), INT_MAX));
  if (part_count < 1 || part_count > kMaxPartNumber) {
    return Status::Error(EINVAL, "complete upload of " + key + ": part count " +
                                     std::to_string(part_etags.size()) + " outside 1.." +
                                     std::to_string(kMaxPartNumber));
  }
  // Check everything before building anything, so a failure changes nothing.
  size_t total = 0;
  for (int i = 1; i <= part_count; i++) {
    auto it = upload.parts.find(i);
    if (it == upload.parts.end()) {
      return Status::Error(EINVAL, "complete upload of " + key + ": part " + std::to_string(i) +
                                       " was never uploaded");
    }
    if (it->second.etag != part_etags[i - 1]) {
      return Status::Error(EINVAL, "complete upload of " + key + ": part " + std::to_string(i) +
                                       ": ETag \"" + part_etags[i - 1] +
                                       "\" is not that of its latest upload");
    }
    if (i < part_count && it->second.data.size() < min_part_size_) {
      return Status::Error(EINVAL, "complete upload of " + key + ": part " + std::to_string(i) +
                                       " has " + std::to_string(it->second.data.size()) +
                                       " bytes, less than the minimum " +
                                       std::to_string(min_part_size_));
    }
    total += it->second.data.size();
  }
  std::string data;
  data.reserve(total);
  for (int i = 1; i <= part_count; i++) data += upload.parts.at(i).data;
  objects_[key] = std::move(data);
  uploads_.erase(upload_id);
  return Status::Ok();
}

Status MemoryObjectStore::AbortMultipart(const std::string& key, const std::string& upload_id) {
  MutexLock lock(&mu_);
  counters_.abort++;
  CKPTFS_RETURN_IF_ERROR(InjectedFaultLocked());
  CKPTFS_RETURN_IF_ERROR(ValidateObjectKey(key));
  Result<Upload*> upload = FindUploadLocked(key, upload_id);
  if (!upload.ok()) return upload.status();
  uploads_.erase(upload_id);
  return Status::Ok();
}

Result<std::string> MemoryObjectStore::GetRange(const std::string& key, uint64_t offset,
                                                uint64_t length) {
  MutexLock lock(&mu_);
  counters_.get++;
  CKPTFS_RETURN_IF_ERROR(InjectedFaultLocked());
  CKPTFS_RETURN_IF_ERROR(ValidateObjectKey(key));
  auto it = objects_.find(key);
  if (it == objects_.end()) return Status::Error(ENOENT, Describe() + ": no object " + key);
  const std::string& data = it->second;
  if (offset >= data.size()) return std::string();
  std::string out = data.substr(offset, std::min<uint64_t>(length, data.size() - offset));
  for (Corruption& c : corruptions_) {
    if (c.key != key || c.remaining == 0 || c.offset < offset || c.offset >= offset + out.size()) continue;
    out[c.offset - offset] ^= 0x01;
    if (c.remaining > 0) c.remaining--;
  }
  return out;
}

void MemoryObjectStore::CorruptReads(const std::string& key, uint64_t offset, int times) {
  MutexLock lock(&mu_);
  corruptions_.push_back(Corruption{key, offset, times});
}

void MemoryObjectStore::ClearReadCorruptions() {
  MutexLock lock(&mu_);
  corruptions_.clear();
}

Result<uint64_t> MemoryObjectStore::ReadRange(const std::string& key, uint64_t offset,
                                              uint64_t length, const RangeSink& sink) {
  // Copied under the lock, handed over without it: a sink may take its time.
  Result<std::string> data = GetRange(key, offset, length);
  if (!data.ok()) return data.status();
  const std::string_view all(*data);
  for (size_t at = 0; at < all.size(); at += kReadPiece) {
    CKPTFS_RETURN_IF_ERROR(sink(at, all.substr(at, kReadPiece)));
  }
  return uint64_t{all.size()};
}

Result<ObjectInfo> MemoryObjectStore::Head(const std::string& key) {
  MutexLock lock(&mu_);
  counters_.head++;
  CKPTFS_RETURN_IF_ERROR(InjectedFaultLocked());
  CKPTFS_RETURN_IF_ERROR(ValidateObjectKey(key));
  auto it = objects_.find(key);
  if (it == objects_.end()) return Status::Error(ENOENT, Describe() + ": no object " + key);
  return ObjectInfo{.key = key, .size = it->second.size()};
}

Result<std::vector<ObjectInfo>> MemoryObjectStore::List(const std::string& prefix) {
  MutexLock lock(&mu_);
  counters_.list++;
  CKPTFS_RETURN_IF_ERROR(InjectedFaultLocked());
  std::vector<ObjectInfo> out;
  for (auto it = objects_.lower_bound(prefix);
       it != objects_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    // As S3's ETag of a single PUT (the MD5 of the bytes): the same bytes,
    // the same tag.
    char tag[32];
    std::snprintf(tag, sizeof tag, "%08x-%zu", Crc32c(0, it->second.data(), it->second.size()),
                  it->second.size());
    out.push_back(ObjectInfo{it->first, it->second.size(), tag});
  }
  return out;
}

Status MemoryObjectStore::Delete(const std::vector<std::string>& keys) {
  MutexLock lock(&mu_);
  counters_.del++;
  CKPTFS_RETURN_IF_ERROR(InjectedFaultLocked());
  for (const std::string& key : keys) CKPTFS_RETURN_IF_ERROR(ValidateObjectKey(key));
  for (const std::string& key : keys) objects_.erase(key);
  return Status::Ok();
}

void MemoryObjectStore::FailNext(int n, int err) {
  MutexLock lock(&mu_);
  fail_next_ = std::max(n, 0);
  fail_err_ = err == 0 ? EIO : err;
}

void MemoryObjectStore::SetUnavailable(bool unavailable) {
  MutexLock lock(&mu_);
  unavailable_ = unavailable;
}

void MemoryObjectStore::CorruptNextUploads(int n) {
  MutexLock lock(&mu_);
  corrupt_next_ = n > 0 ? n : 0;
}

void MemoryObjectStore::SetVerifyUploads(bool verify) {
  MutexLock lock(&mu_);
  verify_uploads_ = verify;
}

uint64_t MemoryObjectStore::UploadChecksumMismatches() const {
  MutexLock lock(&mu_);
  return mismatches_;
}

#define CKPTFS_COUNTER(name, field)        \
  size_t MemoryObjectStore::name() const { \
    MutexLock lock(&mu_);                  \
    return counters_.field;                \
  }
CKPTFS_COUNTER(put_calls, put)
CKPTFS_COUNTER(begin_calls, begin)
CKPTFS_COUNTER(part_calls, part)
CKPTFS_COUNTER(complete_calls, complete)
CKPTFS_COUNTER(abort_calls, abort)
CKPTFS_COUNTER(get_calls, get)
CKPTFS_COUNTER(head_calls, head)
CKPTFS_COUNTER(list_calls, list)
CKPTFS_COUNTER(delete_calls, del)
#undef CKPTFS_COUNTER

size_t MemoryObjectStore::object_count() const {
  MutexLock lock(&mu_);
  return objects_.size();
}

size_t MemoryObjectStore::upload_count() const {
  MutexLock lock(&mu_);
  return uploads_.size();
}

std::optional<std::string> MemoryObjectStore::Peek(const std::string& key) const {
  MutexLock lock(&mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

}  // namespace ckptfs
