// safetensors header validation (see safetensors_header.h).
#include "formats/safetensors_header.h"

#include <algorithm>
#include <exception>
#include <nlohmann/json.hpp>

namespace ckptfs {
namespace {

using nlohmann::json;

Status Bad(const std::string& what) { return Status::Error(EIO, "safetensors header: " + what); }

Status ParseTensor(const std::string& name, const json& entry, SafetensorsTensor* t) {
  std::string where = "tensor '" + name.substr(0, 80) + "'";
  if (!entry.is_object()) return Bad(where + " is not an object");
  auto dtype = entry.find("dtype");
  auto shape = entry.find("shape");
  auto offsets = entry.find("data_offsets");
  if (dtype == entry.end() || !dtype->is_string()) return Bad(where + " has no dtype string");
  if (shape == entry.end() || !shape->is_array()) return Bad(where + " has no shape array");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return Bad(where + " data_offsets is not [begin, end]");
  }
  t->name = name;
  t->dtype = dtype->get<std::string>();
  t->begin = (*offsets)[0].get<uint64_t>();
  t->end = (*offsets)[1].get<uint64_t>();
  if (t->end < t->begin) return Bad(where + " ends before it begins");
  for (const json& d : *shape) {
    if (!d.is_number_unsigned()) return Bad(where + " shape holds a non-size value");
    t->shape.push_back(d.get<uint64_t>());
  }
  std::optional<uint32_t> bits = SafetensorsDtypeBits(t->dtype);
  if (!bits) return Status::Ok();
  uint64_t total_bits = *bits;
  for (uint64_t d : t->shape) {
    if (d != 0 && total_bits > UINT64_MAX / d) return Bad(where + " size overflows");
    total_bits *= d;
  }
  if (total_bits % 8 != 0) return Bad(where + " does not fill whole bytes");
  if (t->end - t->begin != total_bits / 8) {
    return Bad(where + " holds " + std::to_string(t->end - t->begin) +
               " bytes, its dtype and shape need " + std::to_string(total_bits / 8));
  }
  return Status::Ok();
}

Result<SafetensorsHeader> Parse(uint64_t header_length, std::string_view text) {
  if (text.empty() || text.front() != '{') return Bad("does not start with '{'");
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Bad("is not valid JSON");
  if (!doc.is_object()) return Bad("is not a JSON object");
  SafetensorsHeader h;
  h.header_length = header_length;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return Bad("__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) return Bad("__metadata__ value of '" + m.key() + "' is not a string");
        h.metadata.emplace_back(m.key(), m->get<std::string>());
      }
      continue;
    }
    SafetensorsTensor t;
    CKPTFS_RETURN_IF_ERROR(ParseTensor(it.key(), *it, &t));
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t cursor = 0;
  for (const SafetensorsTensor& t : h.tensors) {
    if (t.begin != cursor) {
      return Bad("tensor '" + t.name.substr(0, 80) + "' starts at " + std::to_string(t.begin) +
                 (t.begin < cursor ? ", overlapping the previous one" : ", leaving a hole") +
                 " (expected " + std::to_string(cursor) + ")");
    }
    cursor = t.end;
  }
  if (cursor > UINT64_MAX - h.data_start()) {
    return Bad("data_offsets end at " + std::to_string(cursor) +
               ", past the largest possible file");
  }
  h.data_size = cursor;
  return h;
}

}  // namespace

const SafetensorsTensor* SafetensorsHeader::Find(std::string_view name) const {
  for (const SafetensorsTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::optional<uint32_t> SafetensorsDtypeBits(std::string_view dtype) {
  static constexpr std::pair<std::string_view, uint32_t> kBits[] = {
      {"BOOL", 8},        {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},
      {"I8", 8},          {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8},
      {"F8_E5M2FNUZ", 8}, {"I16", 16},    {"U16", 16},    {"F16", 16},    {"BF16", 16},
      {"I32", 32},        {"U32", 32},    {"F32", 32},    {"C64", 64},    {"F64", 64},
      {"I64", 64},        {"U64", 64},
  };
  for (const auto& [code, bits] : kBits) {
    if (code == dtype) return bits;
  }
  return std::nullopt;
}

Result<uint64_t> ParseSafetensorsHeaderLength(std::string_view prefix) {
  if (prefix.size() < 8) return Bad("file is shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(prefix[static_cast<size_t>(i)]);
  if (n > kSafetensorsMaxHeaderBytes) {
    return Bad("header length " + std::to_string(n) + " exceeds the limit of " +
               std::to_string(kSafetensorsMaxHeaderBytes));
  }
  return n;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(uint64_t header_length,
                                                 std::string_view json_text) {
  if (json_text.size() != header_length) {
    return Bad("has " + std::to_string(json_text.size()) + " bytes, the length says " +
               std::to_string(header_length));
  }
  try {
    return Parse(header_length, json_text);
  } catch (const std::exception& e) {  // nlohmann's accessors throw on surprises
    return Bad(std::string("cannot be read: ") + e.what());
  }
}

}  // namespace ckptfs
