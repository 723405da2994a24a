// Whether an object store honours conditional puts (If-None-Match: *).
// AWS S3 (since 2024), MinIO and file:// do; s3rver 3.7.1 accepts the
// header and overwrites anyway, which PutIfAbsent alone cannot tell from a
// success. The probe writes one scratch key twice (3 requests with the
// delete).
#pragma once

#include <string>

#include "common/status.h"
#include "remote/object_store.h"

namespace ckptfs {

enum class ConditionalPut {
  kSupported,    // the second PutIfAbsent was refused, the first body kept
  kIgnored,      // the second one overwrote the first and said Ok
  kUnsupported,  // the store refuses conditional puts (EOPNOTSUPP)
};

const char* ConditionalPutName(ConditionalPut c);  // "supported", ...

// Probes under scratch_key (a key nobody else writes: name it after the
// node and a random suffix), and deletes it afterwards. Errors of the store
// (unreachable, access denied) are returned as they are.
Result<ConditionalPut> ProbeConditionalPut(ObjectStore* store, const std::string& scratch_key);

}  // namespace ckptfs
