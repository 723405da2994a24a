// SyncOneByOne: the DataStore::SyncFiles every store can do; see data_store.h.
#include "data/data_store.h"

namespace ckptfs {

Status SyncOneByOne(DataStore* store, const std::vector<uint64_t>& inos, uint64_t* failed_ino) {
  for (uint64_t ino : inos) {
    Result<std::unique_ptr<BackingFile>> file = store->Open(ino, /*create=*/false);
    Status st = file.ok() ? (*file)->Sync() : file.status();
    if (!st.ok()) {
      if (failed_ino != nullptr) *failed_ino = ino;
      return st;
    }
  }
  return Status::Ok();
}

}  // namespace ckptfs
