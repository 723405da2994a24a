// PassthroughBook on its own: the kernel's rules for backing ids (one per
// inode, shared by its opens, closed at the last release), and the reasons
// it counts when an open goes through the daemon.
#include "namespace/passthrough_book.h"

#include <gtest/gtest.h>

#include <map>

#include "common/temp_dir_for_test.h"
#include "data/posix_data_store.h"

namespace ckptfs {
namespace {

class CountingRegistry final : public BackingRegistry {
 public:
  Result<int32_t> Register(int fd) override {
    if (refuse) return Status::Error(EPERM, "FUSE_DEV_IOC_BACKING_OPEN");
    EXPECT_GE(fd, 0);
    live[next_id] = true;
    return next_id++;
  }
  void Unregister(int32_t id) override {
    EXPECT_TRUE(live[id]) << "backing id " << id << " closed twice";
    live[id] = false;
  }
  std::map<int32_t, bool> live;
  int32_t next_id = 1;
  bool refuse = false;
};

class PassthroughBookTest : public ::testing::Test {
 protected:
  PassthroughBookTest() {
    auto store = OpenPosixDataStore(dir_.path() + "/data");
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    data_ = std::move(store).value();
    inode_.rec.ino = 42;
    auto made = data_->Open(42, /*create=*/true);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
  }
  // An open of inode 42 as FileSystem makes it (its own backing file).
  std::unique_ptr<FileHandle> Handle(bool writable) {
    auto fh = std::make_unique<FileHandle>();
    fh->ino = 42;
    fh->writable = writable;
    auto file = data_->Open(42, /*create=*/false);
    EXPECT_TRUE(file.ok());
    fh->file = std::move(file).value();
    return fh;
  }

  TempDirForTest dir_;
  std::unique_ptr<DataStore> data_;
  Inode inode_;
  CountingRegistry kernel_;
  PassthroughBook book_;
};

TEST_F(PassthroughBookTest, InactiveServesEveryOpenInTheDaemon) {
  book_.Configure(&kernel_, {"off", false, "--passthrough off"});
  auto fh = Handle(true);
  EXPECT_EQ(book_.Open(&inode_, fh.get(), data_.get()), -1);
  EXPECT_FALSE(fh->passthrough);
  EXPECT_TRUE(kernel_.live.empty());
  EXPECT_EQ(book_.Status()["reason"], "--passthrough off");
}

TEST_F(PassthroughBookTest, OpensOfAnInodeShareOneIdClosedAtTheLastRelease) {
  book_.Configure(&kernel_, {"auto", true, ""});
  auto writer = Handle(true);
  auto reader = Handle(false);
  const int32_t id = book_.Open(&inode_, writer.get(), data_.get());
  ASSERT_GE(id, 0);
  EXPECT_EQ(book_.Open(&inode_, reader.get(), data_.get()), id);
  EXPECT_EQ(book_.writing().count(42), 1u);
  EXPECT_EQ(book_.Status()["files_open"], 1);

  book_.Release(&inode_, writer.get());
  EXPECT_EQ(book_.writing().count(42), 0u);
  EXPECT_TRUE(kernel_.live[id]) << "the reader still uses the id";
  book_.Release(&inode_, reader.get());
  EXPECT_FALSE(kernel_.live[id]);
  EXPECT_EQ(inode_.backing_id, -1);
  EXPECT_EQ(book_.Status()["files_open"], 0);
  EXPECT_EQ(book_.opens(), 2u);
}

TEST_F(PassthroughBookTest, ARefusedRegistrationIsCountedAndServedInTheDaemon) {
  book_.Configure(&kernel_, {"auto", true, ""});
  kernel_.refuse = true;
  auto fh = Handle(true);
  EXPECT_EQ(book_.Open(&inode_, fh.get(), data_.get()), -1);
  EXPECT_FALSE(fh->passthrough);
  book_.ServeInDaemon("daemon_open");
  const nlohmann::json status = book_.Status();
  EXPECT_EQ(status["daemon_opens"]["register_failed"], 1);
  EXPECT_EQ(status["daemon_opens"]["daemon_open"], 1);
  EXPECT_EQ(book_.opens(), 0u);
}

}  // namespace
}  // namespace ckptfs
