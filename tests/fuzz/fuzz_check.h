// Shared helpers of the libFuzzer targets in tests/fuzz: FUZZ_CHECK aborts
// (so libFuzzer records a crash file) when a documented invariant of a reader
// does not hold for an input it accepted or rejected.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/status.h"

#define FUZZ_CHECK(cond, ...)                                                     \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n  ", __FILE__, __LINE__, \
                   #cond);                                                        \
      std::fprintf(stderr, __VA_ARGS__);                                          \
      std::fprintf(stderr, "\n");                                                 \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

namespace ckptfs::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// Every reader documents "malformed input returns EIO with a message"; a
// message also starts with the reader's own prefix so that logs say who failed.
inline void CheckError(const Status& st, std::string_view prefix) {
  FUZZ_CHECK(!st.ok(), "an error Status that is ok");
  FUZZ_CHECK(st.err() == EIO, "error %d instead of EIO: %s", st.err(), st.message().c_str());
  FUZZ_CHECK(st.message().size() > prefix.size() &&
                 std::string_view(st.message()).substr(0, prefix.size()) == prefix,
             "message does not start with '%.*s': %s", static_cast<int>(prefix.size()),
             prefix.data(), st.message().c_str());
}

// For messages that callers annotate with context ("'key': torch.save zip: ...").
inline void CheckErrorMentions(const Status& st, std::string_view what) {
  FUZZ_CHECK(!st.ok(), "an error Status that is ok");
  FUZZ_CHECK(st.err() == EIO, "error %d instead of EIO: %s", st.err(), st.message().c_str());
  FUZZ_CHECK(st.message().find(what) != std::string::npos, "message does not mention '%.*s': %s",
             static_cast<int>(what.size()), what.data(), st.message().c_str());
}

}  // namespace ckptfs::fuzz
