#include "cli/mount_table.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace ckptfs {

namespace {
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string oct = s.substr(i + 1, 3);
      if (oct.size() == 3 && oct.find_first_not_of("01234567") == std::string::npos) {
        out.push_back(static_cast<char>(std::stoi(oct, nullptr, 8)));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}
}  // namespace

std::vector<MountEntry> ReadMountTable() {
  std::vector<MountEntry> out;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mountpoint options [optional...] - fstype source superopts
    std::istringstream fields(line);
    std::string id, parent, devno, root, mnt, field, type;
    fields >> id >> parent >> devno >> root >> mnt;
    while (fields >> field && field != "-") {
    }
    fields >> type;
    out.push_back(MountEntry{Unescape(mnt), type});
  }
  return out;
}

std::string FsTypeOf(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  if (!real) return "";
  const std::string target(real);
  free(real);
  std::string best_type;
  size_t best_len = 0;
  for (const MountEntry& m : ReadMountTable()) {
    const bool covers = target == m.mountpoint || m.mountpoint == "/" ||
                        (target.rfind(m.mountpoint + "/", 0) == 0);
    // Later entries stack on earlier ones at the same mount point.
    if (covers && m.mountpoint.size() >= best_len) {
      best_len = m.mountpoint.size();
      best_type = m.fstype;
    }
  }
  return best_type;
}

}  // namespace ckptfs
