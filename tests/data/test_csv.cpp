// read_csv: headers (given, absent, detected), delimiters, quoting, gzip,
// column selection, and malformed files with the path and line in each message.
#include <ember/ember.h>
#include <gtest/gtest.h>

#include <cmath>

#include "data/file_helpers.h"
#include "support/test_support.h"

namespace ember::data {
namespace {

using ember::testing::ScratchDirectory;
using ember::testing::write_file;
using ember::testing::write_gzip_file;

std::vector<double> values_of(const CsvTable& table) { return table.values.to(DType::f64).to_vector<double>(); }

TEST(Csv, DetectsAHeaderAndReadsFloat32Rows) {
  ScratchDirectory directory;
  std::string path = directory.file("table.csv");
  write_file(path, "sepal_length,sepal_width,label\n5.1,3.5,0\n4.9,3.0,1\n-6.25e1, +2 ,2\n");
  CsvTable table = read_csv(path);
  EXPECT_EQ(table.values.dtype(), DType::f32);
  EXPECT_EQ(table.values.shape(), (Shape{3, 3}));
  EXPECT_EQ(table.column_names, (std::vector<std::string>{"sepal_length", "sepal_width", "label"}));
  EXPECT_EQ(table.values.to_vector<float>(), (std::vector<float>{5.1f, 3.5f, 0, 4.9f, 3.0f, 1, -62.5f, 2, 2}));
}

TEST(Csv, WithoutAHeaderEveryRowIsData) {
  ScratchDirectory directory;
  std::string path = directory.file("numbers.csv");
  write_file(path, "1,2\r\n3,4\r\n\n");  // CRLF line ends, a trailing blank line
  CsvTable table = read_csv(path, {.dtype = DType::f64});
  EXPECT_TRUE(table.column_names.empty());
  EXPECT_EQ(table.values.dtype(), DType::f64);
  EXPECT_EQ(values_of(table), (std::vector<double>{1, 2, 3, 4}));
  // Said explicitly: header = true takes the numeric first row as names.
  CsvTable named = read_csv(path, {.header = true});
  EXPECT_EQ(named.column_names, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(values_of(named), (std::vector<double>{3, 4}));
}

// pandas' DataFrame(array).to_csv(index=False) names the columns 0, 1, 2:
// detection read that header as a row of data. Catches: the row of column
// numbers taken as data when the header is not said.
TEST(Csv, PandasNumberedColumnsMustBeSaid) {
  ScratchDirectory directory;
  std::string path = directory.file("frame.csv");
  write_file(path, "0,1,2\n1.5,2.5,3.5\n4,5,6\n");
  EXPECT_EMBER_ERROR(read_csv(path), "the first row is 0, 1, ..., 2, which pandas writes as the header of unnamed "
                                     "columns and which could also be data; say which with CsvOptions::header");
  CsvTable named = read_csv(path, {.header = true});
  EXPECT_EQ(named.column_names, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(named.values.shape(), (Shape{2, 3}));
  EXPECT_EQ(read_csv(path, {.header = false}).values.shape(), (Shape{3, 3}));
}

// Two files read_csv dropped rows of without a word: old Mac line ends (a lone \r:
// one record of every value, taken as a header, so no rows) and Excel's "CSV UTF-8"
// byte order mark (its first line of numbers became a header). pandas reads both as
// data. Mutations caught: \r not ending a record; the mark not skipped.
TEST(Csv, LoneCarriageReturnsEndRecordsAndAByteOrderMarkIsSkipped) {
  ScratchDirectory directory;
  std::string mac = directory.file("mac.csv");
  write_file(mac, "1,2\r3,4\r5,6\r");
  CsvTable table = read_csv(mac);
  EXPECT_EQ(table.values.shape(), (Shape{3, 2}));
  EXPECT_EQ(values_of(table), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  write_file(mac, "x,\"y\"\r\"7\",8\r\n9,10");  // mixed ends, quoted fields before a lone \r
  CsvTable named = read_csv(mac);
  EXPECT_EQ(named.column_names, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(values_of(named), (std::vector<double>{7, 8, 9, 10}));
  std::string excel = directory.file("excel.csv");
  write_file(excel, "\xEF\xBB\xBF" "1,2\n3,4\n");
  EXPECT_EQ(values_of(read_csv(excel)), (std::vector<double>{1, 2, 3, 4}));
  write_file(excel, "\xEF\xBB\xBF" "a,b\n3,4\n");
  EXPECT_EQ(read_csv(excel).column_names, (std::vector<std::string>{"a", "b"}));
}

TEST(Csv, DelimiterAndQuotedFields) {
  ScratchDirectory directory;
  std::string path = directory.file("quoted.tsv");
  write_file(path, "\"a\tb\"\t\"say \"\"x\"\"\"\tc\n\"1.5\"\t2\t \"3\" \n");
  CsvTable table = read_csv(path, {.delimiter = '\t'});
  EXPECT_EQ(table.column_names, (std::vector<std::string>{"a\tb", "say \"x\"", "c"}));
  EXPECT_EQ(values_of(table), (std::vector<double>{1.5, 2, 3}));
  std::string empty_tab_field = directory.file("empty_tab_field.tsv");
  write_file(empty_tab_field, "1\t\t2\n");
  EXPECT_EMBER_ERROR(read_csv(empty_tab_field, {.delimiter = '\t', .header = false}),
                     "line 1, column 2: '' is not a number");
  std::string semicolons = directory.file("semicolons.csv");
  write_file(semicolons, "x;y\n1;2\n");
  EXPECT_EQ(values_of(read_csv(semicolons, {.delimiter = ';'})), (std::vector<double>{1, 2}));
  std::string multiline = directory.file("multiline.csv");
  write_file(multiline, "\"first\nname\",b\n1,2\n");
  EXPECT_EQ(read_csv(multiline).column_names[0], "first\nname");
}

TEST(Csv, SelectsColumnsByNameOrIndexSkippingTextColumnsNotRead) {
  ScratchDirectory directory;
  std::string path = directory.file("iris.csv");
  write_file(path, "sepal,petal,species\n5.1,1.4,setosa\n7.0,4.7,versicolor\n");
  CsvTable by_name = read_csv(path, {.columns = {"petal", "sepal"}});
  EXPECT_EQ(by_name.column_names, (std::vector<std::string>{"petal", "sepal"}));
  EXPECT_EQ(values_of(by_name), (std::vector<double>{1.4f, 5.1f, 4.7f, 7.0f}));
  CsvTable by_index = read_csv(path, {.column_indices = {-2}});
  EXPECT_EQ(by_index.column_names, (std::vector<std::string>{"petal"}));
  EXPECT_EQ(by_index.values.shape(), (Shape{2, 1}));
  EXPECT_EMBER_ERROR(read_csv(path), "line 2, column 3 ('species'): 'setosa' is not a number");
  EXPECT_EMBER_ERROR(read_csv(path, {.columns = {"width"}}),
                     "no column 'width' (the header has: sepal, petal, species)");
  EXPECT_EMBER_ERROR(read_csv(path, {.column_indices = {3}}), "column index 3 is out of range for 3 columns");
  EXPECT_EMBER_ERROR(read_csv(path, {.columns = {"sepal"}, .column_indices = {0}}), "not both");
}

TEST(Csv, GzippedFilesReadTransparently) {
  ScratchDirectory directory;
  std::string path = directory.file("table.csv.gz");
  std::string text = "x,y\n";
  for (int i = 0; i < 1000; ++i) text += std::to_string(i) + "," + std::to_string(i * 0.5) + "\n";
  write_gzip_file(path, text);
  CsvTable table = read_csv(path, {.dtype = DType::f64});
  ASSERT_EQ(table.values.shape(), (Shape{1000, 2}));
  EXPECT_EQ(table.values.select(0, 999).to_vector<double>(), (std::vector<double>{999, 499.5}));
}

TEST(Csv, EmptyFilesAndHeaderOnlyFiles) {
  ScratchDirectory directory;
  write_file(directory.file("empty.csv"), "");
  EXPECT_EQ(read_csv(directory.file("empty.csv")).values.shape(), (Shape{0, 0}));
  write_file(directory.file("header.csv"), "a,b,c\n");
  CsvTable table = read_csv(directory.file("header.csv"));
  EXPECT_EQ(table.values.shape(), (Shape{0, 3}));
  EXPECT_EQ(table.column_names.size(), 3u);
}

TEST(Csv, MalformedFilesGiveErrorsWithPathAndLine) {
  ScratchDirectory directory;
  auto expect_error = [&](const std::string& name, const std::string& text, const std::string& fragment) {
    std::string path = directory.file(name);
    write_file(path, text);
    EXPECT_EMBER_ERROR(read_csv(path), "read_csv: '" + path + "': " + fragment);
  };
  expect_error("ragged.csv", "a,b\n1,2\n3\n", "line 3: 1 fields, expected 2 (as on line 1)");
  expect_error("long_row.csv", "1,2\n\n3,4,5\n", "line 3: 3 fields, expected 2 (as on line 1)");
  expect_error("text.csv", "a,b\n1,2\n3,x4\n", "line 3, column 2 ('b'): 'x4' is not a number");
  expect_error("empty_field.csv", "1,2\n3,\n", "line 2, column 2: '' is not a number");
  expect_error("unterminated.csv", "a,b\n1,\"2\n3,4\n", "line 2: unterminated quoted field");
  expect_error("after_quote.csv", "a,b\n1,\"2\"x\n", "line 2: unexpected 'x' after a closing quote");
  EXPECT_EMBER_ERROR(read_csv(directory.file("missing.csv")),
                     "read_csv: cannot open '" + directory.file("missing.csv"));
  EXPECT_EMBER_ERROR(read_csv(directory.file("ragged.csv"), {.dtype = DType::i64}), "dtype must be float32 or float64");
  EXPECT_EMBER_ERROR(read_csv(directory.file("ragged.csv"), {.columns = {"a"}}), "line 3: 1 fields");
  std::string truncated = directory.file("truncated.csv.gz");
  write_gzip_file(truncated, "1,2\n3,4\n");
  std::ifstream in(truncated, std::ios::binary);
  std::string compressed((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  write_file(truncated, compressed.substr(0, compressed.size() - 3));
  EXPECT_EMBER_ERROR(read_csv(truncated), "read_csv: '" + truncated + "' is a corrupt or truncated gzip stream");
}

// numpy and pandas read a number beyond the double range as the double it
// rounds to: 1e400 is inf, 1e-400 is 0 with its sign, as "inf" itself is read
// here; both were "not a number" (from_chars' result_out_of_range), and in a
// first row they made it a header. Mutation caught: parse_number returning
// nothing on result_out_of_range -> "'1e-400' is not a number".
TEST(Csv, NumbersBeyondTheDoubleRangeRoundAsNumpyReadsThem) {
  ScratchDirectory directory;
  std::string path = directory.file("extremes.csv");
  write_file(path, "1e-400,-1e-400\n1e400,-1e400\n1e-310,+4.9e-324\n");
  CsvTable table = read_csv(path, {.dtype = DType::f64});
  EXPECT_TRUE(table.column_names.empty());  // the first row is data
  std::vector<double> values = values_of(table);
  ASSERT_EQ(values.size(), 6u);
  EXPECT_EQ(values[0], 0.0);
  EXPECT_FALSE(std::signbit(values[0]));
  EXPECT_EQ(values[1], 0.0);
  EXPECT_TRUE(std::signbit(values[1]));
  EXPECT_EQ(values[2], INFINITY);
  EXPECT_EQ(values[3], -INFINITY);
  EXPECT_EQ(values[4], 1e-310);
  EXPECT_EQ(values[5], 4.9e-324);
}

}  // namespace
}  // namespace ember::data
