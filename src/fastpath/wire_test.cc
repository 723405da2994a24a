#include "fastpath/wire.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace ckptfs::wire {
namespace {

class SocketPair : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds_), 0); }
  void TearDown() override {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }
  int fds_[2] = {-1, -1};
};

TEST_F(SocketPair, FieldsAndDescriptorArriveIntact) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const std::string path = "run 1/step100/ünï\ncode.bin";
  ASSERT_TRUE(Send(fds_[0], {kOpen, "1", "420", path, ""}, pipefd[1]).ok());
  close(pipefd[1]);
  auto m = Receive(fds_[1]);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->fields, (std::vector<std::string>{kOpen, "1", "420", path, ""}));
  ASSERT_GE(m->fd, 0);
  // The descriptor is the pipe's write end: what goes in comes out.
  ASSERT_EQ(write(m->fd, "x", 1), 1);
  char c = 0;
  ASSERT_EQ(read(pipefd[0], &c, 1), 1);
  EXPECT_EQ(c, 'x');
  EXPECT_NE(fcntl(m->fd, F_GETFD) & FD_CLOEXEC, 0);
  close(m->fd);
  close(pipefd[0]);
}

TEST_F(SocketPair, ClosedPeerIsConnReset) {
  close(fds_[0]);
  fds_[0] = -1;
  EXPECT_EQ(Receive(fds_[1]).err(), ECONNRESET);
}

TEST_F(SocketPair, TooLongMessageIsRefused) {
  EXPECT_EQ(Send(fds_[0], {kOpen, std::string(kMaxMessageBytes, 'a')}).err(), EMSGSIZE);
}

TEST(WireTest, RepliesBecomeStatuses) {
  EXPECT_TRUE(ReplyStatus(Message{{kOk, "42"}}).ok());
  Status st = ReplyStatus(Message{ErrorFields(Status::Error(EACCES, "no permission to write x"))});
  EXPECT_EQ(st.err(), EACCES);
  EXPECT_EQ(st.message(), "no permission to write x");
  EXPECT_EQ(ReplyStatus(Message{{"HELLO"}}).err(), EPROTO);
  EXPECT_EQ(ReplyStatus(Message{{kErr, "0", "zero is no error"}}).err(), EPROTO);
  EXPECT_EQ(ReplyStatus(Message{{kErr, "x", "m"}}).err(), EPROTO);
}

TEST(WireTest, NumbersAreStrictDecimal) {
  EXPECT_EQ(*ParseNumber("0"), 0u);
  EXPECT_EQ(*ParseNumber("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(ParseNumber("18446744073709551616").err(), EPROTO);
  EXPECT_EQ(ParseNumber("").err(), EPROTO);
  EXPECT_EQ(ParseNumber("-1").err(), EPROTO);
  EXPECT_EQ(ParseNumber("1 ").err(), EPROTO);
}

}  // namespace
}  // namespace ckptfs::wire
