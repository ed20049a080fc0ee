// The CSV part scan (apps/query/csv.h): typed values, quoting, NULL dates,
// and that the parts of a file, for any number of parts, are its rows
// exactly once and in order; and that bad input names what was wrong.
#include "csv.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tpcc.h"

namespace sluice::query {
namespace {

class CsvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("query_csv_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  // The message read_csv_part throws for `text` (and schema), or "" if it reads.
  std::string error_of(const std::string& text, const Schema& schema) {
    try {
      read_csv_part(write("bad.csv", text), schema, 0, 1);
    } catch (const CsvError& e) {
      return e.what();
    }
    return "";
  }
  std::filesystem::path dir_;
};

Schema every_type() {
  return Schema({int64_field("id"), double_field("x"), decimal_field("amount", 2),
                 date_field("day"), string_field("name", 8)});
}

TEST_F(CsvTest, ReadsEveryTypeQuotesNullDatesAndCrlf) {
  const std::string path = write("t.csv",
                                 "id,x,amount,day,name\n"
                                 "1,0.5,12.34,2013-07-01,plain\r\n"
                                 "-7,-2e3,-0.5,,\"a,b\"\n"
                                 "+3,1,7,2012-02-29,\"say \"\"hi\"\"\"\n"
                                 "9223372036854775807,0,-92233720368547758.07,1970-01-01,\"\"\n");
  const Batch b = read_csv_part(path, every_type(), 0, 1);
  ASSERT_EQ(b.rows(), 4u);
  EXPECT_EQ(b.column(0).ints, (std::vector<int64_t>{1, -7, 3, INT64_MAX}));
  EXPECT_EQ(b.column(1).reals, (std::vector<double>{0.5, -2000, 1, 0}));
  EXPECT_EQ(b.column(2).ints, (std::vector<int64_t>{1234, -50, 700, -9223372036854775807}));
  EXPECT_EQ(b.column(3).days, (std::vector<int32_t>{days_from_civil(2013, 7, 1), kNullDate,
                                                    days_from_civil(2012, 2, 29), 0}));
  EXPECT_EQ(b.column(4).str_at(0), "plain");
  EXPECT_EQ(b.column(4).str_at(1), "a,b");
  EXPECT_EQ(b.column(4).str_at(2), "say \"hi\"");
  EXPECT_EQ(b.column(4).str_at(3), "");
}

// A generated table written with write_csv, read back in 1..9 parts: the
// parts' rows, one after the other, are the table's, byte for byte.
TEST_F(CsvTest, PartsTogetherAreTheTableOnceInOrder) {
  const TpccTables t = generate_tpcc(1, 0, 1);
  const std::string path = (dir_ / "customer.csv").string();
  write_csv(path, t.customer);
  const std::string whole = t.customer.to_text();
  for (uint32_t parts = 1; parts <= 9; ++parts) {
    std::string joined;
    size_t rows = 0;
    for (uint32_t p = 0; p < parts; ++p) {
      const Batch b = read_csv_part(path, tpcc_customer_schema(), p, parts);
      rows += b.rows();
      joined += b.to_text();
    }
    EXPECT_EQ(rows, t.customer.rows()) << parts << " parts";
    EXPECT_TRUE(joined == whole) << parts << " parts";
  }
  // More parts than lines: most parts are empty, none has a row twice.
  const std::string small = write("small.csv", "id,x,amount,day,name\n1,1,1,,a\n2,2,2,,b\n");
  size_t rows = 0;
  for (uint32_t p = 0; p < 50; ++p) rows += read_csv_part(small, every_type(), p, 50).rows();
  EXPECT_EQ(rows, 2u);
}

TEST_F(CsvTest, WriteCsvQuotesWhatNeedsItAndRefusesLineBreaks) {
  Batch b(Schema({string_field("s", 16)}));
  b.column(0).push_string("a,b");
  b.column(0).push_string("q\"");
  b.column(0).push_string("plain");
  b.set_rows(3);
  const std::string path = (dir_ / "q.csv").string();
  write_csv(path, b);
  const Batch back = read_csv_part(path, b.schema(), 0, 1);
  EXPECT_EQ(back.to_text(), b.to_text());
  Batch nl(Schema({string_field("s", 16)}));
  nl.column(0).push_string("two\nlines");
  nl.set_rows(1);
  try {
    write_csv(path, nl);
    FAIL() << "a line break in a string was written";
  } catch (const CsvError& e) {
    EXPECT_NE(std::string(e.what()).find("column 's' holds a line break"), std::string::npos)
        << e.what();
  }
}

TEST_F(CsvTest, BadInputNamesTheFileTheLineTheColumnAndTheValue) {
  const Schema s = every_type();
  const std::string h = "id,x,amount,day,name\n";
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  std::string e = error_of("id,x,amount,name\n", s);
  EXPECT_TRUE(has(e, "the header is 'id,x,amount,name', expected 'id,x,amount,day,name'")) << e;
  e = error_of(h + "1,1,1,,a\n1x,1,1,,a\n", s);
  EXPECT_TRUE(has(e, "bad.csv at byte 30: column 'id': '1x' is not an integer")) << e;
  e = error_of(h + "1,one,1,,a\n", s);
  EXPECT_TRUE(has(e, "column 'x': 'one' is not a number")) << e;
  e = error_of(h + "1,1,1.234,,a\n", s);
  EXPECT_TRUE(has(e, "column 'amount': '1.234' is not a decimal with at most 2 digits")) << e;
  e = error_of(h + "1,1,99999999999999999999,,a\n", s);
  EXPECT_TRUE(has(e, "column 'amount'")) << e;
  e = error_of(h + "1,1,1,2013-02-29,a\n", s);
  EXPECT_TRUE(has(e, "column 'day': '2013-02-29' is not a date")) << e;
  e = error_of(h + "1,1,1,,ninebytes\n", s);
  EXPECT_TRUE(has(e, "column 'name': 'ninebytes' is not a string of at most 8 bytes")) << e;
  e = error_of(h + "1,1,1,\n", s);
  EXPECT_TRUE(has(e, "4 fields, expected 5")) << e;
  e = error_of(h + ",1,1,,a\n", s);
  EXPECT_TRUE(has(e, "column 'id': '' is not an integer")) << e;
  e = error_of(h + "1,1,1,,\"open\n", s);
  EXPECT_TRUE(has(e, "a quoted field does not end")) << e;
  e = error_of(h + "1,1,1,,\"a\"b\n", s);
  EXPECT_TRUE(has(e, "a quoted field does not end (or a field follows its quote)")) << e;
  try {
    read_csv_part((dir_ / "missing.csv").string(), s, 0, 1);
    FAIL() << "a missing file was read";
  } catch (const CsvError& x) {
    EXPECT_TRUE(has(x.what(), "missing.csv: cannot open: No such file")) << x.what();
  }
  EXPECT_THROW(read_csv_part(write("ok.csv", h), s, 2, 2), CsvError);
  EXPECT_EQ(read_csv_part(write("ok.csv", h), s, 0, 1).rows(), 0u);
}

}  // namespace
}  // namespace sluice::query
