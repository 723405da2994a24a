// C++ wrapper of libckptfs-writer (writer.h): RAII, errors as exceptions
// carrying the errno and the library's message. Header-only over the C ABI,
// so it works with any C++17 compiler and any build of the library.
//
//   ckptfs::Writer w("/ckpt/run1/step100/rank0.bin");
//   w.write(ptr, nbytes);   // host or CUDA device memory
//   w.close();              // durable and recorded; the destructor aborts if not closed
#ifndef CKPTFS_WRITER_HPP_
#define CKPTFS_WRITER_HPP_

#include <cerrno>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ckptfs/writer.h"

namespace ckptfs {

class WriterError : public std::runtime_error {
 public:
  explicit WriterError(int err)
      : std::runtime_error(Describe(err)), err_(err) {}
  // The negative errno the C API returned.
  int code() const noexcept { return err_; }

 private:
  static std::string Describe(int err) {
    std::string msg = ckptfs_writer_last_message();
    if (msg.empty()) msg = ckptfs_writer_strerror(err);
    return msg;
  }
  int err_;
};

inline void CheckWriter(int rc) {
  if (rc != 0) throw WriterError(rc);
}

class WriterOptions {
 public:
  WriterOptions() { ckptfs_writer_options_init(&opts_, sizeof opts_); }
  WriterOptions& staging(size_t buffer_bytes, unsigned count) {
    opts_.staging_buffer_bytes = buffer_bytes;
    opts_.staging_buffer_count = count;
    return *this;
  }
  WriterOptions& cuda_stream(void* stream) { opts_.cuda_stream = stream; return *this; }
  WriterOptions& source(ckptfs_writer_source s) { opts_.source = s; return *this; }
  WriterOptions& mode(unsigned m) { opts_.mode = m; return *this; }
  WriterOptions& flags(unsigned f) { opts_.flags = f; return *this; }
  const ckptfs_writer_options* get() const { return &opts_; }

 private:
  ckptfs_writer_options opts_;
};

class Writer {
 public:
  explicit Writer(const std::string& path, const WriterOptions& options = WriterOptions()) {
    CheckWriter(ckptfs_writer_open_with(path.c_str(), options.get(), &w_));
  }
  Writer(Writer&& o) noexcept : w_(std::exchange(o.w_, nullptr)) {}
  Writer& operator=(Writer&& o) noexcept {
    if (this != &o) {
      abort();
      w_ = std::exchange(o.w_, nullptr);
    }
    return *this;
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  // A writer never closed is aborted: a half-written file must not look saved.
  ~Writer() { abort(); }

  void write(const void* buf, size_t len) { CheckWriter(ckptfs_writer_write(handle(), buf, len)); }
  void write_async(const void* buf, size_t len) {
    CheckWriter(ckptfs_writer_write_async(handle(), buf, len));
  }
  ckptfs_writer_info info() const {
    ckptfs_writer_info i{};
    i.struct_size = sizeof i;
    CheckWriter(ckptfs_writer_get_info(handle(), &i));
    return i;
  }
  // Durable and recorded on return; returns what was written.
  ckptfs_writer_info close() {
    ckptfs_writer_info i{};
    i.struct_size = sizeof i;
    CheckWriter(ckptfs_writer_close_info(std::exchange(w_, nullptr), &i));
    return i;
  }
  void abort() noexcept {
    if (w_) ckptfs_writer_abort(std::exchange(w_, nullptr));
  }

 private:
  ckptfs_writer* handle() const {
    if (!w_) throw WriterError(-EBADF);
    return w_;
  }
  ckptfs_writer* w_ = nullptr;
};

class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(const std::string& path, const WriterOptions& options = WriterOptions()) {
    CheckWriter(ckptfs_safetensors_open(path.c_str(), options.get(), &s_));
  }
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  ~SafetensorsWriter() {
    if (s_) ckptfs_safetensors_abort(s_);
  }

  // data must stay valid until finish().
  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           const void* data, size_t nbytes) {
    CheckWriter(ckptfs_safetensors_add(handle(), name.c_str(), dtype.c_str(),
                                       static_cast<int>(shape.size()), shape.data(), data, nbytes));
  }
  void metadata(const std::string& key, const std::string& value) {
    CheckWriter(ckptfs_safetensors_set_metadata(handle(), key.c_str(), value.c_str()));
  }
  void finish() { CheckWriter(ckptfs_safetensors_finish(std::exchange(s_, nullptr))); }

 private:
  ckptfs_safetensors* handle() const {
    if (!s_) throw WriterError(-EBADF);
    return s_;
  }
  ckptfs_safetensors* s_ = nullptr;
};

}  // namespace ckptfs

#endif  // CKPTFS_WRITER_HPP_
