#include "namespace/step_pattern.h"

#include <cerrno>
#include <limits>

#include "namespace/virtual_nodes.h"

namespace ckptfs {

Result<StepPattern> StepPattern::Compile(const std::string& pattern) {
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    return Status::Error(EINVAL, "invalid --step-pattern '" + pattern + "': " + e.what());
  }
  if (re.mark_count() != 1) {
    return Status::Error(EINVAL, "--step-pattern '" + pattern +
                                     "' must have exactly one capture group (the step number), it has " +
                                     std::to_string(re.mark_count()));
  }
  return StepPattern(pattern, std::move(re));
}

std::optional<int64_t> StepPattern::Match(const std::string& name) const {
  std::smatch m;
  if (!std::regex_match(name, m, re_)) return std::nullopt;
  const std::string digits = m[1].str();
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  int64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

Result<std::vector<std::string>> SplitStepPath(const std::string& step_path) {
  constexpr size_t kMaxComponent = 255;  // NAME_MAX, as CheckName allows
  auto invalid = [&](const std::string& why) {
    return Status::Error(EINVAL, "invalid step path '" + step_path + "': " + why);
  };
  if (step_path.find('\0') != std::string::npos) return invalid("it contains NUL");
  std::vector<std::string> parts;
  for (size_t start = 0; start <= step_path.size();) {
    size_t end = step_path.find('/', start);
    if (end == std::string::npos) end = step_path.size();
    std::string part = step_path.substr(start, end - start);
    if (part.empty()) return invalid("an empty component");
    if (part == "." || part == "..") return invalid("a '" + part + "' component");
    if (part.size() > kMaxComponent) return invalid("a component longer than 255 bytes");
    parts.push_back(std::move(part));
    start = end + 1;
  }
  if (parts.front() == kControlDirName)
    return invalid(std::string(kControlDirName) + " is reserved");
  return parts;
}

}  // namespace ckptfs
