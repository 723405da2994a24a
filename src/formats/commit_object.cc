#include "formats/commit_object.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <set>

#include "common/crc32c_chunks.h"
#include "common/time_convert.h"

namespace ckptfs {

namespace {

constexpr int kFormatVersion = 1;

std::string Hex32(uint32_t v) {
  char buf[9];
  snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// Eight lower-case hex digits, as Hex32 writes them.
std::optional<uint32_t> ParseHex32(const std::string& s) {
  if (s.size() != 8 || s.find_first_not_of("0123456789abcdef") != std::string::npos) return std::nullopt;
  return static_cast<uint32_t>(std::stoul(s, nullptr, 16));
}

// A path below the step directory: relative, no empty, "." or ".."
// components, no NUL.
bool ValidRelativePath(const std::string& p) {
  if (p.empty() || p.front() == '/' || p.back() == '/' || p.find('\0') != std::string::npos) return false;
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    const std::string part = p.substr(start, end - start);
    if (part.empty() || part == "." || part == ".." || part.size() > 255) return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

std::string CommitObjectKey(const std::string& step_path) {
  return step_path + "/" + kCommitObjectName;
}

bool IsCommitObjectKey(const std::string& key, std::string* step_path) {
  const std::string suffix = std::string("/") + kCommitObjectName;
  if (key.size() <= suffix.size() || key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  if (step_path) *step_path = key.substr(0, key.size() - suffix.size());
  return true;
}

std::string EncodeCommitObject(const CommitObject& obj) {
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const auto& f : obj.files) {
    nlohmann::ordered_json file = {{"path", f.path},
                                   {"size", f.size},
                                   {"crc32c", Hex32(f.crc32c)},
                                   {"mode", f.mode & 07777},
                                   {"mtime_ns", f.mtime_ns}};
    if (obj.chunk_size > 0 && !f.chunk_crcs.empty()) {
      nlohmann::ordered_json chunks = nlohmann::ordered_json::array();
      for (uint32_t c : f.chunk_crcs) chunks.push_back(Hex32(c));
      file["chunks"] = std::move(chunks);
    }
    files.push_back(std::move(file));
  }
  nlohmann::ordered_json symlinks = nlohmann::ordered_json::array();
  for (const auto& s : obj.symlinks) symlinks.push_back({{"path", s.path}, {"target", s.target}});
  nlohmann::ordered_json j = {
      {"format", "ckptfs-commit"},
      {"version", kFormatVersion},
      {"step_path", obj.step_path},
      {"step", obj.step},
      {"committed_at", TimespecToSeconds(obj.committed_at)},
      {"committed_at_ns", TimespecToNanos(obj.committed_at)},
      {"dir_mtime_ns", obj.dir_mtime_ns},
      {"ephemeral", obj.ephemeral},
      {"bytes", obj.bytes},
      {"chunk_size", obj.chunk_size},
      {"files", std::move(files)},
      {"dirs", obj.dirs},
      {"symlinks", std::move(symlinks)},
  };
  return j.dump(1) + "\n";
}

Result<CommitObject> DecodeCommitObject(const std::string& json, const std::string& step_path) {
  auto bad = [&](const std::string& why) {
    return Status::Error(EIO, "commit object of " + step_path + ": " + why);
  };
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  try {
    if (j.value("format", "") != "ckptfs-commit") return bad("not a ckptfs commit object");
    if (j.value("version", 0) != kFormatVersion) {
      return bad("version " + j.value("version", nlohmann::json()).dump() + " is not supported");
    }
    CommitObject obj;
    obj.step_path = step_path;
    if (j.value("step_path", "") != step_path) return bad("names another step path");
    obj.step = j.at("step").get<int64_t>();
    const int64_t ns = j.at("committed_at_ns").get<int64_t>();
    if (ns < 0) return bad("negative commit time");
    obj.committed_at = NanosToTimespec(ns);
    obj.dir_mtime_ns = j.value("dir_mtime_ns", int64_t{0});
    if (obj.dir_mtime_ns < 0) return bad("negative directory mtime");
    obj.ephemeral = j.value("ephemeral", false);
    obj.chunk_size = j.value("chunk_size", uint64_t{0});
    if (obj.chunk_size != 0 && (obj.chunk_size < kMinChecksumChunk || obj.chunk_size > kMaxChecksumChunk)) {
      return bad("chunk_size " + std::to_string(obj.chunk_size) + " is out of range");
    }
    std::set<std::string> seen;
    uint64_t total = 0;
    for (const auto& f : j.at("files")) {
      CommitObject::File file;
      file.path = f.at("path").get<std::string>();
      file.size = f.at("size").get<uint64_t>();
      const std::string crc = f.at("crc32c").get<std::string>();
      auto whole = ParseHex32(crc);
      if (!whole) return bad("bad crc32c for " + file.path);
      file.crc32c = *whole;
      if (f.contains("chunks")) {
        if (obj.chunk_size == 0) return bad("chunks for " + file.path + " without a chunk_size");
        for (const auto& c : f.at("chunks")) {
          auto value = ParseHex32(c.get<std::string>());
          if (!value) return bad("bad chunk crc32c for " + file.path);
          file.chunk_crcs.push_back(*value);
        }
        if (file.chunk_crcs.size() != ChunkCount(file.size, obj.chunk_size)) {
          return bad("chunks of " + file.path + " do not cover its size");
        }
      }
      file.mode = f.value("mode", 0644u) & 07777;
      file.mtime_ns = f.value("mtime_ns", int64_t{0});
      if (!ValidRelativePath(file.path)) return bad("invalid file path '" + file.path + "'");
      if (!seen.insert(file.path).second) return bad("duplicate path '" + file.path + "'");
      total += file.size;
      obj.files.push_back(std::move(file));
    }
    for (const auto& d : j.value("dirs", nlohmann::json::array())) {
      std::string dir = d.get<std::string>();
      if (!ValidRelativePath(dir)) return bad("invalid directory path '" + dir + "'");
      if (!seen.insert(dir).second) return bad("duplicate path '" + dir + "'");
      obj.dirs.push_back(std::move(dir));
    }
    for (const auto& s : j.value("symlinks", nlohmann::json::array())) {
      CommitObject::Symlink link{s.at("path").get<std::string>(), s.at("target").get<std::string>()};
      if (!ValidRelativePath(link.path)) return bad("invalid symlink path '" + link.path + "'");
      if (!seen.insert(link.path).second) return bad("duplicate path '" + link.path + "'");
      if (link.target.empty() || link.target.size() > 4096) return bad("invalid symlink target");
      obj.symlinks.push_back(std::move(link));
    }
    obj.bytes = total;
    if (j.contains("bytes") && j.at("bytes").get<uint64_t>() != total) return bad("bytes does not match the files");
    return obj;
  } catch (const nlohmann::json::exception& e) {
    return bad(std::string("malformed: ") + e.what());
  }
}

}  // namespace ckptfs
