// From `--remote URL` and the --s3-* flags to an ObjectStore: file:///DIR
// (a local directory with object semantics) or s3://BUCKET/PREFIX (our S3
// client, credentials from the environment or ~/.aws/credentials).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "remote/object_store.h"

namespace ckptfs {

struct RemoteSpec {
  std::string url;            // s3://bucket/prefix or file:///dir
  std::string s3_endpoint;    // http(s)://host[:port]; empty = AWS
  std::string s3_region;      // empty = AWS_REGION / AWS_DEFAULT_REGION, else us-east-1
  std::string s3_addressing;  // "", "path" or "virtual"
};

// Syntax only (scheme, bucket name, prefix, path): for `ckptfs mount` to
// refuse bad options before mounting. EINVAL with the reason.
Status ValidateRemoteSpec(const RemoteSpec& spec);

// Builds the store. Sends nothing: an unreachable endpoint, a missing
// bucket or wrong credentials show up on the first request, and the mount
// serves local data meanwhile. Missing credentials are EINVAL here.
Result<std::unique_ptr<ObjectStore>> OpenRemote(const RemoteSpec& spec);

}  // namespace ckptfs
