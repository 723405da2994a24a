#include "remote/decide_once.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <thread>

namespace ckptfs {

namespace {

class Decider {
 public:
  Decider(ObjectStore* store, const std::string& key, const std::string& body,
          const DecideOptions& o)
      : store_(store),
        key_(key),
        body_(body),
        o_(o),
        rng_(o.seed ? o.seed : std::hash<std::string>{}(o.node + "~" + o.nonce)) {}

  Result<std::string> Run() {
    for (int round = 0; round < o_.max_rounds; round++) {
      if (round > 0) Backoff(round);
      Result<std::optional<std::string>> decided = ReadDecision();
      if (!decided.ok()) return decided.status();
      if (*decided) return **decided;
      Status st = store_->PutIfAbsent(key_, body_);
      if (st.ok()) return body_;
      // EEXIST: someone's body is there (perhaps ours, from an attempt whose
      // reply was lost): the next round reads it.
      if (st.err() != EEXIST) return st;
    }
    return Status::Error(ETIMEDOUT, "no decision for " + key_ + " after " +
                                        std::to_string(o_.max_rounds) + " rounds");
  }

 private:
  bool Valid(const std::string& body) const { return !o_.valid || o_.valid(body); }

  void Backoff(int round) {
    int64_t cap = o_.backoff_ns;
    for (int i = 1; i < round && cap < o_.max_backoff_ns; i++) cap *= 2;
    cap = std::min(cap, o_.max_backoff_ns);
    const int64_t nanos = std::uniform_int_distribution<int64_t>(cap / 2, cap)(rng_);
    if (o_.sleep) {
      o_.sleep(nanos);
    } else {
      std::this_thread::sleep_for(std::chrono::nanoseconds(nanos));
    }
  }

  // The body at key when one is there and valid; nullopt otherwise (absent,
  // or torn: read again next round).
  Result<std::optional<std::string>> ReadDecision() {
    Result<std::string> got = store_->GetRange(key_, 0, UINT64_MAX);
    if (got.err() == ENOENT) return std::optional<std::string>();
    if (!got.ok()) return got.status();
    if (!Valid(*got)) return std::optional<std::string>();
    return std::optional<std::string>(std::move(got).value());
  }

  ObjectStore* const store_;
  const std::string& key_;
  const std::string& body_;
  const DecideOptions& o_;
  std::mt19937_64 rng_;
};

}  // namespace

Result<std::string> DecideOnce(ObjectStore* store, const std::string& key, const std::string& body,
                               const DecideOptions& options) {
  if (options.node.empty() || options.nonce.empty() ||
      options.node.find('~') != std::string::npos || options.nonce.find('~') != std::string::npos) {
    return Status::Error(EINVAL, "DecideOnce needs a node and a nonce without '~'");
  }
  CKPTFS_RETURN_IF_ERROR(ValidateObjectKey(key));
  return Decider(store, key, body, options).Run();
}

}  // namespace ckptfs
