// Node names of cluster mode (SPEC section 9, `--node NAME`): each node that
// mounts one remote names itself, and the name appears in remote keys
// (`<step>/.ckptfs-parts/<node>.json`, `.ckptfs-nodes/<node>.json`) and in
// proposals (`<node>~<nonce>`). So a name is one safe key component without
// '~' or '/': 1-63 characters from [A-Za-z0-9._-], starting with a letter or
// digit, not ending with '.' (which also rules out "." and "..").
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ckptfs {

inline constexpr size_t kMaxNodeNameLength = 63;

// Ok, or EINVAL with a message that names the offending character or rule
// and says what is allowed.
Status ValidateNodeName(const std::string& name);

// A name read from outside, for an error message: in quotes, printable
// ASCII as is, other bytes as \xNN, cut at 80 bytes.
std::string QuoteForMessage(std::string_view s);

}  // namespace ckptfs
