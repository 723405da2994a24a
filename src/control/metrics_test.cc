#include "control/metrics.h"

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

TEST(Metrics, TextFormatWithEscapedLabels) {
  PrometheusWriter w;
  w.Family("ckptfs_steps", "gauge", "Checkpoint steps by state.");
  w.Sample("ckptfs_steps", 3, {{"state", "committed"}});
  w.Sample("ckptfs_x", 1.5, {{"path", "a\"b\\c\nd"}});
  EXPECT_EQ(w.text(),
            "# HELP ckptfs_steps Checkpoint steps by state.\n"
            "# TYPE ckptfs_steps gauge\n"
            "ckptfs_steps{state=\"committed\"} 3\n"
            "ckptfs_x{path=\"a\\\"b\\\\c\\nd\"} 1.5\n");
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram h({0.1, 1});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(0.5);
  h.Observe(7);
  PrometheusWriter w;
  h.Render("lat_seconds", "Latency.", &w);
  const std::string& t = w.text();
  EXPECT_NE(t.find("# TYPE lat_seconds histogram\n"), std::string::npos);
  EXPECT_NE(t.find("lat_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("lat_seconds_bucket{le=\"1\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("lat_seconds_bucket{le=\"+Inf\"} 4\n"), std::string::npos) << t;
  EXPECT_NE(t.find("lat_seconds_sum 8.05\n"), std::string::npos) << t;
  EXPECT_NE(t.find("lat_seconds_count 4\n"), std::string::npos) << t;
}

}  // namespace
}  // namespace ckptfs
