// Naming rules of the `.full/` views (SPEC section 6): file names for tensor
// FQNs, the top-level group of a key, and dtype codes between torch names
// and safetensors codes.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ckptfs {

inline constexpr const char* kFullDirName = ".full";
inline constexpr const char* kIndexJsonName = "index.json";
inline constexpr const char* kAllSafetensorsName = "all.safetensors";
inline constexpr const char* kBytesDirName = "bytes";

// A tensor's file name: the FQN with '%' written as "%25", '/' as "%2F" and
// NUL as "%00"; nullopt when the result cannot be a file name ("", ".",
// "..", longer than 255 bytes).
std::optional<std::string> ViewFileName(std::string_view fqn);

// The first component of a flattened key and the rest ("model.w" ->
// {"model", "w"}); nullopt for keys without a '.' (or with an empty part).
std::optional<std::pair<std::string, std::string>> SplitGroup(std::string_view fqn);

// safetensors code of a torch dtype name ("bfloat16" -> "BF16"); nullopt for
// dtypes safetensors cannot hold with torch's element layout.
std::optional<std::string> SafetensorsCodeOf(std::string_view torch_dtype);
// torch dtype name of a safetensors code ("F8_E4M3" -> "float8_e4m3fn").
std::optional<std::string> TorchDtypeOfCode(std::string_view code);

}  // namespace ckptfs
