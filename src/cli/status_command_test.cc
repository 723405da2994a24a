#include "cli/status_command.h"

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

TEST(StatusCommandTest, OneTablePerRunWithSizesAgesAndReasons) {
  const auto status = nlohmann::json::parse(R"({
    "version": "0.1.0", "pid": 42, "mountpoint": "/ckpt",
    "cache": {"dir": "/nvme/c", "bytes_total": 1099511627776, "bytes_free": 549755813888},
    "steps": [
      {"path": "run1/step200", "step": 200, "state": "writing", "bytes": 10, "files": 1,
       "committed_at": null, "error": "waiting for __3_0.distcp"},
      {"path": "run1/step100", "step": 100, "state": "committed", "bytes": 5368709120, "files": 33,
       "committed_at": 1000.0, "error": ""},
      {"path": "step5", "step": 5, "state": "incomplete", "bytes": 0, "files": 0,
       "committed_at": null, "error": "the daemon stopped"}]})");
  const std::string table = RenderStatusTable(status, 1000.0 + 7200);
  EXPECT_NE(table.find("ckptfs 0.1.0 (pid 42) on /ckpt"), std::string::npos) << table;
  // A daemon that reports no holdings (older versions): the disk alone.
  EXPECT_NE(table.find("cache: /nvme/c; disk 512.0 GiB free of 1.0 TiB\n"), std::string::npos) << table;
  EXPECT_EQ(table.find("steps:"), std::string::npos) << table;
  const size_t run1 = table.find("\nrun1\n");
  const size_t root = table.find("\n/\n");
  ASSERT_NE(run1, std::string::npos) << table;
  ASSERT_NE(root, std::string::npos) << table;
  // Steps by number within their run: 100 before 200.
  const size_t s100 = table.find("100 ", run1);
  const size_t s200 = table.find("200 ", run1);
  ASSERT_NE(s100, std::string::npos);
  EXPECT_LT(s100, s200);
  EXPECT_NE(table.find("5.0 GiB"), std::string::npos) << table;
  EXPECT_NE(table.find("2.0h"), std::string::npos) << table;
  EXPECT_NE(table.find("waiting for __3_0.distcp"), std::string::npos) << table;
}

// The issue this answers: "173.4 GiB used of 252.0 GiB" on an empty cache,
// the disk's use by everything else. What ckptfs holds is shown instead.
TEST(StatusCommandTest, CacheShowsWhatCkptfsHoldsBesideTheDisksFreeSpace) {
  auto status = nlohmann::json::parse(R"({
    "version": "0.1.0", "pid": 42, "mountpoint": "/ckpt",
    "cache": {"dir": "/nvme/c", "bytes_total": 270582939648, "bytes_free": 84396417843,
              "local_bytes": 0, "committed_bytes": 0, "writing_bytes": 0,
              "persisted_bytes": 0, "evictable_bytes": 0},
    "steps": []})");
  std::string table = RenderStatusTable(status, 0);
  EXPECT_NE(table.find("cache: /nvme/c, ckptfs holds 0 B; disk 78.6 GiB free of 252.0 GiB\n"),
            std::string::npos) << table;
  EXPECT_NE(table.find("  steps: 0 B committed, 0 B being written\n"), std::string::npos) << table;
  EXPECT_EQ(table.find("used"), std::string::npos) << table;  // no disk "used" figure

  const double gib = 1024.0 * 1024 * 1024;
  status["cache"]["local_bytes"] = 7 * gib;
  status["cache"]["committed_bytes"] = 10 * gib;
  status["cache"]["persisted_bytes"] = 8 * gib;
  status["cache"]["evictable_bytes"] = 5 * gib;
  status["cache"]["writing_bytes"] = 1.5 * gib;
  status["cache"]["bytes_used"] = 7 * gib;
  status["cache"]["bytes_limit"] = 100 * gib;
  status["remote"] = {{"url", "s3://b/p"}, {"healthy", true}};
  table = RenderStatusTable(status, 0);
  EXPECT_NE(table.find("ckptfs holds 7.0 GiB; disk 78.6 GiB free"), std::string::npos) << table;
  EXPECT_NE(table.find("  steps: 10.0 GiB committed (8.0 GiB persisted, 5.0 GiB evictable), 1.5 GiB being written\n"),
            std::string::npos) << table;
  EXPECT_NE(table.find("  --cache-size: 7.0 GiB of 100.0 GiB used\n"), std::string::npos) << table;
}

TEST(StatusCommandTest, RemoteHealthAndUploadProgress) {
  const auto status = nlohmann::json::parse(R"json({
    "version": "0.1.0", "pid": 42, "mountpoint": "/ckpt",
    "remote": {"url": "s3://b/p (http://127.0.0.1:9000)", "healthy": false,
               "last_error": "uploading: connection refused", "uploads_in_flight": 3,
               "bytes_uploaded": 1048576},
    "steps": [
      {"path": "r/step1", "step": 1, "state": "committed", "bytes": 100, "files": 1,
       "committed_at": 1.0, "error": "", "persisted": true,
       "upload": {"bytes_done": 100, "bytes_total": 100}},
      {"path": "r/step2", "step": 2, "state": "committed", "bytes": 100, "files": 1,
       "committed_at": 1.0, "error": "", "persisted": false,
       "upload": {"bytes_done": 25, "bytes_total": 100}}]})json");
  const std::string table = RenderStatusTable(status, 10);
  EXPECT_NE(table.find("remote: s3://b/p (http://127.0.0.1:9000), FAILING: uploading: connection refused"),
            std::string::npos) << table;
  EXPECT_NE(table.find("3 upload(s) in flight"), std::string::npos) << table;
  EXPECT_NE(table.find("remote "), std::string::npos) << table;
  EXPECT_NE(table.find("up 25%"), std::string::npos) << table;
}

TEST(StatusCommandTest, UploadsShowABarRateAndEtaInCommitOrder) {
  const auto status = nlohmann::json::parse(R"json({
    "version": "0.1.0", "pid": 42, "mountpoint": "/ckpt",
    "remote": {"url": "s3://b/p", "healthy": true, "uploads_in_flight": 2, "bytes_uploaded": 0,
               "upload_rate_bytes_per_s": 104857600},
    "steps": [
      {"path": "r/step300", "step": 300, "state": "committed", "bytes": 1073741824, "files": 8,
       "committed_at": 30.0, "error": "", "persisted": false,
       "upload": {"bytes_done": 0, "bytes_total": 1073741824}},
      {"path": "r/step200", "step": 200, "state": "committed", "bytes": 1073741824, "files": 8,
       "committed_at": 20.0, "error": "", "persisted": false,
       "upload": {"bytes_done": 536870912, "bytes_total": 1073741824}},
      {"path": "r/step100", "step": 100, "state": "committed", "bytes": 10, "files": 1,
       "committed_at": 10.0, "error": "", "persisted": true,
       "upload": {"bytes_done": 10, "bytes_total": 10}}]})json");
  const std::string table = RenderStatusTable(status, 100);
  EXPECT_NE(table.find("uploading (100.0 MiB/s)"), std::string::npos) << table;
  // step200 (committed first) drains first: 512 MiB left at 100 MiB/s.
  const size_t s200 = table.find("r/step200 ");
  const size_t s300 = table.find("r/step300 ");
  ASSERT_NE(s200, std::string::npos) << table;
  ASSERT_LT(s200, s300);
  EXPECT_NE(table.find("[##########..........]  50%  512.0 MiB of 1.0 GiB  ETA 5s", s200), std::string::npos)
      << table;
  // step300 waits for step200's rest: (0.5 + 1) GiB at 100 MiB/s.
  EXPECT_NE(table.find("[....................]   0%  0 B of 1.0 GiB  ETA 15s", s300), std::string::npos) << table;
  EXPECT_EQ(table.find("r/step100 ", table.find("uploading")), std::string::npos);  // persisted
}

TEST(StatusCommandTest, EmptyMount) {
  const auto status = nlohmann::json::parse(R"({"version": "0.1.0", "pid": 1, "mountpoint": "/m", "steps": []})");
  EXPECT_NE(RenderStatusTable(status, 0).find("no checkpoint steps yet"), std::string::npos);
}

TEST(StatusCommandTest, PassthroughSaysWhetherItIsOnAndWhyNot) {
  auto status = nlohmann::json::parse(
      R"({"version": "0.1.0", "pid": 1, "mountpoint": "/m", "steps": [],
          "passthrough": {"mode": "auto", "active": true, "reason": "", "opens": 12}})");
  EXPECT_NE(RenderStatusTable(status, 0).find("passthrough: on, 12 open(s) passed to the kernel"), std::string::npos);
  status["passthrough"] = {{"mode", "auto"}, {"active", false},
                           {"reason", "registering backing files needs CAP_SYS_ADMIN, which the daemon lacks"}};
  EXPECT_NE(RenderStatusTable(status, 0).find("passthrough: off: registering backing files needs CAP_SYS_ADMIN"),
            std::string::npos);
}

TEST(StatusCommandTest, AFailingManifestShowsAndAHealthyOneDoesNot) {
  auto status = nlohmann::json::parse(
      R"({"version": "0.1.0", "pid": 1, "mountpoint": "/m", "steps": [],
          "manifest": {"state": "error", "errno": "ENOSPC", "error": "No space left on device"}})");
  const std::string table = RenderStatusTable(status, 0);
  EXPECT_NE(table.find("manifest: FAILING, read-only (ENOSPC): No space left on device"), std::string::npos)
      << table;
  EXPECT_NE(table.find("writes resume by themselves"), std::string::npos) << table;
  status["manifest"] = {{"state", "ok"}};
  EXPECT_EQ(RenderStatusTable(status, 0).find("manifest"), std::string::npos);
}

}  // namespace
}  // namespace ckptfs
