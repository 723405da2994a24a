// The fsck image's helpers; see fsck_state.h.
#include "maintenance/fsck_state.h"

#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "manifest/schema.h"

namespace ckptfs::fsck {

namespace {
// Deeper than any real tree; only a corrupt chain of parents gets there.
constexpr int kMaxDepth = 4096;
}  // namespace

std::string HexIno(uint64_t ino) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, ino);
  return buf;
}

std::string HexKey(std::string_view key) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (char c : key) {
    const auto b = static_cast<uint8_t>(c);
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

const InodeRecord* State::Find(uint64_t ino) const {
  auto it = inodes.find(ino);
  return it == inodes.end() ? nullptr : &it->second;
}

bool State::IsDir(uint64_t ino) const {
  const InodeRecord* rec = Find(ino);
  return rec && S_ISDIR(rec->mode);
}

std::vector<const Entry*> State::LiveEntriesIn(uint64_t dir) const {
  std::vector<const Entry*> out;
  if (auto it = entries_in.find(dir); it != entries_in.end()) {
    for (size_t i : it->second) {
      if (!entries[i].removed) out.push_back(&entries[i]);
    }
  }
  return out;
}

std::vector<const Entry*> State::LiveEntriesTo(uint64_t ino) const {
  std::vector<const Entry*> out;
  if (auto it = entries_to.find(ino); it != entries_to.end()) {
    for (size_t i : it->second) {
      if (!entries[i].removed) out.push_back(&entries[i]);
    }
  }
  return out;
}

const Entry* State::PrimaryEntry(uint64_t ino) const {
  const std::vector<const Entry*> to = LiveEntriesTo(ino);
  if (to.empty()) return nullptr;
  if (const InodeRecord* rec = Find(ino)) {
    for (const Entry* e : to) {
      if (e->parent == rec->parent) return e;
    }
  }
  return to.front();
}

std::string State::PathOf(uint64_t ino) const {
  std::vector<const std::string*> parts;
  std::set<uint64_t> seen;
  uint64_t at = ino;
  for (int depth = 0; at != kRootIno; ++depth) {
    const bool looped = depth >= kMaxDepth || !seen.insert(at).second;
    const Entry* e = looped ? nullptr : PrimaryEntry(at);
    if (!e) {
      // The chain breaks here: name the path from the last inode we know.
      std::string path = "#" + std::to_string(at);
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) path += "/" + **it;
      return path;
    }
    parts.push_back(&e->name);
    at = e->parent;
  }
  if (parts.empty()) return ".";
  std::string path;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!path.empty()) path += "/";
    path += **it;
  }
  return path;
}

void State::Problem(FsckSeverity severity, const char* check, uint64_t ino, std::string path,
                    std::string problem, std::string advice) {
  FsckFinding f;
  f.severity = severity;
  f.check = check;
  f.ino = ino;
  f.path = std::move(path);
  f.problem = std::move(problem);
  f.advice = std::move(advice);
  report->findings.push_back(std::move(f));
}

void State::Fixable(FsckSeverity severity, const char* check, uint64_t ino, std::string path,
                    std::string problem, std::string repair, Group group) {
  FsckFinding f;
  f.severity = severity;
  f.check = check;
  f.ino = ino;
  f.path = std::move(path);
  f.problem = std::move(problem);
  f.repair = std::move(repair);
  f.group = group;
  report->findings.push_back(std::move(f));
}

FsckRepairGroup& State::GroupOf(Group group) { return groups_[static_cast<size_t>(group)]; }

void State::PutInode(Group group, uint64_t ino) { dirty_[ino] = group; }

void State::Put(Group group, KeySpace space, std::string key, std::string value) {
  GroupOf(group).batch.Put(space, std::move(key), std::move(value));
}

void State::Delete(Group group, KeySpace space, std::string key) {
  GroupOf(group).batch.Delete(space, std::move(key));
}

void State::RemoveEntry(Group group, size_t index) {
  Entry& e = entries[index];
  if (e.removed) return;
  e.removed = true;
  Delete(group, KeySpace::kDentries, DentryKey(e.parent, e.name));
  AdjustLinks(group, e.parent, e.rec.ino, -1);
}

// As the daemon counts links: a subdirectory adds one to its parent, any
// other entry one to the inode it names.
void State::AdjustLinks(Group group, uint64_t parent, uint64_t child, int delta) {
  auto c = inodes.find(child);
  if (c == inodes.end()) return;
  const bool child_is_dir = S_ISDIR(c->second.mode);
  auto p = inodes.find(parent);
  if (child_is_dir && (p == inodes.end() || !S_ISDIR(p->second.mode))) return;
  InodeRecord& counted = child_is_dir ? p->second : c->second;
  const uint32_t floor = child_is_dir ? 2 : 0;
  if (delta < 0 && counted.nlink <= floor) return;
  counted.nlink = delta < 0 ? counted.nlink - 1 : counted.nlink + 1;
  PutInode(group, counted.ino);
}

void State::AddEntry(Group group, uint64_t parent, const std::string& name, uint64_t child,
                     bool counts_link) {
  InodeRecord& dir = inodes[parent];
  Entry e;
  e.parent = parent;
  e.name = name;
  e.rec.ino = child;
  e.rec.cookie = dir.next_cookie++;
  PutInode(group, parent);
  Put(group, KeySpace::kDentries, DentryKey(parent, name), EncodeDentry(e.rec));
  const size_t index = entries.size();
  entries.push_back(std::move(e));
  entries_in[parent].push_back(index);
  entries_to[child].push_back(index);
  if (counts_link) AdjustLinks(group, parent, child, +1);
}

void State::RemoveInode(Group group, uint64_t ino) {
  auto it = inodes.find(ino);
  if (it == inodes.end()) return;
  const bool regular = S_ISREG(it->second.mode);
  Delete(group, KeySpace::kInodes, InoKey(ino));
  if (it->second.nlink == 0) Delete(group, KeySpace::kMeta, OrphanKey(ino));
  for (const std::string& name : xattrs[ino]) Delete(group, KeySpace::kXattrs, XattrKey(ino, name));
  xattrs.erase(ino);
  if (steps.erase(ino)) Delete(group, KeySpace::kSteps, InoKey(ino));
  if (uploads.erase(ino)) Delete(group, KeySpace::kUploads, InoKey(ino));
  if (checksums.erase(ino)) Delete(group, KeySpace::kChecksums, InoKey(ino));
  if (auto obj = objects.find(ino); obj != objects.end()) {
    const std::string key = obj->second.key;
    objects.erase(obj);
    Delete(group, KeySpace::kObjects, InoKey(ino));
    const bool shared =
        std::any_of(objects.begin(), objects.end(), [&](const auto& o) { return o.second.key == key; });
    if (!shared) Put(group, KeySpace::kRemoteGc, RemoteGcKey(key, /*commit_object=*/false), "");
  }
  inodes.erase(it);
  dirty_.erase(ino);
  if (regular && backing.count(ino)) RemoveBacking(group, ino);
}

void State::RemoveBacking(Group group, uint64_t ino) {
  backing.erase(ino);
  GroupOf(group).remove_backing.push_back(ino);
}

void State::CreateBacking(Group group, uint64_t ino) {
  backing.insert(ino);
  GroupOf(group).create_backing.push_back(ino);
}

void State::EndPass() {
  for (const auto& [ino, group] : dirty_) {
    if (const InodeRecord* rec = Find(ino)) {
      GroupOf(group).batch.Put(KeySpace::kInodes, InoKey(ino), EncodeInode(*rec));
    }
  }
  dirty_.clear();
}

void State::FinishPlan() {
  EndPass();
  static const char* const kNames[kGroupCount] = {"records", "tree", "files", "data"};
  // Findings point at group indexes in the report's plan, which skips
  // empty groups.
  std::vector<int> index(groups_.size(), -1);
  if (report->repair_blocked.empty()) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (groups_[g].empty()) continue;
      groups_[g].name = kNames[g];
      index[g] = static_cast<int>(report->plan.size());
      report->plan.push_back(std::move(groups_[g]));
    }
  }
  for (FsckFinding& f : report->findings) {
    if (f.group < 0) continue;
    f.group = index[static_cast<size_t>(f.group)];
    if (f.group < 0) {
      f.advice = report->repair_blocked.empty() ? "nothing to change"
                                                : "--repair withheld: " + report->repair_blocked;
      f.repair.clear();
    }
  }
}

const ObjectRecord* CurrentObject(const State& st, uint64_t ino) {
  const InodeRecord* rec = st.Find(ino);
  auto it = st.objects.find(ino);
  if (!rec || it == st.objects.end() || it->second.key.empty()) return nullptr;
  const bool same = it->second.size == rec->size && it->second.mtime_ns == TimespecToNanos(rec->mtime);
  return same ? &it->second : nullptr;
}

void MarkRemoteOnly(State& st, uint64_t ino) {
  ObjectRecord& obj = st.objects.at(ino);
  obj.resident = false;
  st.Put(kFilesGroup, KeySpace::kObjects, InoKey(ino), EncodeObject(obj));
}

void QueueReupload(State& st, uint64_t ino) {
  const ObjectRecord& obj = st.objects.at(ino);
  UploadRecord rec;
  rec.size = obj.size;
  rec.mtime_ns = obj.mtime_ns;  // the version the object record holds is the file's current one
  st.uploads[ino] = rec;
  st.Put(kFilesGroup, KeySpace::kUploads, InoKey(ino), EncodeUpload(rec));
}

std::set<uint64_t> CommittedFiles(const State& st) {
  std::set<uint64_t> out;
  for (const auto& [ino, rec] : st.steps) {
    if (rec.state != StepState::kCommitted) continue;
    for (const auto& file : FilesUnder(st, ino)) out.insert(file.first);
  }
  return out;
}

std::vector<std::pair<uint64_t, std::string>> FilesUnder(const State& st, uint64_t dir) {
  std::vector<std::pair<uint64_t, std::string>> out;
  std::set<uint64_t> visited{dir};
  std::vector<std::pair<uint64_t, std::string>> stack{{dir, st.PathOf(dir)}};
  while (!stack.empty()) {
    auto [at, path] = stack.back();
    stack.pop_back();
    for (const Entry* e : st.LiveEntriesIn(at)) {
      const InodeRecord* child = st.Find(e->rec.ino);
      if (!child) continue;
      const std::string child_path = path == "." ? e->name : path + "/" + e->name;
      if (S_ISREG(child->mode)) out.emplace_back(e->rec.ino, child_path);
      if (S_ISDIR(child->mode) && visited.insert(e->rec.ino).second)
        stack.emplace_back(e->rec.ino, child_path);
    }
  }
  return out;
}

}  // namespace ckptfs::fsck
