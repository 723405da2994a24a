#include "remote/decide_once.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <optional>
#include <random>
#include <thread>
#include <vector>

namespace ckptfs {

namespace {

// A ballot orders as a string: a zero-padded round, then the proposal
// (node and nonce), so no two proposals ever share one, not even a node's
// before and after a restart. "r00000000" is no ballot.
constexpr int kRoundDigits = 8;
const std::string kNoBallot = "r00000000";
const std::string kNoValue = "-";

std::string Ballot(uint64_t round, const std::string& proposal) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "r%0*llu", kRoundDigits, static_cast<unsigned long long>(round));
  return std::string(buf) + "." + proposal;
}

uint64_t RoundOf(const std::string& ballot) {
  if (ballot.size() < 1 + kRoundDigits || ballot[0] != 'r') return 0;
  return std::strtoull(ballot.substr(1, kRoundDigits).c_str(), nullptr, 10);
}

struct Block {
  std::string node;
  std::string mbal;
  std::string bal;
  std::string value;  // a proposal name, or kNoValue
};

// `<node>~<mbal>~<bal>~<value>`; the value (itself `<node>~<nonce>`) takes
// the rest of the name.
std::optional<Block> ParseBlock(const std::string& name) {
  Block b;
  size_t start = 0;
  std::string* fields[] = {&b.node, &b.mbal, &b.bal};
  for (std::string* f : fields) {
    const size_t tilde = name.find('~', start);
    if (tilde == std::string::npos) return std::nullopt;
    *f = name.substr(start, tilde - start);
    start = tilde + 1;
  }
  b.value = name.substr(start);
  if (b.node.empty() || b.value.empty() || b.mbal[0] != 'r' || b.bal[0] != 'r') return std::nullopt;
  return b;
}

class Decider {
 public:
  Decider(ObjectStore* store, const std::string& key, const std::string& body,
          const DecideOptions& o)
      : store_(store),
        key_(key),
        body_(body),
        o_(o),
        proposal_(o.node + "~" + o.nonce),
        rng_(o.seed ? o.seed : std::hash<std::string>{}(proposal_)) {}

  Result<std::string> Run() {
    for (int round = 0; round < o_.max_rounds; round++) {
      if (round > 0) Backoff(round);
      // The first round of votes sends its first three requests at once
      // (FirstVotesRequests): a commit waits for every round trip.
      const bool first_votes = round == 0 && o_.mode == DecideMode::kVotes;
      Status phase1;
      Result<std::optional<std::string>> decided =
          first_votes ? FirstVotesRequests(&phase1) : ReadDecision();
      if (!decided.ok()) return decided.status();
      if (*decided) return **decided;
      CKPTFS_RETURN_IF_ERROR(phase1);
      Result<std::optional<std::string>> outcome =
          o_.mode == DecideMode::kConditionalPut ? TryConditional() : TryVotes(/*phase1_written=*/first_votes);
      if (!outcome.ok()) return outcome.status();
      if (*outcome) return **outcome;
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

  Result<std::optional<std::string>> TryConditional() {
    Status st = store_->PutIfAbsent(key_, body_);
    if (st.ok()) return std::optional<std::string>(body_);
    if (st.err() != EEXIST) return st;
    // Someone's body is there (perhaps ours, from an attempt whose reply was
    // lost): the next round reads it.
    return std::optional<std::string>();
  }

  std::string ScratchKey(const char* kind, const std::string& name) const {
    return DecisionScratchPrefix(key_) + kind + "/" + name;
  }

  // Every block, and the highest round any of them names.
  Result<std::vector<Block>> ListBlocks(uint64_t* max_round) {
    Result<std::vector<ObjectInfo>> listed = store_->List(DecisionScratchPrefix(key_) + "v/");
    if (!listed.ok()) return listed.status();
    const size_t skip = DecisionScratchPrefix(key_).size() + 2;
    std::vector<Block> blocks;
    for (const ObjectInfo& info : *listed) {
      std::optional<Block> b = ParseBlock(info.key.substr(skip));
      if (!b) continue;  // not ours to read (a newer format): ignored
      *max_round = std::max({*max_round, RoundOf(b->mbal), RoundOf(b->bal)});
      blocks.push_back(std::move(*b));
    }
    return blocks;
  }

  Status WriteBlock(const std::string& mbal, const std::string& bal, const std::string& value) {
    return store_->Put(ScratchKey("v", o_.node + "~" + mbal + "~" + bal + "~" + value), "");
  }

  // The first round's independent requests, in parallel: the GET of the
  // decision, the PUT of the proposal and phase 1's block. The block names no
  // value yet (this proposer has voted for nothing), so the proposal need not
  // be in the bucket before it; it is before phase 2's block names it. If a
  // decision is already there, the proposal and the block are scratch that
  // nobody reads (removed with the step). *phase1 gets the PUTs' outcome.
  Result<std::optional<std::string>> FirstVotesRequests(Status* phase1) {
    const std::string ballot = Ballot(next_round_, o_.node + "." + o_.nonce);
    Status p, b;
    Result<std::optional<std::string>> decided = std::optional<std::string>();
    const std::vector<std::function<void()>> requests = {
        [&] { decided = ReadDecision(); },
        [&] { p = store_->Put(ScratchKey("p", proposal_), body_); },
        [&] { b = WriteBlock(ballot, my_bal_, my_value_); },
    };
    if (o_.run_together) {
      o_.run_together(requests);
    } else {
      std::vector<std::future<void>> running;
      for (size_t i = 1; i < requests.size(); i++) running.push_back(std::async(std::launch::async, requests[i]));
      requests[0]();
      for (auto& r : running) r.get();
    }
    proposal_written_ = p.ok();
    *phase1 = !p.ok() ? p : b;
    return decided;
  }

  // One ballot of Disk Paxos. nullopt: lost the round (try a higher one).
  // phase1_written: FirstVotesRequests wrote the proposal and this ballot's
  // phase 1 block already.
  Result<std::optional<std::string>> TryVotes(bool phase1_written = false) {
    const std::string ballot = Ballot(next_round_, o_.node + "." + o_.nonce);
    if (!phase1_written) {
      if (!proposal_written_) {
        // Before any block names it, so whoever adopts it can read it.
        CKPTFS_RETURN_IF_ERROR(store_->Put(ScratchKey("p", proposal_), body_));
        proposal_written_ = true;
      }
      // Phase 1: claim the ballot, then look.
      CKPTFS_RETURN_IF_ERROR(WriteBlock(ballot, my_bal_, my_value_));
    }
    uint64_t max_round = 0;
    Result<std::vector<Block>> seen = ListBlocks(&max_round);
    if (!seen.ok()) return seen.status();
    if (LostTo(*seen, ballot, max_round)) return std::optional<std::string>();
    std::string value = proposal_;
    std::string best_bal = kNoBallot;
    for (const Block& b : *seen) {
      if (b.bal != kNoBallot && b.value != kNoValue && b.bal > best_bal) {
        best_bal = b.bal;
        value = b.value;
      }
    }
    // Phase 2: vote for it, then look again.
    my_bal_ = ballot;
    my_value_ = value;
    CKPTFS_RETURN_IF_ERROR(WriteBlock(ballot, ballot, value));
    max_round = 0;
    seen = ListBlocks(&max_round);
    if (!seen.ok()) return seen.status();
    if (LostTo(*seen, ballot, max_round)) return std::optional<std::string>();
    // Decided. Every decider writes the decided proposal's bytes.
    std::string decided = body_;
    if (value != proposal_) {
      Result<std::string> got = store_->GetRange(ScratchKey("p", value), 0, UINT64_MAX);
      if (!got.ok()) return got.status();
      if (!Valid(*got)) return std::optional<std::string>();  // torn: read again next round
      decided = std::move(got).value();
    }
    CKPTFS_RETURN_IF_ERROR(store_->Put(key_, decided));
    return std::optional<std::string>(std::move(decided));
  }

  // Some block has a higher mbal than ours: we lost this ballot; the next
  // one goes above every round seen.
  bool LostTo(const std::vector<Block>& blocks, const std::string& ballot, uint64_t max_round) {
    next_round_ = std::max(next_round_ + 1, max_round + 1);
    for (const Block& b : blocks) {
      if (b.mbal > ballot) return true;
    }
    return false;
  }

  ObjectStore* const store_;
  const std::string key_;
  const std::string body_;
  const DecideOptions& o_;
  const std::string proposal_;
  std::mt19937_64 rng_;
  bool proposal_written_ = false;
  uint64_t next_round_ = 1;
  std::string my_bal_ = kNoBallot;  // the last ballot this proposer voted in
  std::string my_value_ = kNoValue;
};

}  // namespace

std::string DecisionScratchPrefix(const std::string& key) { return key + ".paxos/"; }

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
