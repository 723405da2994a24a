#include "control/metrics.h"

#include <cmath>
#include <cstdio>

namespace ckptfs {

namespace {

std::string EscapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", v);
  }
  return buf;
}

}  // namespace

void PrometheusWriter::Family(const std::string& name, const std::string& type, const std::string& help) {
  out_ += "# HELP " + name + " " + help + "\n";
  out_ += "# TYPE " + name + " " + type + "\n";
}

void PrometheusWriter::Sample(const std::string& name, double value,
                              const std::vector<std::pair<std::string, std::string>>& labels) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); i++) {
      if (i) out_ += ',';
      out_ += labels[i].first + "=\"" + EscapeLabel(labels[i].second) + "\"";
    }
    out_ += '}';
  }
  out_ += ' ' + FormatValue(value) + '\n';
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}

void Histogram::Observe(double seconds) {
  MutexLock lock(&mu_);
  size_t i = 0;
  while (i < bounds_.size() && seconds > bounds_[i]) i++;
  counts_[i]++;
  sum_ += seconds;
  count_++;
}

void Histogram::Render(const std::string& name, const std::string& help, PrometheusWriter* w) const {
  MutexLock lock(&mu_);
  w->Family(name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); i++) {
    cumulative += counts_[i];
    w->Sample(name + "_bucket", static_cast<double>(cumulative), {{"le", FormatValue(bounds_[i])}});
  }
  cumulative += counts_.back();
  w->Sample(name + "_bucket", static_cast<double>(cumulative), {{"le", "+Inf"}});
  w->Sample(name + "_sum", sum_);
  w->Sample(name + "_count", static_cast<double>(count_));
}

}  // namespace ckptfs
