// Test support shared by the ObjectStore tests (contract tests and the S3
// tests against s3rver).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "remote/object_store.h"

namespace ckptfs {

// Every key under prefix, in the store's order; a failed List fails the test.
inline std::vector<std::string> Keys(ObjectStore* store, const std::string& prefix) {
  Result<std::vector<ObjectInfo>> r = store->List(prefix);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  std::vector<std::string> keys;
  if (r.ok()) {
    for (const ObjectInfo& info : *r) keys.push_back(info.key);
  }
  return keys;
}

}  // namespace ckptfs
