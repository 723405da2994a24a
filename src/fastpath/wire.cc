#include "fastpath/wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace ckptfs::wire {

Status Send(int sock, const std::vector<std::string>& fields, int fd) {
  std::string packet;
  for (size_t i = 0; i < fields.size(); i++) {
    if (i) packet.push_back('\0');
    packet += fields[i];
  }
  if (packet.size() > kMaxMessageBytes) return Status::Error(EMSGSIZE, "writer protocol message too long");
  iovec iov{packet.data(), packet.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  for (;;) {
    const ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) return Status::Ok();
    if (errno != EINTR) return Status::FromErrno("writer socket: send");
  }
}

Result<Message> Receive(int sock) {
  std::string buf(kMaxMessageBytes + 1, '\0');
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Status::FromErrno("writer socket: receive");
  Message out;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; i++) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (out.fd < 0) {
        out.fd = fd;
      } else {
        close(fd);
      }
    }
  }
  auto fail = [&](int err, const char* what) -> Result<Message> {
    if (out.fd >= 0) close(out.fd);
    return Status::Error(err, what);
  };
  if (n == 0) return fail(ECONNRESET, "writer socket: the peer closed the connection");
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) return fail(EPROTO, "writer socket: message truncated");
  buf.resize(static_cast<size_t>(n));
  size_t start = 0;
  for (;;) {
    const size_t end = buf.find('\0', start);
    out.fields.push_back(buf.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

std::vector<std::string> ErrorFields(const Status& st) {
  return {kErr, std::to_string(st.err()), st.message()};
}

Status ReplyStatus(const Message& reply) {
  if (!reply.fields.empty() && reply.fields[0] == kOk) return Status::Ok();
  if (reply.fields.size() == 3 && reply.fields[0] == kErr) {
    auto err = ParseNumber(reply.fields[1]);
    if (err.ok() && *err > 0 && *err < 4096) return Status::Error(static_cast<int>(*err), reply.fields[2]);
  }
  return Status::Error(EPROTO, "writer socket: unexpected reply from the daemon");
}

Result<uint64_t> ParseNumber(const std::string& field) {
  if (field.empty() || field.size() > 20) return Status::Error(EPROTO, "writer socket: bad number '" + field + "'");
  uint64_t v = 0;
  for (char c : field) {
    if (c < '0' || c > '9') return Status::Error(EPROTO, "writer socket: bad number '" + field + "'");
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - digit) / 10) return Status::Error(EPROTO, "writer socket: number out of range");
    v = v * 10 + digit;
  }
  return v;
}

}  // namespace ckptfs::wire
