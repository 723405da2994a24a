// HeapOptional<T>: std::optional's interface with the value on the heap, so
// that an absent value costs one pointer instead of sizeof(T). For state
// most of a large population never has: every Inode carries an object
// record and a fast-path checksum slot, and a million inodes of a local
// cache hold none of either (issue 29 counts bytes per namespace entry).
// Copies are deep, as std::optional's.
#pragma once

#include <memory>
#include <optional>
#include <utility>

namespace ckptfs {

template <typename T>
class HeapOptional {
 public:
  HeapOptional() = default;
  HeapOptional(std::nullopt_t) {}  // NOLINT(google-explicit-constructor)
  HeapOptional(T value)
      : v_(std::make_unique<T>(std::move(value))) {}  // NOLINT(google-explicit-constructor)
  HeapOptional(const std::optional<T>& value) {       // NOLINT(google-explicit-constructor)
    if (value) v_ = std::make_unique<T>(*value);
  }
  HeapOptional(const HeapOptional& other)
      : v_(other.v_ ? std::make_unique<T>(*other.v_) : nullptr) {}
  HeapOptional(HeapOptional&&) noexcept = default;
  HeapOptional& operator=(const HeapOptional& other) {
    if (this != &other) v_ = other.v_ ? std::make_unique<T>(*other.v_) : nullptr;
    return *this;
  }
  HeapOptional& operator=(HeapOptional&&) noexcept = default;
  HeapOptional& operator=(std::nullopt_t) {
    v_.reset();
    return *this;
  }
  // Assigning a value reuses the allocation when there is one.
  HeapOptional& operator=(T value) {
    if (v_) {
      *v_ = std::move(value);
    } else {
      v_ = std::make_unique<T>(std::move(value));
    }
    return *this;
  }
  HeapOptional& operator=(const std::optional<T>& value) {
    if (value) return *this = *value;
    v_.reset();
    return *this;
  }

  bool has_value() const { return v_ != nullptr; }
  explicit operator bool() const { return has_value(); }
  T& operator*() { return *v_; }
  const T& operator*() const { return *v_; }
  T* operator->() { return v_.get(); }
  const T* operator->() const { return v_.get(); }
  void reset() { v_.reset(); }
  template <typename... Args>
  T& emplace(Args&&... args) {
    v_ = std::make_unique<T>(std::forward<Args>(args)...);
    return *v_;
  }

 private:
  std::unique_ptr<T> v_;
};

}  // namespace ckptfs
