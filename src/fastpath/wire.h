// The writer library's wire protocol with the daemon (SPEC section 7), on a
// Unix SOCK_SEQPACKET socket: each message is one packet of '\0'-separated
// fields, the first naming the message; a descriptor travels with a packet
// as SCM_RIGHTS. One connection writes one file:
//
//   client: OPEN <version> <mode> <path relative to the mount root>
//   daemon: OK <ino> + descriptor of the backing file | ERR <errno> <message>
//   ... the client writes the descriptor ...
//   client: CLOSE <size> <crc32c>
//   daemon: OK | ERR <errno> <message>
//
// A connection that ends without CLOSE abandons the file (it stays as the
// client left it, without a recorded checksum). Shared by the daemon and
// libckptfs-writer, so it depends on nothing but libc and Status.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace ckptfs::wire {

inline constexpr int kProtocolVersion = 1;
// Fields are short except the path (PATH_MAX 4096).
inline constexpr size_t kMaxMessageBytes = 8192;

inline constexpr const char* kOpen = "OPEN";
inline constexpr const char* kClose = "CLOSE";
inline constexpr const char* kOk = "OK";
inline constexpr const char* kErr = "ERR";

struct Message {
  std::vector<std::string> fields;
  int fd = -1;  // a passed descriptor, owned by the receiver
};

// Sends fields as one packet, with fd attached when fd >= 0 (the sender
// keeps its own copy). EMSGSIZE when the packet would be too long.
Status Send(int sock, const std::vector<std::string>& fields, int fd = -1);

// Receives one packet. ECONNRESET when the peer closed the connection;
// EPROTO for a packet that is empty or truncated. Extra descriptors beyond
// the first are closed.
Result<Message> Receive(int sock);

// An ERR reply's fields, or an OK with extra fields.
std::vector<std::string> ErrorFields(const Status& st);
// Turns a reply into a Status: OK -> ok; ERR -> its errno and message;
// anything else -> EPROTO.
Status ReplyStatus(const Message& reply);

// Parses a decimal unsigned field; EPROTO when it is not one.
Result<uint64_t> ParseNumber(const std::string& field);

}  // namespace ckptfs::wire
