// sluice-query tpcc q3 through `sluice run`, row for row against DuckDB
// running the paper's SQL on the same generated tables (exported to CSV by
// `sluice-query tpcc-export`, which generates them in one process while
// the query's workers each generate their own warehouses). Over 1, 2 and 4
// processes x 1 and 2 workers (with 2 warehouses, so some workers have
// none), with the sluice and the sockets exchange; the transport comes
// from SLUICE_TRANSPORT.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace {

using sluice::testing::ProcessResult;
using sluice::testing::run_process;

constexpr int kWarehouses = 2;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string x; std::getline(in, x, sep);) v.push_back(x);
  return v;
}

class TpccTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(SLUICE_QUERY_PYTHON)) return;
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("query_tpcc_" + std::to_string(getpid())));
    const ProcessResult e =
        run_process({sluice::testing::bin("sluice-query"), "tpcc-export", "--warehouses",
                     std::to_string(kWarehouses), "--dir", dir_->string()},
                    {}, std::chrono::seconds(60));
    ASSERT_EQ(e.exit_code, 0) << e.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(e.output, m, std::regex("order_line.csv: ([0-9]+) rows")))
        << e.output;
    order_lines_ = new std::string(m[1].str());
    const ProcessResult d =
        run_process({SLUICE_QUERY_PYTHON, SLUICE_QUERY_DUCKDB_SCRIPT, dir_->string()}, {},
                    std::chrono::seconds(60));
    ASSERT_EQ(d.exit_code, 0) << d.output;
    expected_q1_ = new std::vector<std::string>(rows(d.output, "q1 row: "));
    expected_q2_ = new std::vector<std::string>(rows(d.output, "q2 row: "));
    expected_q3_ = new std::vector<std::string>(rows(d.output, "q3 row: "));
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
    delete dir_;
    delete order_lines_;
    order_lines_ = nullptr;
    delete expected_q1_;
    delete expected_q2_;
    expected_q2_ = nullptr;
    delete expected_q3_;
    dir_ = nullptr;
    expected_q1_ = expected_q3_ = nullptr;
  }
  void SetUp() override {
    if (!std::filesystem::exists(SLUICE_QUERY_PYTHON)) {
      GTEST_SKIP() << "no DuckDB interpreter at " << SLUICE_QUERY_PYTHON
                   << ": run scripts/install-deps.sh (creates .venv with duckdb)";
    }
    ASSERT_NE(expected_q3_, nullptr);
    ASSERT_EQ(expected_q3_->size(), 15u) << "q3 has one row per ol_number 1..15";
    ASSERT_GE(expected_q1_->size(), 5u) << "q1 should select some orders at 2 warehouses";
    ASSERT_EQ(expected_q2_->size(), 1u);
  }

  // The lines of an output that carry `tag` ("row: "), after it.
  static std::vector<std::string> rows(const std::string& output,
                                       const std::string& tag = "row: ") {
    std::vector<std::string> v;
    for (const std::string& line : split(output, '\n')) {
      const size_t at = line.find(tag);
      if (at != std::string::npos) v.push_back(line.substr(at + tag.size()));
    }
    return v;
  }

  // Row for row; the columns in `doubles` bit-equal as doubles (each side
  // prints enough digits to round-trip), the rest equal as text.
  static void expect_rows(const std::vector<std::string>& got, const std::vector<std::string>& want,
                          size_t columns, std::vector<size_t> doubles) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t r = 0; r < got.size(); ++r) {
      const auto a = split(got[r], ','), b = split(want[r], ',');
      ASSERT_EQ(a.size(), columns) << got[r];
      ASSERT_EQ(b.size(), columns) << want[r];
      for (size_t c = 0; c < columns; ++c) {
        if (std::find(doubles.begin(), doubles.end(), c) != doubles.end()) {
          const double x = std::stod(a[c]), y = std::stod(b[c]);
          EXPECT_EQ(x, y) << "row " << r << " column " << c << ": " << got[r] << " vs " << want[r];
        } else {
          EXPECT_EQ(a[c], b[c]) << "row " << r << ": " << got[r] << " vs " << want[r];
        }
      }
    }
  }

  static std::filesystem::path* dir_;
  static std::string* order_lines_;
  static std::vector<std::string>*expected_q1_, *expected_q2_, *expected_q3_;
};
std::filesystem::path* TpccTest::dir_ = nullptr;
std::string* TpccTest::order_lines_ = nullptr;
std::vector<std::string>* TpccTest::expected_q1_ = nullptr;
std::vector<std::string>* TpccTest::expected_q2_ = nullptr;
std::vector<std::string>* TpccTest::expected_q3_ = nullptr;

struct TpccCase {
  int processes, threads;
  const char* exchange;
};
// 4 processes x 2 workers: 8 workers for 2 warehouses, so some have no rows.
const std::vector<TpccCase> kSluiceShapes = {{1, 1, "sluice"}, {2, 2, "sluice"}, {4, 2, "sluice"}};
const std::vector<TpccCase> kSocketShapes = {{1, 2, "sockets"}, {4, 2, "sockets"}};

ProcessResult run_tpcc(const TpccCase& c, const char* query, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"tpcc",         query,
                                   "--warehouses", std::to_string(kWarehouses),
                                   "--threads",    std::to_string(c.threads),
                                   "--exchange",   c.exchange};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_process(sluice::testing::job_argv(c.processes, 90, "sluice-query", args), {},
                     std::chrono::seconds(120));
}

void check_q3(const std::vector<TpccCase>& shapes, const std::vector<std::string>& expected,
              const std::vector<std::string>& extra = {}) {
  for (const TpccCase& c : shapes) {
    SCOPED_TRACE(std::to_string(c.processes) + "x" + std::to_string(c.threads) + " " + c.exchange);
    const ProcessResult r = run_tpcc(c, "q3", extra);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(sluice::testing::warning_lines(r.output), "") << "a clean run warned\n" << r.output;
    TpccTest::expect_rows(TpccTest::rows(r.output), expected, 6, {3, 4});
    // The merged groups reach worker 0 once each.
    EXPECT_NE(r.output.find("query.tpcc.result: 15 rows"), std::string::npos) << r.output;
    EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
  }
}

// Six exchanges active at once; the decimal revenue sums are exact.
void check_q1(const std::vector<TpccCase>& shapes, const std::vector<std::string>& expected,
              const std::string& order_lines, const std::vector<std::string>& extra = {}) {
  for (const TpccCase& c : shapes) {
    SCOPED_TRACE(std::to_string(c.processes) + "x" + std::to_string(c.threads) + " " + c.exchange);
    const ProcessResult r = run_tpcc(c, "q1", extra);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(sluice::testing::warning_lines(r.output), "") << "a clean run warned\n" << r.output;
    TpccTest::expect_rows(TpccTest::rows(r.output), expected, 5, {});
    // Exactly once: every order line and every new order (900 per district) crossed its
    // exchange once.
    EXPECT_NE(r.output.find("query.tpcc.lines: " + order_lines + " rows"), std::string::npos)
        << r.output;
    EXPECT_NE(
        r.output.find("query.tpcc.new_orders: " + std::to_string(kWarehouses * 9000) + " rows"),
        std::string::npos)
        << r.output;
    EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
  }
}

// The items are broadcast: every worker receives each exactly once. (On a
// freshly populated database the lines q2 reads are all delivered, worth
// 0.00 by TPC-C's rules, so the ratio is 0; the join itself is checked by
// q1 and the operator tests.)
void check_q2(const std::vector<TpccCase>& shapes, const std::vector<std::string>& expected,
              const std::vector<std::string>& extra = {}) {
  for (const TpccCase& c : shapes) {
    SCOPED_TRACE(std::to_string(c.processes) + "x" + std::to_string(c.threads) + " " + c.exchange);
    const ProcessResult r = run_tpcc(c, "q2", extra);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(sluice::testing::warning_lines(r.output), "") << "a clean run warned\n" << r.output;
    TpccTest::expect_rows(TpccTest::rows(r.output), expected, 1, {0});
    const int workers = c.processes * c.threads;
    EXPECT_NE(r.output.find("query.tpcc.items: " + std::to_string(100000 * workers) + " rows"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("query.tpcc.result: " + std::to_string(workers) + " rows"),
              std::string::npos)
        << r.output;
    EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
  }
}

TEST_F(TpccTest, Q2EqualsDuckDbOverSluiceExchanges) { check_q2(kSluiceShapes, *expected_q2_); }
TEST_F(TpccTest, Q2EqualsDuckDbOverSocketExchanges) { check_q2(kSocketShapes, *expected_q2_); }
TEST_F(TpccTest, Q3EqualsDuckDbOverSluiceExchanges) { check_q3(kSluiceShapes, *expected_q3_); }
TEST_F(TpccTest, Q3EqualsDuckDbOverSocketExchanges) { check_q3(kSocketShapes, *expected_q3_); }
// Six exchanges with rings of two 1 KiB segments: back-pressure everywhere.
TEST_F(TpccTest, Q1EqualsDuckDbWithTinyRings) {
  const ProcessResult r =
      run_tpcc({2, 2, "sluice"}, "q1", {"--ring-segments", "2", "--batch-bytes", "1024"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_rows(rows(r.output), *expected_q1_, 5, {});
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

TEST_F(TpccTest, Q1EqualsDuckDbOverSluiceExchanges) {
  check_q1(kSluiceShapes, *expected_q1_, *order_lines_);
}
TEST_F(TpccTest, Q1EqualsDuckDbOverSocketExchanges) {
  check_q1(kSocketShapes, *expected_q1_, *order_lines_);
}

// The queries scanning the CSV files DuckDB read (--input): every worker
// reads its own byte range of each file, so the rows are not split by
// warehouse; the results and the exactly-once counts must not change.
TEST_F(TpccTest, QueriesScanningTheCsvFilesEqualDuckDb) {
  const std::vector<std::string> input = {"--input", dir_->string()};
  const std::vector<TpccCase> shapes = {{2, 2, "sluice"}};
  check_q1(shapes, *expected_q1_, *order_lines_, input);
  check_q2(shapes, *expected_q2_, input);
  check_q3({{1, 1, "sluice"}, {2, 2, "sluice"}}, *expected_q3_, input);
}

// With --every-amount the delivered lines q2 and q3 read carry amounts
// (TPC-C's population rules make them 0.00), so the exact decimal sums and
// the promo ratio are checked on real values.
TEST_F(TpccTest, Q2AndQ3SumRealAmountsWithEveryAmount) {
  const std::filesystem::path every = *dir_ / "every";
  const ProcessResult e =
      run_process({sluice::testing::bin("sluice-query"), "tpcc-export", "--warehouses",
                   std::to_string(kWarehouses), "--every-amount", "--dir", every.string()},
                  {}, std::chrono::seconds(60));
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const ProcessResult d =
      run_process({SLUICE_QUERY_PYTHON, SLUICE_QUERY_DUCKDB_SCRIPT, every.string()}, {},
                  std::chrono::seconds(60));
  ASSERT_EQ(d.exit_code, 0) << d.output;
  const std::vector<std::string> q2 = rows(d.output, "q2 row: "), q3 = rows(d.output, "q3 row: ");
  ASSERT_EQ(q2.size(), 1u) << d.output;
  EXPECT_GT(std::stod(q2[0]), 0.0) << "the promo ratio of real amounts is not 0";
  ASSERT_EQ(q3.size(), 15u) << d.output;
  EXPECT_NE(split(q3[0], ',')[2], "0.00") << "delivered lines carry amounts";
  const std::vector<TpccCase> shapes = {{2, 2, "sluice"}, {1, 2, "sockets"}};
  check_q2(shapes, q2, {"--every-amount"});
  check_q3(shapes, q3, {"--every-amount"});
}

// A bad value in one file fails the query on every rank, naming the file,
// the line's byte offset, the column and the value; nothing is left behind.
TEST_F(TpccTest, ACsvFileWithABadValueFailsTheQueryNamingIt) {
  const std::filesystem::path bad = *dir_ / "bad";
  std::filesystem::create_directories(bad);
  for (const char* t : {"customer", "orders", "new_order", "item"}) {
    const std::string file = std::string(t).append(".csv");
    std::filesystem::copy_file(*dir_ / file, bad / file,
                               std::filesystem::copy_options::overwrite_existing);
  }
  {
    std::ifstream in(*dir_ / "order_line.csv");
    std::ofstream out(bad / "order_line.csv");
    std::string line;
    for (int n = 0; std::getline(in, line); ++n) {
      // Line 1000's ol_quantity (8th column) becomes "5x".
      if (n == 1000) {
        size_t at = 0;
        for (int c = 0; c < 8; ++c) at = line.find(',', at) + 1;
        line = line.substr(0, at - 1).append("x").append(line.substr(at - 1));
      }
      out << line << "\n";
    }
  }
  const ProcessResult r = run_tpcc({2, 1, "sluice"}, "q3", {"--input", bad.string()});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("rank [01] could not load its tables: .*order_line.csv at byte "
                           "[0-9]+: column 'ol_quantity': '5x' is not an integer")))
      << r.output;
  EXPECT_EQ(rows(r.output).size(), 0u) << r.output;
  EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
}

}  // namespace
