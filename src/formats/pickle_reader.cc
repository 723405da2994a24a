// The pickle VM: one loop over opcodes, a value stack with a separate mark
// stack (as CPython's _pickle.c keeps them, so values below the innermost
// mark cannot be popped), and a memo of shared nodes.
#include "formats/pickle_reader.h"

#include <bit>
#include <cstdio>
#include <cstring>
#include <unordered_map>

namespace ckptfs {
namespace {

using Kind = PickleValue::Kind;

// Opcode bytes, named as in CPython's pickletools.
enum Op : uint8_t {
  kMark = '(', kStop = '.', kPop = '0', kPopMark = '1', kDup = '2',
  kBinFloat = 'G', kBinInt = 'J', kBinInt1 = 'K', kBinInt2 = 'M', kNone = 'N',
  kBinPersId = 'Q', kReduce = 'R', kBinString = 'T', kShortBinString = 'U',
  kBinUnicode = 'X', kAppend = 'a', kBuild = 'b', kGlobal = 'c', kDict = 'd',
  kAppends = 'e', kBinGet = 'h', kLongBinGet = 'j', kList = 'l', kBinPut = 'q',
  kLongBinPut = 'r', kSetItem = 's', kTuple = 't', kSetItems = 'u',
  kEmptyDict = '}', kEmptyList = ']', kEmptyTuple = ')', kBinBytes = 'B',
  kShortBinBytes = 'C',
  kProto = 0x80, kNewObj = 0x81, kTuple1 = 0x85, kTuple2 = 0x86, kTuple3 = 0x87,
  kNewTrue = 0x88, kNewFalse = 0x89, kLong1 = 0x8a, kLong4 = 0x8b,
  kShortBinUnicode = 0x8c, kBinUnicode8 = 0x8d, kBinBytes8 = 0x8e,
  kEmptySet = 0x8f, kAddItems = 0x90, kFrozenSet = 0x91, kNewObjEx = 0x92,
  kStackGlobal = 0x93, kMemoize = 0x94, kFrame = 0x95, kByteArray8 = 0x96,
};

const char* OpName(uint8_t op) {
  switch (op) {
    case kMark: return "MARK";
    case kStop: return "STOP";
    case kPop: return "POP";
    case kPopMark: return "POP_MARK";
    case kDup: return "DUP";
    case kBinFloat: return "BINFLOAT";
    case kBinInt: return "BININT";
    case kBinInt1: return "BININT1";
    case kBinInt2: return "BININT2";
    case kNone: return "NONE";
    case kBinPersId: return "BINPERSID";
    case kReduce: return "REDUCE";
    case kBinString: return "BINSTRING";
    case kShortBinString: return "SHORT_BINSTRING";
    case kBinUnicode: return "BINUNICODE";
    case kAppend: return "APPEND";
    case kBuild: return "BUILD";
    case kGlobal: return "GLOBAL";
    case kDict: return "DICT";
    case kAppends: return "APPENDS";
    case kBinGet: return "BINGET";
    case kLongBinGet: return "LONG_BINGET";
    case kList: return "LIST";
    case kBinPut: return "BINPUT";
    case kLongBinPut: return "LONG_BINPUT";
    case kSetItem: return "SETITEM";
    case kTuple: return "TUPLE";
    case kSetItems: return "SETITEMS";
    case kEmptyDict: return "EMPTY_DICT";
    case kEmptyList: return "EMPTY_LIST";
    case kEmptyTuple: return "EMPTY_TUPLE";
    case kBinBytes: return "BINBYTES";
    case kShortBinBytes: return "SHORT_BINBYTES";
    case kProto: return "PROTO";
    case kNewObj: return "NEWOBJ";
    case kTuple1: return "TUPLE1";
    case kTuple2: return "TUPLE2";
    case kTuple3: return "TUPLE3";
    case kNewTrue: return "NEWTRUE";
    case kNewFalse: return "NEWFALSE";
    case kLong1: return "LONG1";
    case kLong4: return "LONG4";
    case kShortBinUnicode: return "SHORT_BINUNICODE";
    case kBinUnicode8: return "BINUNICODE8";
    case kBinBytes8: return "BINBYTES8";
    case kEmptySet: return "EMPTY_SET";
    case kAddItems: return "ADDITEMS";
    case kFrozenSet: return "FROZENSET";
    case kNewObjEx: return "NEWOBJ_EX";
    case kStackGlobal: return "STACK_GLOBAL";
    case kMemoize: return "MEMOIZE";
    case kFrame: return "FRAME";
    case kByteArray8: return "BYTEARRAY8";
    // Known but unsupported: protocol-0 text opcodes, extension registry,
    // out-of-band buffers.
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    case 'F': return "FLOAT";
    case 'p': return "PUT";
    case 'g': return "GET";
    case 'P': return "PERSID";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

const std::string kEmpty;

}  // namespace

// ---- PickleValue -----------------------------------------------------------

const std::string& PickleValue::module() const {
  if (kind == Kind::kGlobal) return text;
  if (kind == Kind::kObject && callable != nullptr && callable->kind == Kind::kGlobal) {
    return callable->text;
  }
  return kEmpty;
}

const std::string& PickleValue::name() const {
  if (kind == Kind::kGlobal) return global_name;
  if (kind == Kind::kObject && callable != nullptr && callable->kind == Kind::kGlobal) {
    return callable->global_name;
  }
  return kEmpty;
}

bool PickleValue::IsA(std::string_view mod, std::string_view nm) const {
  if (kind != Kind::kGlobal && kind != Kind::kObject) return false;
  return module() == mod && name() == nm;
}

const PickleValue* PickleValue::Get(std::string_view key) const {
  if (kind != Kind::kDict && kind != Kind::kObject) return nullptr;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->first->kind == Kind::kString && it->first->text == key) return it->second;
  }
  return nullptr;
}

const PickleValue* PickleValue::Attr(std::string_view key) const {
  if (kind != Kind::kObject || state == nullptr) return nullptr;
  if (state->kind == Kind::kDict) return state->Get(key);
  if (state->kind == Kind::kTuple && state->items.size() == 2) {
    // (instance dict or None, slots dict): slots are set after the dict.
    if (const PickleValue* v = state->items[1]->Get(key)) return v;
    return state->items[0]->Get(key);
  }
  return nullptr;
}

const char* PickleKindName(PickleValue::Kind kind) {
  switch (kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kBytes: return "bytes";
    case Kind::kTuple: return "tuple";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kSet: return "set";
    case Kind::kGlobal: return "global";
    case Kind::kObject: return "object";
    case Kind::kPersistentId: return "persistent id";
  }
  return "?";
}

namespace {

void Describe(const PickleValue& v, int depth, size_t max_items, std::string* out);

void DescribeSeq(const std::vector<const PickleValue*>& items, int depth, size_t max_items,
                 std::string* out) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) *out += ", ";
    if (i == max_items) {
      *out += "...";
      break;
    }
    Describe(*items[i], depth, max_items, out);
  }
}

void DescribeEntries(const std::vector<PickleValue::Entry>& entries, int depth, size_t max_items,
                     std::string* out) {
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) *out += ", ";
    if (i == max_items) {
      *out += "...";
      break;
    }
    Describe(*entries[i].first, depth, max_items, out);
    *out += ": ";
    Describe(*entries[i].second, depth, max_items, out);
  }
}

void Describe(const PickleValue& v, int depth, size_t max_items, std::string* out) {
  bool container = v.kind == Kind::kTuple || v.kind == Kind::kList || v.kind == Kind::kDict ||
                   v.kind == Kind::kSet || v.kind == Kind::kObject ||
                   v.kind == Kind::kPersistentId;
  if (container && depth <= 0) {
    *out += "...";
    return;
  }
  switch (v.kind) {
    case Kind::kNone: *out += "None"; return;
    case Kind::kBool: *out += v.bool_value ? "True" : "False"; return;
    case Kind::kInt: *out += std::to_string(v.int_value); return;
    case Kind::kFloat: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", v.float_value);
      *out += buf;
      return;
    }
    case Kind::kString:
    case Kind::kBytes:
      if (v.kind == Kind::kBytes) *out += 'b';
      *out += '\'';
      for (unsigned char c : v.text) {
        if (c == '\'' || c == '\\') {
          *out += '\\';
          *out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f || (v.kind == Kind::kBytes && c >= 0x80)) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          *out += buf;
        } else {
          *out += static_cast<char>(c);
        }
      }
      *out += '\'';
      return;
    case Kind::kTuple:
      *out += '(';
      DescribeSeq(v.items, depth - 1, max_items, out);
      if (v.items.size() == 1) *out += ',';
      *out += ')';
      return;
    case Kind::kList:
      *out += '[';
      DescribeSeq(v.items, depth - 1, max_items, out);
      *out += ']';
      return;
    case Kind::kSet:
      *out += "set(";
      DescribeSeq(v.items, depth - 1, max_items, out);
      *out += ')';
      return;
    case Kind::kDict:
      *out += '{';
      DescribeEntries(v.entries, depth - 1, max_items, out);
      *out += '}';
      return;
    case Kind::kGlobal: *out += v.text + "." + v.global_name; return;
    case Kind::kObject:
      if (v.callable->kind == Kind::kGlobal) {
        *out += v.module() + "." + v.name();
      } else {
        *out += '<';
        Describe(*v.callable, depth - 1, max_items, out);
        *out += '>';
      }
      *out += '(';
      if (v.args != nullptr) DescribeSeq(v.args->items, depth - 1, max_items, out);
      *out += ')';
      if (v.state != nullptr) {
        *out += '{';
        Describe(*v.state, depth - 1, max_items, out);
        *out += '}';
      }
      if (!v.items.empty()) {
        *out += '[';
        DescribeSeq(v.items, depth - 1, max_items, out);
        *out += ']';
      }
      if (!v.entries.empty()) {
        *out += '{';
        DescribeEntries(v.entries, depth - 1, max_items, out);
        *out += '}';
      }
      return;
    case Kind::kPersistentId:
      *out += "persid(";
      Describe(*v.args, depth - 1, max_items, out);
      *out += ')';
      return;
  }
}

}  // namespace

std::string DescribePickleValue(const PickleValue& value, int max_depth, size_t max_items) {
  std::string out;
  Describe(value, max_depth, max_items, &out);
  return out;
}

// ---- The VM ----------------------------------------------------------------

class PickleMachine {
 public:
  PickleMachine(std::string_view data, const PickleLimits& limits)
      : data_(data), limits_(limits) {}

  Result<PickleDocument> Run();

 private:
  Status Fail(const std::string& what) const {
    const char* name = OpName(op_);
    char buf[96];
    if (name != nullptr) {
      std::snprintf(buf, sizeof buf, " (%s at byte %zu)", name, op_offset_);
    } else {
      std::snprintf(buf, sizeof buf, " (opcode 0x%02x at byte %zu)", op_, op_offset_);
    }
    return Status::Error(EIO, "pickle: " + what + buf);
  }

  PickleValue* New(Kind kind) { return &doc_.nodes_->emplace_back(kind); }

  Status Read(uint64_t n, std::string_view* out) {
    if (n > data_.size() - pos_) {
      return Fail("truncated: needs " + std::to_string(n) + " bytes, " +
                  std::to_string(data_.size() - pos_) + " left");
    }
    *out = data_.substr(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return Status::Ok();
  }
  // Little-endian unsigned integer of `width` bytes (1..8).
  Status ReadUint(int width, uint64_t* out) {
    std::string_view b;
    CKPTFS_RETURN_IF_ERROR(Read(static_cast<uint64_t>(width), &b));
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[i]);
    *out = v;
    return Status::Ok();
  }

  size_t Fence() const { return marks_.empty() ? 0 : marks_.back(); }
  Status Push(PickleValue* v) {
    if (stack_.size() >= limits_.max_stack_size) return Fail("stack larger than the limit");
    stack_.push_back(v);
    return Status::Ok();
  }
  Status Pop(PickleValue** v) {
    if (stack_.size() <= Fence()) return Fail("stack underflow");
    *v = stack_.back();
    stack_.pop_back();
    return Status::Ok();
  }
  Status Top(PickleValue** v) {
    if (stack_.size() <= Fence()) return Fail("stack underflow");
    *v = stack_.back();
    return Status::Ok();
  }
  // Pops the innermost mark; the values above it are stack_[*start...].
  Status PopMark(size_t* start) {
    if (marks_.empty()) return Fail("no MARK on the stack");
    *start = marks_.back();
    marks_.pop_back();
    return Status::Ok();
  }
  // The container just below a mark at `start` (APPENDS, SETITEMS, ADDITEMS).
  Status BelowMark(size_t start, PickleValue** v) {
    if (start == 0 || start <= Fence()) return Fail("stack underflow below MARK");
    *v = stack_[start - 1];
    return Status::Ok();
  }

  PickleValue* Shared(PickleValue** slot, Kind kind, bool b = false) {
    if (*slot == nullptr) {
      *slot = New(kind);
      (*slot)->bool_value = b;
    }
    return *slot;
  }

  Status PushInt(int64_t v) {
    PickleValue* n = New(Kind::kInt);
    n->int_value = v;
    return Push(n);
  }
  Status PushText(Kind kind, int width) {
    uint64_t len = 0;
    CKPTFS_RETURN_IF_ERROR(ReadUint(width, &len));
    if (width == 4 && op_ == kBinString && len > 0x7fffffffu) return Fail("negative length");
    std::string_view s;
    CKPTFS_RETURN_IF_ERROR(Read(len, &s));
    PickleValue* n = New(kind);
    n->text.assign(s);
    return Push(n);
  }
  Status PushSigned(int width) {  // LONG1 / LONG4: two's complement, little-endian
    uint64_t n = 0;
    CKPTFS_RETURN_IF_ERROR(ReadUint(width, &n));
    if (width == 4 && n > 0x7fffffffu) return Fail("negative length");
    if (n > 8) return Fail("integer of " + std::to_string(n) + " bytes does not fit in int64");
    uint64_t v = 0;
    if (n > 0) CKPTFS_RETURN_IF_ERROR(ReadUint(static_cast<int>(n), &v));
    if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    return PushInt(static_cast<int64_t>(v));
  }
  Status Put(uint64_t index) {
    PickleValue* top = nullptr;
    CKPTFS_RETURN_IF_ERROR(Top(&top));
    if (memo_.find(index) == memo_.end() && memo_.size() >= limits_.max_memo_entries) {
      return Fail("memo larger than the limit");
    }
    memo_[index] = top;
    return Status::Ok();
  }
  Status Get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return Fail("memo entry " + std::to_string(index) + " is not set");
    return Push(it->second);
  }
  Status PushGlobal(std::string module, std::string name) {
    PickleValue* n = New(Kind::kGlobal);
    n->text = std::move(module);
    n->global_name = std::move(name);
    return Push(n);
  }
  Status ReadLine(std::string* out) {
    size_t nl = data_.find('\n', pos_);
    if (nl == std::string_view::npos) return Fail("truncated: unterminated line");
    out->assign(data_.substr(pos_, nl - pos_));
    pos_ = nl + 1;
    return Status::Ok();
  }
  // Replaces stack_[start...] with one container holding those values.
  Status Collect(size_t start, Kind kind) {
    PickleValue* n = New(kind);
    if (kind == Kind::kDict) {
      if ((stack_.size() - start) % 2 != 0) return Fail("odd number of dict items");
      for (size_t i = start; i < stack_.size(); i += 2) n->entries.emplace_back(stack_[i], stack_[i + 1]);
    } else {
      n->items.assign(stack_.begin() + static_cast<std::ptrdiff_t>(start), stack_.end());
    }
    stack_.resize(start);
    return Push(n);
  }
  Status MakeObject(PickleValue* callable, PickleValue* args, PickleValue* kwargs) {
    if (callable->kind != Kind::kGlobal && callable->kind != Kind::kObject) {
      return Fail(std::string("cannot call a ") + PickleKindName(callable->kind));
    }
    if (args->kind != Kind::kTuple) return Fail("arguments are not a tuple");
    if (kwargs != nullptr && kwargs->kind != Kind::kDict) return Fail("keyword arguments are not a dict");
    PickleValue* n = New(Kind::kObject);
    n->callable = callable;
    n->args = args;
    n->kwargs = kwargs;
    return Push(n);
  }
  Status Build();
  Status Step(bool* stop);

  std::string_view data_;
  PickleLimits limits_;
  size_t pos_ = 0;
  size_t op_offset_ = 0;
  uint8_t op_ = 0;
  PickleDocument doc_;
  std::vector<PickleValue*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PickleValue*> memo_;
  PickleValue* none_ = nullptr;
  PickleValue* true_ = nullptr;
  PickleValue* false_ = nullptr;
};

Status PickleMachine::Build() {
  PickleValue* state = nullptr;
  PickleValue* inst = nullptr;
  CKPTFS_RETURN_IF_ERROR(Pop(&state));
  CKPTFS_RETURN_IF_ERROR(Top(&inst));
  if (inst->kind != Kind::kObject) {
    return Fail(std::string("BUILD on a ") + PickleKindName(inst->kind) + ", not an object");
  }
  if (inst->state != nullptr && inst->state->kind == Kind::kDict && state->kind == Kind::kDict) {
    PickleValue* merged = New(Kind::kDict);
    merged->entries = inst->state->entries;
    merged->entries.insert(merged->entries.end(), state->entries.begin(), state->entries.end());
    inst->state = merged;
  } else {
    inst->state = state;
  }
  return Status::Ok();
}

Status PickleMachine::Step(bool* stop) {
  uint64_t u = 0;
  size_t start = 0;
  PickleValue* a = nullptr;
  PickleValue* b = nullptr;
  PickleValue* c = nullptr;
  switch (op_) {
    case kProto:
      CKPTFS_RETURN_IF_ERROR(ReadUint(1, &u));
      if (u > 5) return Fail("unsupported protocol " + std::to_string(u));
      doc_.protocol_ = static_cast<int>(u);
      return Status::Ok();
    case kFrame:  // a framing hint: only check that the frame is really there
      CKPTFS_RETURN_IF_ERROR(ReadUint(8, &u));
      if (u > data_.size() - pos_) return Fail("frame of " + std::to_string(u) + " bytes is truncated");
      return Status::Ok();
    case kStop:
      CKPTFS_RETURN_IF_ERROR(Pop(&a));
      doc_.root_ = a;
      *stop = true;
      return Status::Ok();
    case kMark:
      if (marks_.size() >= limits_.max_marks) return Fail("too many nested MARKs");
      marks_.push_back(stack_.size());
      return Status::Ok();
    case kPop:
      if (!marks_.empty() && marks_.back() == stack_.size()) {
        marks_.pop_back();
        return Status::Ok();
      }
      return Pop(&a);
    case kPopMark:
      CKPTFS_RETURN_IF_ERROR(PopMark(&start));
      stack_.resize(start);
      return Status::Ok();
    case kDup:
      CKPTFS_RETURN_IF_ERROR(Top(&a));
      return Push(a);
    case kShortBinUnicode: return PushText(Kind::kString, 1);
    case kBinUnicode: return PushText(Kind::kString, 4);
    case kBinUnicode8: return PushText(Kind::kString, 8);
    case kShortBinString: return PushText(Kind::kString, 1);
    case kBinString: return PushText(Kind::kString, 4);
    case kShortBinBytes: return PushText(Kind::kBytes, 1);
    case kBinBytes: return PushText(Kind::kBytes, 4);
    case kBinBytes8: return PushText(Kind::kBytes, 8);
    case kByteArray8: return PushText(Kind::kBytes, 8);
    case kMemoize: return Put(memo_.size());
    case kBinPut:
      CKPTFS_RETURN_IF_ERROR(ReadUint(1, &u));
      return Put(u);
    case kLongBinPut:
      CKPTFS_RETURN_IF_ERROR(ReadUint(4, &u));
      return Put(u);
    case kBinGet:
      CKPTFS_RETURN_IF_ERROR(ReadUint(1, &u));
      return Get(u);
    case kLongBinGet:
      CKPTFS_RETURN_IF_ERROR(ReadUint(4, &u));
      return Get(u);
    case kGlobal: {
      std::string module, name;
      CKPTFS_RETURN_IF_ERROR(ReadLine(&module));
      CKPTFS_RETURN_IF_ERROR(ReadLine(&name));
      // Python 2 module names that protocol-2 writers keep for compatibility
      // (CPython maps these with fix_imports, _compat_pickle.IMPORT_MAPPING).
      if (doc_.protocol_ < 3 && module == "__builtin__") module = "builtins";
      if (doc_.protocol_ < 3 && module == "copy_reg") module = "copyreg";
      return PushGlobal(std::move(module), std::move(name));
    }
    case kStackGlobal:
      CKPTFS_RETURN_IF_ERROR(Pop(&b));
      CKPTFS_RETURN_IF_ERROR(Pop(&a));
      if (a->kind != Kind::kString || b->kind != Kind::kString) {
        return Fail("module and name are not strings");
      }
      return PushGlobal(a->text, b->text);
    case kNewObj:
    case kReduce:
      CKPTFS_RETURN_IF_ERROR(Pop(&b));
      CKPTFS_RETURN_IF_ERROR(Pop(&a));
      return MakeObject(a, b, nullptr);
    case kNewObjEx:
      CKPTFS_RETURN_IF_ERROR(Pop(&c));
      CKPTFS_RETURN_IF_ERROR(Pop(&b));
      CKPTFS_RETURN_IF_ERROR(Pop(&a));
      return MakeObject(a, b, c);
    case kBuild: return Build();
    case kBinPersId:
      CKPTFS_RETURN_IF_ERROR(Pop(&a));
      b = New(Kind::kPersistentId);
      b->args = a;
      return Push(b);
    case kEmptyTuple: return Push(New(Kind::kTuple));
    case kTuple:
      CKPTFS_RETURN_IF_ERROR(PopMark(&start));
      return Collect(start, Kind::kTuple);
    case kTuple1:
    case kTuple2:
    case kTuple3: {
      size_t n = static_cast<size_t>(op_ - kTuple1) + 1;
      if (stack_.size() < Fence() + n) return Fail("stack underflow");
      return Collect(stack_.size() - n, Kind::kTuple);
    }
    case kEmptyList: return Push(New(Kind::kList));
    case kList:
      CKPTFS_RETURN_IF_ERROR(PopMark(&start));
      return Collect(start, Kind::kList);
    case kEmptyDict: return Push(New(Kind::kDict));
    case kDict:
      CKPTFS_RETURN_IF_ERROR(PopMark(&start));
      return Collect(start, Kind::kDict);
    case kEmptySet: return Push(New(Kind::kSet));
    case kFrozenSet:
      CKPTFS_RETURN_IF_ERROR(PopMark(&start));
      return Collect(start, Kind::kSet);
    case kAppend:
      CKPTFS_RETURN_IF_ERROR(Pop(&b));
      CKPTFS_RETURN_IF_ERROR(Top(&a));
      if (a->kind != Kind::kList && a->kind != Kind::kObject) return Fail("APPEND to a non-list");
      a->items.push_back(b);
      return Status::Ok();
    case kAppends:
    case kAddItems:
      CKPTFS_RETURN_IF_ERROR(PopMark(&start));
      CKPTFS_RETURN_IF_ERROR(BelowMark(start, &a));
      if (op_ == kAppends ? (a->kind != Kind::kList && a->kind != Kind::kObject)
                          : a->kind != Kind::kSet) {
        return Fail(std::string("cannot add items to a ") + PickleKindName(a->kind));
      }
      a->items.insert(a->items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(start), stack_.end());
      stack_.resize(start);
      return Status::Ok();
    case kSetItem:
      CKPTFS_RETURN_IF_ERROR(Pop(&c));
      CKPTFS_RETURN_IF_ERROR(Pop(&b));
      CKPTFS_RETURN_IF_ERROR(Top(&a));
      if (a->kind != Kind::kDict && a->kind != Kind::kObject) return Fail("SETITEM on a non-dict");
      a->entries.emplace_back(b, c);
      return Status::Ok();
    case kSetItems:
      CKPTFS_RETURN_IF_ERROR(PopMark(&start));
      CKPTFS_RETURN_IF_ERROR(BelowMark(start, &a));
      if (a->kind != Kind::kDict && a->kind != Kind::kObject) return Fail("SETITEMS on a non-dict");
      if ((stack_.size() - start) % 2 != 0) return Fail("odd number of dict items");
      for (size_t i = start; i < stack_.size(); i += 2) a->entries.emplace_back(stack_[i], stack_[i + 1]);
      stack_.resize(start);
      return Status::Ok();
    case kBinInt:
      CKPTFS_RETURN_IF_ERROR(ReadUint(4, &u));
      return PushInt(static_cast<int32_t>(static_cast<uint32_t>(u)));
    case kBinInt1:
      CKPTFS_RETURN_IF_ERROR(ReadUint(1, &u));
      return PushInt(static_cast<int64_t>(u));
    case kBinInt2:
      CKPTFS_RETURN_IF_ERROR(ReadUint(2, &u));
      return PushInt(static_cast<int64_t>(u));
    case kLong1: return PushSigned(1);
    case kLong4: return PushSigned(4);
    case kNone: return Push(Shared(&none_, Kind::kNone));
    case kNewTrue: return Push(Shared(&true_, Kind::kBool, true));
    case kNewFalse: return Push(Shared(&false_, Kind::kBool, false));
    case kBinFloat: {
      std::string_view s;
      CKPTFS_RETURN_IF_ERROR(Read(8, &s));
      uint64_t bits = 0;
      for (unsigned char ch : s) bits = (bits << 8) | ch;  // big-endian
      PickleValue* n = New(Kind::kFloat);
      n->float_value = std::bit_cast<double>(bits);
      return Push(n);
    }
    default:
      if (OpName(op_) != nullptr) return Fail("unsupported opcode");
      return Fail("unknown opcode");
  }
}

Result<PickleDocument> PickleMachine::Run() {
  if (data_.size() > limits_.max_input_bytes) {
    return Status::Error(EIO, "pickle: input of " + std::to_string(data_.size()) +
                                  " bytes is larger than the limit");
  }
  bool stop = false;
  while (!stop) {
    if (pos_ >= data_.size()) {
      op_offset_ = pos_;
      return Status::Error(EIO, "pickle: truncated: no STOP opcode before the end (byte " +
                                    std::to_string(pos_) + ")");
    }
    op_offset_ = pos_;
    op_ = static_cast<uint8_t>(data_[pos_++]);
    CKPTFS_RETURN_IF_ERROR(Step(&stop));
  }
  return std::move(doc_);
}

Result<PickleDocument> Unpickle(std::string_view data, const PickleLimits& limits) {
  PickleMachine machine(data, limits);
  return machine.Run();
}

}  // namespace ckptfs
