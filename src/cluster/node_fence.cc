#include "cluster/node_fence.h"

#include <algorithm>
#include <utility>

#include "cluster/cluster_join.h"

namespace ckptfs {

namespace {
// A run of steps whose parts keep being fenced (an old holder that never
// stops) does not grow the warnings' memory without bound.
constexpr size_t kReportedMax = 4096;
}  // namespace

NodeFence::NodeFence(ObjectStore* store, EventLog* events, const Clock* clock,
                     std::atomic<uint64_t>* lists, NodeFenceOptions options)
    : store_(store), events_(events), clock_(clock), lists_(lists), options_(std::move(options)) {}

Status NodeFence::Fenced() const {
  MutexLock lock(&mu_);
  if (fenced_.empty()) return Status::Ok();
  return Status::Error(EROFS, fenced_);
}

Status NodeFence::CheckHolder() {
  {
    MutexLock lock(&mu_);
    if (!fenced_.empty()) return Status::Error(EROFS, fenced_);
    if (checked_ && Now() - checked_at_ < options_.recheck_ns) return Status::Ok();
  }
  (*lists_)++;
  auto epochs = ListNodeEpochs(store_, options_.node);
  // An unreachable bucket is not a replacement: the part's own PUT says
  // whether the bucket takes it.
  if (!epochs.ok()) return Status::Ok();
  auto it = epochs->find(options_.node);
  const uint64_t top = it == epochs->end() ? 0 : it->second;
  MutexLock lock(&mu_);
  checked_ = true;
  checked_at_ = Now();
  if (top <= options_.epoch) return Status::Ok();
  if (fenced_.empty()) {
    fenced_ = "node name '" + options_.node + "' was taken over by another cache with " +
              "--replace-node (" + NodeRegistrationKey(options_.node, top) +
              "; this mount holds epoch " + std::to_string(options_.epoch) +
              "): this mount no longer writes into the cluster's steps; unmount it, and mount "
              "it with --replace-node only if it should take the name back";
    events_->Append({{"event", "error"},
                     {"kind", "cluster_fenced"},
                     {"node", options_.node},
                     {"epoch", options_.epoch},
                     {"holder_epoch", top},
                     {"error", fenced_}});
  }
  return Status::Error(EROFS, fenced_);
}

Status NodeFence::DropFencedParts(const std::string& step_path, std::vector<PartRecord>* parts) {
  if (parts->empty()) return Status::Ok();
  std::map<std::string, uint64_t> registry;
  bool fresh = false;
  {
    MutexLock lock(&mu_);
    fresh = listed_ && Now() - listed_at_ < options_.registry_ttl_ns;
    if (fresh) registry = registry_;
  }
  if (!fresh) {
    (*lists_)++;
    auto listed = ListNodeEpochs(store_);
    if (!listed.ok()) {
      return Status::Error(EAGAIN, "listing the node registrations: " + listed.status().message());
    }
    registry = std::move(listed).value();
    MutexLock lock(&mu_);
    registry_ = registry;
    listed_ = true;
    listed_at_ = Now();
  }
  std::vector<PartRecord> kept;
  kept.reserve(parts->size());
  for (PartRecord& part : *parts) {
    auto it = registry.find(part.node);
    const uint64_t holder = it == registry.end() ? 0 : it->second;
    if (holder != 0 && part.epoch >= holder) {
      kept.push_back(std::move(part));
      continue;
    }
    // A replaced holder's part, or one of a name no mount ever registered
    // (a mount joins before it writes anything): neither is the cluster's.
    MutexLock lock(&mu_);
    if (reported_.size() >= kReportedMax) reported_.clear();
    if (reported_.insert(step_path + "\n" + part.node + "\n" + std::to_string(part.epoch)).second) {
      const std::string why =
          holder == 0 ? "no mount registered that name in " + std::string(kNodeRegistryDir) + "/"
                      : "its name was taken over with --replace-node (epoch " +
                            std::to_string(holder) + ")";
      events_->Append({{"event", "warning"},
                       {"kind", "cluster_fenced_part"},
                       {"path", step_path},
                       {"node", part.node},
                       {"epoch", part.epoch},
                       {"holder_epoch", holder},
                       {"error", "the part of node " + part.node + " at epoch " +
                                     std::to_string(part.epoch) + " is left out: " + why}});
    }
  }
  *parts = std::move(kept);
  return Status::Ok();
}

void NodeFence::ForgetStep(const std::string& step_path) {
  MutexLock lock(&mu_);
  const std::string prefix = step_path + "\n";
  for (auto it = reported_.lower_bound(prefix);
       it != reported_.end() && it->compare(0, prefix.size(), prefix) == 0;) {
    it = reported_.erase(it);
  }
}

void NodeFence::AddStatus(nlohmann::json* block) const {
  MutexLock lock(&mu_);
  (*block)["epoch"] = options_.epoch;
  (*block)["fenced"] = fenced_.empty() ? nlohmann::json(nullptr) : nlohmann::json(fenced_);
}

}  // namespace ckptfs
