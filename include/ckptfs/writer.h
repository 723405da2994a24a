/*
 * libckptfs-writer: write a file inside a ckptfs mount from host or CUDA
 * device memory at the speed of the disk.
 *
 * Inside a ckptfs mount the daemon hands the library a descriptor of the
 * file's local backing file over a Unix socket, so the bytes never pass
 * through FUSE requests: they go through a ring of pinned staging buffers
 * (device-to-host copies overlapped with O_DIRECT writes) and the CRC32C is
 * computed on the way. On close the library reports size and CRC32C; the
 * daemon checks the size, records both, and from then on the file is like
 * any other (commit, upload, retention). Outside a ckptfs mount, or when the
 * daemon's socket is unavailable, the same pipeline writes the path directly.
 *
 * Every function returning int returns 0 or a negative errno. After a
 * failure, ckptfs_writer_last_message() says more than the errno does (it is
 * kept per thread). The ABI is stable: structs passed in carry their own size.
 *
 * A writer is used by one thread at a time (like a FILE* without locking);
 * different writers may be used from different threads at once. A failed
 * write leaves the writer failed: later writes and close return the same
 * error, and close (which still frees it) reports it; abort removes the file.
 * Writing 0 bytes is allowed, with buf NULL or not.
 *
 * CUDA: device memory is copied on the writer's stream: the caller's
 * (options.cuda_stream) or, by default, a stream of the writer's own that
 * waits for work on the legacy default stream. Data produced on any other
 * stream must be ready before write is called (synchronize that stream, or
 * pass it as cuda_stream). write returns once the copies are done. A build
 * without CUDA refuses device pointers (-ENOTSUP) when the process has the
 * CUDA driver loaded, instead of reading them as host memory.
 *
 *   ckptfs_writer *w;
 *   int rc = ckptfs_writer_open("/ckpt/run1/step100/rank0.bin", &w);
 *   if (rc == 0) rc = ckptfs_writer_write(w, ptr, nbytes);   // host or device
 *   int rc2 = ckptfs_writer_close(w);                          // always frees w
 *   if (rc == 0) rc = rc2;
 *   if (rc) fprintf(stderr, "%s: %s\n", ckptfs_writer_strerror(rc),
 *                   ckptfs_writer_last_message());
 */
#ifndef CKPTFS_WRITER_H_
#define CKPTFS_WRITER_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CKPTFS_WRITER_API __attribute__((visibility("default")))
#else
#define CKPTFS_WRITER_API
#endif

typedef struct ckptfs_writer ckptfs_writer;

/* Where the bytes given to write come from. AUTO asks CUDA about each
 * pointer (host memory when the library has no CUDA or there is no GPU). */
enum ckptfs_writer_source {
  CKPTFS_WRITER_SOURCE_AUTO = 0,
  CKPTFS_WRITER_SOURCE_HOST = 1,
  CKPTFS_WRITER_SOURCE_DEVICE = 2
};

/* Flags for ckptfs_writer_options.flags. */
#define CKPTFS_WRITER_NO_FAST_PATH 0x1u /* never ask the daemon: write via the path */
#define CKPTFS_WRITER_NO_DIRECT 0x2u    /* buffered writes instead of O_DIRECT */

typedef struct ckptfs_writer_options {
  size_t struct_size;             /* sizeof(ckptfs_writer_options); set by _init */
  size_t staging_buffer_bytes;    /* default 8 MiB; rounded up to 4 KiB */
  unsigned staging_buffer_count;  /* default 4 (2 at least) */
  void *cuda_stream;              /* cudaStream_t for device copies; NULL: the writer's own */
  int source;                     /* enum ckptfs_writer_source; default AUTO */
  unsigned mode;                  /* permissions of a new file, default 0666 (umask applies) */
  unsigned flags;                 /* CKPTFS_WRITER_* flags, default 0 */
} ckptfs_writer_options;

/* What a writer did; filled by ckptfs_writer_get_info. */
typedef struct ckptfs_writer_info {
  size_t struct_size;   /* sizeof(ckptfs_writer_info); set by the caller */
  uint64_t bytes;       /* bytes accepted so far */
  uint32_t crc32c;      /* CRC32C of those bytes */
  int fast_path;        /* 1: the daemon's backing file; 0: the path itself */
  int direct_io;        /* 1: O_DIRECT writes */
} ckptfs_writer_info;

/* Fills opts with the defaults; size is sizeof(*opts) as the caller knows
 * it, so a library newer than the caller's header never writes past it:
 *   ckptfs_writer_options o; ckptfs_writer_options_init(&o, sizeof o); */
CKPTFS_WRITER_API void ckptfs_writer_options_init(ckptfs_writer_options *opts, size_t size);

/* Creates or truncates the file at path for writing (like fopen "wb"). */
CKPTFS_WRITER_API int ckptfs_writer_open(const char *path, ckptfs_writer **out);
/* The same with options (NULL = defaults). */
CKPTFS_WRITER_API int ckptfs_writer_open_with(const char *path, const ckptfs_writer_options *opts,
                                              ckptfs_writer **out);

/* Appends len bytes from buf (host or CUDA device memory) and returns once
 * they are written to the file, except for at most one partly filled staging
 * buffer that waits for the next write or close. */
CKPTFS_WRITER_API int ckptfs_writer_write(ckptfs_writer *w, const void *buf, size_t len);
/* Appends len bytes and returns as soon as buf may be reused (the bytes are
 * in staging buffers); disk writes go on in the background and their errors
 * are returned by a later call. */
CKPTFS_WRITER_API int ckptfs_writer_write_async(ckptfs_writer *w, const void *buf, size_t len);

/* Writes what is staged, makes the data durable (fdatasync), reports size
 * and CRC32C to the daemon, which records them; then frees w (also on
 * error). When it returns 0 the file is complete, durable and recorded. */
CKPTFS_WRITER_API int ckptfs_writer_close(ckptfs_writer *w);
/* ckptfs_writer_close that also fills info (its struct_size set by the
 * caller), even when it fails (bytes accepted; crc32c 0 if unknown). */
CKPTFS_WRITER_API int ckptfs_writer_close_info(ckptfs_writer *w, ckptfs_writer_info *info);
/* Stops, removes the partly written file and frees w. */
CKPTFS_WRITER_API void ckptfs_writer_abort(ckptfs_writer *w);

CKPTFS_WRITER_API int ckptfs_writer_get_info(const ckptfs_writer *w, ckptfs_writer_info *info);

/* Text for a negative errno returned by this library. */
CKPTFS_WRITER_API const char *ckptfs_writer_strerror(int err);
/* The detailed message of this thread's last failure ("" if none). */
CKPTFS_WRITER_API const char *ckptfs_writer_last_message(void);

/* 1 when device pointers can be written (built with CUDA and a GPU present). */
CKPTFS_WRITER_API int ckptfs_writer_cuda_available(void);
/* One line about this build, e.g. "ckptfs-writer 0.1.0, CUDA 13.0, 1 device". */
CKPTFS_WRITER_API const char *ckptfs_writer_build_info(void);

/* --- safetensors ---------------------------------------------------------
 * Collects tensors (name, dtype, shape, pointer), then writes one
 * safetensors file: the JSON header, then each tensor's bytes in the order
 * added. Pointers must stay valid until finish. dtype is a safetensors code:
 * BOOL, U8, I8, U16, I16, U32, I32, U64, I64, F16, BF16, F32, F64,
 * F8_E4M3, F8_E5M2. */
typedef struct ckptfs_safetensors ckptfs_safetensors;

CKPTFS_WRITER_API int ckptfs_safetensors_open(const char *path, const ckptfs_writer_options *opts,
                                              ckptfs_safetensors **out);
/* nbytes must equal the product of shape times the dtype's size. */
CKPTFS_WRITER_API int ckptfs_safetensors_add(ckptfs_safetensors *s, const char *name, const char *dtype,
                                             int ndim, const int64_t *shape, const void *data,
                                             size_t nbytes);
/* A string entry of the header's __metadata__. */
CKPTFS_WRITER_API int ckptfs_safetensors_set_metadata(ckptfs_safetensors *s, const char *key,
                                                      const char *value);
/* Writes and closes the file (as ckptfs_writer_close); frees s. */
CKPTFS_WRITER_API int ckptfs_safetensors_finish(ckptfs_safetensors *s);
/* The same, also filling info (size and CRC32C of the whole file). */
CKPTFS_WRITER_API int ckptfs_safetensors_finish_info(ckptfs_safetensors *s, ckptfs_writer_info *info);
/* Discards everything, removes the file, frees s. */
CKPTFS_WRITER_API void ckptfs_safetensors_abort(ckptfs_safetensors *s);

#ifdef __cplusplus
}
#endif

#endif /* CKPTFS_WRITER_H_ */
