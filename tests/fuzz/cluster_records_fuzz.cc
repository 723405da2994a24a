// libFuzzer target: cluster mode's records (src/formats/cluster_records.h)
// and node names (src/formats/node_name.h).
//
// Input: any text; it is decoded as a part record and as a step record, and
// tried as a node name, a part record key and a proposal. Checks:
//  - a refusal is EIO (EINVAL for node names) with a "part record: " / "step record: " /
//    "node name" message of printable ASCII, at most 1 KiB (input bytes are
//    quoted, escaped and cut);
//  - an accepted record passes Validate*, holds its entries in path order,
//    and is canonical: Encode then Decode gives the same record, and Encode
//    of that gives the same bytes again; the encoding is one line, at most
//    about twice the input;
//  - a step record's files each name a node of `parts` and sum to `bytes`;
//    its proposal parses;
//  - a valid node name is 1-63 characters of [A-Za-z0-9._-], starts with a
//    letter or digit, does not end with '.', and survives PartRecordKey /
//    ParsePartRecordKey; a parsed key or proposal rebuilds the input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/cluster_records.h"
#include "formats/node_name.h"
#include "fuzz_check.h"

namespace ckptfs {
namespace {

void CheckRefusal(const Status& st, std::string_view prefix) {
  FUZZ_CHECK(!st.ok(), "an error Status that is ok");
  FUZZ_CHECK(st.err() == EIO, "error %d instead of EIO: %s", st.err(), st.message().c_str());
  const std::string& m = st.message();
  FUZZ_CHECK(m.size() > prefix.size() && std::string_view(m).substr(0, prefix.size()) == prefix,
             "message does not start with '%.*s': %s", static_cast<int>(prefix.size()),
             prefix.data(), m.c_str());
  FUZZ_CHECK(m.size() <= 1024, "a %zu-byte message", m.size());
  for (char c : m) {
    FUZZ_CHECK(c >= 0x20 && c < 0x7f, "byte 0x%02x in the message: %s",
               static_cast<unsigned char>(c), m.c_str());
  }
}

template <typename T>
void CheckPathOrder(const std::vector<T>& v, const char* what) {
  for (size_t i = 1; i < v.size(); ++i) {
    FUZZ_CHECK(v[i - 1].path < v[i].path, "%s not in strict path order at %zu", what, i);
  }
}

void CheckStringOrder(const std::vector<std::string>& v) {
  for (size_t i = 1; i < v.size(); ++i) {
    FUZZ_CHECK(v[i - 1] < v[i], "dirs not in strict order at %zu", i);
  }
}

void CheckEncoding(const std::string& e, size_t input_size) {
  FUZZ_CHECK(!e.empty() && e.back() == '\n' && e.find('\n') == e.size() - 1,
             "the encoding is not one line");
  FUZZ_CHECK(e.size() <= 2 * input_size + 256, "%zu bytes encode %zu input bytes", e.size(),
             input_size);
}

void CheckPart(const std::string& text) {
  Result<PartRecord> r = DecodePartRecord(text);
  if (!r.ok()) {
    CheckRefusal(r.status(), "part record: ");
    return;
  }
  Status valid = ValidatePartRecord(*r);
  FUZZ_CHECK(valid.ok(), "a decoded part record does not validate: %s", valid.message().c_str());
  CheckPathOrder(r->files, "files");
  CheckStringOrder(r->dirs);
  CheckPathOrder(r->symlinks, "symlinks");
  const std::string e = EncodePartRecord(*r);
  CheckEncoding(e, text.size());
  Result<PartRecord> back = DecodePartRecord(e);
  FUZZ_CHECK(back.ok(), "its own encoding does not decode: %s", back.status().message().c_str());
  FUZZ_CHECK(*back == *r, "the part record changes through Encode/Decode");
  FUZZ_CHECK(EncodePartRecord(*back) == e, "the part record's encoding is not stable");
  FUZZ_CHECK(!r->all_uploaded || std::all_of(r->files.begin(), r->files.end(),
                                             [](const auto& f) { return f.uploaded; }),
             "all_uploaded with a file not uploaded");
  std::string step, node;
  FUZZ_CHECK(ParsePartRecordKey(PartRecordKey(r->step_path, r->node), &step, &node) &&
                 step == r->step_path && node == r->node,
             "the record's own key does not parse back");
}

void CheckStep(const std::string& text) {
  Result<ClusterStepRecord> r = DecodeClusterStepRecord(text);
  if (!r.ok()) {
    CheckRefusal(r.status(), "step record: ");
    return;
  }
  Status valid = ValidateClusterStepRecord(*r);
  FUZZ_CHECK(valid.ok(), "a decoded step record does not validate: %s", valid.message().c_str());
  CheckPathOrder(r->files, "files");
  CheckStringOrder(r->dirs);
  CheckPathOrder(r->symlinks, "symlinks");
  unsigned __int128 total = 0;
  for (const auto& f : r->files) {
    FUZZ_CHECK(r->parts.contains(f.node), "file '%s' of node '%s' without a part", f.path.c_str(),
               f.node.c_str());
    total += f.size;
  }
  FUZZ_CHECK(total == r->bytes, "bytes is not the sum of the sizes");
  for (const auto& [node, part] : r->parts) {
    FUZZ_CHECK(ValidateNodeName(node).ok(), "part of an invalid node name");
  }
  FUZZ_CHECK(ParseProposal(r->proposal, nullptr, nullptr), "proposal does not parse");
  FUZZ_CHECK(ValidateNodeName(r->committer).ok(), "invalid committer");
  const std::string e = EncodeClusterStepRecord(*r);
  CheckEncoding(e, text.size());
  Result<ClusterStepRecord> back = DecodeClusterStepRecord(e);
  FUZZ_CHECK(back.ok(), "its own encoding does not decode: %s", back.status().message().c_str());
  FUZZ_CHECK(*back == *r, "the step record changes through Encode/Decode");
  FUZZ_CHECK(EncodeClusterStepRecord(*back) == e, "the step record's encoding is not stable");
}

bool IsAlnum(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

void CheckNames(const std::string& text) {
  Status st = ValidateNodeName(text);
  if (st.ok()) {
    FUZZ_CHECK(!text.empty() && text.size() <= kMaxNodeNameLength, "accepted a %zu-byte name",
               text.size());
    FUZZ_CHECK(IsAlnum(text.front()) && text.back() != '.', "accepted '%s'", text.c_str());
    for (char c : text) {
      FUZZ_CHECK(IsAlnum(c) || c == '.' || c == '_' || c == '-', "accepted '%s'", text.c_str());
    }
    std::string step, node;
    FUZZ_CHECK(ParsePartRecordKey(PartRecordKey("run/step1", text), &step, &node) &&
                   step == "run/step1" && node == text,
               "the key of node '%s' does not parse back", text.c_str());
  } else {
    FUZZ_CHECK(st.err() == EINVAL, "node name: error %d", st.err());
    FUZZ_CHECK(st.message().find("node name") != std::string::npos, "node name message: %s",
               st.message().c_str());
  }

  std::string step, node;
  if (ParsePartRecordKey(text, &step, &node)) {
    FUZZ_CHECK(PartRecordKey(step, node) == text, "parsed key does not rebuild the input");
    FUZZ_CHECK(ValidateNodeName(node).ok(), "parsed key with an invalid node");
  }
  std::string nonce;
  if (ParseProposal(text, &node, &nonce)) {
    FUZZ_CHECK(node + "~" + nonce == text, "parsed proposal does not rebuild the input");
    FUZZ_CHECK(ValidateNodeName(node).ok(), "proposal with an invalid node");
  }
}

}  // namespace
}  // namespace ckptfs

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptfs;
  const std::string text(fuzz::AsText(data, size));
  CheckPart(text);
  CheckStep(text);
  CheckNames(text);
  return 0;
}
