#include "tiering/open_remote.h"

#include <cstdlib>

#include "remote/aws_credentials.h"
#include "remote/s3_addressing.h"
#include "remote/s3_object_store.h"

namespace ckptfs {

namespace {

constexpr const char* kFileScheme = "file://";
constexpr const char* kS3Scheme = "s3://";

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace

Status ValidateRemoteSpec(const RemoteSpec& spec) {
  if (StartsWith(spec.url, kFileScheme)) {
    const std::string dir = spec.url.substr(std::string(kFileScheme).size());
    if (dir.empty() || dir[0] != '/') {
      return Status::Error(EINVAL, "--remote " + spec.url + ": file:// takes an absolute path (file:///srv/ckpt)");
    }
    if (!spec.s3_endpoint.empty() || !spec.s3_region.empty() || !spec.s3_addressing.empty()) {
      return Status::Error(EINVAL, "--s3-* options apply to s3:// remotes only");
    }
    return Status::Ok();
  }
  if (StartsWith(spec.url, kS3Scheme)) {
    auto loc = ParseS3Url(spec.url);
    if (!loc.ok()) {
      return Status::Error(EINVAL, "--remote " + RedactUrlUserinfo(spec.url) + ": " + loc.status().message());
    }
    if (!spec.s3_endpoint.empty() && !StartsWith(spec.s3_endpoint, "http://") &&
        !StartsWith(spec.s3_endpoint, "https://")) {
      return Status::Error(EINVAL, "--s3-endpoint takes http://HOST[:PORT] or https://HOST[:PORT], not '" +
                                       RedactUrlUserinfo(spec.s3_endpoint) + "'");
    }
    return Status::Ok();
  }
  return Status::Error(EINVAL, "--remote takes s3://BUCKET/PREFIX or file:///DIR, not '" + RedactUrlUserinfo(spec.url) + "'");
}

Result<std::unique_ptr<ObjectStore>> OpenRemote(const RemoteSpec& spec) {
  CKPTFS_RETURN_IF_ERROR(ValidateRemoteSpec(spec));
  if (StartsWith(spec.url, kFileScheme)) {
    return OpenFileObjectStore(spec.url.substr(std::string(kFileScheme).size()));
  }
  auto loc = ParseS3Url(spec.url);
  if (!loc.ok()) return loc.status();
  auto creds = LoadAwsCredentials(CredentialSourcesFromEnvironment());
  if (!creds.ok()) {
    return Status::Error(EINVAL, "no AWS credentials for " + spec.url + ": " + creds.status().message() +
                                     " (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile in "
                                     "~/.aws/credentials)");
  }
  S3Config config;
  config.bucket = loc->bucket;
  config.prefix = loc->prefix;
  config.endpoint = spec.s3_endpoint;
  config.region = !spec.s3_region.empty() ? spec.s3_region
                                          : EnvOr("AWS_REGION", EnvOr("AWS_DEFAULT_REGION", "us-east-1"));
  if (spec.s3_addressing == "path") config.addressing = S3Addressing::kPath;
  if (spec.s3_addressing == "virtual") config.addressing = S3Addressing::kVirtualHosted;
  config.ca_bundle = EnvOr("AWS_CA_BUNDLE", "");
  config.credentials = std::move(creds).value();
  return OpenS3ObjectStore(std::move(config));
}

}  // namespace ckptfs
