// Test support for the remote tier: a FileSystem over in-memory stores
// (FsEnv) with a RemoteTier over a MemoryObjectStore that the test keeps
// across tier restarts, crashes and cold mounts of other "machines".
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "namespace/fs_test_env.h"
#include "remote/memory_object_store.h"
#include "tiering/remote_tier.h"

namespace ckptfs::testing {

inline constexpr uint64_t kMiB = 1 << 20;

// Lets the test keep the store across tier restarts; Puts of chosen keys
// fail (EIO) until allowed again. Conditional writes are the base class's
// (none) unless asked for: then they are the wrapped store's.
class SharedStore final : public ObjectStore {
 public:
  explicit SharedStore(ObjectStore* s, bool conditional_writes = false)
      : s_(s), conditional_writes_(conditional_writes) {}
  void FailPutsOf(const std::string& key, bool fail) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail) {
      failing_.insert(key);
    } else {
      failing_.erase(key);
    }
  }
  Status Put(const std::string& k, const std::string& d) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failing_.count(k)) return Status::Error(EIO, "injected failure for " + k);
    }
    return s_->Put(k, d);
  }
  Status PutIfAbsent(const std::string& k, const std::string& d) override {
    return conditional_writes_ ? s_->PutIfAbsent(k, d) : ObjectStore::PutIfAbsent(k, d);
  }
  Result<std::string> BeginMultipart(const std::string& k) override { return s_->BeginMultipart(k); }
  Result<std::string> UploadPart(const std::string& k, const std::string& id, int n,
                                 const std::string& d) override {
    return s_->UploadPart(k, id, n, d);
  }
  Status CompleteMultipart(const std::string& k, const std::string& id,
                           const std::vector<std::string>& etags) override {
    return s_->CompleteMultipart(k, id, etags);
  }
  Status AbortMultipart(const std::string& k, const std::string& id) override {
    return s_->AbortMultipart(k, id);
  }
  uint64_t min_part_size() const override { return s_->min_part_size(); }
  // Runs fn once, right after the next GetRange of key has read it: another
  // node's write landing between two of this node's reads.
  void AfterNextGetOf(const std::string& key, std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    after_get_key_ = key;
    after_get_ = std::move(fn);
  }
  Result<std::string> GetRange(const std::string& k, uint64_t o, uint64_t n) override {
    auto got = s_->GetRange(k, o, n);
    std::function<void()> then;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (after_get_ && k == after_get_key_) std::swap(then, after_get_);
    }
    if (then) then();
    return got;
  }
  Result<ObjectInfo> Head(const std::string& k) override { return s_->Head(k); }
  Result<std::vector<ObjectInfo>> List(const std::string& p) override { return s_->List(p); }
  Status Delete(const std::vector<std::string>& keys) override { return s_->Delete(keys); }
  std::string Describe() const override { return s_->Describe(); }
  uint64_t UploadChecksumMismatches() const override { return s_->UploadChecksumMismatches(); }

 private:
  ObjectStore* s_;
  const bool conditional_writes_;
  std::mutex mu_;
  std::set<std::string> failing_;    // GUARDED_BY(mu_)
  std::string after_get_key_;        // GUARDED_BY(mu_)
  std::function<void()> after_get_;  // GUARDED_BY(mu_)
};

inline FileSystemOptions RemoteOptions() {
  FileSystemOptions o;
  o.remote = true;
  return o;
}

inline std::string Pattern(size_t n, char seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i++) s[i] = static_cast<char>(seed + i * 7 + i / 4096);
  return s;
}

class RemoteTierTest : public ::testing::Test {
 protected:
  RemoteTierTest() : store_(kMiB), env_(RemoteOptions()) { StartTier(); }
  ~RemoteTierTest() override { StopTier(); }

  void StartTier(RemoteTierOptions options = {}) {
    options.min_part_size = kMiB;
    options.fetch_chunk = kMiB;
    options.checksum_chunk = kMiB;  // several chunk CRC32Cs per test file
    options.retry_min_ns = 0;
    options_ = options;
    auto shared = std::make_unique<SharedStore>(&store_);
    shared_ = shared.get();
    tier_ = std::make_unique<RemoteTier>(&env_.fs(), env_.fs().data(), std::move(shared), &env_.events, options);
    env_.fs().SetTierHooks(tier_.get());
  }
  void StopTier() {
    env_.fs().SetTierHooks(nullptr);
    tier_.reset();
    shared_ = nullptr;
  }
  // kill -9: unsynced manifest batches survive (RocksDB's WAL is in the
  // page cache), as does file data.
  void KillAndRestart() {
    StopTier();
    env_.manifest.FailWritesAfter(0, EIO);
    env_.Stop();
    env_.manifest.ClearFailure();
    env_.Start();
    StartTier(options_);
  }

  void Commit(uint64_t step) {
    env_.fs().RequestCommit(step);
    env_.DrainCommits();
    ASSERT_EQ(*env_.fs().GetXattr(step, "user.ckptfs.state"), "committed");
  }
  std::string Xattr(uint64_t ino, const std::string& name) {
    auto v = env_.fs().GetXattr(ino, name);
    return v.ok() ? *v : "<" + v.status().ToString() + ">";
  }
  std::string Object(const std::string& key) { return store_.Peek(key).value_or("<absent>"); }
  bool Has(const std::string& key) { return store_.Peek(key).has_value(); }

  MemoryObjectStore store_;
  FsEnv env_;
  RemoteTierOptions options_;
  std::unique_ptr<RemoteTier> tier_;
  SharedStore* shared_ = nullptr;  // owned by tier_
};

}  // namespace ckptfs::testing
