// AWS credentials for the S3 remote: the AwsCredentials value the signer
// uses, and where it comes from. Resolution is a pure function of a
// CredentialSources snapshot (environment variables by name) plus the shared
// credentials file it names, so tests never touch the process environment.
// Only the two sources ckptfs needs are supported, in the AWS CLI's order:
//   1. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN);
//   2. the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, else
//      $HOME/.aws/credentials), profile AWS_PROFILE or "default".
// No instance metadata, SSO or credential_process.
//
// Secrets never appear in a Status message or a description: errors name the
// variable, file, profile and line number, never a value.
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace ckptfs {

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty unless temporary (STS) credentials
};

struct CredentialSources {
  // Variable name -> value; an empty value counts as unset, as in the AWS CLI.
  // Read: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
  // AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE, HOME.
  std::map<std::string, std::string> env;
};

// The variables above from this process's environment (getenv).
CredentialSources CredentialSourcesFromEnvironment();

// Errors: ENOENT when no source has credentials (the message says what to
// set); EINVAL for a malformed file or a profile lacking a key; the open(2)
// errno when the file exists but cannot be read.
Result<AwsCredentials> LoadAwsCredentials(const CredentialSources& src);

// "AKIA…(20 chars), secret set, session token set": safe for logs and
// `ckptfs status`; shows at most the first 4 characters of the key id.
std::string RedactedDescription(const AwsCredentials& creds);

}  // namespace ckptfs
