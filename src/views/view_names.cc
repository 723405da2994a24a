// Naming rules of the `.full/` views (see view_names.h).
#include "views/view_names.h"

#include <utility>

namespace ckptfs {
namespace {

// torch dtype name <-> safetensors code (FORMATS.md section 3.2). float4 is
// left out: torch counts packed pairs, safetensors counts 4-bit elements.
constexpr std::pair<std::string_view, std::string_view> kCodes[] = {
    {"float64", "F64"},       {"float32", "F32"},          {"float16", "F16"},
    {"bfloat16", "BF16"},     {"int64", "I64"},            {"int32", "I32"},
    {"int16", "I16"},         {"int8", "I8"},              {"uint8", "U8"},
    {"bool", "BOOL"},         {"uint16", "U16"},           {"uint32", "U32"},
    {"uint64", "U64"},        {"complex64", "C64"},        {"float8_e4m3fn", "F8_E4M3"},
    {"float8_e5m2", "F8_E5M2"}, {"float8_e8m0fnu", "F8_E8M0"},
    {"float8_e4m3fnuz", "F8_E4M3FNUZ"}, {"float8_e5m2fnuz", "F8_E5M2FNUZ"},
};

}  // namespace

std::optional<std::string> ViewFileName(std::string_view fqn) {
  std::string out;
  out.reserve(fqn.size());
  for (char c : fqn) {
    if (c == '%') {
      out += "%25";
    } else if (c == '/') {
      out += "%2F";
    } else if (c == '\0') {
      out += "%00";
    } else {
      out += c;
    }
  }
  if (out.empty() || out == "." || out == ".." || out.size() > 255) return std::nullopt;
  return out;
}

std::optional<std::pair<std::string, std::string>> SplitGroup(std::string_view fqn) {
  const size_t dot = fqn.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == fqn.size()) return std::nullopt;
  return std::make_pair(std::string(fqn.substr(0, dot)), std::string(fqn.substr(dot + 1)));
}

std::optional<std::string> SafetensorsCodeOf(std::string_view torch_dtype) {
  for (const auto& [name, code] : kCodes) {
    if (name == torch_dtype) return std::string(code);
  }
  return std::nullopt;
}

std::optional<std::string> TorchDtypeOfCode(std::string_view code) {
  for (const auto& [name, c] : kCodes) {
    if (c == code) return std::string(name);
  }
  return std::nullopt;
}

}  // namespace ckptfs
