#include "namespace/transaction.h"

#include <cassert>
#include <utility>

namespace ckptfs {

Transaction::~Transaction() {
  // Kept and retried by the journal on failure; nobody is left to tell.
  if (!written_ && !batch_.empty()) (void)journal_->Apply(batch_, /*sync=*/false);
}

Status Transaction::Finish(bool sync, bool keep_on_failure) {
  // Twice would write the first records twice and, worse, means two
  // changes were taken for one.
  assert(!written_ && "a namespace transaction is written once");
  written_ = true;
  return journal_->Apply(batch_, sync, keep_on_failure);
}

void Transaction::WriteLater() {
  assert(!written_ && "a namespace transaction is written once");
  written_ = true;
  journal_->ApplyLater(std::move(batch_));
  batch_ = ManifestBatch();
}

}  // namespace ckptfs
