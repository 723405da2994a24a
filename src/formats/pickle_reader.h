// A minimal, safe reader of Python pickles (protocols 2-5, binary opcodes
// only) that turns a pickle into a generic value tree without running any
// Python: classes named by GLOBAL/STACK_GLOBAL stay names, and instances built
// by NEWOBJ/REDUCE/BUILD become "object" values holding the callable, its
// arguments and the BUILD state. Unknown classes are therefore never an error.
// Used for DCP `.metadata` files and, later, for the `data.pkl` of torch.save
// archives (BINPERSID is supported for that).
//
// Safety contract: Unpickle never reads outside `data`, never recurses on the
// input, and bounds its memory by the input size (at most one node per opcode
// byte) and by PickleLimits. Every malformed input returns EIO with a message
// naming the problem, the opcode and its byte offset. Integers are int64:
// LONG1/LONG4 wider than 8 bytes are an error. Strings are kept as raw UTF-8
// bytes (not validated). Protocol-0 text opcodes, EXT* and out-of-band buffers
// are rejected as unsupported. Below protocol 3, GLOBAL's Python 2 modules
// `__builtin__` and `copy_reg` read as `builtins` and `copyreg`, as in CPython.
//
// Ownership: a PickleDocument owns every node; values point at each other with
// raw const pointers that live as long as the document. The memo shares nodes
// as Python does, so the graph may be a DAG or even contain cycles (a list
// appended to itself): code walking it must bound its depth, as
// DescribePickleValue does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ckptfs {

class PickleValue {
 public:
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,     // str (also protocol-2 SHORT_BINSTRING/BINSTRING)
    kBytes,      // bytes and bytearray
    kTuple,
    kList,
    kDict,
    kSet,        // set and frozenset
    kGlobal,     // a class or function named by GLOBAL/STACK_GLOBAL
    kObject,     // the result of NEWOBJ/NEWOBJ_EX/REDUCE, maybe BUILT
    kPersistentId,  // BINPERSID: `args` is the persistent id
  };
  using Entry = std::pair<const PickleValue*, const PickleValue*>;

  explicit PickleValue(Kind kind) : kind(kind) {}

  Kind kind;
  bool bool_value = false;
  int64_t int_value = 0;
  double float_value = 0;
  // kString/kBytes: the bytes. kGlobal: the module.
  std::string text;
  // kGlobal: the qualified name inside the module.
  std::string global_name;
  // kTuple/kList/kSet elements; kObject: what APPEND(S) added (list subclasses).
  std::vector<const PickleValue*> items;
  // kDict entries in insertion order (keys may repeat; the last one wins, as in
  // Python); kObject: what SETITEM(S) added (dict subclasses, OrderedDict).
  std::vector<Entry> entries;
  // kObject: what was called (usually a kGlobal: the class for NEWOBJ, the
  // function for REDUCE). Never null for kObject.
  const PickleValue* callable = nullptr;
  // kObject: the positional arguments (a kTuple); kPersistentId: the pid.
  const PickleValue* args = nullptr;
  // kObject: NEWOBJ_EX keyword arguments (a kDict), else null.
  const PickleValue* kwargs = nullptr;
  // kObject: the BUILD state (a dict, a (dict, slots) tuple, or anything a
  // __setstate__ takes), null when never built. Two BUILDs with dict states
  // merge, later keys winning.
  const PickleValue* state = nullptr;

  bool is(Kind k) const { return kind == k; }
  // kGlobal: its module/name; kObject: those of its callable when that is a
  // global; otherwise empty.
  const std::string& module() const;
  const std::string& name() const;
  // True for a kGlobal, or a kObject whose callable is a kGlobal, with exactly
  // this module and name.
  bool IsA(std::string_view module, std::string_view name) const;
  // kDict (or kObject entries): the value of the last entry whose key is the
  // string `key`; null when absent or when this is not a dict.
  const PickleValue* Get(std::string_view key) const;
  // kObject: the attribute `key` from its BUILD state: a dict, or the two dicts
  // of a (dict-or-None, slots-dict) tuple. Null when absent.
  const PickleValue* Attr(std::string_view key) const;
};

const char* PickleKindName(PickleValue::Kind kind);

// A short Python-like rendering for messages and tests, cut at max_depth
// levels and max_items elements per container ("..." marks a cut).
std::string DescribePickleValue(const PickleValue& value, int max_depth = 4,
                                size_t max_items = 8);

struct PickleLimits {
  // Inputs larger than this are refused before any parsing.
  uint64_t max_input_bytes = uint64_t{1} << 30;
  // Distinct memo slots; Python's writers number them 0, 1, 2, ...
  size_t max_memo_entries = size_t{1} << 24;
  // Values on the VM stack (all marks included).
  size_t max_stack_size = size_t{1} << 24;
  // Open MARKs at once.
  size_t max_marks = size_t{1} << 16;
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
