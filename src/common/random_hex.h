// Random identifiers in lower-case hex from the kernel's generator
// (getrandom): cache ids, nonces, scratch key names. Unique enough that two
// nodes, caches or attempts never pick the same one by chance.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace ckptfs {

// 2 * bytes hex digits (bytes <= 64); EINVAL beyond that, the errno of
// getrandom when the kernel cannot give randomness.
Result<std::string> RandomHex(size_t bytes);

}  // namespace ckptfs
