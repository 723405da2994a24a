// Reads the torch.save ZIP container (FORMATS.md section 2) and rebuilds the
// tensors its data.pkl describes (section 1.4 steps 4-7), without copying any
// tensor data: the result says where a tensor's storage bytes lie in the
// source, so a view can serve them by range reads (or gather them when the
// strides are not row-major).
//
// One container is a byte range of a source: a DCP `.distcp` item
// (`_StorageInfo.offset/length`, after any stream transform has been undone by
// the caller) or a whole `.pt` file (offset 0, the file's size). Offsets inside
// the zip are relative to its start.
//
// Reading rules, as torch writes and reads: records must be stored (method 0;
// anything else is EIO naming the method); sizes come from the central
// directory (local headers of torch's records say 0 and are followed by data
// descriptors); a record's data starts after its local header, whose extra
// field holds torch's alignment padding; ZIP64 end records and extras are
// followed; CRCs are not checked (torch does not, and may write 0).
//
// Safety contract: every read is inside the container and every size is
// checked before use; memory is bounded by TorchZipLimits (the central
// directory and data.pkl are the only things read whole). Anything malformed
// or unsupported (big-endian archives, encryption, multi-disk zips, tensor
// kinds other than plain strided ones) returns EIO with a message; nothing
// crashes or loops on hostile input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ckptfs {

// Random-access bytes: a local file, a range of the remote tier, a decoded
// buffer. Implementations must be safe to call concurrently when the caller
// shares them; nothing here keeps state between calls.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Up to n bytes at `offset` into buf; fewer only at the end of the source
  // (0 at or past it).
  virtual Result<size_t> ReadAt(uint64_t offset, void* buf, size_t n) const = 0;
  virtual uint64_t Size() const = 0;
};

// A ByteSource over memory the caller keeps alive (a zstd-decoded DCP item, a
// test buffer).
class StringByteSource final : public ByteSource {
 public:
  explicit StringByteSource(std::string_view bytes) : bytes_(bytes) {}
  Result<size_t> ReadAt(uint64_t offset, void* buf, size_t n) const override;
  uint64_t Size() const override { return bytes_.size(); }

 private:
  std::string_view bytes_;
};

struct TorchZipLimits {
  uint64_t max_central_directory_bytes = uint64_t{64} << 20;
  uint64_t max_records = uint64_t{1} << 20;
  uint64_t max_pickle_bytes = uint64_t{64} << 20;
};

// Element size of a torch dtype named without "torch." ("float32",
// "bfloat16", "float8_e4m3fn", "uint16"); nullopt when unknown. The names of
// DcpTensor::dtype and TorchTensorInfo::dtype.
std::optional<uint32_t> TorchDtypeElementSize(std::string_view dtype);

struct TorchZipRecord {
  std::string name;                  // full name, e.g. "archive/data/0"
  uint64_t local_header_offset = 0;  // relative to the container
  uint64_t size = 0;                 // uncompressed size from the central directory
  uint64_t compressed_size = 0;
  uint16_t method = 0;  // 0 = stored; anything else cannot be served
};

// The central directory of one container. Holds no reference to the source:
// it can be cached and used with any source holding the same bytes.
class TorchZipArchive {
 public:
  // Reads the end records and the central directory of the zip occupying
  // [base, base + length) of `source`.
  static Result<TorchZipArchive> Open(const ByteSource& source, uint64_t base, uint64_t length,
                                      const TorchZipLimits& limits = {});

  // The archive name: the text before the first '/' of the first record
  // ("archive" for DCP items, the file's basename for torch.save(path)).
  const std::string& prefix() const { return prefix_; }
  // In central-directory order.
  const std::vector<TorchZipRecord>& records() const { return records_; }
  // The record named prefix() + "/" + `relative` ("data.pkl", "data/0"), or null.
  const TorchZipRecord* Find(std::string_view relative) const;

  // Absolute offset in the source of the record's data (reads its local
  // header). EIO when the record is compressed or its data is not inside the
  // container.
  Result<uint64_t> DataOffset(const ByteSource& source, const TorchZipRecord& record) const;
  // The whole record, when it is at most max_bytes.
  Result<std::string> ReadRecord(const ByteSource& source, const TorchZipRecord& record,
                                 uint64_t max_bytes) const;

  uint64_t base() const { return base_; }
  uint64_t length() const { return length_; }

 private:
  TorchZipArchive() = default;

  uint64_t base_ = 0;
  uint64_t length_ = 0;
  uint64_t central_directory_offset_ = 0;  // relative; record data ends before it
  std::string prefix_;
  std::vector<TorchZipRecord> records_;
  std::vector<size_t> by_name_;  // indexes into records_, sorted by name
};

// A strided tensor rebuilt by torch._utils._rebuild_tensor_v2/_v3 (possibly
// wrapped by _rebuild_parameter), located in the source.
struct TorchTensorInfo {
  std::string dtype;  // torch name without "torch.", e.g. "bfloat16"
  uint32_t element_size = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;    // in elements; NOT necessarily row-major
  int64_t storage_offset = 0;     // in elements, into the storage
  std::string storage_key;        // the record "data/<key>"
  uint64_t storage_position = 0;  // absolute offset in the source of the storage bytes
  uint64_t storage_bytes = 0;     // size of the storage record

  uint64_t numel() const;
  uint64_t nbytes() const { return numel() * element_size; }
  // Absolute offset in the source of element (0, ..., 0).
  uint64_t data_position() const {
    return storage_position + uint64_t(storage_offset) * element_size;
  }
  // True when the strides are row-major dense (dims of size 1 are ignored, as
  // torch does), i.e. the tensor is the nbytes() bytes at data_position().
  bool IsContiguous() const;
};

// The single tensor of a container whose data.pkl root is a tensor (every DCP
// tensor item). Checked: the storage record exists, is stored, has the size
// the persistent id implies, and holds every element the shape, strides and
// storage offset reach.
Result<TorchTensorInfo> ReadTorchSaveTensor(const ByteSource& source, uint64_t base,
                                            uint64_t length, const TorchZipLimits& limits = {});

struct TorchSaveTensor {
  std::string key;  // nested dict keys and list indices joined by '.'; "" for a root tensor
  TorchTensorInfo info;
};

struct TorchSaveContents {
  // In pickle order. A tensor reachable by several paths (tied weights)
  // appears under each.
  std::vector<TorchSaveTensor> tensors;
  // Tensor-like values this reader does not serve, as "key: why" (quantized or
  // sparse tensors, keys that are neither str nor int). Other non-tensor
  // values (ints, strings, param groups) are ignored, not listed.
  std::vector<std::string> skipped;
};

// Every tensor in a container holding a state dict: dicts (plain or
// OrderedDict), lists and tuples are walked, keys flattened as DCP and
// expected/ do ("model.w", "extra.0"). For a `.pt` file pass base 0 and the
// file's size. A malformed tensor is EIO for the whole container.
Result<TorchSaveContents> ReadTorchSaveTensors(const ByteSource& source, uint64_t base,
                                               uint64_t length, const TorchZipLimits& limits = {});

}  // namespace ckptfs
