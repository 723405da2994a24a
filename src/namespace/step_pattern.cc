#include "namespace/step_pattern.h"

#include <cerrno>
#include <limits>

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

}  // namespace ckptfs
