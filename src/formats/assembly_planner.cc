// The read planner of assembly_planner.h: sources are validated and lowered to
// run lattices once; each read walks only the runs it intersects.
#include "formats/assembly_planner.h"

#include <algorithm>
#include <string>

namespace ckptfs {
namespace assembly_internal {

struct Dim {
  uint64_t count;
  uint64_t tensor_stride;  // bytes
  uint64_t file_stride;    // bytes
};

// Run (i0, ..., ik) starts at tensor_start + sum(i * tensor_stride) in the
// tensor and at file_start + sum(i * file_stride) in the file, `run` bytes
// long. Runs of a source never overlap and increase in tensor order with the
// index (row-major), and the runs under one index of a dim fit within that
// dim's tensor_stride: that nesting is what lets FirstRun find its answer by
// division instead of a scan.
struct RunFamily {
  std::vector<Dim> outer;  // outermost first
  uint64_t run = 0;
  uint64_t tensor_start = 0;
  uint64_t tensor_end = 0;  // end of the last run
  uint32_t file = 0;
  uint64_t file_start = 0;
};

}  // namespace assembly_internal

namespace {

using assembly_internal::Dim;
using assembly_internal::RunFamily;
using Index = std::vector<uint64_t>;
// 128-bit sums and products for overflow checks (GCC and Clang extension).
__extension__ typedef unsigned __int128 Wide;

constexpr size_t kMaxDims = 64;
// Tensor and file positions stay below this, so sums of them cannot wrap.
constexpr uint64_t kMaxBytes = uint64_t{1} << 62;

Status Bad(const std::string& what) { return Status::Error(EIO, "tensor assembly: " + what); }

std::string DimsText(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

// Moves `idx` to the next run in row-major order; false past the last one.
bool Next(const RunFamily& f, Index* idx) {
  for (size_t k = f.outer.size(); k-- > 0;) {
    if (++(*idx)[k] < f.outer[k].count) return true;
    (*idx)[k] = 0;
  }
  return false;
}

uint64_t TensorPos(const RunFamily& f, const Index& idx) {
  uint64_t p = f.tensor_start;
  for (size_t k = 0; k < idx.size(); ++k) p += idx[k] * f.outer[k].tensor_stride;
  return p;
}

uint64_t FilePos(const RunFamily& f, const Index& idx) {
  uint64_t p = f.file_start;
  for (size_t k = 0; k < idx.size(); ++k) p += idx[k] * f.outer[k].file_stride;
  return p;
}

// The first run that ends after tensor byte `a`; false when there is none.
bool FirstRun(const RunFamily& f, uint64_t a, Index* idx) {
  idx->assign(f.outer.size(), 0);
  if (a <= f.tensor_start) return true;
  uint64_t rel = a - f.tensor_start;
  for (size_t k = 0; k < f.outer.size(); ++k) {
    uint64_t q = rel / f.outer[k].tensor_stride;
    if (q >= f.outer[k].count) {
      // Every run under the current prefix ends before `a`: step the prefix.
      if (k == 0) return false;
      for (size_t j = k; j < f.outer.size(); ++j) (*idx)[j] = f.outer[j].count - 1;
      return Next(f, idx);
    }
    (*idx)[k] = q;
    rel -= q * f.outer[k].tensor_stride;
  }
  return rel < f.run || Next(f, idx);
}

// Merges outer dims that step like one (dim a's stride is dim b's stride
// times b's count, in the tensor and the file), so lattices stay shallow.
void Collapse(std::vector<Dim>* dims) {
  std::vector<Dim> out;
  for (const Dim& d : *dims) {
    if (!out.empty() && out.back().tensor_stride == d.count * d.tensor_stride &&
        out.back().file_stride == d.count * d.file_stride) {
      out.back().count *= d.count;
      out.back().tensor_stride = d.tensor_stride;
      out.back().file_stride = d.file_stride;
    } else {
      out.push_back(d);
    }
  }
  *dims = std::move(out);
}

Status CheckDims(const std::vector<int64_t>& v, size_t rank, const char* what, size_t i) {
  if (v.size() != rank) {
    return Bad("box " + std::to_string(i) + " " + what + " " + DimsText(v) + " has rank " +
               std::to_string(v.size()) + ", the tensor " + std::to_string(rank));
  }
  for (int64_t x : v) {
    if (x < 0)
      return Bad("box " + std::to_string(i) + " " + what + " " + DimsText(v) + " is negative");
  }
  return Status::Ok();
}

// The file end of a family's last byte must stay below kMaxBytes.
Status CheckFileExtent(const RunFamily& f, const std::string& what) {
  Wide end = static_cast<Wide>(f.file_start) + f.run;
  for (const Dim& d : f.outer) end += static_cast<Wide>(d.count - 1) * d.file_stride;
  if (end > kMaxBytes) return Bad(what + " reaches past 2^62 bytes of its file");
  return Status::Ok();
}

bool BoxesOverlap(const BoxSource& a, const BoxSource& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    if (a.offsets[d] + a.sizes[d] <= b.offsets[d] || b.offsets[d] + b.sizes[d] <= a.offsets[d]) {
      return false;
    }
  }
  return true;
}

}  // namespace

AssemblyPlanner::AssemblyPlanner(const AssemblyPlanner&) = default;
AssemblyPlanner::AssemblyPlanner(AssemblyPlanner&&) noexcept = default;
AssemblyPlanner& AssemblyPlanner::operator=(const AssemblyPlanner&) = default;
AssemblyPlanner& AssemblyPlanner::operator=(AssemblyPlanner&&) noexcept = default;
AssemblyPlanner::~AssemblyPlanner() = default;

Result<AssemblyPlanner> AssemblyPlanner::Create(std::vector<int64_t> shape, uint32_t element_size,
                                                const std::vector<BoxSource>& boxes,
                                                const std::vector<FlatSource>& flats) {
  const size_t rank = shape.size();
  if (element_size == 0) return Bad("element size 0");
  if (rank > kMaxDims) return Bad("tensor of rank " + std::to_string(rank));
  // Row-major strides of the full tensor, in elements.
  std::vector<uint64_t> full(rank);
  Wide bytes = element_size;
  for (size_t d = rank; d-- > 0;) {
    if (shape[d] < 0) return Bad("negative shape " + DimsText(shape));
    full[d] = static_cast<uint64_t>(bytes / element_size);
    bytes *= static_cast<uint64_t>(shape[d]);
    if (bytes > kMaxBytes) return Bad("tensor " + DimsText(shape) + " exceeds 2^62 bytes");
  }
  AssemblyPlanner p;
  p.shape_ = std::move(shape);
  p.element_size_ = element_size;
  p.size_bytes_ = static_cast<uint64_t>(bytes);
  const uint64_t numel = p.size_bytes_ / element_size;
  const std::vector<int64_t>& dims = p.shape_;

  std::vector<size_t> nonempty_boxes;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const BoxSource& b = boxes[i];
    CKPTFS_RETURN_IF_ERROR(CheckDims(b.offsets, rank, "offsets", i));
    CKPTFS_RETURN_IF_ERROR(CheckDims(b.sizes, rank, "sizes", i));
    if (!b.strides.empty()) CKPTFS_RETURN_IF_ERROR(CheckDims(b.strides, rank, "strides", i));
    bool empty = false;
    for (size_t d = 0; d < rank; ++d) {
      if (b.offsets[d] > dims[d] || b.sizes[d] > dims[d] - b.offsets[d]) {
        return Bad("box " + std::to_string(i) + " at " + DimsText(b.offsets) + " of size " +
                   DimsText(b.sizes) + " is outside the tensor " + DimsText(dims));
      }
      empty |= b.sizes[d] == 0;
    }
    if (empty) continue;
    nonempty_boxes.push_back(i);

    // Strides of the box's own storage: given, or row-major.
    std::vector<uint64_t> own(rank);
    uint64_t acc = 1;
    for (size_t d = rank; d-- > 0;) {
      own[d] = b.strides.empty() ? acc : static_cast<uint64_t>(b.strides[d]);
      acc *= static_cast<uint64_t>(b.sizes[d]);
    }
    RunFamily f;
    f.file = b.file;
    f.file_start = b.file_offset;
    for (size_t d = 0; d < rank; ++d) f.tensor_start += uint64_t(b.offsets[d]) * full[d];
    // Grow the run inward-out while the next dim continues it both in the
    // tensor (the run so far spans the tensor's whole inner block) and in the
    // file (the box's stride equals the run so far). Size-1 dims never step.
    uint64_t run = 1;
    size_t d = rank;
    while (d > 0) {
      size_t k = d - 1;
      if (b.sizes[k] != 1 && (full[k] != run || own[k] != run)) break;
      if (b.sizes[k] != 1) run *= uint64_t(b.sizes[k]);
      d = k;
    }
    for (size_t k = 0; k < d; ++k) {
      if (b.sizes[k] == 1) continue;
      if (own[k] > kMaxBytes / element_size) {
        return Bad("box " + std::to_string(i) + " stride " + DimsText(b.strides) + " is too large");
      }
      f.outer.push_back({uint64_t(b.sizes[k]), full[k] * element_size, own[k] * element_size});
    }
    f.run = run * element_size;
    // Checked before Collapse, whose products then cannot wrap.
    CKPTFS_RETURN_IF_ERROR(CheckFileExtent(f, "box " + std::to_string(i)));
    Collapse(&f.outer);
    f.tensor_start *= element_size;
    f.tensor_end = f.tensor_start + f.run;
    for (const Dim& o : f.outer) f.tensor_end += (o.count - 1) * o.tensor_stride;
    p.covered_bytes_ += acc * element_size;
    p.families_.push_back(std::move(f));
  }
  const size_t box_families = p.families_.size();

  for (size_t i = 0; i < flats.size(); ++i) {
    const FlatSource& s = flats[i];
    if (s.begin > s.end || s.end > numel) {
      return Bad("flat range " + std::to_string(i) + " [" + std::to_string(s.begin) + ", " +
                 std::to_string(s.end) + ") is outside the " + std::to_string(numel) +
                 " elements of the tensor");
    }
    if (s.begin == s.end) continue;
    RunFamily f;
    f.file = s.file;
    f.file_start = s.file_offset;
    f.tensor_start = s.begin * element_size;
    f.run = (s.end - s.begin) * element_size;
    f.tensor_end = f.tensor_start + f.run;
    CKPTFS_RETURN_IF_ERROR(CheckFileExtent(f, "flat range " + std::to_string(i)));
    p.covered_bytes_ += f.run;
    p.families_.push_back(std::move(f));
  }

  // Overlaps. Boxes: sweep in order of their first offset (quadratic only
  // when many boxes share dim-0 ranges, e.g. a dim-1 split).
  if (rank == 0 && nonempty_boxes.size() > 1) return Bad("several boxes overlap on the 0-d tensor");
  if (rank > 0) {
    std::vector<size_t> order = nonempty_boxes;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return boxes[a].offsets[0] < boxes[b].offsets[0]; });
    for (size_t x = 0; x < order.size(); ++x) {
      const BoxSource& a = boxes[order[x]];
      for (size_t y = x + 1; y < order.size(); ++y) {
        const BoxSource& b = boxes[order[y]];
        if (b.offsets[0] >= a.offsets[0] + a.sizes[0]) break;
        if (BoxesOverlap(a, b)) {
          return Bad("boxes " + std::to_string(order[x]) + " and " + std::to_string(order[y]) +
                     " overlap at " + DimsText(a.offsets) + " / " + DimsText(b.offsets));
        }
      }
    }
  }
  // Flat ranges among themselves, then against every box's runs.
  std::vector<const RunFamily*> flat(p.families_.size() - box_families);
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = &p.families_[box_families + i];
  std::sort(flat.begin(), flat.end(), [](const RunFamily* a, const RunFamily* b) {
    return a->tensor_start < b->tensor_start;
  });
  for (size_t i = 1; i < flat.size(); ++i) {
    if (flat[i]->tensor_start < flat[i - 1]->tensor_end) {
      return Bad("flat ranges overlap at element " +
                 std::to_string(flat[i]->tensor_start / element_size));
    }
  }
  Index idx;
  for (const RunFamily* r : flat) {
    for (size_t b = 0; b < box_families; ++b) {
      const RunFamily& box = p.families_[b];
      if (FirstRun(box, r->tensor_start, &idx) && TensorPos(box, idx) < r->tensor_end) {
        return Bad("flat range at element " + std::to_string(r->tensor_start / element_size) +
                   " overlaps a box");
      }
    }
  }
  return p;
}

Result<std::vector<AssemblySegment>> AssemblyPlanner::Plan(uint64_t offset, uint64_t length,
                                                           size_t max_segments) const {
  std::vector<AssemblySegment> out;
  if (offset >= size_bytes_ || length == 0) return out;
  const uint64_t end = offset + std::min(length, size_bytes_ - offset);
  auto too_many = [&] {
    return Status::Error(E2BIG, "tensor assembly: reading " + std::to_string(end - offset) +
                                    " bytes at " + std::to_string(offset) + " needs more than " +
                                    std::to_string(max_segments) + " segments");
  };

  // Every run piece inside [offset, end), from all sources, then in order.
  std::vector<AssemblySegment> pieces;
  Index idx;
  for (const RunFamily& f : families_) {
    if (f.tensor_end <= offset || f.tensor_start >= end) continue;
    if (!FirstRun(f, offset, &idx)) continue;
    do {
      uint64_t at = TensorPos(f, idx);
      if (at >= end) break;
      if (pieces.size() >= max_segments) return too_many();
      uint64_t from = std::max(at, offset);
      uint64_t to = std::min(at + f.run, end);
      pieces.push_back(
          {AssemblySegment::Kind::kFile, from, to - from, f.file, FilePos(f, idx) + (from - at)});
    } while (Next(f, &idx));
  }
  std::sort(pieces.begin(), pieces.end(), [](const AssemblySegment& a, const AssemblySegment& b) {
    return a.tensor_offset < b.tensor_offset;
  });

  uint64_t cursor = offset;
  auto hole_to = [&](uint64_t to) {
    if (to > cursor) out.push_back({AssemblySegment::Kind::kHole, cursor, to - cursor, 0, 0});
  };
  for (const AssemblySegment& s : pieces) {
    if (s.tensor_offset < cursor) return Bad("internal error: sources overlap in a plan");
    hole_to(s.tensor_offset);
    AssemblySegment* last = out.empty() ? nullptr : &out.back();
    if (last != nullptr && last->kind == AssemblySegment::Kind::kFile && last->file == s.file &&
        last->tensor_offset + last->length == s.tensor_offset &&
        last->file_offset + last->length == s.file_offset) {
      last->length += s.length;
    } else {
      out.push_back(s);
    }
    cursor = s.tensor_offset + s.length;
  }
  hole_to(end);
  if (out.size() > max_segments) return too_many();
  return out;
}

}  // namespace ckptfs
