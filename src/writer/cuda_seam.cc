#include "writer/cuda_seam.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#ifdef CKPTFS_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ckptfs::writer {

namespace {

constexpr size_t kPage = 4096;

#ifdef CKPTFS_WITH_CUDA
int DeviceCount() {
  // Asked once: cudaGetDeviceCount initializes the runtime (tens of ms).
  static const int count = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
  }();
  return count;
}

Status CudaError(cudaError_t e, const char* what) {
  return Status::Error(EIO, std::string(what) + ": " + cudaGetErrorString(e));
}
#endif

}  // namespace

bool CudaAvailable() {
#ifdef CKPTFS_WITH_CUDA
  return DeviceCount() > 0;
#else
  return false;
#endif
}

std::string CudaDescription() {
#ifdef CKPTFS_WITH_CUDA
  const std::string version =
      "CUDA " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
  const int n = DeviceCount();
  if (n == 0) return version + ", no device (host memory only)";
  return version + ", " + std::to_string(n) + (n == 1 ? " device" : " devices");
#else
  return "built without CUDA (host memory only)";
#endif
}

#ifndef CKPTFS_WITH_CUDA
namespace {
// A build without CUDA cannot copy device memory, but the process may hold
// device pointers (a trainer's framework has CUDA): when the driver is
// already loaded, ask it, so such a pointer gets a clear error instead of a
// crash. RTLD_NOLOAD: never loads the driver into a process without it.
bool DriverSaysDevice(const void* p) {
  using GetAttribute = int (*)(void* data, int attribute, unsigned long long ptr);
  static const GetAttribute get = [] {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h ? reinterpret_cast<GetAttribute>(dlsym(h, "cuPointerGetAttribute")) : nullptr;
  }();
  if (!get) return false;
  constexpr int kMemoryTypeAttribute = 2;  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
  constexpr unsigned kDeviceMemory = 2;    // CU_MEMORYTYPE_DEVICE
  unsigned type = 0;
  return get(&type, kMemoryTypeAttribute, reinterpret_cast<uintptr_t>(p)) == 0 && type == kDeviceMemory;
}
}  // namespace
#endif

bool IsDevicePointer(const void* p) {
#ifdef CKPTFS_WITH_CUDA
  if (!CudaAvailable()) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();  // plain host memory on old runtimes: not sticky
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
#else
  return DriverSaysDevice(p);
#endif
}

Result<void*> AllocStaging(size_t bytes, bool* pinned) {
#ifdef CKPTFS_WITH_CUDA
  if (CudaAvailable()) {
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) == cudaSuccess) {
      *pinned = true;
      return p;
    }
    (void)cudaGetLastError();
  }
#endif
  void* p = nullptr;
  if (posix_memalign(&p, kPage, bytes) != 0) return Status::Error(ENOMEM, "staging buffers: out of memory");
  std::memset(p, 0, bytes);  // fault the pages in now, not in the copy loop
  // Locked pages cannot be swapped out mid-write; over RLIMIT_MEMLOCK the
  // buffers still work, only unlocked.
  *pinned = mlock(p, bytes) == 0;
  return p;
}

void FreeStaging(void* p, size_t bytes, bool pinned) {
  if (!p) return;
#ifdef CKPTFS_WITH_CUDA
  if (pinned && CudaAvailable()) {
    if (cudaFreeHost(p) == cudaSuccess) return;
    (void)cudaGetLastError();
  }
#endif
  if (pinned) munlock(p, bytes);
  std::free(p);
}

Result<std::unique_ptr<CudaCopier>> CudaCopier::Create(void* user_stream, size_t events) {
#ifdef CKPTFS_WITH_CUDA
  if (!CudaAvailable()) {
    return Status::Error(ENODEV, "the source is CUDA device memory, but no CUDA device is present");
  }
  std::unique_ptr<CudaCopier> c(new CudaCopier());
  if (user_stream) {
    c->stream_ = user_stream;
  } else {
    cudaStream_t s;
    // A blocking stream: its copies wait for kernels queued on the legacy
    // default stream, where frameworks produce tensors unless told otherwise.
    cudaError_t e = cudaStreamCreate(&s);
    if (e != cudaSuccess) return CudaError(e, "cudaStreamCreate");
    c->stream_ = s;
    c->own_stream_ = true;
  }
  for (size_t i = 0; i < events; i++) {
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) return CudaError(e, "cudaEventCreate");
    c->events_.push_back(ev);
  }
  return c;
#else
  (void)user_stream;
  (void)events;
  return Status::Error(ENOTSUP, "the source is CUDA device memory, but libckptfs-writer was built without CUDA");
#endif
}

CudaCopier::~CudaCopier() {
#ifdef CKPTFS_WITH_CUDA
  for (void* ev : events_) cudaEventDestroy(static_cast<cudaEvent_t>(ev));
  if (own_stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
}

Status CudaCopier::CopyToHostAsync(void* dst, const void* src, size_t n, size_t slot) {
#ifdef CKPTFS_WITH_CUDA
  auto stream = static_cast<cudaStream_t>(stream_);
  cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream);
  if (e != cudaSuccess) return CudaError(e, "device-to-host copy");
  e = cudaEventRecord(static_cast<cudaEvent_t>(events_.at(slot)), stream);
  if (e != cudaSuccess) return CudaError(e, "cudaEventRecord");
  return Status::Ok();
#else
  (void)dst, (void)src, (void)n, (void)slot;
  return Status::Error(ENOTSUP, "built without CUDA");
#endif
}

Status CudaCopier::Wait(size_t slot) {
#ifdef CKPTFS_WITH_CUDA
  cudaError_t e = cudaEventSynchronize(static_cast<cudaEvent_t>(events_.at(slot)));
  if (e != cudaSuccess) return CudaError(e, "device-to-host copy");
  return Status::Ok();
#else
  (void)slot;
  return Status::Error(ENOTSUP, "built without CUDA");
#endif
}

}  // namespace ckptfs::writer
