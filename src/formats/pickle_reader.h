// A minimal, safe reader of Python pickles (protocols 2-5, binary opcodes
// only) that turns a pickle into a generic value tree (pickle_value.h) without
// running any Python: classes named by GLOBAL/STACK_GLOBAL stay names, and
// instances built by NEWOBJ/REDUCE/BUILD become "object" values holding the
// callable, its arguments and the BUILD state. Unknown classes are therefore
// never an error. Used for DCP `.metadata` files and, later, for the
// `data.pkl` of torch.save archives (BINPERSID is supported for that).
//
// Safety contract: Unpickle never reads outside `data`, never recurses on the
// input, and bounds its memory by the input size (at most one node per opcode
// byte, no quadratic copying) and by PickleLimits. Every malformed input returns EIO with a message
// naming the problem, the opcode and its byte offset. Integers are int64:
// LONG1/LONG4 wider than 8 bytes are an error. Strings are kept as raw UTF-8
// bytes (not validated). Protocol-0 text opcodes, EXT* and out-of-band buffers
// are rejected as unsupported. Below protocol 3, GLOBAL's Python 2 modules
// `__builtin__` and `copy_reg` read as `builtins` and `copyreg`, as in CPython.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>

#include "common/status.h"
#include "formats/pickle_value.h"

namespace ckptfs {

struct PickleLimits {
  // Inputs larger than this are refused before any parsing.
  uint64_t max_input_bytes = uint64_t{1} << 30;
  // Distinct memo slots; Python's writers number them 0, 1, 2, ...
  size_t max_memo_entries = size_t{1} << 24;
  // Values on the VM stack (all marks included).
  size_t max_stack_size = size_t{1} << 24;
  // Open MARKs at once.
  size_t max_marks = size_t{1} << 16;
  // Values in the document. A node takes about 170 bytes plus its strings and
  // vectors; real DCP metadata makes about one node per 6 input bytes (shared
  // None/bool/small ints/empty tuple), a hostile pickle up to one per byte.
  size_t max_nodes = size_t{1} << 26;
};

class PickleDocument {
 public:
  PickleDocument(PickleDocument&&) = default;
  PickleDocument& operator=(PickleDocument&&) = default;
  PickleDocument(const PickleDocument&) = delete;
  PickleDocument& operator=(const PickleDocument&) = delete;

  const PickleValue& root() const { return *root_; }
  // The protocol from PROTO, or 0 when the pickle has none.
  int protocol() const { return protocol_; }
  size_t node_count() const { return nodes_->size(); }

 private:
  friend class PickleMachine;
  PickleDocument() : nodes_(std::make_unique<std::deque<PickleValue>>()) {}

  // A deque keeps node addresses stable as it grows; the unique_ptr keeps them
  // stable when the document moves.
  std::unique_ptr<std::deque<PickleValue>> nodes_;
  const PickleValue* root_ = nullptr;
  int protocol_ = 0;
};

// Runs the pickle in `data` up to its STOP opcode (bytes after STOP are
// ignored, as Python does) and returns the value it produced.
Result<PickleDocument> Unpickle(std::string_view data, const PickleLimits& limits = {});

}  // namespace ckptfs
