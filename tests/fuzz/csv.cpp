// Fuzzes the CSV reader (data/csv.h), gzip included: the input's first two
// bytes pick the options (delimiter, header, dtype, column selection), the
// rest is the file. An accepted table must have the shape and names its
// options ask for. Seeds: corpus/csv/ (make_seeds.cpp).
#include "data/csv.h"
#include "fuzz/fuzz_support.h"

using namespace ember;

namespace {

// Byte 0: the delimiter (quote and line break are refused by read_csv), and
// byte 1: bits 0-1 the header (detected, yes, no), bit 2 the dtype, bits 3-4
// the columns (all, the index in bits 5-7 minus 4, the column "b", both ways).
data::CsvOptions options_of(uint8_t delimiter, uint8_t flags) {
  constexpr char kDelimiters[] = {',', ';', '\t', ' ', '|', '"', '\n', '\r'};
  data::CsvOptions options{.delimiter = kDelimiters[delimiter % 8]};
  if (flags % 4 == 1) options.header = true;
  if (flags % 4 == 2) options.header = false;
  options.dtype = flags & 4 ? DType::f64 : DType::f32;
  const int columns = (flags >> 3) & 3;
  if (columns & 1) options.column_indices = {int64_t(flags >> 5) - 4};
  if (columns & 2) options.columns = {"b"};
  return options;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const data::CsvOptions options = options_of(data[0], data[1]);
  const fuzz::MemoryFile file(data + 2, size - 2);
  data::CsvTable table;
  try {
    table = data::read_csv(file.path(), options);
  } catch (const Error& error) {
    fuzz::rejected(error);
    return 0;
  }
  FUZZ_REQUIRE(table.values.dim() == 2 && table.values.dtype() == options.dtype, "a table of shape {} and dtype {}",
               table.values.shape(), table.values.dtype());
  const int64_t selected = options.columns.size() + options.column_indices.size();
  FUZZ_REQUIRE(selected == 0 || table.values.shape()[1] == selected, "{} columns asked for, {} read", selected,
               table.values.shape()[1]);
  FUZZ_REQUIRE(table.column_names.empty() || int64_t(table.column_names.size()) == table.values.shape()[1],
               "{} column names for {} columns", table.column_names.size(), table.values.shape()[1]);
  return 0;
}
