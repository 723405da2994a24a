#include "common/heap_optional.h"

#include <gtest/gtest.h>

#include <string>

namespace ckptfs {
namespace {

TEST(HeapOptionalTest, CostsOnePointerWhenEmpty) {
  static_assert(sizeof(HeapOptional<std::string>) == sizeof(void*));
  HeapOptional<std::string> v;
  EXPECT_FALSE(v.has_value());
  EXPECT_FALSE(v);
}

TEST(HeapOptionalTest, AssignReadResetAndReassign) {
  HeapOptional<std::string> v;
  v = std::string("a");
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, "a");
  EXPECT_EQ(v->size(), 1u);
  const std::string* slot = &*v;
  v = std::string("bc");  // the allocation is reused
  EXPECT_EQ(&*v, slot);
  EXPECT_EQ(*v, "bc");
  v.reset();
  EXPECT_FALSE(v);
  v = std::optional<std::string>("d");
  EXPECT_EQ(*v, "d");
  v = std::optional<std::string>();
  EXPECT_FALSE(v);
  v.emplace(3, 'x');
  EXPECT_EQ(*v, "xxx");
  v = std::nullopt;
  EXPECT_FALSE(v.has_value());
}

TEST(HeapOptionalTest, CopiesAreDeepAndMovesTakeTheValue) {
  HeapOptional<std::string> a = std::string("kept");
  HeapOptional<std::string> b = a;
  *b = "changed";
  EXPECT_EQ(*a, "kept");
  HeapOptional<std::string> c = std::move(b);
  EXPECT_EQ(*c, "changed");
  a = c;
  EXPECT_EQ(*a, "changed");
  HeapOptional<std::string> empty;
  a = empty;
  EXPECT_FALSE(a);
}

}  // namespace
}  // namespace ckptfs
