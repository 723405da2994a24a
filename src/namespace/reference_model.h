// A reference model of the namespace and its checkpoint steps, for
// reference_model_test.cc (as mountpoint-s3's reftests): a map path → node
// and a map step path → state, changed by the same operations the test runs
// on FileSystem, predicting each one's errno. Paths are relative to the root
// ("" is the root, "run/step_1/f0" a file). It knows only the rules the
// contract states (docs/operations.md, "Checkpoint steps" and "Errors users
// see"); where the contract leaves a choice open the test checks less.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ckptfs::testing {

struct Op {
  enum Kind {
    kMkdir,      // a
    kWrite,      // create a, write data, close
    kOverwrite,  // open a for writing, write data at offset n, close
    kTruncate,   // truncate a to n bytes
    kUnlink,     // a
    kRmdir,      // a
    kRename,     // a -> b, flags n (0 or RENAME_NOREPLACE)
    kCommit,     // ask for the commit of directory a (user.ckptfs.commit)
    kMarker,     // create a/metadata.json = "{}" (a commit marker), close
    kRead,       // read a whole, compare bytes
    kList,       // readdir a, compare names
    kCheck,      // walk the whole tree and compare
    kKill,       // the daemon dies (kill -9) and restarts in the same boot
    kSyncCrash,  // fsync a directory, then power loss: the namespace is durable
    kCrash,      // power loss keeping n unsynced manifest batches
    kReload,     // as kKill, without walking the tree after: the next op meets
                 // committed steps still unloaded (the lazy namespace); with
                 // n = 1 the idle thread's background checks run first
    kUnload,     // the kernel forgets every inode, and the daemon unloads every
                 // settled step nothing uses (as past its --inode-cache budget)
  };
  Kind kind;
  std::string a;
  std::string b;
  std::string data;
  uint64_t n = 0;
};

inline const char* KindName(Op::Kind k) {
  static const char* names[] = {"kMkdir",  "kWrite",  "kOverwrite", "kTruncate",  "kUnlink",
                                "kRmdir",  "kRename", "kCommit",    "kMarker",    "kRead",
                                "kList",   "kCheck",  "kKill",      "kSyncCrash", "kCrash",
                                "kReload", "kUnload"};
  return names[k];
}

inline std::string Parent(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}
inline std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}
inline std::string Join(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}
// path is dir itself or below it.
inline bool IsAtOrBelow(const std::string& path, const std::string& dir) {
  if (dir.empty()) return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

// The test's names that match the default step pattern, with their numbers.
inline std::optional<int64_t> StepNumber(const std::string& name) {
  static const std::map<std::string, int64_t> numbers = {
      {"step_1", 1}, {"step_2", 2}, {"checkpoint-3", 3}, {"step_4", 4}};
  auto it = numbers.find(name);
  if (it == numbers.end()) return std::nullopt;
  return it->second;
}

class RefModel {
 public:
  struct Node {
    bool dir = false;
    std::string data;
    bool sealed = false;  // a file of a step that committed: read-only for good
  };
  enum class State { kWriting, kCommitted, kIncomplete, kDeleting, kBroken };
  struct Step {
    State state = State::kWriting;
    int64_t number = 0;
  };
  // What an operation answers: errno, and for reads and listings the result.
  struct Answer {
    int err = 0;
    std::string data;
    std::set<std::string> names;
    bool operator==(const Answer&) const = default;
  };

  RefModel() { nodes[""] = Node{true, "", false}; }

  std::map<std::string, Node> nodes;
  std::map<std::string, Step> steps;

  static const char* StateName(State s) {
    switch (s) {
      case State::kWriting: return "writing";
      case State::kCommitted: return "committed";
      case State::kIncomplete: return "incomplete";
      case State::kDeleting: return "deleting";
      case State::kBroken: return "broken";
    }
    return "?";
  }

  // ENOENT / ENOTDIR on the way to path, or 0 when every directory above it
  // exists (path itself may be missing).
  int ResolveParent(const std::string& path) const {
    std::string dir = Parent(path);
    auto it = nodes.find(dir);
    if (it != nodes.end()) return it->second.dir ? 0 : ENOTDIR;
    // The first missing or non-directory component decides.
    std::string walked;
    size_t pos = 0;
    while (pos <= dir.size()) {
      size_t slash = dir.find('/', pos);
      if (slash == std::string::npos) slash = dir.size();
      walked = Join(walked, dir.substr(pos, slash - pos));
      auto n = nodes.find(walked);
      if (n == nodes.end()) return ENOENT;
      if (!n->second.dir) return ENOTDIR;
      pos = slash + 1;
    }
    return ENOENT;
  }
  // Moving from to to would put steps inside a step (see Rename).
  bool NestsSteps(const std::string& from, const std::string& to) const {
    bool holds_steps = false;
    for (auto it = steps.upper_bound(from); it != steps.end() && IsAtOrBelow(it->first, from); ++it) {
      holds_steps = true;
    }
    return holds_steps && (StepOf(Parent(to)) || StepNumber(BaseName(to)));
  }
  const Node* Find(const std::string& path) const {
    auto it = nodes.find(path);
    return it == nodes.end() ? nullptr : &it->second;
  }
  // The step path holds, or is: "" when none (FileSystem::StepOf).
  std::optional<std::string> StepOf(std::string path) const {
    for (;;) {
      if (steps.count(path)) return path;
      if (path.empty()) return std::nullopt;
      path = Parent(path);
    }
  }
  // Inside a committed or deleting step: nothing new, no moves in or out.
  bool InSealedStep(const std::string& path) const {
    auto s = StepOf(path);
    if (!s) return false;
    const State st = steps.at(*s).state;
    return st == State::kCommitted || st == State::kDeleting;
  }

  Answer Mkdir(const std::string& path) { return NewEntry(path, true, ""); }
  Answer Write(const std::string& path, const std::string& data) { return NewEntry(path, false, data); }

  Answer Overwrite(const std::string& path, const std::string& data, uint64_t offset) {
    if (int e = FileForWrite(path)) return {e};
    std::string& bytes = nodes[path].data;
    if (data.empty()) return {};
    if (bytes.size() < offset + data.size()) bytes.resize(offset + data.size(), '\0');
    bytes.replace(offset, data.size(), data);
    return {};
  }
  Answer Truncate(const std::string& path, uint64_t size) {
    if (int e = FileForWrite(path)) return {e};
    nodes[path].data.resize(size, '\0');
    return {};
  }
  Answer Unlink(const std::string& path) {
    if (int e = ResolveParent(path)) return {e};
    const Node* n = Find(path);
    if (!n) return {ENOENT};
    if (n->dir) return {EISDIR};
    NoteDeletion(Parent(path));
    nodes.erase(path);
    return {};
  }
  Answer Rmdir(const std::string& path) {
    if (int e = ResolveParent(path)) return {e};
    const Node* n = Find(path);
    if (!n) return {ENOENT};
    if (!n->dir) return {ENOTDIR};
    if (HasChildren(path)) return {ENOTEMPTY};
    if (!steps.count(path)) NoteDeletion(Parent(path));
    RemoveTree(path);
    return {};
  }
  // flags: 0 or RENAME_NOREPLACE (1).
  Answer Rename(const std::string& from, const std::string& to, uint64_t flags) {
    if (int e = ResolveParent(from)) return {e};
    if (int e = ResolveParent(to)) return {e};
    const Node* src = Find(from);
    if (!src) return {ENOENT};
    if (InSealedStep(Parent(from)) || InSealedStep(Parent(to))) return {EROFS};
    if (src->dir && IsAtOrBelow(Parent(to), from)) return {EINVAL};
    if (from == to) return {};
    if (const Node* dst = Find(to)) {
      if (flags & 1) return {EEXIST};
      if (src->dir && !dst->dir) return {ENOTDIR};
      if (!src->dir && dst->dir) return {EISDIR};
      if (dst->dir && HasChildren(to)) return {ENOTEMPTY};
      RemoveTree(to);
    }
    const bool dir = src->dir;
    MoveTree(from, to);
    if (dir) Reclassify(to, /*renamed=*/true);
    // A directory inside a step is no step ("unless it is inside another
    // step"): steps moved in with a directory stop being steps.
    if (dir && StepOf(to)) {
      for (auto it = steps.upper_bound(to); it != steps.end() && IsAtOrBelow(it->first, to);) {
        it = steps.erase(it);
      }
    }
    return {};
  }
  // An explicit commit request, run to its end (no file is ever left open).
  Answer Commit(const std::string& path) {
    if (int e = ResolveParent(path)) return {e};
    if (!Find(path)) return {ENOENT};
    auto it = steps.find(path);
    if (it != steps.end() && it->second.state != State::kCommitted) DoCommit(path);
    return {};
  }
  Answer Marker(const std::string& dir) {
    const std::string path = Join(dir, "metadata.json");
    Answer a = NewEntry(path, false, "{}");
    // A marker commits a step being written (an incomplete one only by an
    // explicit commit, once someone checked its files).
    if (a.err == 0 && steps.count(dir) && steps[dir].state == State::kWriting) DoCommit(dir);
    return a;
  }
  Answer Read(const std::string& path) const {
    if (int e = ResolveParent(path)) return {e};
    const Node* n = Find(path);
    if (!n) return {ENOENT};
    if (n->dir) return {EISDIR};
    return {0, n->data, {}};
  }
  Answer List(const std::string& path) const {
    if (!path.empty()) {
      if (int e = ResolveParent(path)) return {e};
    }
    const Node* n = Find(path);
    if (!n) return {ENOENT};
    if (!n->dir) return {ENOTDIR};
    Answer a;
    for (const auto& child : Children(path)) a.names.insert(BaseName(child));
    return a;
  }

  // What a restart after a crash does to the steps: writing ones become
  // incomplete, deletions that were under way are finished, retention runs.
  void Restart() {
    std::vector<std::string> gone;
    for (auto& [path, step] : steps) {
      if (step.state == State::kWriting) step.state = State::kIncomplete;
      if (step.state == State::kDeleting) gone.push_back(path);
    }
    for (const auto& path : gone) {
      if (nodes.count(path)) RemoveTree(path);
    }
    std::set<std::string> runs;
    for (const auto& [path, step] : steps) runs.insert(Parent(path));
    for (const auto& run : runs) Retain(run);
  }

  // The committed step with the highest number directly in dir, for `latest`.
  std::optional<std::string> LatestIn(const std::string& dir) const {
    std::optional<std::string> best;
    int64_t best_n = -1;
    for (const auto& [path, step] : steps) {
      if (Parent(path) != dir || path.empty() || step.state != State::kCommitted) continue;
      if (step.number > best_n) {
        best_n = step.number;
        best = BaseName(path);
      }
    }
    return best;
  }

  std::vector<std::string> Children(const std::string& dir) const {
    std::vector<std::string> out;
    for (auto it = nodes.upper_bound(dir); it != nodes.end(); ++it) {
      if (!IsAtOrBelow(it->first, dir)) break;
      if (Parent(it->first) == dir && it->first != dir) out.push_back(it->first);
    }
    return out;
  }

 private:
  Answer NewEntry(const std::string& path, bool dir, const std::string& data) {
    if (int e = ResolveParent(path)) return {e};
    if (InSealedStep(Parent(path))) return {EROFS};
    if (Find(path)) return {EEXIST};
    nodes[path] = Node{dir, data, false};
    if (dir) Reclassify(path, /*renamed=*/false);
    return {};
  }
  int FileForWrite(const std::string& path) const {
    if (int e = ResolveParent(path)) return e;
    const Node* n = Find(path);
    if (!n) return ENOENT;
    if (n->dir) return EISDIR;
    if (n->sealed) return EROFS;
    return 0;
  }
  bool HasChildren(const std::string& dir) const {
    return !Children(dir).empty();
  }
  // A removal inside a finished step starts its deletion.
  void NoteDeletion(const std::string& dir) {
    auto s = StepOf(dir);
    if (!s) return;
    State& st = steps[*s].state;
    if (st == State::kCommitted || st == State::kIncomplete || st == State::kBroken) st = State::kDeleting;
  }
  void RemoveTree(const std::string& path) {
    for (auto it = nodes.lower_bound(path); it != nodes.end() && IsAtOrBelow(it->first, path);) {
      steps.erase(it->first);
      it = nodes.erase(it);
    }
  }
  void MoveTree(const std::string& from, const std::string& to) {
    std::map<std::string, Node> moved;
    std::map<std::string, Step> moved_steps;
    for (auto it = nodes.lower_bound(from); it != nodes.end() && IsAtOrBelow(it->first, from);) {
      const std::string dst = to + it->first.substr(from.size());
      moved[dst] = it->second;
      if (auto s = steps.find(it->first); s != steps.end()) {
        moved_steps[dst] = s->second;
        steps.erase(s);
      }
      it = nodes.erase(it);
    }
    nodes.merge(moved);
    steps.merge(moved_steps);
  }
  // A directory made or moved: a step when its name matches and it is not
  // inside another step (judged for that directory alone, when it gets its
  // name). A new step by rename asks for its commit.
  void Reclassify(const std::string& path, bool renamed) {
    std::optional<int64_t> number;
    if (!StepOf(Parent(path))) number = StepNumber(BaseName(path));
    auto it = steps.find(path);
    if (number && it == steps.end()) {
      steps[path] = Step{State::kWriting, *number};
      if (renamed) DoCommit(path);
    } else if (number) {
      it->second.number = *number;
    } else if (it != steps.end()) {
      steps.erase(it);
    }
  }
  void DoCommit(const std::string& step) {
    // The test's only marker holds "{}" (a format the commit does not
    // check); one whose bytes a crash lost is malformed metadata.
    if (const Node* marker = Find(Join(step, "metadata.json")); marker && marker->data != "{}") {
      steps[step].state = State::kBroken;
      return;
    }
    steps[step].state = State::kCommitted;
    for (auto it = nodes.lower_bound(step); it != nodes.end() && IsAtOrBelow(it->first, step); ++it) {
      if (!it->second.dir) it->second.sealed = true;
    }
    Retain(Parent(step));
  }
  // Retention with no policy: incomplete steps older than the newest
  // committed one go.
  void Retain(const std::string& run) {
    int64_t newest = -1;
    for (const auto& [path, s] : steps) {
      if (!path.empty() && Parent(path) == run && s.state == State::kCommitted) newest = std::max(newest, s.number);
    }
    std::vector<std::string> pruned;
    for (const auto& [path, s] : steps) {
      if (!path.empty() && Parent(path) == run && (s.state == State::kIncomplete || s.state == State::kBroken) &&
          s.number < newest) {
        pruned.push_back(path);
      }
    }
    for (const auto& path : pruned) RemoveTree(path);
  }
};

}  // namespace ckptfs::testing
