// What the writer library needs from CUDA, behind one seam so the rest of
// the library is the same with and without it: which pointers are device
// memory, pinned host buffers, and asynchronous device-to-host copies on a
// stream with an event per copy.
//
// Built with CUDA (CKPTFS_WITH_CUDA, meson -Dcuda=enabled/auto) these call
// the CUDA runtime; without it, or with no GPU present, every pointer is
// host memory and asking for a device copy is an error that says why.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace ckptfs::writer {

// True when the library was built with CUDA and a device is present.
bool CudaAvailable();
// "CUDA 13.0, 1 device", "CUDA 13.0, no device (host memory only)",
// "built without CUDA (host memory only)".
std::string CudaDescription();

// True when p is device (or managed) memory that must be copied by CUDA.
bool IsDevicePointer(const void* p);

// Page-aligned host memory for staging, pinned (cudaHostAlloc) when CUDA is
// available, else locked with mlock when the limit allows; freed with
// FreeStaging. *pinned says which.
Result<void*> AllocStaging(size_t bytes, bool* pinned);
void FreeStaging(void* p, size_t bytes, bool pinned);

// One stream (the caller's, or one of our own) and events to order copies.
class CudaCopier {
 public:
  // user_stream: a cudaStream_t the caller passed, or nullptr for our own.
  static Result<std::unique_ptr<CudaCopier>> Create(void* user_stream, size_t events);
  ~CudaCopier();
  CudaCopier(const CudaCopier&) = delete;
  CudaCopier& operator=(const CudaCopier&) = delete;

  // Queues a copy of n bytes from device src to host dst and records event
  // slot after it.
  Status CopyToHostAsync(void* dst, const void* src, size_t n, size_t slot);
  // Waits for the copy recorded in slot.
  Status Wait(size_t slot);

 private:
  CudaCopier() = default;
  void* stream_ = nullptr;
  bool own_stream_ = false;
  std::vector<void*> events_;
};

}  // namespace ckptfs::writer
