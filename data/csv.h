// Numeric CSV files into a [rows, columns] tensor: an optional header row
// (detected when not said), any one-character delimiter, RFC 4180 quoting,
// column selection by name or index, gzip read transparently. Tests:
// tests/data/test_csv.cpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::data {

struct CsvOptions {
  char delimiter = ',';
  // Whether the first row names the columns. None: it does when any of its
  // fields is not a number. A first row of exactly 0, 1, ..., n-1 (n >= 2),
  // pandas' names for unnamed columns (DataFrame(array).to_csv()), is
  // refused unless this says which it is.
  std::optional<bool> header = std::nullopt;
  // The columns to read, by header name or by 0-based index (negative counts
  // from the end); at most one of the two. Empty: all columns. Only the
  // columns read must be numeric.
  std::vector<std::string> columns = {};
  std::vector<int64_t> column_indices = {};
  DType dtype = DType::f32;  // f32 or f64
};

struct CsvTable {
  Tensor values;                          // [rows, selected columns]
  std::vector<std::string> column_names;  // of the selected columns; empty without a header
};

// A malformed file (a non-numeric or empty field, ragged rows, an unterminated
// quote) throws ember::Error naming the path and the line.
CsvTable read_csv(const std::string& path, CsvOptions options = {});

}  // namespace ember::data
