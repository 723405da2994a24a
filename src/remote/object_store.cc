// Key validation shared by every ObjectStore; see object_store.h.
#include "remote/object_store.h"

#include <string_view>

namespace ckptfs {

namespace {

// S3 limits keys to 1024 bytes of UTF-8; we apply the same bound to the
// relative key so a key valid for file:// is valid for S3 as well (a bucket
// prefix makes the S3 key longer still, which the S3 store checks itself).
constexpr size_t kMaxKeyBytes = 1024;

Status Invalid(const std::string& key, const char* why) {
  return Status::Error(EINVAL, "invalid object key \"" + key + "\": " + why);
}

}  // namespace

Status ObjectStore::PutIfAbsent(const std::string& key, const std::string&) {
  return Status::Error(EOPNOTSUPP, Describe() + ": conditional put of " + key + " is not supported");
}

Result<uint64_t> ObjectStore::ReadRange(const std::string& key, uint64_t offset, uint64_t length,
                                        const RangeSink& sink) {
  Result<std::string> data = GetRange(key, offset, length);
  if (!data.ok()) return data.status();
  if (!data->empty()) CKPTFS_RETURN_IF_ERROR(sink(0, *data));
  return uint64_t{data->size()};
}

Status ValidateObjectKey(const std::string& key) {
  if (key.empty()) return Status::Error(EINVAL, "invalid object key: empty");
  if (key.size() > kMaxKeyBytes) {
    return Status::Error(EINVAL, "invalid object key: " + std::to_string(key.size()) +
                                     " bytes, more than " + std::to_string(kMaxKeyBytes));
  }
  if (key.find('\0') != std::string::npos) return Invalid(key, "contains a NUL byte");
  if (key.front() == '/') return Invalid(key, "starts with '/'");
  if (key.back() == '/') return Invalid(key, "ends with '/'");
  const std::string_view view(key);
  size_t start = 0;
  while (start <= view.size()) {
    size_t end = view.find('/', start);
    if (end == std::string_view::npos) end = view.size();
    const std::string_view component = view.substr(start, end - start);
    if (component.empty()) return Invalid(key, "empty path component");
    if (component == "." || component == "..") return Invalid(key, "'.' or '..' path component");
    start = end + 1;
  }
  return Status::Ok();
}

}  // namespace ckptfs
