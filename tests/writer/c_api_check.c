/* A C program (not C++) using libckptfs-writer: proves writer.h is plain C
 * and gives the integration tests and the benchmark a writer to run.
 *
 *   c_api_check PATH SIZE [--async] [--no-fast-path] [--buffer BYTES] [--count N]
 *
 * Writes SIZE bytes of a deterministic pattern (byte i = (i * 131 + 7) mod 251)
 * to PATH from one pinned-or-not host buffer, in calls of at most 64 MiB, and
 * prints one JSON line: bytes, crc32c, fast_path, direct_io, seconds. Exit 1
 * with the library's message on failure. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckptfs/writer.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s PATH SIZE [--async] [--no-fast-path] [--buffer BYTES] [--count N]\n", argv[0]);
    return 2;
  }
  const char *path = argv[1];
  unsigned long long size = strtoull(argv[2], NULL, 10);
  int async = 0;
  ckptfs_writer_options opts;
  ckptfs_writer_options_init(&opts, sizeof opts);
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--async")) {
      async = 1;
    } else if (!strcmp(argv[i], "--no-fast-path")) {
      opts.flags |= CKPTFS_WRITER_NO_FAST_PATH;
    } else if (!strcmp(argv[i], "--buffer") && i + 1 < argc) {
      opts.staging_buffer_bytes = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--count") && i + 1 < argc) {
      opts.staging_buffer_count = (unsigned)strtoul(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  const size_t chunk_max = (size_t)64 << 20;
  const size_t buf_len = size < chunk_max ? (size_t)size : chunk_max;
  unsigned char *buf = malloc(buf_len ? buf_len : 1);
  if (!buf) return 1;
  /* The pattern repeats every 251 bytes; 64 MiB calls keep it continuous
   * only if each call starts at a multiple of 251: regenerate per call. */
  const double t0 = now();
  ckptfs_writer *w = NULL;
  int rc = ckptfs_writer_open_with(path, &opts, &w);
  unsigned long long done = 0;
  while (rc == 0 && done < size) {
    size_t n = size - done < buf_len ? (size_t)(size - done) : buf_len;
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(((done + i) * 131 + 7) % 251);
    rc = async ? ckptfs_writer_write_async(w, buf, n) : ckptfs_writer_write(w, buf, n);
    done += n;
  }
  ckptfs_writer_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (w) {
    if (rc == 0) {
      rc = ckptfs_writer_close_info(w, &info);
    } else {
      fprintf(stderr, "write: %s\n", ckptfs_writer_last_message());
      ckptfs_writer_abort(w);
    }
  }
  const double t1 = now();
  if (rc != 0) {
    fprintf(stderr, "ckptfs-writer: %s (%s)\n", ckptfs_writer_last_message(), ckptfs_writer_strerror(rc));
    free(buf);
    return 1;
  }
  printf("{\"bytes\": %llu, \"crc32c\": %u, \"fast_path\": %d, \"direct_io\": %d, \"seconds\": %.6f}\n",
         (unsigned long long)info.bytes, info.crc32c, info.fast_path, info.direct_io, t1 - t0);
  free(buf);
  return 0;
}
