#include "common/sparse_map.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace ckptfs {
namespace {

TEST(SparseMapTest, AnEmptyOneCostsOnePointerAndReadsAsEmpty) {
  static_assert(sizeof(SparseMap<std::string, int>) == sizeof(void*));
  SparseMap<std::string, int> m;
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.count("a"), 0u);
  EXPECT_EQ(m.find("a"), m.end());
  EXPECT_EQ(m.begin(), m.end());
  EXPECT_EQ(m.upper_bound("a"), m.end());
  EXPECT_EQ(m.erase("a"), 0u);
  EXPECT_THROW((void)m.at("a"), std::out_of_range);
  const SparseMap<std::string, int>& c = m;
  EXPECT_EQ(c.find("a"), c.end());
}

TEST(SparseMapTest, BehavesAsAMapOnceWritten) {
  SparseMap<std::string, int> m;
  m["b"] = 2;
  m["a"] = 1;
  m["c"] = 3;
  EXPECT_EQ(m.size(), 3u);
  std::string order;
  for (const auto& [k, v] : m) order += k + std::to_string(v);
  EXPECT_EQ(order, "a1b2c3");
  EXPECT_EQ(m.at("b"), 2);
  EXPECT_EQ(m.lower_bound("b")->first, "b");
  EXPECT_EQ(m.upper_bound("b")->first, "c");
  auto it = m.find("a");
  ASSERT_NE(it, m.end());
  EXPECT_EQ(m.erase(it)->first, "b");
  EXPECT_EQ(m.erase("c"), 1u);
  EXPECT_EQ(m.size(), 1u);
  m.clear();
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.find("b"), m.end());
}

TEST(SparseMapTest, CopiesAreDeep) {
  SparseMap<int, std::string> a;
  a[1] = "one";
  SparseMap<int, std::string> b = a;
  b[1] = "uno";
  EXPECT_EQ(a.at(1), "one");
  SparseMap<int, std::string> empty;
  a = empty;
  EXPECT_TRUE(a.empty());
  a = std::move(b);
  EXPECT_EQ(a.at(1), "uno");
}

}  // namespace
}  // namespace ckptfs
