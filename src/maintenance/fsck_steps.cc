// Step records against the tree: a committed step's files are all sealed
// (else they could still be written) and add up to the totals its commit
// recorded. Neither is repaired: both mean the step is not what was
// committed, and only the operator can tell which copy is right.
#include <sys/stat.h>

#include "maintenance/fsck_state.h"

namespace ckptfs::fsck {

void CheckSteps(State& st) {
  for (const auto& [ino, rec] : st.steps) {
    if (rec.state != StepState::kCommitted) continue;
    const std::string path = st.PathOf(ino);
    uint64_t files = 0;
    uint64_t bytes = 0;
    for (const auto& [file, file_path] : FilesUnder(st, ino)) {
      const InodeRecord& f = st.inodes.at(file);
      ++files;
      bytes += f.size;
      if (!f.sealed) {
        st.Problem(FsckSeverity::kError, "steps", file, file_path,
                   "file of committed step " + path + " is not sealed (it can still be written)",
                   "check its contents; to be safe copy the step to a new step directory and commit that");
      }
    }
    if (files == rec.files && bytes == rec.bytes) continue;
    st.Problem(FsckSeverity::kError, "steps", ino, path,
               "committed with " + std::to_string(rec.files) + " files of " + std::to_string(rec.bytes) +
                   " bytes; it now holds " + std::to_string(files) + " files of " + std::to_string(bytes) +
                   " bytes",
               "its contents changed after the commit: compare it with the remote's or the trainer's copy, "
               "or delete the step");
  }
}

}  // namespace ckptfs::fsck
