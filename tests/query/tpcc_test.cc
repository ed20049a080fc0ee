// sluice-query tpcc q3 through `sluice run`, row for row against DuckDB
// running the paper's SQL on the same generated tables (exported to CSV by
// `sluice-query tpcc-export`, which generates them in one process while
// the query's workers each generate their own warehouses). Over 1, 2 and 4
// processes x 1 and 2 workers (with 2 warehouses, so some workers have
// none), with the sluice and the sockets exchange; the transport comes
// from SLUICE_TRANSPORT.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace {

using sluice::testing::ProcessResult;
using sluice::testing::run_process;

constexpr int kWarehouses = 2;

// The paper's Query 3 (Listing 1.1), with ol_number added to ORDER BY to
// make ties (every order has lines 1..5) come out in one order.
const char* kQ3 =
    "select ol_number, sum(ol_quantity) as sum_qty, sum(cast(ol_amount as decimal(10,2))) as "
    "sum_amount, sum(ol_quantity) / count(*) as avg_qty, sum(ol_amount) / count(*) as "
    "avg_amount, count(*) as count_order from order_line where ol_delivery_d > "
    "timestamp '2013-07-01 00:00:00.000' group by ol_number order by sum(ol_quantity) desc, "
    "ol_number";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string x; std::getline(in, x, sep);) v.push_back(x);
  return v;
}

class TpccTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(SLUICE_QUERY_PYTHON)) return;
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("query_tpcc_" + std::to_string(getpid())));
    const ProcessResult e =
        run_process({sluice::testing::bin("sluice-query"), "tpcc-export", "--warehouses",
                     std::to_string(kWarehouses), "--dir", dir_->string()},
                    {}, std::chrono::seconds(60));
    ASSERT_EQ(e.exit_code, 0) << e.output;
    const auto script = *dir_ / "q3.py";
    std::ofstream(script)
        << "import duckdb, datetime\ncon = duckdb.connect()\n"
        << "con.execute(\"CREATE TABLE order_line AS SELECT * FROM read_csv('"
        << (*dir_ / "order_line.csv").string()
        << "', header=true, columns={'ol_o_id': 'BIGINT', 'ol_d_id': 'BIGINT', 'ol_w_id': "
           "'BIGINT', 'ol_number': 'BIGINT', 'ol_i_id': 'BIGINT', 'ol_supply_w_id': 'BIGINT', "
           "'ol_delivery_d': 'DATE', 'ol_quantity': 'BIGINT', 'ol_amount': 'DECIMAL(6,2)', "
           "'ol_dist_info': 'VARCHAR'})\")\n"
        << "for r in con.execute(\"\"\"" << kQ3 << "\"\"\").fetchall():\n"
        << "    print('row: ' + ','.join(repr(v) if isinstance(v, float) else str(v) for v in "
           "r))\n";
    const ProcessResult d =
        run_process({SLUICE_QUERY_PYTHON, script.string()}, {}, std::chrono::seconds(60));
    ASSERT_EQ(d.exit_code, 0) << d.output;
    expected_ = new std::vector<std::string>(rows(d.output));
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
    delete dir_;
    delete expected_;
    dir_ = nullptr;
    expected_ = nullptr;
  }
  void SetUp() override {
    if (!std::filesystem::exists(SLUICE_QUERY_PYTHON)) {
      GTEST_SKIP() << "no DuckDB interpreter at " << SLUICE_QUERY_PYTHON
                   << ": run scripts/install-deps.sh (creates .venv with duckdb)";
    }
    ASSERT_NE(expected_, nullptr);
    ASSERT_EQ(expected_->size(), 15u) << "q3 has one row per ol_number 1..15";
  }

  // The "row: " lines of an output, without the launcher's "[0] " prefix.
  static std::vector<std::string> rows(const std::string& output) {
    std::vector<std::string> v;
    for (const std::string& line : split(output, '\n')) {
      const size_t at = line.find("row: ");
      if (at != std::string::npos) v.push_back(line.substr(at + 5));
    }
    return v;
  }

  // Columns 3 and 4 (the averages) are doubles: equal to 1e-9 relative; the rest exact.
  static void expect_q3(const std::vector<std::string>& got) {
    ASSERT_EQ(got.size(), expected_->size());
    for (size_t r = 0; r < got.size(); ++r) {
      const auto a = split(got[r], ','), b = split((*expected_)[r], ',');
      ASSERT_EQ(a.size(), 6u) << got[r];
      ASSERT_EQ(b.size(), 6u) << (*expected_)[r];
      for (size_t c = 0; c < 6; ++c) {
        if (c == 3 || c == 4) {
          const double x = std::stod(a[c]), y = std::stod(b[c]);
          EXPECT_LE(std::fabs(x - y), 1e-9 * std::max(1.0, std::fabs(y)))
              << "row " << r << ": " << got[r] << " vs " << (*expected_)[r];
        } else {
          EXPECT_EQ(a[c], b[c]) << "row " << r << ": " << got[r] << " vs " << (*expected_)[r];
        }
      }
    }
  }

  static std::filesystem::path* dir_;
  static std::vector<std::string>* expected_;
};
std::filesystem::path* TpccTest::dir_ = nullptr;
std::vector<std::string>* TpccTest::expected_ = nullptr;

TEST_F(TpccTest, Q3EqualsDuckDbOnEveryShape) {
  struct Case {
    int processes, threads;
    const char* exchange;
  };
  for (const Case c : {Case{1, 1, "sluice"}, Case{2, 2, "sluice"}, Case{4, 1, "sluice"},
                       Case{4, 2, "sluice"}, Case{1, 2, "sockets"}, Case{4, 2, "sockets"}}) {
    SCOPED_TRACE(std::to_string(c.processes) + "x" + std::to_string(c.threads) + " " + c.exchange);
    const ProcessResult r =
        run_process(sluice::testing::job_argv(
                        c.processes, 90, "sluice-query",
                        {"tpcc", "q3", "--warehouses", std::to_string(kWarehouses), "--threads",
                         std::to_string(c.threads), "--exchange", c.exchange}),
                    {}, std::chrono::seconds(120));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_q3(rows(r.output));
    // The partial groups crossed the shuffle once each: at most 15 per worker.
    EXPECT_NE(r.output.find("query.tpcc.result: 15 rows"), std::string::npos) << r.output;
    EXPECT_TRUE(sluice::testing::sluice_shm_entries().empty());
  }
}

}  // namespace
