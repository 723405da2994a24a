// The pickle VM: one loop over opcodes, a value stack with a separate mark
// stack (as CPython's _pickle.c keeps them, so values below the innermost
// mark cannot be popped), and a memo of shared nodes.
#include "formats/pickle_reader.h"

#include <bit>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

namespace ckptfs {
namespace {

using Kind = PickleValue::Kind;

// clang-format off
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

// Names for messages, including opcodes that are known but unsupported
// (protocol-0 text opcodes, the extension registry, out-of-band buffers).
constexpr std::pair<uint8_t, const char*> kOpNames[] = {
  {kMark, "MARK"}, {kStop, "STOP"}, {kPop, "POP"}, {kPopMark, "POP_MARK"}, {kDup, "DUP"},
  {kBinFloat, "BINFLOAT"}, {kBinInt, "BININT"}, {kBinInt1, "BININT1"}, {kBinInt2, "BININT2"},
  {kNone, "NONE"}, {kBinPersId, "BINPERSID"}, {kReduce, "REDUCE"}, {kBinString, "BINSTRING"},
  {kShortBinString, "SHORT_BINSTRING"}, {kBinUnicode, "BINUNICODE"}, {kAppend, "APPEND"},
  {kBuild, "BUILD"}, {kGlobal, "GLOBAL"}, {kDict, "DICT"}, {kAppends, "APPENDS"},
  {kBinGet, "BINGET"}, {kLongBinGet, "LONG_BINGET"}, {kList, "LIST"}, {kBinPut, "BINPUT"},
  {kLongBinPut, "LONG_BINPUT"}, {kSetItem, "SETITEM"}, {kTuple, "TUPLE"},
  {kSetItems, "SETITEMS"}, {kEmptyDict, "EMPTY_DICT"}, {kEmptyList, "EMPTY_LIST"},
  {kEmptyTuple, "EMPTY_TUPLE"}, {kBinBytes, "BINBYTES"}, {kShortBinBytes, "SHORT_BINBYTES"},
  {kProto, "PROTO"}, {kNewObj, "NEWOBJ"}, {kTuple1, "TUPLE1"}, {kTuple2, "TUPLE2"},
  {kTuple3, "TUPLE3"}, {kNewTrue, "NEWTRUE"}, {kNewFalse, "NEWFALSE"}, {kLong1, "LONG1"},
  {kLong4, "LONG4"}, {kShortBinUnicode, "SHORT_BINUNICODE"}, {kBinUnicode8, "BINUNICODE8"},
  {kBinBytes8, "BINBYTES8"}, {kEmptySet, "EMPTY_SET"}, {kAddItems, "ADDITEMS"},
  {kFrozenSet, "FROZENSET"}, {kNewObjEx, "NEWOBJ_EX"}, {kStackGlobal, "STACK_GLOBAL"},
  {kMemoize, "MEMOIZE"}, {kFrame, "FRAME"}, {kByteArray8, "BYTEARRAY8"},
  {'I', "INT"}, {'L', "LONG"}, {'S', "STRING"}, {'V', "UNICODE"}, {'F', "FLOAT"},
  {'p', "PUT"}, {'g', "GET"}, {'P', "PERSID"}, {'i', "INST"}, {'o', "OBJ"},
  {0x82, "EXT1"}, {0x83, "EXT2"}, {0x84, "EXT4"}, {0x97, "NEXT_BUFFER"},
  {0x98, "READONLY_BUFFER"},
};
// clang-format on

const char* OpName(uint8_t op) {
  for (const auto& [code, name] : kOpNames) {
    if (code == op) return name;
  }
  return nullptr;
}

}  // namespace

class PickleMachine {
 public:
  PickleMachine(std::string_view data, const PickleLimits& limits) : data_(data), limits_(limits) {}

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

  // Run() checks PickleLimits::max_nodes after each opcode (which adds at most
  // two nodes).
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

  // Immutable values (None, booleans, the empty tuple, small ints) are made
  // once and shared, which keeps typical documents small.
  PickleValue* Shared(PickleValue** slot, Kind kind, int64_t v = 0) {
    if (*slot == nullptr) {
      *slot = New(kind);
      (*slot)->bool_value = v != 0;
      (*slot)->int_value = v;
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
      for (size_t i = start; i < stack_.size(); i += 2)
        n->entries.emplace_back(stack_[i], stack_[i + 1]);
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
    if (kwargs != nullptr && kwargs->kind != Kind::kDict)
      return Fail("keyword arguments are not a dict");
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
  PickleValue* empty_tuple_ = nullptr;
  PickleValue* small_ints_[256] = {};
  // BUILD merges copy entries; their total is bounded by the input size so
  // that re-BUILDing a big state cannot amplify memory.
  size_t merged_entries_ = 0;
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
    merged_entries_ += inst->state->entries.size() + state->entries.size();
    if (merged_entries_ > data_.size()) return Fail("BUILD merges more state than the input holds");
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
      if (u > data_.size() - pos_)
        return Fail("frame of " + std::to_string(u) + " bytes is truncated");
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
    case kShortBinUnicode:
      return PushText(Kind::kString, 1);
    case kBinUnicode:
      return PushText(Kind::kString, 4);
    case kBinUnicode8:
      return PushText(Kind::kString, 8);
    case kShortBinString:
      return PushText(Kind::kString, 1);
    case kBinString:
      return PushText(Kind::kString, 4);
    case kShortBinBytes:
      return PushText(Kind::kBytes, 1);
    case kBinBytes:
      return PushText(Kind::kBytes, 4);
    case kBinBytes8:
      return PushText(Kind::kBytes, 8);
    case kByteArray8:
      return PushText(Kind::kBytes, 8);
    case kMemoize:
      return Put(memo_.size());
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
    case kBuild:
      return Build();
    case kBinPersId:
      CKPTFS_RETURN_IF_ERROR(Pop(&a));
      b = New(Kind::kPersistentId);
      b->args = a;
      return Push(b);
    case kEmptyTuple:
      return Push(Shared(&empty_tuple_, Kind::kTuple));
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
    case kEmptyList:
      return Push(New(Kind::kList));
    case kList:
      CKPTFS_RETURN_IF_ERROR(PopMark(&start));
      return Collect(start, Kind::kList);
    case kEmptyDict:
      return Push(New(Kind::kDict));
    case kDict:
      CKPTFS_RETURN_IF_ERROR(PopMark(&start));
      return Collect(start, Kind::kDict);
    case kEmptySet:
      return Push(New(Kind::kSet));
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
      a->items.insert(a->items.end(), stack_.begin() + static_cast<std::ptrdiff_t>(start),
                      stack_.end());
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
      for (size_t i = start; i < stack_.size(); i += 2)
        a->entries.emplace_back(stack_[i], stack_[i + 1]);
      stack_.resize(start);
      return Status::Ok();
    case kBinInt:
      CKPTFS_RETURN_IF_ERROR(ReadUint(4, &u));
      return PushInt(static_cast<int32_t>(static_cast<uint32_t>(u)));
    case kBinInt1:
      CKPTFS_RETURN_IF_ERROR(ReadUint(1, &u));
      return Push(Shared(&small_ints_[u], Kind::kInt, static_cast<int64_t>(u)));
    case kBinInt2:
      CKPTFS_RETURN_IF_ERROR(ReadUint(2, &u));
      return PushInt(static_cast<int64_t>(u));
    case kLong1:
      return PushSigned(1);
    case kLong4:
      return PushSigned(4);
    case kNone:
      return Push(Shared(&none_, Kind::kNone));
    case kNewTrue:
      return Push(Shared(&true_, Kind::kBool, 1));
    case kNewFalse:
      return Push(Shared(&false_, Kind::kBool, 0));
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
    if (doc_.nodes_->size() > limits_.max_nodes) return Fail("more values than the limit");
  }
  return std::move(doc_);
}

Result<PickleDocument> Unpickle(std::string_view data, const PickleLimits& limits) {
  PickleMachine machine(data, limits);
  return machine.Run();
}

}  // namespace ckptfs
