// Errors as values. A Status carries an errno (0 = ok) chosen on purpose by the
// module that detects the failure, plus a human-readable message. The FUSE glue
// maps Status to a reply in exactly one place (ReplyError in fuse/fuse_ops.cc);
// the CLI prints the message. No exceptions cross module boundaries.
#pragma once

#include <cerrno>
#include <string>
#include <utility>
#include <variant>

namespace ckptfs {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(int err, std::string message) {
    return Status(err == 0 ? EIO : err, std::move(message));
  }
  // Wraps the current errno of a failed libc call: "what: strerror".
  static Status FromErrno(const std::string& what);
  static Status FromErrno(int err, const std::string& what);

  bool ok() const { return err_ == 0; }
  int err() const { return err_; }
  const std::string& message() const { return message_; }
  // "message (ENOENT)" style, for logs and events.
  std::string ToString() const;

  // Prefixes the message with context, keeping the errno.
  Status Annotate(const std::string& context) const {
    if (ok()) return *this;
    return Status(err_, context + ": " + message_);
  }

 private:
  Status(int err, std::string message) : err_(err), message_(std::move(message)) {}
  int err_ = 0;
  std::string message_;
};

// Result<T>: a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status::Error(EIO, "Result built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  int err() const { return ok() ? 0 : std::get<Status>(v_).err(); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

#define CKPTFS_RETURN_IF_ERROR(expr)          \
  do {                                        \
    ::ckptfs::Status _st = (expr);            \
    if (!_st.ok()) return _st;                \
  } while (0)

}  // namespace ckptfs
