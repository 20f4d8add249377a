// read_csv: a small RFC 4180 record splitter, then numbers parsed with
// std::from_chars for the selected columns only.
#include "data/csv.h"

#include <locale.h>
#include <stdlib.h>

#include <charconv>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/ops/creation.h"
#include "data/file_bytes.h"

namespace ember::data {

namespace {

// Splits text into records of fields. Quoted fields may hold delimiters,
// doubled quotes and newlines; a record's line is where it starts. A record
// ends at "\n", "\r\n" or a lone "\r" (old Mac files: read as one record of
// every value, then as a header and no rows, without a word); a UTF-8 byte
// order mark (Excel's "CSV UTF-8") is skipped, as pandas does, instead of
// making the first line a header of non-numbers.
class RecordReader {
 public:
  RecordReader(std::string_view text, char delimiter, const std::string& path)
      : text_(text), delimiter_(delimiter), path_(path), position_(text.starts_with("\xEF\xBB\xBF") ? 3 : 0) {}

  // The next non-blank record, or false at the end.
  bool next(std::vector<std::string>& fields, int64_t& line) {
    while (position_ < text_.size()) {
      line = line_;
      read_record(fields);
      bool blank = fields.size() == 1 && !last_quoted_ && fields[0].find_first_not_of(" \t") == std::string::npos;
      if (!blank) return true;
    }
    return false;
  }

 private:
  void read_record(std::vector<std::string>& fields) {
    fields.clear();
    for (;;) {
      fields.emplace_back();
      std::string& field = fields.back();
      last_quoted_ = false;
      size_t start = position_;
      while (start < text_.size() && is_blank(text_[start])) ++start;
      if (start < text_.size() && text_[start] == '"') {
        last_quoted_ = true;
        position_ = start + 1;
        read_quoted(field);
      } else {
        while (position_ < text_.size() && text_[position_] != delimiter_ && !is_line_end(text_[position_]))
          field.push_back(text_[position_++]);
      }
      if (position_ >= text_.size()) return;
      char separator = text_[position_++];
      if (is_line_end(separator)) {
        if (separator == '\r' && position_ < text_.size() && text_[position_] == '\n') ++position_;
        ++line_;
        return;
      }
    }
  }

  // From just after an opening quote to just after the closing one (and any
  // blanks after it), which must end the field.
  void read_quoted(std::string& field) {
    int64_t opened_on = line_;
    for (;;) {
      EMBER_CHECK(position_ < text_.size(), "read_csv: '{}': line {}: unterminated quoted field", path_, opened_on);
      char c = text_[position_++];
      if (c == '"') {
        if (position_ < text_.size() && text_[position_] == '"') {
          field.push_back('"');
          ++position_;
          continue;
        }
        break;
      }
      if (c == '\n') ++line_;
      field.push_back(c);
    }
    while (position_ < text_.size() && is_blank(text_[position_])) ++position_;
    EMBER_CHECK(position_ >= text_.size() || text_[position_] == delimiter_ || is_line_end(text_[position_]),
                "read_csv: '{}': line {}: unexpected '{}' after a closing quote", path_, line_, text_[position_]);
  }

  // A space or tab, unless it is the delimiter.
  bool is_blank(char c) const { return (c == ' ' || c == '\t') && c != delimiter_; }
  static bool is_line_end(char c) { return c == '\n' || c == '\r'; }

  std::string_view text_;
  char delimiter_;
  const std::string& path_;
  size_t position_ = 0;
  int64_t line_ = 1;
  bool last_quoted_ = false;
};

// A number that from_chars read whole but found beyond the double range,
// rounded as numpy and pandas read it: 1e400 is inf, 1e-400 is 0 (with its
// sign), as "inf" itself is read. from_chars leaves its result alone then;
// strtod rounds to the nearest double, and in the "C" locale reads the same
// syntax whatever locale the program set.
double out_of_range_number(std::string_view field) {
  static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", locale_t(0));
  EMBER_ASSERT(c_locale != locale_t(0), "newlocale(\"C\") failed");
  return strtod_l(std::string(field).c_str(), nullptr, c_locale);
}

// The number in `field` (surrounding blanks allowed), or nothing.
std::optional<double> parse_number(std::string_view field) {
  size_t first = field.find_first_not_of(" \t");
  if (first == std::string_view::npos) return std::nullopt;
  size_t last = field.find_last_not_of(" \t");
  field = field.substr(first, last - first + 1);
  if (field.size() > 1 && field[0] == '+' && field[1] != '-') field.remove_prefix(1);  // from_chars rejects '+'
  double value = 0;
  auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (end != field.data() + field.size()) return std::nullopt;
  if (error == std::errc::result_out_of_range) return out_of_range_number(field);
  if (error != std::errc()) return std::nullopt;
  return value;
}

bool all_numbers(const std::vector<std::string>& fields) {
  for (const std::string& field : fields)
    if (!parse_number(field)) return false;
  return true;
}

// The 0-based indices of the columns to read.
std::vector<int64_t> select_columns(const CsvOptions& options, const std::vector<std::string>& header,
                                    int64_t num_columns, const std::string& path) {
  EMBER_CHECK(options.columns.empty() || options.column_indices.empty(),
              "read_csv: '{}': give columns by name or by index, not both", path);
  std::vector<int64_t> selected;
  if (!options.columns.empty()) {
    EMBER_CHECK(!header.empty(), "read_csv: '{}': selecting columns by name needs a header row", path);
    for (const std::string& name : options.columns) {
      int64_t found = -1;
      for (size_t i = 0; i < header.size() && found < 0; ++i)
        if (header[i] == name) found = int64_t(i);
      EMBER_CHECK(found >= 0, "read_csv: '{}': no column '{}' (the header has: {})", path, name,
                  fmt::join(header, ", "));
      selected.push_back(found);
    }
    return selected;
  }
  if (options.column_indices.empty()) {
    for (int64_t i = 0; i < num_columns; ++i) selected.push_back(i);
    return selected;
  }
  for (int64_t index : options.column_indices) {
    EMBER_CHECK(index >= -num_columns && index < num_columns,
                "read_csv: '{}': column index {} is out of range for {} columns", path, index, num_columns);
    selected.push_back(index < 0 ? index + num_columns : index);
  }
  return selected;
}

}  // namespace

CsvTable read_csv(const std::string& path, CsvOptions options) {
  EMBER_CHECK(options.dtype == DType::f32 || options.dtype == DType::f64,
              "read_csv: dtype must be float32 or float64, got {}", options.dtype);
  EMBER_CHECK(options.delimiter != '"' && options.delimiter != '\n' && options.delimiter != '\r',
              "read_csv: the delimiter cannot be a quote or a line break");
  FileBytes file = read_file_bytes(path, "read_csv");
  RecordReader reader(file.bytes, options.delimiter, path);

  std::vector<std::string> fields;
  int64_t line = 0;
  if (!reader.next(fields, line)) {
    EMBER_CHECK(options.columns.empty() && options.column_indices.empty(),
                "read_csv: '{}': cannot select columns of an empty file", path);
    return {zeros({0, 0}, {.dtype = options.dtype}), {}};
  }
  int64_t num_columns = int64_t(fields.size());
  int64_t first_line = line;
  std::vector<std::string> header;
  // pandas writes unnamed columns' names as 0, 1, ..., n-1: read as data,
  // that header was a row of made-up numbers, without a word.
  bool counts_columns = fields.size() >= 2;
  for (size_t i = 0; i < fields.size() && counts_columns; ++i) counts_columns = fields[i] == std::to_string(i);
  EMBER_CHECK(options.header.has_value() || !counts_columns,
              "read_csv: '{}': the first row is 0, 1, ..., {}, which pandas writes as the header of unnamed columns "
              "and which could also be data; say which with CsvOptions::header (true: a header)",
              path, fields.size() - 1);
  bool has_header = options.header.value_or(!all_numbers(fields));
  if (has_header) header = fields;

  std::vector<int64_t> selected = select_columns(options, header, num_columns, path);
  CsvTable table;
  for (int64_t column : selected)
    if (has_header) table.column_names.push_back(header[size_t(column)]);

  std::vector<double> values;
  int64_t rows = 0;
  bool have_record = !has_header || reader.next(fields, line);
  for (; have_record; have_record = reader.next(fields, line)) {
    EMBER_CHECK(int64_t(fields.size()) == num_columns,
                "read_csv: '{}': line {}: {} fields, expected {} (as on line {})", path, line, fields.size(),
                num_columns, first_line);
    for (int64_t column : selected) {
      const std::string& field = fields[size_t(column)];
      std::optional<double> value = parse_number(field);
      EMBER_CHECK(value.has_value(), "read_csv: '{}': line {}, column {}{}: '{}' is not a number", path, line,
                  column + 1, has_header ? fmt::format(" ('{}')", header[size_t(column)]) : std::string(), field);
      values.push_back(*value);
    }
    ++rows;
  }

  Tensor result = make_tensor({rows, int64_t(selected.size())}, options.dtype);
  if (options.dtype == DType::f64) {
    std::copy(values.begin(), values.end(), result.data_ptr<double>());
  } else {
    float* out = result.data_ptr<float>();
    for (size_t i = 0; i < values.size(); ++i) out[i] = float(values[i]);
  }
  table.values = result;
  return table;
}

}  // namespace ember::data
