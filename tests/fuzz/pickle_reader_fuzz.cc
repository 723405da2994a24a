// libFuzzer target: the pickle VM (src/formats/pickle_reader.h).
//
// Input: the raw pickle bytes given to Unpickle. Checks, besides "no crash,
// no leak, no UB, no hang" (the sanitizers and libFuzzer's -timeout and
// -rss_limit_mb):
//  - a failure is EIO with a "pickle: " message;
//  - a success has a root, a protocol 0..5, at most one node per input byte,
//    and a well-formed graph (objects have a callable and a tuple of
//    arguments, persistent ids an argument, no null pointers), all nodes
//    reachable from the root owned by the document;
//  - bytes after STOP are ignored: the same pickle with a tail appended parses
//    to the same shape;
//  - PickleLimits only ever turn a success into an error: what parses under
//    tight limits parses the same under the defaults;
//  - DescribePickleValue terminates on any graph (cycles included).
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "formats/pickle_reader.h"
#include "formats/pickle_value.h"
#include "fuzz_check.h"

namespace ckptfs {
namespace {

using Kind = PickleValue::Kind;

// Visits every node reachable from the root once; returns how many.
size_t CheckGraph(const PickleDocument& doc) {
  std::unordered_set<const PickleValue*> seen;
  std::vector<const PickleValue*> todo{&doc.root()};
  auto push = [&](const PickleValue* v, const char* what) {
    FUZZ_CHECK(v != nullptr, "null %s pointer in the value graph", what);
    if (seen.insert(v).second) todo.push_back(v);
  };
  seen.insert(&doc.root());
  while (!todo.empty()) {
    const PickleValue* v = todo.back();
    todo.pop_back();
    FUZZ_CHECK(seen.size() <= doc.node_count(), "more reachable nodes (%zu) than the document has (%zu)",
               seen.size(), doc.node_count());
    for (const PickleValue* item : v->items) push(item, "item");
    for (const auto& [k, val] : v->entries) {
      push(k, "key");
      push(val, "value");
    }
    switch (v->kind) {
      case Kind::kObject:
        FUZZ_CHECK(v->callable != nullptr, "object without a callable");
        FUZZ_CHECK(v->args != nullptr && v->args->kind == Kind::kTuple,
                   "object whose arguments are not a tuple");
        FUZZ_CHECK(v->callable->kind == Kind::kGlobal || v->callable->kind == Kind::kObject,
                   "object called a %s", PickleKindName(v->callable->kind));
        FUZZ_CHECK(v->kwargs == nullptr || v->kwargs->kind == Kind::kDict,
                   "object whose kwargs are not a dict");
        push(v->callable, "callable");
        push(v->args, "args");
        if (v->kwargs != nullptr) push(v->kwargs, "kwargs");
        if (v->state != nullptr) push(v->state, "state");
        // The accessors must cope with any state shape.
        (void)v->Attr("storage_data");
        (void)v->Get("fqn");
        (void)v->IsA("torch._utils", "_rebuild_tensor_v2");
        break;
      case Kind::kPersistentId:
        FUZZ_CHECK(v->args != nullptr, "persistent id without an argument");
        push(v->args, "persistent id");
        break;
      default:
        FUZZ_CHECK(v->callable == nullptr && v->args == nullptr && v->kwargs == nullptr &&
                       v->state == nullptr,
                   "a %s with object fields set", PickleKindName(v->kind));
        if (v->kind != Kind::kTuple && v->kind != Kind::kList && v->kind != Kind::kSet) {
          FUZZ_CHECK(v->items.empty(), "a %s with items", PickleKindName(v->kind));
        }
        if (v->kind != Kind::kDict) {
          FUZZ_CHECK(v->entries.empty(), "a %s with entries", PickleKindName(v->kind));
        }
        break;
    }
  }
  return seen.size();
}

}  // namespace
}  // namespace ckptfs

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptfs;
  std::string_view in = fuzz::AsText(data, size);

  Result<PickleDocument> doc = Unpickle(in);
  if (!doc.ok()) {
    fuzz::CheckError(doc.status(), "pickle: ");
  } else {
    FUZZ_CHECK(doc->protocol() >= 0 && doc->protocol() <= 5, "protocol %d", doc->protocol());
    FUZZ_CHECK(doc->node_count() <= size, "%zu nodes from %zu input bytes", doc->node_count(),
               size);
    size_t reachable = CheckGraph(*doc);
    std::string text = DescribePickleValue(doc->root());
    FUZZ_CHECK(!text.empty(), "empty description");

    // Bytes after STOP are ignored.
    std::string longer(in);
    longer.append("\x80\xff(((garbage", 12);
    Result<PickleDocument> again = Unpickle(longer);
    FUZZ_CHECK(again.ok(), "appending bytes after STOP broke the parse: %s",
               again.status().message().c_str());
    FUZZ_CHECK(again->node_count() == doc->node_count() && again->protocol() == doc->protocol() &&
                   DescribePickleValue(again->root()) == text,
               "appending bytes after STOP changed the result");
    (void)reachable;
  }

  // Tight limits may refuse the input, but must not change a success.
  PickleLimits tight;
  tight.max_input_bytes = 4096;
  tight.max_memo_entries = 16;
  tight.max_stack_size = 32;
  tight.max_marks = 4;
  tight.max_nodes = 64;
  Result<PickleDocument> small = Unpickle(in, tight);
  if (small.ok()) {
    FUZZ_CHECK(doc.ok(), "accepted under tight limits but refused under the defaults: %s",
               doc.status().message().c_str());
    FUZZ_CHECK(small->node_count() == doc->node_count() &&
                   DescribePickleValue(small->root()) == DescribePickleValue(doc->root()),
               "tight limits changed the result");
    FUZZ_CHECK(small->node_count() <= tight.max_nodes, "%zu nodes over the limit of %zu",
               small->node_count(), tight.max_nodes);
  } else {
    fuzz::CheckError(small.status(), "pickle: ");
  }
  return 0;
}
