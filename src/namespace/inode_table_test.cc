#include "namespace/inode_table.h"

#include <gtest/gtest.h>

#include "manifest/schema.h"

namespace ckptfs {
namespace {

Inode MakeInode(uint64_t ino, uint32_t mode) {
  Inode inode;
  inode.rec.ino = ino;
  inode.rec.mode = mode;
  inode.rec.nlink = S_ISDIR(mode) ? 2 : 1;
  return inode;
}

TEST(InodeTable, AllocatesPastEveryNumberItWasShown) {
  InodeTable table;
  table.Insert(MakeInode(kRootIno, S_IFDIR | 0755));
  EXPECT_EQ(table.Allocate()->rec.ino, 2u);
  table.Insert(MakeInode(10, S_IFREG | 0644));
  EXPECT_EQ(table.Allocate()->rec.ino, 11u);
  // A backing file or queued garbage numbered 20 was found: never reused.
  table.ReserveThrough(20);
  EXPECT_EQ(table.Allocate()->rec.ino, 21u);
  table.ReserveThrough(5);  // lower numbers change nothing
  EXPECT_EQ(table.Allocate()->rec.ino, 22u);
  EXPECT_EQ(table.size(), 6u);
}

TEST(InodeTable, LinksRecordEntriesAndParentsInTheCallersBatch) {
  InodeTable table;
  Inode* root = table.Insert(MakeInode(kRootIno, S_IFDIR | 0755));
  Inode* dir = table.Allocate();
  dir->rec.mode = S_IFDIR | 0755;
  dir->rec.nlink = 2;
  Inode* file = table.Allocate();
  file->rec.mode = S_IFREG | 0644;
  const timespec now{1234, 5};

  ManifestBatch batch;
  table.AddChild(root, "run", dir, now, &batch);
  table.AddChild(dir, "step1", file, now, &batch);
  EXPECT_EQ(root->rec.nlink, 3u);  // a subdirectory's ".."
  EXPECT_EQ(dir->rec.nlink, 2u);   // a file adds none
  EXPECT_EQ(file->rec.parent, dir->rec.ino);
  EXPECT_EQ(file->name, "step1");
  EXPECT_EQ(dir->rec.mtime.tv_sec, 1234);
  EXPECT_EQ(table.PathOf(file->rec.ino), "run/step1");
  EXPECT_EQ(table.PathOf(kRootIno), "");
  // Two dentries and two directory records.
  EXPECT_EQ(batch.size(), 4u);

  ManifestBatch removal;
  table.RemoveChild(root, "run", now, &removal);
  EXPECT_EQ(root->rec.nlink, 2u);
  EXPECT_TRUE(root->children.empty());
  EXPECT_TRUE(root->by_cookie.empty());
  ASSERT_EQ(removal.size(), 2u);
  EXPECT_EQ(removal.ops()[0].space, KeySpace::kDentries);
  EXPECT_FALSE(removal.ops()[0].value.has_value());  // a deletion
  table.RemoveChild(root, "run", now, &removal);     // gone already: nothing
  EXPECT_EQ(removal.size(), 2u);
}

// The one subtree walk: depth first in name order, a directory before what
// it holds, paths relative to the start, and a visitor can prune.
TEST(InodeTable, WalksBelowADirectoryInNameOrderAndPrunes) {
  InodeTable table;
  Inode* root = table.Insert(MakeInode(kRootIno, S_IFDIR | 0755));
  Inode* b = table.Insert(MakeInode(2, S_IFDIR | 0755));
  Inode* a = table.Insert(MakeInode(3, S_IFDIR | 0755));
  Inode* a_x = table.Insert(MakeInode(4, S_IFREG | 0644));
  Inode* b_y = table.Insert(MakeInode(5, S_IFREG | 0644));
  Inode* c = table.Insert(MakeInode(6, S_IFREG | 0644));
  const timespec now{};
  ManifestBatch batch;
  table.AddChild(root, "b", b, now, &batch);
  table.AddChild(root, "a", a, now, &batch);
  table.AddChild(a, "x", a_x, now, &batch);
  table.AddChild(b, "y", b_y, now, &batch);
  table.AddChild(root, "c", c, now, &batch);
  std::vector<std::string> seen;
  table.WalkBelow(root, [&](Inode*, const std::string& rel) {
    seen.push_back(rel);
    return true;
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "a/x", "b", "b/y", "c"}));
  seen.clear();
  table.WalkBelow(root, [&](Inode* inode, const std::string& rel) {
    seen.push_back(rel);
    return inode != a;  // skip what a holds
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b", "b/y", "c"}));
  seen.clear();
  table.WalkBelow(a_x, [&](Inode*, const std::string& rel) {
    seen.push_back(rel);
    return true;
  });
  EXPECT_TRUE(seen.empty());  // a file holds nothing
}

TEST(InodeTable, FindDirSaysWhatIsWrong) {
  InodeTable table;
  table.Insert(MakeInode(kRootIno, S_IFDIR | 0755));
  table.Insert(MakeInode(7, S_IFREG | 0644));
  EXPECT_TRUE(table.FindDir(kRootIno).ok());
  EXPECT_EQ(table.FindDir(7).status().err(), ENOTDIR);
  EXPECT_EQ(table.FindDir(8).status().err(), ENOENT);
}

TEST(InodeTable, ForgetsOnlyWhatNothingRefersTo) {
  InodeTable table;
  table.Insert(MakeInode(kRootIno, S_IFDIR | 0755));
  Inode* file = table.Insert(MakeInode(3, S_IFREG | 0644));
  file->rec.nlink = 0;
  file->open_handles = 1;
  table.ForgetIfUnused(3);
  EXPECT_NE(table.Find(3), nullptr);  // still open
  file->open_handles = 0;
  file->lookups = 1;
  table.ForgetIfUnused(3);
  EXPECT_NE(table.Find(3), nullptr);  // the kernel still refers to it
  file->lookups = 0;
  table.ForgetIfUnused(3);
  EXPECT_EQ(table.Find(3), nullptr);
  table.Find(kRootIno)->rec.nlink = 0;
  table.ForgetIfUnused(kRootIno);
  EXPECT_NE(table.Find(kRootIno), nullptr);  // the root always stays
}

}  // namespace
}  // namespace ckptfs
