// libFuzzer target: the torch.save ZIP reader (src/formats/torch_zip.h):
// TorchZipArchive::Open, DataOffset/ReadRecord of every record,
// ReadTorchSaveTensor and ReadTorchSaveTensors.
//
// Input: one container (a DCP `.distcp` item or a whole `.pt` file). It is
// placed at a non-zero base inside a larger source, with marker bytes before
// and after it, behind a ByteSource that aborts on any read outside the
// container (the safety contract: "every read is inside the container").
// Checks:
//  - a failure is EIO mentioning "torch.save zip: ";
//  - an open archive has records, a prefix without '/', the first record
//    under it, Find() finds every record by its relative name, and every
//    record's data (DataOffset + size) lies inside the container before the
//    central directory; ReadRecord returns exactly those bytes;
//  - every rebuilt tensor has the element size of its dtype, shape and stride
//    of the same rank, nbytes() <= 2^62, its storage inside the container, and
//    every element its shape/strides/storage offset reach inside its storage;
//  - ReadTorchSaveTensors' keys are unique.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>

#include "formats/torch_zip.h"
#include "fuzz_check.h"

namespace ckptfs {
namespace {

constexpr size_t kBefore = 13;  // the container's base in the source
constexpr size_t kAfter = 7;

// A StringByteSource that aborts on a read leaving [base, base + length).
class ContainerOnlySource final : public ByteSource {
 public:
  ContainerOnlySource(std::string_view bytes, uint64_t base, uint64_t length)
      : inner_(bytes), base_(base), length_(length) {}
  Result<size_t> ReadAt(uint64_t offset, void* buf, size_t n) const override {
    FUZZ_CHECK(offset >= base_ && offset <= base_ + length_ && n <= base_ + length_ - offset,
               "read of %zu bytes at %llu outside the container [%llu, %llu)", n,
               static_cast<unsigned long long>(offset), static_cast<unsigned long long>(base_),
               static_cast<unsigned long long>(base_ + length_));
    return inner_.ReadAt(offset, buf, n);
  }
  uint64_t Size() const override { return inner_.Size(); }

 private:
  StringByteSource inner_;
  uint64_t base_, length_;
};

void CheckTensor(const TorchTensorInfo& t, uint64_t base, uint64_t length) {
  const char* key = t.storage_key.c_str();
  std::optional<uint32_t> es = TorchDtypeElementSize(t.dtype);
  FUZZ_CHECK(es && *es == t.element_size, "storage %s: element size %u for dtype '%s'", key,
             t.element_size, t.dtype.c_str());
  FUZZ_CHECK(t.shape.size() == t.stride.size(), "storage %s: shape and stride ranks differ", key);
  FUZZ_CHECK(t.storage_offset >= 0, "storage %s: negative storage offset", key);
  FUZZ_CHECK(t.storage_position >= base && t.storage_position <= base + length &&
                 t.storage_bytes <= base + length - t.storage_position,
             "storage %s [%llu, +%llu) is outside the container [%llu, +%llu)", key,
             static_cast<unsigned long long>(t.storage_position),
             static_cast<unsigned long long>(t.storage_bytes),
             static_cast<unsigned long long>(base), static_cast<unsigned long long>(length));
  unsigned __int128 bytes = t.element_size;
  unsigned __int128 last = static_cast<uint64_t>(t.storage_offset);
  for (size_t d = 0; d < t.shape.size(); ++d) {
    FUZZ_CHECK(t.shape[d] >= 0 && t.stride[d] >= 0, "storage %s: negative size or stride", key);
    bytes *= static_cast<uint64_t>(t.shape[d]);
    FUZZ_CHECK(bytes <= (uint64_t{1} << 62), "storage %s: more than 2^62 bytes", key);
    if (t.shape[d] > 0) last += static_cast<unsigned __int128>(t.shape[d] - 1) * t.stride[d];
  }
  FUZZ_CHECK(bytes == t.nbytes(), "storage %s: nbytes() %llu", key,
             static_cast<unsigned long long>(t.nbytes()));
  unsigned __int128 reach = bytes > 0 ? (last + 1) * t.element_size
                                      : static_cast<unsigned __int128>(t.storage_offset) *
                                            t.element_size;
  FUZZ_CHECK(reach <= t.storage_bytes, "storage %s: the view reaches past its %llu bytes", key,
             static_cast<unsigned long long>(t.storage_bytes));
  FUZZ_CHECK(t.data_position() >= t.storage_position &&
                 t.data_position() <= t.storage_position + t.storage_bytes,
             "storage %s: data_position outside the storage", key);
  if (t.IsContiguous() && bytes > 0) {
    FUZZ_CHECK(t.data_position() + t.nbytes() <= t.storage_position + t.storage_bytes,
               "storage %s: a contiguous view runs past its storage", key);
  }
}

}  // namespace
}  // namespace ckptfs

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckptfs;
  std::string bytes(kBefore, 'B');
  bytes.append(reinterpret_cast<const char*>(data), size);
  bytes.append(kAfter, 'A');
  const uint64_t base = kBefore, length = size;
  ContainerOnlySource source(bytes, base, length);

  Result<TorchZipArchive> z = TorchZipArchive::Open(source, base, length);
  if (!z.ok()) {
    fuzz::CheckError(z.status(), "torch.save zip: ");
  } else {
    FUZZ_CHECK(z->base() == base && z->length() == length, "base/length changed");
    FUZZ_CHECK(!z->records().empty(), "an archive without records");
    const std::string& prefix = z->prefix();
    FUZZ_CHECK(!prefix.empty() && prefix.find('/') == std::string::npos, "bad prefix '%s'",
               prefix.c_str());
    FUZZ_CHECK(z->records()[0].name.compare(0, prefix.size() + 1, prefix + "/") == 0,
               "first record '%s' is not under the prefix", z->records()[0].name.c_str());
    std::set<std::string> names;
    for (const TorchZipRecord& r : z->records()) {
      FUZZ_CHECK(names.insert(r.name).second, "record '%s' twice", r.name.c_str());
      FUZZ_CHECK(r.local_header_offset < length, "local header of '%s' past the container",
                 r.name.c_str());
      if (r.name.compare(0, prefix.size() + 1, prefix + "/") == 0) {
        FUZZ_CHECK(z->Find(std::string_view(r.name).substr(prefix.size() + 1)) == &r,
                   "Find misses '%s'", r.name.c_str());
      }
      Result<uint64_t> at = z->DataOffset(source, r);
      if (!at.ok()) {
        fuzz::CheckError(at.status(), "torch.save zip: ");
        continue;
      }
      FUZZ_CHECK(r.method == 0 && r.compressed_size == r.size, "served a compressed record");
      FUZZ_CHECK(*at >= base && *at <= base + length && r.size <= base + length - *at,
                 "data of '%s' [%llu, +%llu) outside the container", r.name.c_str(),
                 static_cast<unsigned long long>(*at), static_cast<unsigned long long>(r.size));
      Result<std::string> rec = z->ReadRecord(source, r, 1 << 20);
      if (rec.ok()) {
        FUZZ_CHECK(rec->size() == r.size && std::memcmp(rec->data(), bytes.data() + *at,
                                                        rec->size()) == 0,
                   "ReadRecord('%s') returned other bytes", r.name.c_str());
      } else {
        fuzz::CheckError(rec.status(), "torch.save zip: ");
        FUZZ_CHECK(r.size > (1 << 20), "ReadRecord failed after DataOffset succeeded");
      }
    }
  }

  Result<TorchTensorInfo> one = ReadTorchSaveTensor(source, base, length);
  if (one.ok()) {
    FUZZ_CHECK(z.ok(), "a tensor from an archive Open refuses");
    CheckTensor(*one, base, length);
  } else {
    fuzz::CheckErrorMentions(one.status(), "torch.save zip: ");
  }

  Result<TorchSaveContents> all = ReadTorchSaveTensors(source, base, length);
  if (one.ok()) {
    FUZZ_CHECK(all.ok(), "a root tensor ReadTorchSaveTensors refuses: %s",
               all.status().message().c_str());
  }
  if (all.ok()) {
    FUZZ_CHECK(z.ok(), "tensors from an archive Open refuses");
    std::set<std::string> keys;
    for (const TorchSaveTensor& t : all->tensors) {
      FUZZ_CHECK(keys.insert(t.key).second, "key '%s' twice", t.key.c_str());
      CheckTensor(t.info, base, length);
    }
    if (one.ok()) {
      // A root tensor is the only tensor, under the key "".
      FUZZ_CHECK(all->tensors.size() == 1 && all->tensors[0].key.empty() &&
                     all->tensors[0].info.storage_position == one->storage_position,
                 "ReadTorchSaveTensors disagrees with ReadTorchSaveTensor");
    }
  } else {
    fuzz::CheckErrorMentions(all.status(), "torch.save zip: ");
  }
  return 0;
}
