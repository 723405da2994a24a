#include "remote/conditional_put_probe.h"

namespace ckptfs {

const char* ConditionalPutName(ConditionalPut c) {
  switch (c) {
    case ConditionalPut::kSupported:
      return "supported";
    case ConditionalPut::kIgnored:
      return "ignored";
    case ConditionalPut::kUnsupported:
      return "unsupported";
  }
  return "unknown";
}

Result<ConditionalPut> ProbeConditionalPut(ObjectStore* store, const std::string& scratch_key) {
  Result<ConditionalPut> out = ConditionalPut::kUnsupported;
  Status first = store->PutIfAbsent(scratch_key, "1");
  if (first.err() == EOPNOTSUPP) return ConditionalPut::kUnsupported;
  // EEXIST on the first put: a scratch key left by an earlier probe that
  // died before its delete; the second put decides all the same.
  if (!first.ok() && first.err() != EEXIST) return first;
  Status second = store->PutIfAbsent(scratch_key, "2");
  if (second.err() == EEXIST) {
    out = ConditionalPut::kSupported;
  } else if (second.ok()) {
    // Ok for a key that exists. After a first put that was refused the
    // store did honour the condition once (someone deleted the stale key in
    // between); after a first put that created it, the condition was ignored.
    out = first.ok() ? ConditionalPut::kIgnored : ConditionalPut::kSupported;
  } else if (second.err() == EOPNOTSUPP) {
    out = ConditionalPut::kUnsupported;
  } else {
    out = second;
  }
  (void)store->Delete({scratch_key});
  return out;
}

}  // namespace ckptfs
