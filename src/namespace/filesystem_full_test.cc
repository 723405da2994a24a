// `.full/` views served by the FileSystem (no mount): hidden until a step
// commits, reachable by name, listed only with show_full, read-only, exact
// sizes and bytes, errors as EIO plus one event.
#include <fcntl.h>

#include <gtest/gtest.h>

#include "formats/formats_test_util.h"
#include "namespace/fs_test_env.h"
#include "views/view_names.h"

namespace ckptfs::testing {
namespace {

std::vector<std::string> Names(FileSystem& fs, uint64_t dir) {
  std::vector<std::string> out;
  auto r = fs.Readdir(dir, 0, 100000);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (r.ok()) {
    for (const auto& d : *r) out.push_back(d.name);
  }
  return out;
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Copies a real DCP case (without expected/) into run/step<n>, .metadata last.
uint64_t CopyCase(FileSystem& fs, uint64_t run, const std::string& step_name, const std::string& rel,
                  const std::vector<std::string>& files) {
  const uint64_t step = Mkdir(fs, run, step_name);
  for (const std::string& f : files) {
    std::string bytes;
    EXPECT_TRUE(ReadTestFile(DcpTestdata(rel + "/" + f), &bytes)) << f;
    WriteFile(fs, step, f, bytes);
  }
  return step;
}

std::string ReadAllOf(FileSystem& fs, uint64_t ino, Status* error = nullptr) {
  auto o = fs.OpenFile(ino, O_RDONLY);
  if (!o.ok()) {
    if (error) *error = o.status();
    return "";
  }
  EXPECT_TRUE(o->keep_cache);
  std::string out;
  std::string buf(100'000, '\0');
  for (;;) {
    auto n = fs.Read(o->fh, buf.data(), buf.size(), out.size());
    if (!n.ok()) {
      if (error) *error = n.status();
      break;
    }
    if (*n == 0) break;
    out.append(buf.data(), *n);
  }
  EXPECT_TRUE(fs.Release(o->fh).ok());
  return out;
}

TEST(FileSystemFullTest, ViewsAppearWhenTheStepCommitsAndServeFullTensors) {
  FileSystemOptions options;
  options.show_full = true;
  FsEnv env(options);
  FileSystem& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t step = CopyCase(fs, run, "step10", "torch-2.14/dcp_default", {"__0_0.distcp", "__1_0.distcp"});
  // Writing: no view, by name or in the listing.
  EXPECT_EQ(fs.Lookup(step, ".full").status().err(), ENOENT);
  EXPECT_FALSE(Contains(Names(fs, step), ".full"));

  std::string meta;
  ASSERT_TRUE(ReadTestFile(DcpTestdata("torch-2.14/dcp_default/.metadata"), &meta));
  WriteFile(fs, step, ".metadata", meta);
  env.DrainCommits();
  ASSERT_EQ(*fs.GetXattr(step, "user.ckptfs.state"), "committed");

  EXPECT_TRUE(Contains(Names(fs, step), ".full"));
  auto full = fs.Lookup(step, ".full");
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_TRUE(S_ISDIR(full->attr.st_mode));
  ASSERT_TRUE(fs.OpenDir(full->ino).ok());
  const std::vector<std::string> names = Names(fs, full->ino);
  for (const char* n : {".", "..", "index.json", "all.safetensors", "model.safetensors", "model.w", "bytes"}) {
    EXPECT_TRUE(Contains(names, n)) << n;
  }
  auto w = fs.Lookup(full->ino, "model.w");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->attr.st_size, 96);
  EXPECT_EQ(w->attr.st_mode, S_IFREG | 0444u);
  EXPECT_EQ(*fs.GetXattr(w->ino, "user.ckptfs.dtype"), "float32");
  EXPECT_EQ(*fs.GetXattr(w->ino, "user.ckptfs.shape"), "[6,4]");
  EXPECT_EQ(fs.GetXattr(w->ino, "user.other").status().err(), ENODATA);
  std::string want;
  ASSERT_TRUE(ReadTestFile(DcpTestdata("torch-2.14/dcp_default/expected/model.w.bin"), &want));
  EXPECT_EQ(ReadAllOf(fs, w->ino), want);
  // The same inode on a second lookup, and after the view left the cache it
  // is rebuilt with the same numbers (GetAttr by ino).
  EXPECT_EQ(fs.Lookup(full->ino, "model.w")->ino, w->ino);
  EXPECT_EQ(fs.GetAttr(w->ino)->attr.st_size, 96);

  auto bytes_dir = fs.Lookup(full->ino, "bytes");
  ASSERT_TRUE(bytes_dir.ok());
  EXPECT_TRUE(Contains(Names(fs, bytes_dir->ino), "optim.step"));
  auto step_item = fs.Lookup(bytes_dir->ino, "optim.step");
  ASSERT_TRUE(step_item.ok());
  EXPECT_EQ(ReadAllOf(fs, step_item->ino).substr(0, 2), "PK");

  // Read-only, in every way.
  EXPECT_EQ(fs.OpenFile(w->ino, O_WRONLY).status().err(), EROFS);
  EXPECT_EQ(fs.OpenFile(w->ino, O_RDONLY | O_TRUNC).status().err(), EROFS);
  EXPECT_EQ(fs.Create(kRoot, full->ino, "x", 0644, O_WRONLY).status().err(), EROFS);
  EXPECT_EQ(fs.Mkdir(kRoot, full->ino, "d", 0755).status().err(), EROFS);
  EXPECT_NE(fs.Unlink(full->ino, "model.w").err(), 0);
  EXPECT_NE(fs.SetXattr(w->ino, "user.x", "1", 0).err(), 0);
  EXPECT_EQ(fs.Lookup(full->ino, "nope").status().err(), ENOENT);
}

TEST(FileSystemFullTest, HiddenWithoutShowFullAndAbsentWithoutMetadata) {
  FsEnv env;
  FileSystem& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t step = CopyCase(fs, run, "step1", "torch-2.14/dcp_zero", {"__0_0.distcp", "__1_0.distcp", ".metadata"});
  env.DrainCommits();
  EXPECT_FALSE(Contains(Names(fs, step), ".full"));
  EXPECT_TRUE(fs.Lookup(step, ".full").ok());
  // A committed step without checkpoint metadata has no view.
  const uint64_t plain = Mkdir(fs, run, "step2");
  WriteFile(fs, plain, "weights.bin", "abc");
  fs.RequestCommit(plain);
  env.DrainCommits();
  ASSERT_EQ(*fs.GetXattr(plain, "user.ckptfs.state"), "committed");
  EXPECT_EQ(fs.Lookup(plain, ".full").status().err(), ENOENT);
  // A real entry named .full wins.
  const uint64_t step3 = Mkdir(fs, run, "step3");
  const uint64_t mine = Mkdir(fs, step3, ".full");
  EXPECT_EQ(fs.Lookup(step3, ".full")->ino, mine);
}

TEST(FileSystemFullTest, DamagedShardsGiveEioAndOneEvent) {
  FsEnv env;
  FileSystem& fs = env.fs();
  const uint64_t run = Mkdir(fs, kRootIno, "run");
  const uint64_t step = Mkdir(fs, run, "step5");
  std::string meta, rank0, rank1;
  ASSERT_TRUE(ReadTestFile(DcpTestdata("torch-2.14/dcp_default/.metadata"), &meta));
  ASSERT_TRUE(ReadTestFile(DcpTestdata("torch-2.14/dcp_default/__0_0.distcp"), &rank0));
  ASSERT_TRUE(ReadTestFile(DcpTestdata("torch-2.14/dcp_default/__1_0.distcp"), &rank1));
  // Garbage over all of rank 1's file: sizes still satisfy the commit check.
  WriteFile(fs, step, "__0_0.distcp", rank0);
  WriteFile(fs, step, "__1_0.distcp", std::string(rank1.size(), 'Z'));
  WriteFile(fs, step, ".metadata", meta);
  env.DrainCommits();
  ASSERT_EQ(*fs.GetXattr(step, "user.ckptfs.state"), "committed");
  auto full = fs.Lookup(step, ".full");
  ASSERT_TRUE(full.ok());
  auto u16 = fs.Lookup(full->ino, "model.u16");
  ASSERT_TRUE(u16.ok());
  Status error;
  ReadAllOf(fs, u16->ino, &error);
  EXPECT_EQ(error.err(), EIO);
  ReadAllOf(fs, u16->ino, &error);  // a second failure: no second event
  const std::string events = env.events.Render();
  size_t count = 0;
  for (size_t at = events.find("view_error"); at != std::string::npos; at = events.find("view_error", at + 1)) ++count;
  EXPECT_EQ(count, 1u) << events;
  EXPECT_NE(events.find("run/step5/.full/model.u16"), std::string::npos) << events;

}

}  // namespace
}  // namespace ckptfs::testing
