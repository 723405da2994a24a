#include "namespace/access_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace ckptfs {

bool MayAccess(const InodeRecord& rec, const Credentials& who, int mask) {
  if (who.uid == 0) {
    if (!(mask & X_OK)) return true;
    return S_ISDIR(rec.mode) || (rec.mode & 0111) != 0;
  }
  uint32_t bits;
  if (who.uid == rec.uid) {
    bits = (rec.mode >> 6) & 7;
  } else if (who.gid == rec.gid || std::find(who.groups.begin(), who.groups.end(), rec.gid) != who.groups.end()) {
    bits = (rec.mode >> 3) & 7;
  } else {
    bits = rec.mode & 7;
  }
  return (bits & static_cast<uint32_t>(mask)) == static_cast<uint32_t>(mask);
}

}  // namespace ckptfs
