// Training metrics as JSON lines, one object per line, flushed as written so a
// run that is stopped early still leaves a readable file:
//   {"split":"train","epoch":1,"step":100,"loss":0.61,"lr":0.001,"time_s":4.2}
//   {"split":"test","epoch":1,"step":469,"loss":0.42,"accuracy":0.85,"time_s":20.1}
// Written by the examples' `--metrics-out PATH`; scripts/plot_metrics.py reads
// it (x axis: "step"; one curve per "split" for "loss", and for "accuracy" when
// present). The examples' ctests read the files back.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

#include "core/error.h"

namespace ember::examples {

class MetricsWriter {
 public:
  // An empty path writes nothing, so callers need no branch for "no --metrics-out".
  explicit MetricsWriter(const std::string& path) : path_(path) {
    if (path.empty()) return;
    file_.open(path, std::ios::out | std::ios::trunc);
    EMBER_CHECK(file_.is_open(), "MetricsWriter: cannot open '{}' for writing", path);
  }

  void write(const nlohmann::json& record) {
    if (!file_.is_open()) return;
    file_ << record.dump() << '\n';
    file_.flush();
    EMBER_CHECK(file_.good(), "MetricsWriter: writing to '{}' failed", path_);
  }

 private:
  std::string path_;
  std::ofstream file_;
};

}  // namespace ember::examples
