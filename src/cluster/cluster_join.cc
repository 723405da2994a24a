#include "cluster/cluster_join.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/random_hex.h"
#include "formats/node_name.h"

namespace ckptfs {

namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr const char* kClusterFormat = "ckptfs-cluster";
constexpr const char* kNodeFormat = "ckptfs-node";
constexpr int kVersion = 1;
// Both files are a few dozen bytes; anything this large is not one of them.
constexpr uint64_t kMaxBodyBytes = 64 << 10;
// A body that does not parse is read again this often, this far apart,
// before it counts as damaged: on s3rver a PUT in progress truncates the
// object first (docs/design/cluster-mode.md section 1).
constexpr int kReadAttempts = 5;
constexpr auto kReadRetryDelay = std::chrono::milliseconds(20);

std::string Dump(const OrderedJson& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace) + "\n";
}

// The top-level object of body with "format" == format and "version" ==
// kVersion; EIO "<kind>: <why>" otherwise.
Result<Json> ParseHeader(const std::string& body, const char* kind, const char* format) {
  auto bad = [&](const std::string& why) {
    return Status::Error(EIO, std::string(kind) + ": " + why);
  };
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("not JSON");
  if (!j.is_object()) return bad("not a JSON object");
  auto f = j.find("format");
  if (f == j.end() || !f->is_string() || f->get_ref<const std::string&>() != format) {
    return bad(std::string("format is not \"") + format + "\"");
  }
  auto v = j.find("version");
  if (v == j.end() || !v->is_number_integer()) return bad("no integer version");
  if (v->get<int64_t>() != kVersion) {
    return bad("version " + v->dump() + " is not supported by this ckptfs (expects " +
               std::to_string(kVersion) + ")");
  }
  return j;
}

Status StringField(const Json& j, const char* kind, const char* name, std::string* out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_string()) {
    return Status::Error(EIO, std::string(kind) + ": " + name + " is missing or not a string");
  }
  *out = it->get<std::string>();
  return Status::Ok();
}

// The body at key, or nullopt when there is none. A body that decode
// refuses is read again a few times (a write in progress), then is EIO
// naming the key.
Result<std::optional<std::string>> ReadValid(
    ObjectStore* store, const std::string& key,
    const std::function<Status(const std::string&)>& decode) {
  Status last;
  for (int attempt = 0; attempt < kReadAttempts; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(kReadRetryDelay);
    auto body = store->GetRange(key, 0, kMaxBodyBytes);
    if (body.err() == ENOENT) return std::optional<std::string>();
    if (!body.ok()) return body.status().Annotate("reading " + key);
    last = body->size() >= kMaxBodyBytes
               ? Status::Error(EIO, "larger than " + std::to_string(kMaxBodyBytes) + " bytes")
               : decode(*body);
    if (last.ok()) return std::optional<std::string>(std::move(body).value());
  }
  return Status::Error(EIO, "the remote object " + key + " is damaged (" + last.message() +
                                "); if no cluster mount uses it, remove it and mount again");
}

// Put where nobody has written yet; EEXIST (someone was first) is Ok: the
// caller reads the winner back.
Status PutFirst(ObjectStore* store, const std::string& key, const std::string& body) {
  Status st = store->PutIfAbsent(key, body);
  if (st.err() == EEXIST) return Status::Ok();
  return st.Annotate("writing " + key);
}

// Cluster mode's one requirement of the store (SPEC section 9): without an
// honoured conditional create, two nodes can both "win" a step's decision
// or a node name.
Status RequireConditionalPut(ConditionalPut probe) {
  if (probe == ConditionalPut::kSupported) return Status::Ok();
  return Status::Error(
      EOPNOTSUPP,
      std::string(
          "cluster mode (--node) needs an object store that honours conditional writes, and "
          "this one ") +
          (probe == ConditionalPut::kIgnored ? "accepted `If-None-Match: *` on a key that exists "
                                               "and overwrote it anyway (s3rver does)"
                                             : "refused conditional PUTs") +
          ": two nodes could then both decide a step. AWS S3, MinIO, Ceph RGW, Cloudflare R2 and "
          "GCS (x-goog-if-generation-match: 0) honour them; mount without --node for one writer "
          "per remote prefix, or reach the store without what drops the condition (a proxy, "
          "another endpoint)");
}

// `.ckptfs-cluster.json` says how the cluster decides. This build decides
// by conditional puts only; the file is written once, by the first cluster
// mount of the bucket, so an older ckptfs that joins later decides the same
// way, and a bucket an older ckptfs pinned to votes (a store that ignored
// the condition then) is refused rather than decided two ways at once.
Status CheckClusterFile(ObjectStore* store, std::string* pinned_body) {
  auto decode = [](const std::string& b) { return DecodeClusterFile(b).status(); };
  auto pinned = ReadValid(store, kClusterFileKey, decode);
  if (!pinned.ok()) return pinned.status();
  if (!pinned->has_value()) {
    CKPTFS_RETURN_IF_ERROR(PutFirst(store, kClusterFileKey, EncodeClusterFile()));
    pinned = ReadValid(store, kClusterFileKey, decode);
    if (!pinned.ok()) return pinned.status();
    if (!pinned->has_value()) {
      return Status::Error(EIO,
                           std::string(kClusterFileKey) + " vanished right after it was written");
    }
  }
  *pinned_body = **pinned;
  auto decide = DecodeClusterFile(*pinned_body);
  if (!decide.ok()) return decide.status();
  if (*decide != kDecideByConditionalPut) {
    return Status::Error(
        EOPNOTSUPP,
        std::string(kClusterFileKey) + " says the nodes decide by \"" + *decide +
            "\": an older ckptfs pinned that on a store that ignored conditional writes, "
            "and this ckptfs decides only by conditional writes; finish that job with "
            "the older ckptfs, or start the cluster in a new remote prefix");
  }
  return Status::Ok();
}

// The name's registration at the highest epoch, or nullopt when it has
// none; its epoch in *epoch.
Result<std::optional<NodeRegistration>> ReadHolder(ObjectStore* store, const std::string& node,
                                                   uint64_t* epoch) {
  auto epochs = ListNodeEpochs(store, node);
  if (!epochs.ok()) return epochs.status().Annotate("listing the registrations of " + node);
  auto it = epochs->find(node);
  *epoch = it == epochs->end() ? 0 : it->second;
  if (*epoch == 0) return std::optional<NodeRegistration>();
  const std::string key = NodeRegistrationKey(node, *epoch);
  auto body = ReadValid(store, key, [&](const std::string& b) -> Status {
    auto r = DecodeNodeRegistration(b);
    if (!r.ok()) return r.status();
    if (r->node != node) {
      return Status::Error(EIO, "node registration: names node " + QuoteForMessage(r->node));
    }
    return Status::Ok();
  });
  if (!body.ok()) return body.status();
  // Listed, then gone: the name was freed by hand meanwhile; read as free.
  if (!body->has_value()) return std::optional<NodeRegistration>();
  return std::optional<NodeRegistration>(*DecodeNodeRegistration(**body));
}

// Registers cache_id under node (steps 3 and 4 of the header) and returns
// the epoch it holds.
Result<uint64_t> Register(ObjectStore* store, const std::string& node, const std::string& cache_id,
                          const std::string& host, bool replace, ClusterMembership* m) {
  const std::string mine = EncodeNodeRegistration(node, cache_id, host);
  auto taken_by = [&](const NodeRegistration& r, uint64_t epoch) {
    return Status::Error(
        EEXIST, "node name '" + node + "' is used by cache " + r.cache_id + " on host " +
                    QuoteForMessage(r.host) + " (" + NodeRegistrationKey(node, epoch) +
                    "); pick another --node, or, if that node is gone for good, mount with "
                    "--replace-node to take its name over (its daemon, if it still runs, can "
                    "then no longer write under it)");
  };
  // A few rounds, only for a name freed by hand between the looks.
  for (int round = 0; round < 3; ++round) {
    uint64_t epoch = 0;
    auto holder = ReadHolder(store, node, &epoch);
    if (!holder.ok()) return holder.status();
    if (holder->has_value() && (*holder)->cache_id == cache_id) {
      const std::string key = NodeRegistrationKey(node, epoch);
      if (EncodeNodeRegistration(node, cache_id, (*holder)->host) == mine) return epoch;
      // This cache, moved to another host: the record follows it.
      CKPTFS_RETURN_IF_ERROR(store->Put(key, mine).Annotate("writing " + key));
      return epoch;
    }
    if (holder->has_value() && !replace) return taken_by(**holder, epoch);
    // Free (epoch 0), or held by the cache this replacement saw: the next
    // epoch, created only if nobody has it yet. A replacement replaces the
    // holder it saw, never one that took the name meanwhile.
    const uint64_t next = epoch + 1;
    CKPTFS_RETURN_IF_ERROR(PutFirst(store, NodeRegistrationKey(node, next), mine));
    // Read back: a cache that registered the same epoch at the same moment
    // won (the condition holds: the mount checked) and is named here.
    uint64_t now = 0;
    auto back = ReadHolder(store, node, &now);
    if (!back.ok()) return back.status();
    if (!back->has_value()) continue;
    if ((*back)->cache_id != cache_id) return taken_by(**back, now);
    if (holder->has_value()) {
      m->replaced_cache_id = (*holder)->cache_id;
      m->replaced_host = (*holder)->host;
    }
    return now;
  }
  return Status::Error(EAGAIN, "the registration of node name '" + node +
                                   "' kept changing while this mount registered it; mount again");
}

}  // namespace

std::string EncodeClusterFile() {
  OrderedJson j = OrderedJson::object();
  j["format"] = kClusterFormat;
  j["version"] = kVersion;
  j["decide"] = kDecideByConditionalPut;
  return Dump(j);
}

Result<std::string> DecodeClusterFile(const std::string& body) {
  constexpr const char* kKind = "cluster file";
  auto j = ParseHeader(body, kKind, kClusterFormat);
  if (!j.ok()) return j.status();
  std::string decide;
  CKPTFS_RETURN_IF_ERROR(StringField(*j, kKind, "decide", &decide));
  if (decide == kDecideByConditionalPut || decide == "votes") return decide;
  return Status::Error(EIO, std::string(kKind) + ": decide " + QuoteForMessage(decide) +
                                " is neither \"conditional-put\" nor \"votes\"");
}

std::string NodeRegistrationKey(const std::string& node, uint64_t epoch) {
  std::string key = std::string(kNodeRegistryDir) + "/" + node;
  if (epoch > 1) key += "~" + std::to_string(epoch);
  return key + ".json";
}

bool ParseNodeRegistrationKey(const std::string& key, std::string* node, uint64_t* epoch) {
  const std::string dir = std::string(kNodeRegistryDir) + "/";
  constexpr std::string_view kSuffix = ".json";
  if (key.size() <= dir.size() + kSuffix.size() || key.compare(0, dir.size(), dir) != 0 ||
      key.compare(key.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return false;
  }
  std::string name = key.substr(dir.size(), key.size() - dir.size() - kSuffix.size());
  uint64_t e = 1;
  if (size_t tilde = name.find('~'); tilde != std::string::npos) {
    const std::string digits = name.substr(tilde + 1);
    // Epochs above 1 only, written without leading zeros: one key per epoch.
    if (digits.empty() || digits.size() > 18 || digits[0] < '1' || digits[0] > '9' ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
    e = std::stoull(digits);
    if (e < 2) return false;
    name.resize(tilde);
  }
  if (!ValidateNodeName(name).ok()) return false;
  *node = std::move(name);
  *epoch = e;
  return true;
}

Result<std::map<std::string, uint64_t>> ListNodeEpochs(ObjectStore* store,
                                                       const std::string& node) {
  // A name's own prefix also lists longer names ("gpu-1" lists "gpu-10"):
  // the keys are parsed, and only the asked name kept.
  auto listed = store->List(std::string(kNodeRegistryDir) + "/" + node);
  if (!listed.ok()) return listed.status();
  std::map<std::string, uint64_t> epochs;
  for (const ObjectInfo& obj : *listed) {
    std::string name;
    uint64_t epoch = 0;
    if (!ParseNodeRegistrationKey(obj.key, &name, &epoch)) continue;
    if (!node.empty() && name != node) continue;
    uint64_t& top = epochs[name];
    top = std::max(top, epoch);
  }
  return epochs;
}

std::string EncodeNodeRegistration(const std::string& node, const std::string& cache_id,
                                   const std::string& host) {
  OrderedJson j = OrderedJson::object();
  j["format"] = kNodeFormat;
  j["version"] = kVersion;
  j["node"] = node;
  j["cache_id"] = cache_id;
  j["host"] = host;
  return Dump(j);
}

Result<NodeRegistration> DecodeNodeRegistration(const std::string& body) {
  constexpr const char* kKind = "node registration";
  auto j = ParseHeader(body, kKind, kNodeFormat);
  if (!j.ok()) return j.status();
  NodeRegistration r;
  CKPTFS_RETURN_IF_ERROR(StringField(*j, kKind, "node", &r.node));
  CKPTFS_RETURN_IF_ERROR(StringField(*j, kKind, "cache_id", &r.cache_id));
  CKPTFS_RETURN_IF_ERROR(StringField(*j, kKind, "host", &r.host));
  if (r.cache_id.empty()) return Status::Error(EIO, std::string(kKind) + ": cache_id is empty");
  return r;
}

Result<ClusterMembership> JoinCluster(ObjectStore* store, const std::string& node,
                                      const std::string& cache_id, const std::string& host,
                                      bool replace) {
  CKPTFS_RETURN_IF_ERROR(ValidateNodeName(node));
  if (cache_id.empty()) return Status::Error(EINVAL, "JoinCluster: empty cache id");
  const std::string where = "joining the cluster in " + store->Describe() + " as node " + node;
  ClusterMembership m;
  m.node = node;
  auto suffix = RandomHex(8);
  if (!suffix.ok()) return suffix.status().Annotate(where);
  auto probe = ProbeConditionalPut(store, std::string(kProbeDir) + "/" + node + "-" + *suffix);
  if (!probe.ok()) return probe.status().Annotate(where + ": probing conditional puts");
  m.probe = *probe;
  CKPTFS_RETURN_IF_ERROR(RequireConditionalPut(m.probe).Annotate(where));
  CKPTFS_RETURN_IF_ERROR(CheckClusterFile(store, &m.cluster_json).Annotate(where));
  auto epoch = Register(store, node, cache_id, host, replace, &m);
  if (!epoch.ok()) return epoch.status().Annotate(where);
  m.epoch = *epoch;
  return m;
}

}  // namespace ckptfs
