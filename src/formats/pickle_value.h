// The generic value tree produced by the pickle reader (pickle_reader.h):
// Python's built-in types, plus "global" (a class or function named by
// GLOBAL/STACK_GLOBAL) and "object" (what NEWOBJ/REDUCE/BUILD made of one) so
// that pickles of arbitrary classes read without running Python.
//
// Nodes are owned by a PickleDocument and point at each other with raw const
// pointers that live as long as the document. The memo shares nodes as Python
// does, so the graph may be a DAG or even contain cycles (a list appended to
// itself): code walking it must bound its depth, as DescribePickleValue does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckptfs {

class PickleValue {
 public:
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,  // str (also protocol-2 SHORT_BINSTRING/BINSTRING)
    kBytes,   // bytes and bytearray
    kTuple,
    kList,
    kDict,
    kSet,           // set and frozenset
    kGlobal,        // a class or function named by GLOBAL/STACK_GLOBAL
    kObject,        // the result of NEWOBJ/NEWOBJ_EX/REDUCE, maybe BUILT
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
std::string DescribePickleValue(const PickleValue& value, int max_depth = 4, size_t max_items = 8);

}  // namespace ckptfs
