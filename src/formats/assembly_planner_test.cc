// Tests of the read planner: random layouts (ranks 0-4, guillotine chunkings,
// strided and permuted chunk layouts, flat ranges, holes) checked byte by
// byte against a brute-force map of every tensor byte to its file byte;
// overlap detection checked against the same map; the dim-1 split of a 1 GiB
// tensor; and the real DCP checkpoints assembled through torch_zip.
#include "formats/assembly_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "formats/dcp_metadata.h"
#include "formats/formats_test_util.h"
#include "formats/torch_zip.h"

namespace ckptfs {
namespace {

using Kind = AssemblySegment::Kind;
using Dims = std::vector<int64_t>;

struct Layout {
  Dims shape;
  uint32_t es = 4;
  std::vector<BoxSource> boxes;
  std::vector<FlatSource> flats;
};

uint64_t Numel(const Dims& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

std::vector<uint64_t> RowMajor(const Dims& shape) {
  std::vector<uint64_t> s(shape.size());
  uint64_t acc = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = acc;
    acc *= uint64_t(shape[d]);
  }
  return s;
}

// Where each byte of the full tensor comes from; file -1 is a hole.
struct Origin {
  int64_t file = -1;
  uint64_t offset = 0;
};

// Brute force, one element at a time. Sets *overlap when a byte is claimed twice.
std::vector<Origin> Reference(const Layout& l, bool* overlap) {
  *overlap = false;
  std::vector<Origin> map(Numel(l.shape) * l.es);
  std::vector<uint64_t> full = RowMajor(l.shape);
  auto claim = [&](uint64_t elem, uint32_t file, uint64_t file_offset) {
    for (uint32_t b = 0; b < l.es; ++b) {
      Origin& o = map[elem * l.es + b];
      if (o.file != -1) *overlap = true;
      o = {int64_t(file), file_offset + b};
    }
  };
  for (const BoxSource& box : l.boxes) {
    if (Numel(box.sizes) == 0) continue;
    std::vector<uint64_t> own = RowMajor(box.sizes);
    if (!box.strides.empty()) own.assign(box.strides.begin(), box.strides.end());
    std::vector<int64_t> idx(box.sizes.size(), 0);
    for (uint64_t k = 0; k < Numel(box.sizes); ++k) {
      uint64_t elem = 0, at = box.file_offset;
      for (size_t d = 0; d < idx.size(); ++d) {
        elem += uint64_t(box.offsets[d] + idx[d]) * full[d];
        at += uint64_t(idx[d]) * own[d] * l.es;
      }
      claim(elem, box.file, at);
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < box.sizes[d]) break;
        idx[d] = 0;
      }
    }
  }
  for (const FlatSource& f : l.flats) {
    for (uint64_t e = f.begin; e < f.end; ++e)
      claim(e, f.file, f.file_offset + (e - f.begin) * l.es);
  }
  return map;
}

// Checks one plan against the reference: contiguous, exact, maximal.
void CheckPlan(const AssemblyPlanner& p, const std::vector<Origin>& ref, uint64_t off,
               uint64_t len) {
  Result<std::vector<AssemblySegment>> r = p.Plan(off, len);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  uint64_t size = ref.size();
  uint64_t end = off >= size ? off : off + std::min(len, size - off);
  uint64_t cur = off;
  const AssemblySegment* prev = nullptr;
  for (const AssemblySegment& s : *r) {
    ASSERT_EQ(s.tensor_offset, cur);
    ASSERT_GT(s.length, 0u);
    ASSERT_LE(s.tensor_offset + s.length, end);
    for (uint64_t b = 0; b < s.length; ++b) {
      const Origin& o = ref[cur + b];
      if (s.kind == Kind::kHole) {
        ASSERT_EQ(o.file, -1) << "byte " << cur + b;
      } else {
        ASSERT_EQ(o.file, int64_t(s.file)) << "byte " << cur + b;
        ASSERT_EQ(o.offset, s.file_offset + b) << "byte " << cur + b;
      }
    }
    if (prev != nullptr) {
      bool mergeable =
          prev->kind == s.kind &&
          (s.kind == Kind::kHole ||
           (prev->file == s.file && prev->file_offset + prev->length == s.file_offset));
      ASSERT_FALSE(mergeable) << "segments at " << prev->tensor_offset << " and " << s.tensor_offset
                              << " should have been merged";
    }
    prev = &s;
    cur += s.length;
  }
  ASSERT_EQ(cur, end);
}

// ---- Random layouts -------------------------------------------------------

struct Box {
  Dims offsets, sizes;
};

// Splits the tensor into boxes by repeated cuts of random boxes along random
// dims, which gives uneven N-D chunkings, not just grids.
std::vector<Box> Guillotine(const Dims& shape, std::mt19937& rng) {
  std::vector<Box> boxes{{Dims(shape.size(), 0), shape}};
  int cuts = int(rng() % 7);
  for (int c = 0; c < cuts && !shape.empty(); ++c) {
    Box& b = boxes[rng() % boxes.size()];
    size_t d = rng() % shape.size();
    if (b.sizes[d] < 2) continue;
    int64_t at = 1 + int64_t(rng() % uint64_t(b.sizes[d] - 1));
    Box rest = b;
    rest.offsets[d] += at;
    rest.sizes[d] -= at;
    b.sizes[d] = at;
    boxes.push_back(rest);
  }
  return boxes;
}

// The box's elements as one range of the flattened tensor, when they are one.
std::optional<std::pair<uint64_t, uint64_t>> FlatRangeOf(const Dims& shape, const Box& b) {
  uint64_t n = Numel(b.sizes);
  if (n == 0) return std::nullopt;
  std::vector<uint64_t> full = RowMajor(shape);
  uint64_t first = 0, last = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    first += uint64_t(b.offsets[d]) * full[d];
    last += uint64_t(b.offsets[d] + b.sizes[d] - 1) * full[d];
  }
  if (last - first + 1 != n) return std::nullopt;
  return std::make_pair(first, last + 1);
}

Layout RandomLayout(std::mt19937& rng, bool allow_holes) {
  Layout l;
  size_t rank = rng() % 5;
  for (size_t d = 0; d < rank; ++d) l.shape.push_back(rng() % 20 == 0 ? 0 : 1 + int64_t(rng() % 5));
  l.es = std::vector<uint32_t>{1, 2, 4, 8}[rng() % 4];
  bool flats = rng() % 3 == 0;
  std::vector<uint64_t> cursor(3, 0);
  auto place = [&](uint32_t* file, uint64_t* offset, uint64_t extent) {
    *file = uint32_t(rng() % 3);
    *offset = cursor[*file] + (rng() % 3 == 0 ? 0 : rng() % 50);
    cursor[*file] = *offset + extent;
  };
  std::vector<Box> boxes = Guillotine(l.shape, rng);
  std::shuffle(boxes.begin(), boxes.end(), rng);
  for (const Box& b : boxes) {
    if (allow_holes && rng() % 8 == 0) continue;
    std::optional<std::pair<uint64_t, uint64_t>> flat = FlatRangeOf(l.shape, b);
    if (flats && flat) {
      // OLMo-style: the range cut into pieces, concatenated in one file.
      uint64_t at = flat->first;
      uint32_t file = 0;
      uint64_t offset = 0;
      place(&file, &offset, (flat->second - flat->first) * l.es);
      while (at < flat->second) {
        uint64_t next = std::min<uint64_t>(flat->second, at + 1 + rng() % 6);
        l.flats.push_back({at, next, file, offset});
        offset += (next - at) * l.es;
        at = next;
      }
      continue;
    }
    BoxSource s{b.offsets, b.sizes, {}, 0, 0};
    std::vector<uint64_t> own = RowMajor(b.sizes);
    switch (rng() % 4) {
      case 0:  // row-major, implicit
        break;
      case 1:  // row-major, explicit
        s.strides.assign(own.begin(), own.end());
        break;
      case 2: {  // a view into a larger buffer: padded rows
        uint64_t acc = 1;
        s.strides.resize(b.sizes.size());
        for (size_t d = b.sizes.size(); d-- > 0;) {
          s.strides[d] = int64_t(acc);
          acc *= uint64_t(b.sizes[d]) + rng() % 3;
        }
        break;
      }
      default: {  // dims stored in a random order (a transposed tensor)
        std::vector<size_t> order(b.sizes.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), rng);
        uint64_t acc = 1;
        s.strides.resize(b.sizes.size());
        for (size_t i = order.size(); i-- > 0;) {
          s.strides[order[i]] = int64_t(acc);
          acc *= uint64_t(b.sizes[order[i]]);
        }
      }
    }
    uint64_t extent = 1;
    for (size_t d = 0; d < b.sizes.size(); ++d) {
      uint64_t st = s.strides.empty() ? own[d] : uint64_t(s.strides[d]);
      if (b.sizes[d] > 0) extent += uint64_t(b.sizes[d] - 1) * st;
    }
    place(&s.file, &s.file_offset, extent * l.es);
    l.boxes.push_back(s);
  }
  // Zero-size chunks sit at offset == dim, as DCP records them.
  if (!l.shape.empty() && rng() % 6 == 0) {
    BoxSource z{Dims(rank, 0), l.shape, {}, 1, 7};
    z.offsets[0] = l.shape[0];
    z.sizes[0] = 0;
    l.boxes.push_back(z);
  }
  return l;
}

TEST(AssemblyPlannerTest, RandomLayoutsMatchBruteForce) {
  std::mt19937 rng(12345);
  int with_holes = 0, with_flats = 0, plans = 0;
  for (int iter = 0; iter < 500; ++iter) {
    Layout l = RandomLayout(rng, /*allow_holes=*/true);
    SCOPED_TRACE("iteration " + std::to_string(iter));
    bool overlap = false;
    std::vector<Origin> ref = Reference(l, &overlap);
    ASSERT_FALSE(overlap);
    Result<AssemblyPlanner> p = AssemblyPlanner::Create(l.shape, l.es, l.boxes, l.flats);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    uint64_t covered = 0;
    for (const Origin& o : ref) covered += o.file != -1;
    EXPECT_EQ(p->size_bytes(), ref.size());
    EXPECT_EQ(p->covered_bytes(), covered);
    EXPECT_EQ(p->fully_covered(), covered == ref.size());
    with_holes += !p->fully_covered();
    with_flats += !l.flats.empty();
    uint64_t size = ref.size();
    CheckPlan(*p, ref, 0, size);
    CheckPlan(*p, ref, 0, UINT64_MAX);
    for (int r = 0; r < 30; ++r) {
      uint64_t off = rng() % (size + 3);
      uint64_t len = rng() % (size + 3);
      CheckPlan(*p, ref, off, len);
      ++plans;
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  EXPECT_GT(with_holes, 20);
  EXPECT_GT(with_flats, 50);
  EXPECT_GT(plans, 10000);
}

TEST(AssemblyPlannerTest, RandomOverlapsAreDetectedExactly) {
  std::mt19937 rng(777);
  int rejected = 0, accepted = 0;
  for (int iter = 0; iter < 600; ++iter) {
    Layout l = RandomLayout(rng, /*allow_holes=*/true);
    uint64_t numel = Numel(l.shape);
    if (rng() % 2 == 0 && !l.shape.empty()) {
      BoxSource extra{Dims(l.shape.size()), Dims(l.shape.size()), {}, 2, 1000};
      for (size_t d = 0; d < l.shape.size(); ++d) {
        extra.offsets[d] = int64_t(rng() % uint64_t(l.shape[d] + 1));
        extra.sizes[d] = int64_t(rng() % uint64_t(l.shape[d] - extra.offsets[d] + 1));
      }
      l.boxes.push_back(extra);
    } else {
      uint64_t b = rng() % (numel + 1);
      l.flats.push_back({b, b + rng() % (numel - b + 1), 2, 1000});
    }
    bool overlap = false;
    Reference(l, &overlap);
    Result<AssemblyPlanner> p = AssemblyPlanner::Create(l.shape, l.es, l.boxes, l.flats);
    EXPECT_EQ(p.ok(), !overlap) << "iteration " << iter << ": " << p.status().ToString();
    if (!p.ok()) {
      EXPECT_EQ(p.err(), EIO);
      EXPECT_NE(p.status().message().find("overlap"), std::string::npos) << p.status().message();
    }
    (overlap ? rejected : accepted)++;
  }
  EXPECT_GT(rejected, 100);
  EXPECT_GT(accepted, 100);
}

// ---- Specific layouts -----------------------------------------------------

std::vector<AssemblySegment> PlanOrDie(const AssemblyPlanner& p, uint64_t off, uint64_t len) {
  Result<std::vector<AssemblySegment>> r = p.Plan(off, len);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : std::vector<AssemblySegment>{};
}

void ExpectFile(const AssemblySegment& s, uint64_t tensor_offset, uint64_t length, uint32_t file,
                uint64_t file_offset) {
  EXPECT_EQ(s.kind, Kind::kFile);
  EXPECT_EQ(s.tensor_offset, tensor_offset);
  EXPECT_EQ(s.length, length);
  EXPECT_EQ(s.file, file);
  EXPECT_EQ(s.file_offset, file_offset);
}

TEST(AssemblyPlannerTest, Dim0SplitIsOneRunPerChunkAndMergesInOneFile) {
  // (8, 16) float32 in 4 row blocks.
  std::vector<BoxSource> apart, together;
  for (int i = 0; i < 4; ++i) {
    apart.push_back({{2 * i, 0}, {2, 16}, {}, uint32_t(i), 100});
    together.push_back({{2 * i, 0}, {2, 16}, {}, 0, 64 + 128 * uint64_t(i)});
  }
  Result<AssemblyPlanner> p = AssemblyPlanner::Create({8, 16}, 4, apart);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::vector<AssemblySegment> s = PlanOrDie(*p, 0, 512);
  ASSERT_EQ(s.size(), 4u);
  for (int i = 0; i < 4; ++i) ExpectFile(s[i], 128 * i, 128, i, 100);
  s = PlanOrDie(*p, 100, 100);
  ASSERT_EQ(s.size(), 2u);
  ExpectFile(s[0], 100, 28, 0, 200);
  ExpectFile(s[1], 128, 72, 1, 100);
  p = AssemblyPlanner::Create({8, 16}, 4, together);
  ASSERT_TRUE(p.ok());
  s = PlanOrDie(*p, 0, 512);
  ASSERT_EQ(s.size(), 1u);
  ExpectFile(s[0], 0, 512, 0, 64);
}

TEST(AssemblyPlannerTest, TwoDimensionalSplit) {
  // (4, 6) int16 as a 2x2 grid of (2, 3) chunks, chunk (r, c) in file 2r+c.
  std::vector<BoxSource> b;
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) b.push_back({{2 * r, 3 * c}, {2, 3}, {}, uint32_t(2 * r + c), 10});
  }
  Result<AssemblyPlanner> p = AssemblyPlanner::Create({4, 6}, 2, b);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::vector<AssemblySegment> s = PlanOrDie(*p, 0, 48);
  ASSERT_EQ(s.size(), 8u);
  for (int row = 0; row < 4; ++row) {
    ExpectFile(s[2 * row], 12 * row, 6, 2 * (row / 2), 10 + 6 * (row % 2));
    ExpectFile(s[2 * row + 1], 12 * row + 6, 6, 2 * (row / 2) + 1, 10 + 6 * (row % 2));
  }
}

TEST(AssemblyPlannerTest, TransposedChunkIsOneRunPerElement) {
  // plain_t of the testdata: logical [[0,3],[1,4],[2,5]], storage [0..5], stride (1, 3).
  Result<AssemblyPlanner> p = AssemblyPlanner::Create({3, 2}, 4, {{{0, 0}, {3, 2}, {1, 3}, 0, 0}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::vector<AssemblySegment> s = PlanOrDie(*p, 0, 24);
  ASSERT_EQ(s.size(), 6u);
  const uint64_t storage_index[] = {0, 3, 1, 4, 2, 5};
  for (int i = 0; i < 6; ++i) ExpectFile(s[i], 4 * i, 4, 0, 4 * storage_index[i]);
  // Reads inside one element.
  s = PlanOrDie(*p, 5, 2);
  ASSERT_EQ(s.size(), 1u);
  ExpectFile(s[0], 5, 2, 0, 13);
}

TEST(AssemblyPlannerTest, OlmoFlattenedOffsetsWithSeveralRangesPerFile) {
  // (4, 6) float32. rank_0 holds [0,5) and [12,17), rank_1 [5,12) and [17,24),
  // each file's ranges concatenated (here at data offsets 100 and 0).
  std::vector<FlatSource> f{{0, 5, 0, 100}, {12, 17, 0, 120}, {5, 12, 1, 0}, {17, 24, 1, 28}};
  Result<AssemblyPlanner> p = AssemblyPlanner::Create({4, 6}, 4, {}, f);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->fully_covered());
  std::vector<AssemblySegment> s = PlanOrDie(*p, 0, 96);
  ASSERT_EQ(s.size(), 4u);
  ExpectFile(s[0], 0, 20, 0, 100);
  ExpectFile(s[1], 20, 28, 1, 0);
  ExpectFile(s[2], 48, 20, 0, 120);
  ExpectFile(s[3], 68, 28, 1, 28);
  // Ranges that continue in the file merge.
  p = AssemblyPlanner::Create({4, 6}, 4, {}, {{0, 10, 3, 0}, {10, 24, 3, 40}});
  ASSERT_TRUE(p.ok());
  s = PlanOrDie(*p, 8, 80);
  ASSERT_EQ(s.size(), 1u);
  ExpectFile(s[0], 8, 80, 3, 8);
}

TEST(AssemblyPlannerTest, ZeroDimAndEmptyTensors) {
  Result<AssemblyPlanner> p = AssemblyPlanner::Create({}, 8, {{{}, {}, {}, 5, 64}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->size_bytes(), 8u);
  std::vector<AssemblySegment> s = PlanOrDie(*p, 0, 100);
  ASSERT_EQ(s.size(), 1u);
  ExpectFile(s[0], 0, 8, 5, 64);
  EXPECT_EQ(AssemblyPlanner::Create({}, 8, {{{}, {}, {}, 5, 64}, {{}, {}, {}, 6, 0}}).err(), EIO);
  EXPECT_EQ(AssemblyPlanner::Create({}, 8, {{{}, {}, {}, 5, 64}}, {{0, 1, 1, 0}}).err(), EIO);
  p = AssemblyPlanner::Create({}, 8, {}, {{0, 1, 1, 0}});
  ASSERT_TRUE(p.ok());
  // An empty tensor: no bytes, and zero-size chunks at offset == dim.
  p = AssemblyPlanner::Create({1, 4}, 4, {{{0, 0}, {1, 4}, {}, 0, 0}, {{1, 0}, {0, 4}, {}, 1, 0}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->fully_covered());
  p = AssemblyPlanner::Create({0, 4}, 4, {{{0, 0}, {0, 4}, {}, 0, 0}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->size_bytes(), 0u);
  EXPECT_TRUE(PlanOrDie(*p, 0, 10).empty());
}

TEST(AssemblyPlannerTest, HolesAreReportedAsTheirOwnSegments) {
  // (4, 4) uint8, the top-right (2, 2) block missing.
  Result<AssemblyPlanner> p =
      AssemblyPlanner::Create({4, 4}, 1, {{{0, 0}, {2, 2}, {}, 0, 0}, {{2, 0}, {2, 4}, {}, 1, 0}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE(p->fully_covered());
  EXPECT_EQ(p->covered_bytes(), 12u);
  std::vector<AssemblySegment> s = PlanOrDie(*p, 0, 16);
  ASSERT_EQ(s.size(), 5u);
  ExpectFile(s[0], 0, 2, 0, 0);
  EXPECT_EQ(s[1].kind, Kind::kHole);
  EXPECT_EQ(s[1].tensor_offset, 2u);
  EXPECT_EQ(s[1].length, 2u);
  ExpectFile(s[2], 4, 2, 0, 2);
  EXPECT_EQ(s[3].kind, Kind::kHole);
  ExpectFile(s[4], 8, 8, 1, 0);
  // Nothing at all: one hole.
  p = AssemblyPlanner::Create({4, 4}, 1, {});
  ASSERT_TRUE(p.ok());
  s = PlanOrDie(*p, 3, 5);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].kind, Kind::kHole);
  EXPECT_EQ(s[0].length, 5u);
}

TEST(AssemblyPlannerTest, InvalidSourcesAreRejected) {
  auto err = [](Dims shape, std::vector<BoxSource> boxes, std::vector<FlatSource> flats = {}) {
    Result<AssemblyPlanner> p = AssemblyPlanner::Create(shape, 4, boxes, flats);
    EXPECT_FALSE(p.ok());
    if (p.ok()) return std::string();
    EXPECT_EQ(p.err(), EIO);
    return p.status().message();
  };
  auto has = [](const std::string& msg, const char* what) {
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  };
  has(err({4, 4}, {{{0, 0}, {4, 5}, {}, 0, 0}}), "outside the tensor");
  has(err({4, 4}, {{{3, 0}, {2, 4}, {}, 0, 0}}), "outside the tensor");
  has(err({4, 4}, {{{5, 0}, {0, 4}, {}, 0, 0}}), "outside the tensor");
  has(err({4, 4}, {{{-1, 0}, {1, 4}, {}, 0, 0}}), "negative");
  has(err({4, 4}, {{{0, 0}, {4, 4}, {4, -1}, 0, 0}}), "negative");
  has(err({4, 4}, {{{0}, {4}, {}, 0, 0}}), "rank");
  has(err({4, 4}, {{{0, 0}, {4, 4}, {1}, 0, 0}}), "rank");
  has(err({4, -4}, {}), "negative shape");
  has(err({4, 4}, {{{0, 0}, {3, 3}, {}, 0, 0}, {{2, 2}, {2, 2}, {}, 1, 0}}), "overlap");
  has(err({4, 4}, {{{0, 0}, {4, 2}, {}, 0, 0}, {{0, 1}, {4, 2}, {}, 1, 0}}), "overlap");
  has(err({4, 4}, {}, {{0, 8, 0, 0}, {7, 9, 1, 0}}), "overlap");
  has(err({4, 4}, {}, {{0, 17, 0, 0}}), "outside");
  has(err({4, 4}, {}, {{5, 4, 0, 0}}), "outside");
  has(err({4, 4}, {{{0, 2}, {4, 2}, {}, 0, 0}}, {{6, 7, 1, 0}}), "overlap");
  has(err({int64_t{1} << 31, int64_t{1} << 31}, {}), "2^62");
  has(err({4, 4}, {{{0, 0}, {4, 4}, {int64_t{1} << 62, 1}, 0, 0}}), "large");
  has(err({4, 4}, {{{0, 0}, {4, 4}, {}, 0, uint64_t{1} << 62}}), "2^62");
  EXPECT_EQ(AssemblyPlanner::Create({4}, 0, {}).err(), EIO);
  // Touching boxes and a flat range filling the rest are fine.
  EXPECT_TRUE(AssemblyPlanner::Create({4, 4}, 4,
                                      {{{0, 0}, {4, 2}, {}, 0, 0}, {{0, 2}, {2, 2}, {}, 1, 0}},
                                      {{10, 12, 2, 0}, {14, 16, 2, 8}})
                  .ok());
}

// ---- Large tensors --------------------------------------------------------

// (16384, 16384) float32 = 1 GiB, Shard(1) over 8 ranks: every row of the
// full tensor is 8 runs of 8 KiB, one per chunk.
constexpr int64_t kRows = 16384, kCols = 16384, kWays = 8;
constexpr uint64_t kRowBytes = kCols * 4, kChunkRowBytes = kRowBytes / kWays;

std::vector<BoxSource> Dim1Split(bool one_file) {
  std::vector<BoxSource> b;
  for (int64_t c = 0; c < kWays; ++c) {
    uint64_t chunk_bytes = uint64_t(kRows) * kChunkRowBytes;
    b.push_back({{0, c * (kCols / kWays)},
                 {kRows, kCols / kWays},
                 {},
                 one_file ? 0u : uint32_t(c),
                 one_file ? 1577 + uint64_t(c) * chunk_bytes : 1577});
  }
  return b;
}

TEST(AssemblyPlannerTest, Dim1EightWaySplitOfAGibibyteTensor) {
  for (bool one_file : {false, true}) {
    Result<AssemblyPlanner> p = AssemblyPlanner::Create({kRows, kCols}, 4, Dim1Split(one_file));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->size_bytes(), uint64_t{1} << 30);
    EXPECT_TRUE(p->fully_covered());
    const uint64_t off = (uint64_t{300} << 20) + 12345, len = uint64_t{8} << 20;
    std::vector<AssemblySegment> s = PlanOrDie(*p, off, len);
    // Expected: one segment per (row, chunk) the range touches.
    size_t want = 0;
    for (uint64_t row = off / kRowBytes; row <= (off + len - 1) / kRowBytes; ++row) {
      for (int64_t c = 0; c < kWays; ++c) {
        uint64_t a = row * kRowBytes + uint64_t(c) * kChunkRowBytes;
        want += a < off + len && a + kChunkRowBytes > off;
      }
    }
    // Rows 4800..4928: 7 chunks of the first (it starts in chunk 1), 8 of each
    // of the 127 between, 2 of the last.
    EXPECT_EQ(want, 7u + 127u * 8u + 2u);
    ASSERT_EQ(s.size(), want);
    uint64_t cur = off;
    for (const AssemblySegment& seg : s) {
      ASSERT_EQ(seg.tensor_offset, cur);
      uint64_t row = cur / kRowBytes, col_byte = cur % kRowBytes, c = col_byte / kChunkRowBytes;
      uint64_t base = one_file ? 1577 + c * uint64_t(kRows) * kChunkRowBytes : 1577;
      ASSERT_EQ(seg.kind, Kind::kFile);
      ASSERT_EQ(seg.file, one_file ? 0u : uint32_t(c));
      ASSERT_EQ(seg.file_offset, base + row * kChunkRowBytes + col_byte % kChunkRowBytes);
      ASSERT_LE(seg.length, kChunkRowBytes);
      cur += seg.length;
    }
    EXPECT_EQ(cur, off + len);
  }
}

TEST(AssemblyPlannerTest, PlanningTheWholeGibibyteIsBoundedByRowsTimesChunks) {
  Result<AssemblyPlanner> p = AssemblyPlanner::Create({kRows, kCols}, 4, Dim1Split(false));
  ASSERT_TRUE(p.ok());
  std::vector<AssemblySegment> s = PlanOrDie(*p, 0, uint64_t{1} << 30);
  EXPECT_EQ(s.size(), uint64_t(kRows * kWays));
  // A cap on segments turns a huge plan into E2BIG, not a huge allocation.
  Result<std::vector<AssemblySegment>> capped = p->Plan(0, uint64_t{1} << 30, 1000);
  EXPECT_EQ(capped.err(), E2BIG);
  // The same tensor split on dim 0 is 8 segments however much is read.
  std::vector<BoxSource> rows;
  for (int64_t c = 0; c < kWays; ++c) {
    rows.push_back({{c * (kRows / kWays), 0}, {kRows / kWays, kCols}, {}, uint32_t(c), 0});
  }
  p = AssemblyPlanner::Create({kRows, kCols}, 4, rows);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(PlanOrDie(*p, 0, uint64_t{1} << 30).size(), 8u);
}

// ---- Real checkpoints, through torch_zip ----------------------------------

TEST(AssemblyPlannerTest, RealDcpCheckpointsAssembleToTheExpectedBytes) {
  std::mt19937 rng(99);
  int tensors = 0;
  for (const char* c :
       {"torch-1.13/ckpt113", "torch-1.13/ckpt113b", "torch-1.13/ckpt113c",
        "torch-2.14/dcp_default", "torch-2.14/dcp_threads", "torch-2.14/dcp_zero"}) {
    SCOPED_TRACE(c);
    std::string dir = testing::DcpTestdata(c), text;
    ASSERT_TRUE(testing::ReadTestFile(dir + "/.metadata", &text));
    Result<DcpMetadata> m = ParseDcpMetadata(text);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    std::vector<std::string> files;
    std::map<std::string, uint32_t> file_ids;
    for (const DcpStorageEntry& e : m->storage) {
      if (file_ids.count(e.relative_path)) continue;
      file_ids[e.relative_path] = uint32_t(files.size());
      files.emplace_back();
      ASSERT_TRUE(testing::ReadTestFile(dir + "/" + e.relative_path, &files.back()));
    }
    for (const DcpTensor& t : m->tensors) {
      SCOPED_TRACE(t.fqn);
      std::vector<BoxSource> boxes;
      for (const DcpChunk& ch : t.chunks) {
        for (const DcpStorageEntry& e : m->storage) {
          if (e.fqn != t.fqn || e.chunk_offsets != ch.offsets) continue;
          uint32_t id = file_ids[e.relative_path];
          StringByteSource src(files[id]);
          Result<TorchTensorInfo> info = ReadTorchSaveTensor(src, e.offset, e.length);
          ASSERT_TRUE(info.ok()) << info.status().ToString();
          ASSERT_EQ(info->shape, ch.sizes);
          boxes.push_back({ch.offsets, ch.sizes, info->stride, id, info->data_position()});
        }
      }
      Result<AssemblyPlanner> p =
          AssemblyPlanner::Create(t.size, *TorchDtypeElementSize(t.dtype), boxes);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      ASSERT_TRUE(p->fully_covered());
      std::string expected;
      ASSERT_TRUE(testing::ReadTestFile(dir + "/expected/" + t.fqn + ".bin", &expected));
      ASSERT_EQ(p->size_bytes(), expected.size());
      for (int r = 0; r < 20; ++r) {
        uint64_t off = r == 0 ? 0 : rng() % (expected.size() + 1);
        uint64_t len = r == 0 ? expected.size() : rng() % (expected.size() + 1);
        std::string got;
        for (const AssemblySegment& s : PlanOrDie(*p, off, len)) {
          ASSERT_EQ(s.kind, Kind::kFile);
          got += files[s.file].substr(s.file_offset, s.length);
        }
        EXPECT_EQ(got, expected.substr(off, len)) << "read " << off << "+" << len;
      }
      ++tensors;
    }
  }
  EXPECT_GE(tensors, 22);
}

}  // namespace
}  // namespace ckptfs
