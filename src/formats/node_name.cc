#include "formats/node_name.h"

#include <cstdio>

namespace ckptfs {

namespace {

constexpr const char* kAllowed =
    "a node name is 1-63 characters from A-Z, a-z, 0-9, '.', '_' and '-', starting with a "
    "letter or digit and not ending with '.'";

bool IsAlnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}


std::string CharName(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f && u != '\'' && u != '\\') return std::string("'") + c + "'";
  char buf[8];
  snprintf(buf, sizeof buf, "0x%02x", u);
  return buf;
}

}  // namespace

Status ValidateNodeName(const std::string& name) {
  auto bad = [&](const std::string& why) {
    return Status::Error(EINVAL, "node name " + QuoteForMessage(name) + ": " + why + "; " + kAllowed);
  };
  if (name.empty()) return Status::Error(EINVAL, std::string("empty node name; ") + kAllowed);
  if (name.size() > kMaxNodeNameLength) {
    return bad("too long (" + std::to_string(name.size()) + " characters)");
  }
  if (name == "." || name == "..") return bad("reserved");
  if (!IsAlnum(name.front())) return bad("starts with " + CharName(name.front()));
  for (size_t i = 1; i < name.size(); ++i) {
    const char c = name[i];
    if (!IsAlnum(c) && c != '.' && c != '_' && c != '-') {
      return bad("contains " + CharName(c) + " at offset " + std::to_string(i));
    }
  }
  if (name.back() == '.') return bad("ends with '.'");
  return Status::Ok();
}

std::string QuoteForMessage(std::string_view s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[5];
      snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > 80) out += "...";
  return out + "'";
}

}  // namespace ckptfs
