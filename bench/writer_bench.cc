// bench/writer's measuring program. Modes (one per run, so each gets a cold
// start and the wrapper can drop caches between them):
//
//   writer_bench library PATH SIZE [--source host|device] [--buffer B] [--count N]
//       SIZE bytes from one pinned host buffer (or device memory) written to
//       PATH through libckptfs-writer; the time includes open and close
//       (durable and recorded).
//   writer_bench fuse-write PATH SIZE
//       the same bytes with a plain write() loop of 4 MiB calls and
//       fdatasync: what a trainer without the library does.
//   writer_bench d2h SIZE
//       device-to-host copy bandwidth into pinned memory (GPU only).
//
// Prints one JSON line: mode, bytes, seconds, gb_per_s, and what the writer
// used (fast_path, direct_io) for the library mode.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ckptfs/writer.h"

#ifdef CKPTFS_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Usage() {
  std::fprintf(stderr,
               "usage: writer_bench library PATH SIZE [--source host|device] [--buffer B] [--count N]\n"
               "       writer_bench fuse-write PATH SIZE\n"
               "       writer_bench d2h SIZE\n");
  return 2;
}

// Pinned host memory (cudaHostAlloc with CUDA, else locked pages), filled
// with a pattern so the bytes are real.
void* PinnedSource(size_t size) {
  void* p = nullptr;
#ifdef CKPTFS_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0 && cudaHostAlloc(&p, size, cudaHostAllocDefault) == cudaSuccess) {
    std::memset(p, 0x5a, size);
    return p;
  }
#endif
  if (posix_memalign(&p, 4096, size) != 0) return nullptr;
  for (size_t i = 0; i < size; i += 4096) static_cast<unsigned char*>(p)[i] = static_cast<unsigned char>(i >> 12);
  std::memset(p, 0x5a, size);
  (void)mlock(p, size);  // best effort: over RLIMIT_MEMLOCK it stays unlocked
  return p;
}

void Report(const char* mode, size_t bytes, double seconds, const std::string& extra) {
  std::printf("{\"mode\": \"%s\", \"bytes\": %zu, \"seconds\": %.4f, \"gb_per_s\": %.3f%s}\n", mode, bytes,
              seconds, bytes / seconds / 1e9, extra.c_str());
}

int Library(const char* path, size_t size, int argc, char** argv) {
  ckptfs_writer_options opts;
  ckptfs_writer_options_init(&opts, sizeof opts);
  bool device = false;
  for (int i = 0; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--source" && i + 1 < argc) {
      device = std::string(argv[++i]) == "device";
    } else if (a == "--buffer" && i + 1 < argc) {
      opts.staging_buffer_bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--count" && i + 1 < argc) {
      opts.staging_buffer_count = static_cast<unsigned>(std::strtoul(argv[++i], nullptr, 10));
    } else {
      return Usage();
    }
  }
  void* src = nullptr;
  if (device) {
#ifdef CKPTFS_WITH_CUDA
    if (cudaMalloc(&src, size) != cudaSuccess || cudaMemset(src, 0x5a, size) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
      std::fprintf(stderr, "writer_bench: cannot allocate %zu bytes of device memory\n", size);
      return 1;
    }
#else
    std::fprintf(stderr, "writer_bench: built without CUDA\n");
    return 1;
#endif
  } else {
    src = PinnedSource(size);
    if (!src) return 1;
  }
  const double t0 = Now();
  ckptfs_writer* w = nullptr;
  int rc = ckptfs_writer_open_with(path, &opts, &w);
  if (rc == 0) rc = ckptfs_writer_write(w, src, size);
  ckptfs_writer_info info{};
  info.struct_size = sizeof info;
  if (w) rc = rc == 0 ? ckptfs_writer_close_info(w, &info) : (ckptfs_writer_abort(w), rc);
  const double t1 = Now();
  if (rc != 0) {
    std::fprintf(stderr, "writer_bench: %s\n", ckptfs_writer_last_message());
    return 1;
  }
  Report(device ? "library-device" : "library-host", size, t1 - t0,
         ", \"fast_path\": " + std::to_string(info.fast_path) + ", \"direct_io\": " + std::to_string(info.direct_io));
  return 0;
}

int FuseWrite(const char* path, size_t size) {
  const size_t block = 4u << 20;
  void* buf = PinnedSource(block);
  const double t0 = Now();
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror(path);
    return 1;
  }
  for (size_t done = 0; done < size;) {
    const size_t n = std::min(block, size - done);
    const ssize_t w = write(fd, buf, n);
    if (w <= 0) {
      std::perror("write");
      return 1;
    }
    done += static_cast<size_t>(w);
  }
  if (fdatasync(fd) != 0 || close(fd) != 0) {
    std::perror("fdatasync");
    return 1;
  }
  Report("fuse-write", size, Now() - t0, "");
  return 0;
}

int DeviceToHost(size_t size) {
#ifdef CKPTFS_WITH_CUDA
  void* dev = nullptr;
  void* host = nullptr;
  const size_t chunk = 256u << 20;
  if (cudaMalloc(&dev, size) != cudaSuccess || cudaHostAlloc(&host, chunk, cudaHostAllocDefault) != cudaSuccess) {
    std::fprintf(stderr, "writer_bench: no GPU memory\n");
    return 1;
  }
  cudaMemset(dev, 1, size);
  cudaDeviceSynchronize();
  const double t0 = Now();
  for (size_t done = 0; done < size; done += chunk) {
    cudaMemcpy(host, static_cast<char*>(dev) + done, std::min(chunk, size - done), cudaMemcpyDeviceToHost);
  }
  Report("d2h", size, Now() - t0, "");
  return 0;
#else
  (void)size;
  std::fprintf(stderr, "writer_bench: built without CUDA\n");
  return 1;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  const std::string mode = argv[1];
  if (mode == "d2h") return DeviceToHost(std::strtoull(argv[2], nullptr, 10));
  if (argc < 4) return Usage();
  const size_t size = std::strtoull(argv[3], nullptr, 10);
  if (mode == "library") return Library(argv[2], size, argc - 4, argv + 4);
  if (mode == "fuse-write") return FuseWrite(argv[2], size);
  return Usage();
}
