// Credential resolution for the S3 remote (see aws_credentials.h): the
// environment first, then one profile of the shared credentials file, parsed
// as the INI dialect the AWS CLI writes.
#include "remote/aws_credentials.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string_view>

namespace ckptfs {
namespace {

constexpr size_t kMaxFileBytes = 1 << 20;  // a credentials file is a few KiB

std::string Get(const CredentialSources& src, const std::string& name) {
  auto it = src.env.find(name);
  return it == src.env.end() ? std::string() : it->second;
}

std::string_view Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// A comment after a value must follow whitespace ("key = v  # note"), so a
// '#' or ';' inside a value survives, as with Python's configparser.
std::string_view StripInlineComment(std::string_view v) {
  for (size_t i = 1; i < v.size(); ++i) {
    if ((v[i] == '#' || v[i] == ';') && (v[i - 1] == ' ' || v[i - 1] == '\t')) {
      return Trim(v.substr(0, i));
    }
  }
  return v;
}

Status ReadSmallFile(const std::string& path, std::string* out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status::FromErrno(path);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    out->append(buf, n);
    if (out->size() > kMaxFileBytes) {
      std::fclose(f);
      return Status::Error(EFBIG, path + ": larger than 1 MiB, not a credentials file");
    }
  }
  bool failed = std::ferror(f) != 0;
  int err = errno;
  std::fclose(f);
  if (failed) return Status::FromErrno(err, path);
  return Status::Ok();
}

// Collects the keys of [profile] (lower-cased names; later lines win).
// Every line of the file must parse, so a typo elsewhere is reported rather
// than silently ignored. Messages cite line numbers, never line contents,
// which may hold a secret.
Status ParseProfile(const std::string& text, const std::string& path, const std::string& profile,
                    std::map<std::string, std::string>* keys, bool* found) {
  *found = false;
  bool in_section = false;
  bool in_wanted = false;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view line = Trim(std::string_view(text).substr(pos, nl - pos));
    pos = nl + 1;
    ++line_no;
    auto malformed = [&](const char* why) {
      return Status::Error(EINVAL, path + ":" + std::to_string(line_no) + ": " + why);
    };
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      size_t close = line.find(']');
      if (close == std::string_view::npos) return malformed("section header lacks ']'");
      std::string_view rest = Trim(line.substr(close + 1));
      if (!rest.empty() && rest[0] != '#' && rest[0] != ';') {
        return malformed("text after section header");
      }
      std::string_view name = Trim(line.substr(1, close - 1));
      if (name.empty()) return malformed("empty section name");
      in_section = true;
      in_wanted = name == profile;
      *found = *found || in_wanted;
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) return malformed("expected 'key = value'");
    std::string_view key = Trim(line.substr(0, eq));
    if (key.empty()) return malformed("empty key");
    if (!in_section) return malformed("key before any [profile] section");
    if (in_wanted)
      (*keys)[ToLower(key)] = std::string(StripInlineComment(Trim(line.substr(eq + 1))));
  }
  return Status::Ok();
}

std::string CredentialsFilePath(const CredentialSources& src) {
  std::string path = Get(src, "AWS_SHARED_CREDENTIALS_FILE");
  std::string home = Get(src, "HOME");
  if (path.empty()) return home.empty() ? std::string() : home + "/.aws/credentials";
  // The CLI expands a leading "~/"; people copy such values from its docs.
  if (path.rfind("~/", 0) == 0 && !home.empty()) path = home + path.substr(1);
  return path;
}

}  // namespace

CredentialSources CredentialSourcesFromEnvironment() {
  CredentialSources src;
  for (const char* name : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                           "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "HOME"}) {
    if (const char* v = std::getenv(name)) src.env[name] = v;
  }
  return src;
}

Result<AwsCredentials> LoadAwsCredentials(const CredentialSources& src) {
  std::string id = Get(src, "AWS_ACCESS_KEY_ID");
  std::string secret = Get(src, "AWS_SECRET_ACCESS_KEY");
  if (!id.empty() && !secret.empty()) {
    return AwsCredentials{id, secret, Get(src, "AWS_SESSION_TOKEN")};
  }
  // Half-set variables fall through to the file, but the final error says so:
  // it is the likeliest cause of "no credentials".
  std::string partial;
  if (!id.empty()) partial = " (AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not)";
  if (!secret.empty()) partial = " (AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not)";

  std::string profile = Get(src, "AWS_PROFILE");
  if (profile.empty()) profile = "default";
  std::string path = CredentialsFilePath(src);
  std::string hint =
      "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or add "
      "profile '" +
      profile + "' to ";
  if (path.empty()) {
    return Status::Error(ENOENT, hint + "$HOME/.aws/credentials (HOME is not set)" + partial);
  }

  std::string text;
  Status read = ReadSmallFile(path, &text);
  if (!read.ok()) {
    if (read.err() == ENOENT) return Status::Error(ENOENT, hint + path + partial);
    return read.Annotate("reading AWS credentials");
  }
  std::map<std::string, std::string> keys;
  bool found = false;
  CKPTFS_RETURN_IF_ERROR(ParseProfile(text, path, profile, &keys, &found));
  if (!found) {
    return Status::Error(ENOENT, hint + path + " (it has no [" + profile + "] section)" + partial);
  }
  AwsCredentials creds{keys["aws_access_key_id"], keys["aws_secret_access_key"],
                       keys["aws_session_token"]};
  for (const char* key : {"aws_access_key_id", "aws_secret_access_key"}) {
    if (keys[key].empty()) {
      return Status::Error(EINVAL, path + ": profile '" + profile + "' lacks " + key);
    }
  }
  return creds;
}

std::string RedactedDescription(const AwsCredentials& creds) {
  std::string out;
  const std::string& id = creds.access_key_id;
  if (id.empty()) {
    out = "no access key id";
  } else {
    // Short ids (only seen in tests or typos) show nothing: four characters
    // of an eight-character value would be half of it.
    std::string shown = id.size() > 8 ? id.substr(0, 4) : std::string();
    out = shown + "\u2026(" + std::to_string(id.size()) + " chars)";
  }
  out += creds.secret_access_key.empty() ? ", no secret" : ", secret set";
  out += creds.session_token.empty() ? ", no session token" : ", session token set";
  return out;
}

}  // namespace ckptfs
