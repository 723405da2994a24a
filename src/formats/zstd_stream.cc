// zstd stream items (see zstd_stream.h).
#include "formats/zstd_stream.h"

#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>

namespace ckptfs {

Result<ItemTransform> ParseItemTransforms(const std::vector<std::string>& descriptors) {
  if (descriptors.empty()) return ItemTransform::kNone;
  // torch records several extensions in reverse order of application; only
  // one is unambiguous (FORMATS.md section 1.3).
  if (descriptors.size() > 1) {
    return Status::Error(EIO, "items with " + std::to_string(descriptors.size()) +
                                  " stream transforms are not supported");
  }
  const std::string& d = descriptors[0];
  // name[@domain]/version; ZStandard.from_descriptor accepts major version 1.
  const std::string name = "stream.zstd/";
  if (d.compare(0, name.size(), name) == 0) {
    const std::string version = d.substr(name.size());
    if (version == "1" || version.compare(0, 2, "1.") == 0) return ItemTransform::kZstd;
  }
  return Status::Error(EIO, "unsupported stream transform '" + d + "'");
}

struct ZstdStreamReader::State {
  ZSTD_DCtx* dctx = nullptr;
  std::vector<char> in;       // compressed bytes read but not yet consumed
  size_t in_pos = 0;
  size_t in_size = 0;
  uint64_t read_pos = 0;      // compressed bytes read from the item
  size_t frame_hint = 1;      // 0 once the last frame ended exactly
  std::vector<char> discard;  // output for bytes skipped to reach an offset
  ~State() { ZSTD_freeDCtx(dctx); }
};

namespace {
constexpr size_t kInputBytes = 128 << 10;
constexpr size_t kDiscardBytes = 128 << 10;
}  // namespace

ZstdStreamReader::ZstdStreamReader(uint64_t compressed_length, ReadCompressed read)
    : compressed_length_(compressed_length), read_(std::move(read)) {}

ZstdStreamReader::~ZstdStreamReader() = default;

Result<std::unique_ptr<ZstdStreamReader>> ZstdStreamReader::Create(uint64_t compressed_length,
                                                                   ReadCompressed read) {
  std::unique_ptr<ZstdStreamReader> r(new ZstdStreamReader(compressed_length, std::move(read)));
  r->state_ = std::make_unique<State>();
  r->state_->dctx = ZSTD_createDCtx();
  if (r->state_->dctx == nullptr) return Status::Error(ENOMEM, "cannot create a zstd decoder");
  const size_t rc = ZSTD_DCtx_setParameter(r->state_->dctx, ZSTD_d_windowLogMax, kZstdMaxWindowLog);
  if (ZSTD_isError(rc)) return Status::Error(EIO, std::string("zstd: ") + ZSTD_getErrorName(rc));
  r->state_->in.resize(kInputBytes);
  CKPTFS_RETURN_IF_ERROR(r->Restart());
  return r;
}

Status ZstdStreamReader::Restart() {
  ZSTD_DCtx_reset(state_->dctx, ZSTD_reset_session_only);
  state_->in_pos = state_->in_size = 0;
  state_->read_pos = 0;
  state_->frame_hint = 1;
  out_pos_ = 0;
  finished_ = false;
  return Status::Ok();
}

Result<size_t> ZstdStreamReader::Decode(char* dst, size_t n) {
  State& s = *state_;
  size_t produced = 0;
  while (produced < n && !finished_) {
    if (s.in_pos == s.in_size) {
      if (s.read_pos == compressed_length_) {
        if (s.frame_hint != 0) return Status::Error(EIO, "zstd stream is truncated");
        finished_ = true;
        break;
      }
      const size_t want = static_cast<size_t>(std::min<uint64_t>(s.in.size(), compressed_length_ - s.read_pos));
      Result<size_t> got = read_(s.read_pos, s.in.data(), want);
      if (!got.ok()) return got.status();
      if (*got == 0) return Status::Error(EIO, "zstd stream: the item ends before its stated length");
      s.read_pos += *got;
      s.in_pos = 0;
      s.in_size = *got;
    }
    ZSTD_inBuffer in{s.in.data(), s.in_size, s.in_pos};
    ZSTD_outBuffer out{dst ? dst + produced : s.discard.data(),
                       dst ? n - produced : std::min(n - produced, s.discard.size()), 0};
    const size_t rc = ZSTD_decompressStream(s.dctx, &out, &in);
    if (ZSTD_isError(rc)) {
      if (ZSTD_getErrorCode(rc) == ZSTD_error_frameParameter_windowTooLarge) {
        return Status::Error(EIO, "zstd stream needs a window larger than " +
                                      std::to_string((1u << kZstdMaxWindowLog) >> 20) + " MiB");
      }
      return Status::Error(EIO, std::string("zstd stream is corrupt: ") + ZSTD_getErrorName(rc));
    }
    s.in_pos = in.pos;
    s.frame_hint = rc;
    produced += out.pos;
    out_pos_ += out.pos;
  }
  return produced;
}

Result<size_t> ZstdStreamReader::ReadAt(uint64_t offset, void* buf, size_t n) {
  if (offset < out_pos_) CKPTFS_RETURN_IF_ERROR(Restart());
  if (state_->discard.empty() && offset > out_pos_) state_->discard.resize(kDiscardBytes);
  while (out_pos_ < offset && !finished_) {
    const size_t skip = static_cast<size_t>(std::min<uint64_t>(offset - out_pos_, kDiscardBytes));
    Result<size_t> got = Decode(nullptr, skip);
    if (!got.ok()) return got.status();
  }
  if (out_pos_ < offset) return size_t{0};  // past the end
  return Decode(static_cast<char*>(buf), n);
}

Result<uint64_t> ZstdStreamReader::DecodedSize(uint64_t max_bytes) {
  if (state_->discard.empty()) state_->discard.resize(kDiscardBytes);
  while (!finished_) {
    Result<size_t> got = Decode(nullptr, kDiscardBytes);
    if (!got.ok()) return got.status();
    if (out_pos_ > max_bytes) {
      return Status::Error(EFBIG, "zstd stream decodes to more than " + std::to_string(max_bytes) + " bytes");
    }
  }
  return out_pos_;
}

size_t ZstdStreamReader::MemoryUsage() const {
  return ZSTD_sizeof_DCtx(state_->dctx) + state_->in.capacity() + state_->discard.capacity();
}

}  // namespace ckptfs
