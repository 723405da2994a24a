// What verifying fetched bytes costs a cold read (docs/benchmarks.md,
// "Verified reads"). A step of --files files x --file-mib MiB is put in a
// file:// remote (objects plus a commit object with chunk CRC32Cs, as an
// upload writes them); each round imports it into a fresh in-memory cache,
// as a cold mount does, and reads every file sequentially in 4 MiB reads
// through FileSystem, once with verification and once without (alternating
// which goes first), timing only the reads. The remote is read from the page
// cache, the fastest transport there is, so the ratio is an upper bound on
// what verification adds to a cold read from S3. Prints medians and
// their ratio [target <= 1.05].
//
//   verified_fetch_bin DIR [--files N] [--file-mib M] [--rounds R]
#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/crc32c_chunks.h"
#include "control/event_log.h"
#include "data/memory_data_store.h"
#include "manifest/memory_manifest_store.h"
#include "namespace/filesystem.h"
#include "remote/file_object_store.h"
#include "formats/commit_object.h"
#include "tiering/remote_tier.h"

using namespace ckptfs;

namespace {

int Fail(const std::string& what, const Status& st) {
  std::fprintf(stderr, "verified_fetch: %s: %s\n", what.c_str(), st.ToString().c_str());
  return 1;
}

// Seconds to read every file of the step on a fresh cold cache; 0 on failure.
double ColdRead(const std::string& dir, int files, uint64_t file_bytes, bool verify) {
  ManualClock clock;
  EventLog events;
  FileSystemOptions options;
  options.remote = true;
  auto fs = FileSystem::Open(options, std::make_unique<MemoryManifestStore>(), std::make_unique<MemoryDataStore>(),
                             &clock, &events);
  auto store = FileObjectStore::Open(dir);
  if (!fs.ok() || !store.ok()) return 0;
  RemoteTierOptions tier_options;
  tier_options.verify_reads = verify;
  RemoteTier tier(fs->get(), (*fs)->data(), std::move(store).value(), &events, tier_options);
  (*fs)->SetTierHooks(&tier);
  tier.Start();
  double seconds = 0;
  if (tier.WaitForImport(std::chrono::seconds(60))) {
    auto step = (*fs)->Lookup(kRootIno, "step1");
    std::string buf(4 << 20, '\0');
    const auto t0 = std::chrono::steady_clock::now();
    bool ok = step.ok();
    for (int f = 0; ok && f < files; f++) {
      auto file = (*fs)->Lookup(step->ino, "shard" + std::to_string(f));
      auto h = file.ok() ? (*fs)->OpenFile(file->ino, O_RDONLY) : Result<FileSystem::Opened>(file.status());
      if (!h.ok()) {
        ok = false;
        break;
      }
      for (uint64_t off = 0; off < file_bytes;) {
        auto n = (*fs)->Read(h->fh, buf.data(), buf.size(), off);
        if (!n.ok() || *n == 0) {
          ok = false;
          break;
        }
        off += *n;
      }
      (void)(*fs)->Release(h->fh);
    }
    seconds = ok ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() : 0;
  }
  (*fs)->SetTierHooks(nullptr);
  return seconds;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: verified_fetch_bin DIR [--files N] [--file-mib M] [--rounds R]\n");
    return 2;
  }
  const std::string dir = argv[1];
  int files = 4, file_mib = 64, rounds = 5;
  for (int i = 2; i + 1 < argc; i += 2) {
    const int v = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--files")) files = v;
    if (!std::strcmp(argv[i], "--file-mib")) file_mib = v;
    if (!std::strcmp(argv[i], "--rounds")) rounds = v;
  }
  const uint64_t file_bytes = static_cast<uint64_t>(file_mib) << 20;
  auto store = FileObjectStore::Open(dir);
  if (!store.ok()) return Fail("opening " + dir, store.status());
  CommitObject obj;
  obj.step_path = "step1";
  obj.step = 1;
  obj.committed_at.tv_sec = 1;
  obj.chunk_size = kDefaultChecksumChunk;
  std::mt19937_64 rng(1);
  std::string data(file_bytes, '\0');
  for (int f = 0; f < files; f++) {
    for (size_t i = 0; i + 8 <= data.size(); i += 8) {
      const uint64_t r = rng();
      std::memcpy(&data[i], &r, 8);
    }
    ChunkCrc32c sums(kDefaultChecksumChunk);
    sums.Add(data.data(), data.size());
    const std::string name = "shard" + std::to_string(f);
    Status st = (*store)->Put("step1/" + name, data);
    if (!st.ok()) return Fail("writing the remote", st);
    obj.files.push_back({name, file_bytes, sums.Whole(), 0644, 1, sums.Chunks()});
    obj.bytes += file_bytes;
  }
  Status st = (*store)->Put(CommitObjectKey("step1"), EncodeCommitObject(obj));
  if (!st.ok()) return Fail("writing the commit object", st);

  std::vector<double> verified, unverified;
  for (int r = 0; r < rounds; r++) {
    for (int k = 0; k < 2; k++) {
      const bool verify = (r + k) % 2 == 0;
      const double s = ColdRead(dir, files, file_bytes, verify);
      if (s <= 0) return Fail("cold read", Status::Error(EIO, "failed"));
      (verify ? verified : unverified).push_back(s);
    }
  }
  const double mib = static_cast<double>(files) * file_mib;
  const double v = Median(verified), u = Median(unverified);
  std::printf("cold read of %d x %d MiB from file:// (page cache), median of %d rounds:\n", files, file_mib, rounds);
  std::printf("  verified (chunk CRC32Cs):  %7.3f s  (%7.1f MiB/s)\n", v, mib / v);
  std::printf("  unverified:                %7.3f s  (%7.1f MiB/s)\n", u, mib / u);
  std::printf("  ratio verified/unverified: %7.3f  [<= 1.05]\n", v / u);
  return 0;
}
