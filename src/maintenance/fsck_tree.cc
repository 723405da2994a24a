// The directory tree: every entry names an inode that exists, in a parent
// that is a directory; a directory has one entry; every inode is reachable
// from the root (no cycles); link counts and directories' parent pointers
// agree with the entries; readdir cookies are unique and below the directory's counter.
//
// Fixes never drop an inode that has a name or contents: an inode nothing
// leads to is linked into lost+found (as e2fsck does), not deleted. Only
// orphans the daemon itself would remove at the next mount (nlink 0, no
// entry) are removed, with their data, as recovery does.
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <deque>

#include "maintenance/fsck_state.h"

namespace ckptfs::fsck {

namespace {

constexpr size_t kNameMax = 255;
constexpr const char* kLostFound = "lost+found";

bool ValidName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.size() <= kNameMax &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos;
}

std::string EntryPath(const State& st, const Entry& e) {
  const std::string parent = st.Find(e.parent) ? st.PathOf(e.parent) : "#" + std::to_string(e.parent);
  return parent == "." ? e.name : parent + "/" + e.name;
}

// Entries that cannot stand: the mount would fail on them (a missing child
// or parent) or could not show them (a bad name).
void CheckEntries(State& st) {
  for (size_t i = 0; i < st.entries.size(); ++i) {
    const Entry& e = st.entries[i];
    std::string problem;
    if (!st.Find(e.rec.ino)) {
      problem =
          "entry names inode " + std::to_string(e.rec.ino) + ", which has no record (the mount would fail)";
    } else if (!st.Find(e.parent)) {
      problem =
          "entry in directory " + std::to_string(e.parent) + ", which has no record (the mount would fail)";
    } else if (!st.IsDir(e.parent)) {
      problem = "entry in inode " + std::to_string(e.parent) + ", which is not a directory";
    } else if (!ValidName(e.name)) {
      problem = "entry name is not a valid file name";
    } else if (e.rec.ino == kRootIno) {
      problem = "entry names the root directory";
    } else {
      continue;
    }
    st.Fixable(FsckSeverity::kError, "tree", e.rec.ino, EntryPath(st, e), problem,
               "remove the entry (an inode left without one goes to lost+found)", kTreeGroup);
    st.RemoveEntry(kTreeGroup, i);
  }
}

// Breadth-first from the root; for each directory reached, the index of the
// entry it was first reached through.
std::map<uint64_t, size_t> TreeEdges(const State& st, std::set<uint64_t>* reached) {
  std::map<uint64_t, size_t> edges;
  std::deque<uint64_t> queue;
  if (st.IsDir(kRootIno)) {
    queue.push_back(kRootIno);
    reached->insert(kRootIno);
  }
  while (!queue.empty()) {
    const uint64_t dir = queue.front();
    queue.pop_front();
    auto it = st.entries_in.find(dir);
    if (it == st.entries_in.end()) continue;
    for (size_t i : it->second) {
      const Entry& e = st.entries[i];
      if (e.removed || !reached->insert(e.rec.ino).second) continue;
      if (st.IsDir(e.rec.ino)) {
        edges[e.rec.ino] = i;
        queue.push_back(e.rec.ino);
      }
    }
  }
  return edges;
}

// A directory has exactly one entry. The one kept is the one the root
// reaches first, so no reachable directory is cut off.
void CheckDirectoryLinks(State& st) {
  std::set<uint64_t> reached;
  const std::map<uint64_t, size_t> edges = TreeEdges(st, &reached);
  for (const auto& [ino, rec] : st.inodes) {
    if (!S_ISDIR(rec.mode)) continue;
    std::vector<size_t> live;
    for (size_t i : st.entries_to[ino]) {
      if (!st.entries[i].removed) live.push_back(i);
    }
    if (live.size() < 2) continue;
    size_t keep = live.front();
    if (auto e = edges.find(ino); e != edges.end()) {
      keep = e->second;
    } else {
      for (size_t i : live) {
        if (st.entries[i].parent == rec.parent) keep = i;
      }
    }
    std::string extra;
    for (size_t i : live) {
      if (i == keep) continue;
      extra += (extra.empty() ? "" : ", ") + EntryPath(st, st.entries[i]);
    }
    st.Fixable(FsckSeverity::kError, "tree", ino, EntryPath(st, st.entries[keep]),
               "directory has " + std::to_string(live.size()) + " entries (also " + extra + ")",
               "remove the other entries", kTreeGroup);
    for (size_t i : live) {
      if (i != keep) st.RemoveEntry(kTreeGroup, i);
    }
  }
}

// Unlinked while open when the daemon stopped: the next mount removes them
// (filesystem_recovery.cc), so --repair may too.
void CheckOrphans(State& st) {
  std::vector<uint64_t> orphans;
  for (const auto& [ino, rec] : st.inodes) {
    if (ino == kRootIno || rec.nlink != 0) continue;
    if (!st.LiveEntriesTo(ino).empty() || !st.LiveEntriesIn(ino).empty()) continue;
    orphans.push_back(ino);
  }
  for (uint64_t ino : orphans) {
    st.Fixable(FsckSeverity::kWarning, "tree", ino, "#" + std::to_string(ino),
               "unlinked inode (nlink 0), left by a file deleted while open; the next mount removes it",
               "remove it and its data", kTreeGroup);
    st.RemoveInode(kTreeGroup, ino);
  }
}

struct LostFound {
  uint64_t ino = 0;
};

const Entry* EntryNamed(const State& st, uint64_t dir, const std::string& name) {
  for (const Entry* e : st.LiveEntriesIn(dir)) {
    if (e->name == name) return e;
  }
  return nullptr;
}

// base, or base.1, base.2 ...: the first name not taken in dir (a fix must
// never overwrite an entry someone made).
std::string FreeName(const State& st, uint64_t dir, const std::string& base) {
  std::string name = base;
  for (int n = 1; EntryNamed(st, dir, name); ++n) name = base + "." + std::to_string(n);
  return name;
}

// The root's lost+found directory, made on first use.
uint64_t LostFoundDir(State& st, LostFound* lf) {
  if (lf->ino != 0) return lf->ino;
  if (const Entry* e = EntryNamed(st, kRootIno, kLostFound); e && st.IsDir(e->rec.ino)) {
    lf->ino = e->rec.ino;
    return lf->ino;
  }
  const std::string name = FreeName(st, kRootIno, kLostFound);
  const InodeRecord& root = st.inodes.at(kRootIno);
  InodeRecord dir;
  dir.ino = st.next_ino++;
  dir.mode = S_IFDIR | 0700;  // what it holds had its own owners and modes
  dir.uid = root.uid;
  dir.gid = root.gid;
  dir.nlink = 2;
  dir.parent = kRootIno;
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  dir.atime = dir.mtime = dir.ctime = now;
  st.inodes[dir.ino] = dir;
  st.PutInode(kTreeGroup, dir.ino);
  st.AddEntry(kTreeGroup, kRootIno, name, dir.ino);
  lf->ino = dir.ino;
  return lf->ino;
}

void MarkReachable(const State& st, uint64_t top, std::set<uint64_t>* reached) {
  std::deque<uint64_t> queue{top};
  reached->insert(top);
  while (!queue.empty()) {
    const uint64_t dir = queue.front();
    queue.pop_front();
    for (const Entry* e : st.LiveEntriesIn(dir)) {
      if (reached->insert(e->rec.ino).second && st.IsDir(e->rec.ino)) queue.push_back(e->rec.ino);
    }
  }
}

// Every inode must be reachable from the root. For each that is not, the
// top of its detached subtree (or a directory of a detached cycle, whose
// entry inside the cycle is dropped) goes to lost+found as "#<ino>".
void CheckReachability(State& st) {
  std::set<uint64_t> reached;
  MarkReachable(st, kRootIno, &reached);
  LostFound lf;
  std::vector<uint64_t> inos;
  for (const auto& [ino, rec] : st.inodes) inos.push_back(ino);
  for (uint64_t ino : inos) {
    if (reached.count(ino)) continue;
    // Climb to the top of the detached part.
    uint64_t top = ino;
    std::set<uint64_t> seen{top};
    for (;;) {
      const std::vector<const Entry*> in = st.LiveEntriesTo(top);
      if (in.empty()) break;
      const Entry* up = in.front();
      if (seen.count(up->parent)) {
        // A cycle: cut the entry that closes it.
        const size_t index = static_cast<size_t>(up - st.entries.data());
        st.RemoveEntry(kTreeGroup, index);
        break;
      }
      top = up->parent;
      seen.insert(top);
    }
    const std::string was = st.PathOf(top);
    const uint64_t dir = LostFoundDir(st, &lf);
    const std::string name = FreeName(st, dir, "#" + std::to_string(top));
    // A file whose entries a fix removed had its count lowered for each;
    // one that never had an entry still counts the one it lost.
    const bool had_entries = !st.entries_to[top].empty();
    st.AddEntry(kTreeGroup, dir, name, top, st.IsDir(top) || had_entries);
    st.inodes[top].parent = dir;
    st.PutInode(kTreeGroup, top);
    st.Fixable(FsckSeverity::kError, "tree", top, was, "no entry leads to it from the root (unreachable)",
               "link it as " + st.PathOf(dir) + "/" + name, kTreeGroup);
    reached.insert(dir);
    MarkReachable(st, top, &reached);
  }
}

// nlink: 2 + subdirectories for a directory, entries for anything else.
void CheckLinkCounts(State& st) {
  for (auto& [ino, rec] : st.inodes) {
    uint32_t expected = 0;
    if (S_ISDIR(rec.mode)) {
      expected = 2;
      for (const Entry* e : st.LiveEntriesIn(ino)) expected += st.IsDir(e->rec.ino) ? 1 : 0;
    } else {
      expected = static_cast<uint32_t>(st.LiveEntriesTo(ino).size());
    }
    if (rec.nlink == expected) continue;
    // Too low on a file is data at risk: unlinking one name (or, at 0, the
    // next mount) would delete the data while other names remain.
    const bool at_risk = !S_ISDIR(rec.mode) && rec.nlink < expected;
    st.Fixable(at_risk ? FsckSeverity::kError : FsckSeverity::kWarning, "tree", ino, st.PathOf(ino),
               "link count is " + std::to_string(rec.nlink) + ", the entries say " + std::to_string(expected),
               "set it to " + std::to_string(expected), kTreeGroup);
    rec.nlink = expected;
    st.PutInode(kTreeGroup, ino);
  }
}

// A directory's parent pointer is its "..", and the way up to the step it
// belongs to. Files are not checked: theirs names the directory they were
// last linked into (inode.h), which unlinking another name leaves behind.
void CheckParents(State& st) {
  for (auto& [ino, rec] : st.inodes) {
    if (ino == kRootIno || !S_ISDIR(rec.mode)) continue;
    const std::vector<const Entry*> in = st.LiveEntriesTo(ino);
    if (in.empty()) continue;
    const bool ok =
        std::any_of(in.begin(), in.end(), [parent = rec.parent](const Entry* e) { return e->parent == parent; });
    if (ok) continue;
    const uint64_t parent = in.front()->parent;
    st.Fixable(FsckSeverity::kWarning, "tree", ino, st.PathOf(ino),
               "parent pointer names inode " + std::to_string(rec.parent) + ", but its entry is in " +
                   std::to_string(parent),
               "set it to " + std::to_string(parent), kTreeGroup);
    rec.parent = parent;
    st.PutInode(kTreeGroup, ino);
  }
}

// Readdir offsets are cookies: a repeated one hides an entry from ls, one at
// or above the directory's counter will be handed out again.
void CheckCookies(State& st) {
  for (auto& [dir_ino, indexes] : st.entries_in) {
    auto dir = st.inodes.find(dir_ino);
    if (dir == st.inodes.end() || !S_ISDIR(dir->second.mode)) continue;
    std::set<uint64_t> used;
    std::vector<size_t> bad;
    for (size_t i : indexes) {
      const Entry& e = st.entries[i];
      if (e.removed) continue;
      if (e.rec.cookie == 0 || e.rec.cookie >= dir->second.next_cookie || !used.insert(e.rec.cookie).second) {
        bad.push_back(i);
      }
    }
    if (bad.empty()) continue;
    st.Fixable(FsckSeverity::kWarning, "tree", dir_ino, st.PathOf(dir_ino),
               std::to_string(bad.size()) +
                   " readdir cookie(s) repeat or are not below the directory's counter (ls may skip entries)",
               "give those entries new cookies", kTreeGroup);
    for (size_t i : bad) {
      Entry& e = st.entries[i];
      e.rec.cookie = dir->second.next_cookie++;
      st.Put(kTreeGroup, KeySpace::kDentries, DentryKey(e.parent, e.name), EncodeDentry(e.rec));
    }
    st.PutInode(kTreeGroup, dir_ino);
  }
}

}  // namespace

void CheckTree(State& st) {
  if (st.inodes.empty() && st.entries.empty()) return;  // a manifest nothing was ever written to
  const InodeRecord* root = st.Find(kRootIno);
  if (!root || !S_ISDIR(root->mode)) {
    st.Problem(FsckSeverity::kError, "tree", kRootIno, ".",
               root ? "the root inode is not a directory" : "the root directory has no record",
               "the manifest is damaged: restore the steps from the remote (mount an empty cache on it) "
               "or keep the data in CACHE_DIR/data and report the bug");
    return;
  }
  // Orphans first, judged on the manifest as it is: an inode that loses its
  // only (bad) entry to a fix below goes to lost+found, never away.
  CheckOrphans(st);
  CheckEntries(st);
  CheckDirectoryLinks(st);
  CheckReachability(st);
  CheckLinkCounts(st);
  CheckParents(st);
  CheckCookies(st);
}

}  // namespace ckptfs::fsck
