#include "cluster/cluster_join.h"

#include <chrono>
#include <functional>
#include <optional>
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

// Put where nobody has written yet. Stores that accept the condition get
// it even when the probe found it ignored: where it is honoured after all it
// keeps the first writer's body, and where it is ignored it is a Put.
Status PutFirst(ObjectStore* store, ConditionalPut probe, const std::string& key,
                const std::string& body) {
  Status st =
      probe == ConditionalPut::kUnsupported ? store->Put(key, body) : store->PutIfAbsent(key, body);
  if (st.err() == EOPNOTSUPP) st = store->Put(key, body);
  if (st.err() == EEXIST) return Status::Ok();  // someone was first: the caller reads it back
  return st.Annotate("writing " + key);
}

Result<DecideMode> PinMode(ObjectStore* store, ConditionalPut probe, std::string* pinned_body) {
  auto decode = [](const std::string& b) { return DecodeClusterFile(b).status(); };
  auto pinned = ReadValid(store, kClusterFileKey, decode);
  if (!pinned.ok()) return pinned.status();
  if (!pinned->has_value()) {
    // The first cluster mount of this bucket chooses; votes are correct on
    // any store, conditional puts only where the condition holds.
    const DecideMode chosen =
        probe == ConditionalPut::kSupported ? DecideMode::kConditionalPut : DecideMode::kVotes;
    CKPTFS_RETURN_IF_ERROR(PutFirst(store, probe, kClusterFileKey, EncodeClusterFile(chosen)));
    pinned = ReadValid(store, kClusterFileKey, decode);
    if (!pinned.ok()) return pinned.status();
    if (!pinned->has_value()) {
      return Status::Error(EIO,
                           std::string(kClusterFileKey) + " vanished right after it was written");
    }
  }
  *pinned_body = **pinned;
  auto mode = DecodeClusterFile(*pinned_body);
  if (!mode.ok()) return mode.status();
  if (*mode == DecideMode::kConditionalPut && probe != ConditionalPut::kSupported) {
    return Status::Error(
        EOPNOTSUPP,
        std::string("the remote is pinned to deciding by conditional puts (") + kClusterFileKey +
            " says \"conditional-put\"), but conditional puts are " + ConditionalPutName(probe) +
            " by the store as this node reaches it (If-None-Match: * " +
            (probe == ConditionalPut::kIgnored ? "did not stop an overwrite" : "was refused") +
            "): deciding differently from the other nodes would break agreement; reach the "
            "store without what drops the condition (a proxy, another endpoint)");
  }
  return mode;
}

Status Register(ObjectStore* store, ConditionalPut probe, const std::string& node,
                const std::string& cache_id, const std::string& host) {
  const std::string key = NodeRegistrationKey(node);
  const std::string mine = EncodeNodeRegistration(node, cache_id, host);
  auto decode = [&](const std::string& b) -> Status {
    auto r = DecodeNodeRegistration(b);
    if (!r.ok()) return r.status();
    if (r->node != node) {
      return Status::Error(EIO, "node registration: names node " + QuoteForMessage(r->node));
    }
    return Status::Ok();
  };
  auto taken_by = [&](const NodeRegistration& r) {
    return Status::Error(EEXIST, "node name '" + node + "' is used by cache " + r.cache_id +
                                     " on host " + QuoteForMessage(r.host) +
                                     "; pick another --node (or remove " + key +
                                     " from the remote if that cache is gone)");
  };
  auto found = ReadValid(store, key, decode);
  if (!found.ok()) return found.status();
  if (found->has_value()) {
    auto r = DecodeNodeRegistration(**found);
    if (r->cache_id != cache_id) return taken_by(*r);
    if (**found == mine) return Status::Ok();
    // This cache, moved to another host: the record follows it.
    return store->Put(key, mine).Annotate("writing " + key);
  }
  CKPTFS_RETURN_IF_ERROR(PutFirst(store, probe, key, mine));
  // Read back: where the condition holds, a cache that registered the name
  // at the same moment won and is named here.
  auto back = ReadValid(store, key, decode);
  if (!back.ok()) return back.status();
  if (!back->has_value()) return Status::Error(EIO, key + " vanished right after it was written");
  auto r = DecodeNodeRegistration(**back);
  if (r->cache_id != cache_id) return taken_by(*r);
  return Status::Ok();
}

}  // namespace

const char* DecideModeName(DecideMode mode) {
  return mode == DecideMode::kConditionalPut ? "conditional-put" : "votes";
}

std::string EncodeClusterFile(DecideMode mode) {
  OrderedJson j = OrderedJson::object();
  j["format"] = kClusterFormat;
  j["version"] = kVersion;
  j["decide"] = DecideModeName(mode);
  return Dump(j);
}

Result<DecideMode> DecodeClusterFile(const std::string& body) {
  constexpr const char* kKind = "cluster file";
  auto j = ParseHeader(body, kKind, kClusterFormat);
  if (!j.ok()) return j.status();
  std::string decide;
  CKPTFS_RETURN_IF_ERROR(StringField(*j, kKind, "decide", &decide));
  if (decide == "conditional-put") return DecideMode::kConditionalPut;
  if (decide == "votes") return DecideMode::kVotes;
  return Status::Error(EIO, std::string(kKind) + ": decide " + QuoteForMessage(decide) +
                                " is neither \"conditional-put\" nor \"votes\"");
}

std::string NodeRegistrationKey(const std::string& node) {
  return std::string(kNodeRegistryDir) + "/" + node + ".json";
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
                                      const std::string& cache_id, const std::string& host) {
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
  auto mode = PinMode(store, m.probe, &m.cluster_json);
  if (!mode.ok()) return mode.status().Annotate(where);
  m.mode = *mode;
  Status registered = Register(store, m.probe, node, cache_id, host);
  if (!registered.ok()) return registered.Annotate(where);
  return m;
}

}  // namespace ckptfs
