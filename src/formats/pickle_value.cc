// PickleValue accessors and DescribePickleValue (see pickle_value.h).
#include "formats/pickle_value.h"

#include <cstdio>

namespace ckptfs {
namespace {

using Kind = PickleValue::Kind;

const std::string kEmpty;

}  // namespace

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
                   v.kind == Kind::kSet || v.kind == Kind::kObject || v.kind == Kind::kPersistentId;
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

}  // namespace ckptfs
